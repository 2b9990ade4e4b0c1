// unwind.c: the kernel lab's program for libgcc's exception unwinder.
// For MS milliseconds, main starts one thread after the other; each runs
// unw_thread -> unw_top -> unw_mid -> unw_leaf, which calls pthread_exit:
// glibc unwinds the thread by libgcc's _Unwind_ForcedUnwind, which
// installs each frame's cleanup (the cleanup attributes below; built with
// -fexceptions), whose end resumes the unwinding with _Unwind_Resume, to
// the thread's start. Each thread's stacks are known by construction:
// its own functions in that order, under start_thread and the clone's
// child, with no function twice (nothing here recurses).
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#define NOINLINE __attribute__((noinline))

volatile long sink;

static void cleanup(long *p) { sink += *p; }

NOINLINE void unw_leaf(long n) {
	long a __attribute__((cleanup(cleanup))) = n;
	pthread_exit(0);
}
NOINLINE void unw_mid(long n) {
	long b __attribute__((cleanup(cleanup))) = n + 1;
	unw_leaf(n + 1);
	__asm__ volatile("");
}
NOINLINE void unw_top(long n) {
	long c __attribute__((cleanup(cleanup))) = n + 2;
	unw_mid(n + 1);
	__asm__ volatile("");
}
NOINLINE void *unw_thread(void *arg) {
	unw_top((long)arg);
	return 0;
}

static double now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int main(int argc, char **argv) {
	double end = now_ms() + (argc > 1 ? atof(argv[1]) : 1000);
	long i = 0;
	do { // one thread at least, however slow the machine
		pthread_t t;
		if (pthread_create(&t, 0, unw_thread, (void *)i++) != 0)
			return 1;
		pthread_join(t, 0);
	} while (now_ms() < end);
	return 0;
}
