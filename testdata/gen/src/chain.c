/* main -> top -> mid -> leaf -> close(-1). Each call is followed by a store so
 * no call is a tail call. */
#include <unistd.h>
#include "common.h"
volatile long sink;
NOINLINE int leaf(int x) { int r = close(x); sink = r; return r + 1; }
NOINLINE int mid(int x) { int r = leaf(x - 1); sink = r; return r * 3; }
NOINLINE int top(int x) { int r = mid(x + 2); sink = r; return r - 5; }
int main(int argc, char **argv) { (void)argv; int r = top(argc - 3); sink = r; return 0; }
