/* Static musl: a SIGALRM handler interrupts busy(); handler -> handler_leaf -> close(-1).
 * musl's __restore_rt has no CFI. main first calls close(-5) through musl's close(). */
#include <signal.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>
#include "common.h"
volatile long sink;
static volatile int fired;
/* A raw syscall, so no musl function (musl has no CFI) sits above the handler. */
NOINLINE int handler_leaf(int sig) {
	long r;
	__asm__ volatile("syscall" : "=a"(r) : "0"(3L /* SYS_close */), "D"((long)-sig) : "rcx", "r11", "memory");
	sink = r;
	return (int)r;
}
/* close() through musl, whose functions have no CFI (musl_no_cfi fixture). */
NOINLINE int libc_close(int fd) { int r = close(fd); sink = r; return r; }
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
int main(void) {
	sink = libc_close(-5);
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sigaction(SIGALRM, &sa, 0);
	struct itimerval it;
	memset(&it, 0, sizeof it);
	it.it_value.tv_usec = 20000;
	setitimer(ITIMER_REAL, &it, 0);
	sink = busy(1000);
	return 0;
}
