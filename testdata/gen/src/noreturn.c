/* fail() ends with a call to the noreturn die(), so its return address is the
 * first byte of the function that follows it (after_fail). die -> close(-1). */
#include <unistd.h>
#include "common.h"
volatile long sink;
__attribute__((noreturn)) NOINLINE void die(int x) { int r = close(x); sink = r; _exit(0); }
NOINLINE void fail(int x) { sink = x; die(x - 1); }
NOINLINE int after_fail(int x) { sink = x; return x + 7; }
NOINLINE int check(int x) { if (x < 5) fail(x); int r = after_fail(x); sink = r; return r; }
int main(int argc, char **argv) { (void)argv; sink = check(argc - 1); return 0; }
