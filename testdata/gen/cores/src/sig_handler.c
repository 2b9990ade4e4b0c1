/* main -> outer -> inner, which faults (SIGSEGV); the handler on_segv ->
 * handler_leaf -> abort(): SIGABRT raised inside the handler, so the stack
 * runs through the signal frame back to inner, the interrupted function.
 * Built -static for arm64 and run under qemu-aarch64: the sigreturn
 * trampoline is qemu's, in an anonymous page with no symbol and no CFI.
 *
 * gdb-multiarch 13.1 hangs unwinding past the handler in such a core, so
 * the program records the rest of its stack itself, in chain[]: the return
 * addresses into on_segv and into the trampoline, the interrupted pc and
 * link register from the signal's ucontext, then the return address of
 * each frame record from the interrupted x29 (built with frame pointers). */
#include <signal.h>
#include <stdlib.h>
#include <ucontext.h>
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
int *volatile nowhere;
unsigned long chain[32];
volatile int nchain;
NOINLINE void handler_leaf(int sig) {
	chain[0] = (unsigned long)__builtin_return_address(0);
	sink = sig;
	abort();
}
NOINLINE void on_segv(int sig, siginfo_t *si, void *ctx) {
	ucontext_t *uc = ctx;
	(void)si;
	chain[1] = (unsigned long)__builtin_return_address(0);
	chain[2] = uc->uc_mcontext.pc;
	chain[3] = uc->uc_mcontext.regs[30];
	int n = 4;
	for (unsigned long *fp = (unsigned long *)uc->uc_mcontext.regs[29]; fp && n < 32; fp = (unsigned long *)fp[0])
		chain[n++] = fp[1];
	nchain = n;
	handler_leaf(sig + 1);
	sink = 2;
}
NOINLINE int inner(int x) { *nowhere = x; sink = x; return x + 1; }
NOINLINE int outer(int x) { sink = inner(x + 1); return x + 2; }
int main(int argc, char **argv) {
	(void)argv;
	struct sigaction sa = {0};
	sa.sa_sigaction = on_segv;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGSEGV, &sa, 0);
	sink = outer(argc);
	return 0;
}
