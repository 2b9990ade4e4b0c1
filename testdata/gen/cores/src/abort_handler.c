/* main -> trigger -> raise(SIGUSR1); the handler on_usr1 -> handler_leaf ->
 * abort(): SIGABRT raised inside a signal handler, so the stack runs through
 * the kernel's signal frame (__restore_rt) back to raise and main. */
#include <signal.h>
#include <stdlib.h>
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
NOINLINE void handler_leaf(int sig) { sink = sig; abort(); }
NOINLINE void on_usr1(int sig) { handler_leaf(sig + 1); sink = 2; }
NOINLINE int trigger(int x) { raise(SIGUSR1); sink = x; return x + 1; }
int main(int argc, char **argv) {
	(void)argv;
	struct sigaction sa = {0};
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, 0);
	sink = trigger(argc);
	return 0;
}
