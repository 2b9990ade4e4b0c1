/* vla_alloca(): alloca and a VLA, frame pointer based CFA; -> use_buf -> close(-1). */
#include <alloca.h>
#include <string.h>
#include <unistd.h>
#include "common.h"
volatile long sink;
NOINLINE int use_buf(char *a, char *b, int x) { int r = close(x); sink = r + a[1] + b[2]; return r + 1; }
NOINLINE int vla_alloca(int x, int n) {
	char vla[n];
	char *dyn = alloca((size_t)(n * 2));
	memset(vla, 3, (size_t)n);
	memset(dyn, 4, (size_t)(n * 2));
	int r = use_buf(vla, dyn, x);
	sink = r + vla[n - 1] + dyn[0];
	return r;
}
int main(int argc, char **argv) { (void)argv; sink = vla_alloca(argc - 2, 200 + argc * 37); return 0; }
