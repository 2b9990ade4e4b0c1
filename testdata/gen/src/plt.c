/* main -> caller -> close@plt. Built with -z now and -z lazy. */
#include <unistd.h>
#include "common.h"
volatile long sink;
NOINLINE int caller(int x) { int r = close(x); sink = r; return r + 1; }
int main(int argc, char **argv) { (void)argv; sink = caller(argc - 2); return 0; }
