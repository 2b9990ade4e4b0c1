/* Signal handler fixtures.
 *   signal timer   : setitimer(ITIMER_REAL) interrupts busy() mid-loop; handler on the normal stack
 *   signal raise   : raise(SIGALRM) from raiser(); signal delivered on return from tgkill
 *   signal altstack: like timer, but SA_ONSTACK on an mmap'd sigaltstack
 * The handler calls handler_leaf -> close(-1), where the fixture stops. */
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <unistd.h>
#include "common.h"
volatile long sink;
static volatile int fired;

NOINLINE int handler_leaf(int sig) { int r = close(-sig); sink = r; return r; }
NOINLINE void handler(int sig) { handler_leaf(sig); sink++; fired = 1; }

NOINLINE long busy(long n) {
	long acc = 0;
	while (!fired) {
		for (long i = 0; i < n; i++)
			acc = acc * 31 + i;
		sink = acc;
	}
	return acc;
}
NOINLINE long spinner(long n) { long r = busy(n); sink = r; return r + 1; }
NOINLINE int raiser(int sig) { int r = raise(sig); sink = r; return r + 1; }

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "timer";
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigemptyset(&sa.sa_mask);
	if (strcmp(mode, "altstack") == 0) {
		size_t sz = 64 * 1024;
		void *p = mmap(0, sz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED) return 2;
		stack_t ss = {.ss_sp = p, .ss_size = sz, .ss_flags = 0};
		if (sigaltstack(&ss, 0) != 0) return 3;
		sa.sa_flags = SA_ONSTACK;
	}
	sigaction(SIGALRM, &sa, 0);
	if (strcmp(mode, "raise") == 0) {
		sink = raiser(SIGALRM);
		return 0;
	}
	struct itimerval it;
	memset(&it, 0, sizeof it);
	it.it_value.tv_usec = 20000;
	setitimer(ITIMER_REAL, &it, 0);
	sink = spinner(1000);
	return 0;
}
