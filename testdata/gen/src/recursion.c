/* recurse(200) with a 64-byte local per frame, then close(-1). */
#include <unistd.h>
#include "common.h"
volatile long sink;
NOINLINE int recurse(int n) {
	volatile char buf[64];
	buf[0] = (char)n;
	if (n == 0) { int r = close(-1); sink = r; return r + buf[0]; }
	int r = recurse(n - 1);
	sink = r;
	return r + buf[0];
}
int main(int argc, char **argv) { (void)argv; sink = recurse(199 + argc); return 0; }
