/* main -> top -> mid -> leaf, which stores through a null pointer: SIGSEGV
 * at the end of a known call chain. Each call is followed by a store so no
 * call is a tail call. Built -O2 -fomit-frame-pointer, -O0, and stripped
 * with a debuglink. */
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
int *volatile target; /* null */
NOINLINE int leaf(int x) { *target = x; sink = x; return x + 1; }
NOINLINE int mid(int x) { int r = leaf(x - 1); sink = r; return r * 3; }
NOINLINE int top(int x) { int r = mid(x + 2); sink = r; return r - 5; }
int main(int argc, char **argv) { (void)argv; int r = top(argc - 3); sink = r; return 0; }
