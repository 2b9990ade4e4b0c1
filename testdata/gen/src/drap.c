/* realign(): 64-byte aligned locals plus a variable-size alloca, so gcc
 * realigns the stack through a DRAP register and describes the CFA with
 * DW_CFA_def_cfa_expression. realign -> inner -> close(-1). */
#include <alloca.h>
#include <string.h>
#include <unistd.h>
#include "common.h"
volatile long sink;
NOINLINE int inner(int x, char *p) { int r = close(x); sink = r + p[0]; return r + 1; }
NOINLINE int realign(int x, int n) {
	_Alignas(64) char aligned[192];
	char *dyn = alloca((size_t)n);
	memset(aligned, x, sizeof aligned);
	memset(dyn, 1, (size_t)n);
	int r = inner(x, aligned + dyn[n - 1]);
	sink = r + aligned[5];
	return r;
}
NOINLINE int outer(int x) { int r = realign(x, 100 + x * x); sink = r; return r + 2; }
int main(int argc, char **argv) { (void)argv; sink = outer(argc - 2); return 0; }
