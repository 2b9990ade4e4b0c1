/* main -> recurse -> recurse -> ... until the stack meets its guard gap:
 * SIGSEGV with frame 0 at the faulting instruction (a store into the next
 * frame's buffer), no sigaltstack, so the kernel dumps core at once. The
 * stack limit is lowered to 256 KiB first so the core stays small and the
 * stack has a few hundred frames. */
#include <sys/resource.h>
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
NOINLINE int recurse(int n) {
	volatile char buf[1000];
	buf[0] = (char)n;
	buf[999] = (char)n;
	int r = recurse(n + 1);
	sink = buf[n % 1000] + r;
	return r + 1;
}
int main(void) {
	struct rlimit rl = {256 * 1024, 256 * 1024};
	setrlimit(RLIMIT_STACK, &rl);
	sink = recurse(0);
	return 0;
}
