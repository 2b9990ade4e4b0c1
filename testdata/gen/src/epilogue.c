/* gcc -O0 epilogues, swept instruction by instruction by the epilogue_*
 * fixtures: main -> outer -> with_leave -> leaf_pop. with_leave calls, so
 * gcc -O0 gives it a frame with sub $n,%rsp and returns with "leave; ret";
 * leaf_pop calls nothing and keeps its locals in the red zone, so it returns
 * with "pop %rbp; ret". At both rets gcc's CFI still says rbp is saved at
 * CFA-16, below the SP. */
#include "common.h"
volatile long sink;
NOINLINE int leaf_pop(int x) { int y = x * 3; sink = y; return y + 1; }
NOINLINE int with_leave(int x) { int r = leaf_pop(x - 1); sink = r; return r * 3; }
NOINLINE int outer(int x) { int r = with_leave(x + 2); sink = r; return r - 5; }
int main(int argc, char **argv) { (void)argv; int r = outer(argc); sink = r; return 0; }
