/* main -> top -> mid -> leaf -> clock_gettime (vdso). */
#include <time.h>
#include "common.h"
volatile long sink;
NOINLINE int leaf(int x) { struct timespec ts; int r = clock_gettime(x, &ts); sink = r + ts.tv_nsec; return r + 1; }
NOINLINE int mid(int x) { int r = leaf(x - 1); sink = r; return r * 3; }
NOINLINE int top(int x) { int r = mid(x + 1); sink = r; return r - 5; }
int main(int argc, char **argv) { (void)argv; int r = top(argc - 1 + CLOCK_MONOTONIC); sink = r; return 0; }
