// lab.c: the kernel lab's test program. Every mode reaches its event
// through a known chain of its own functions, so the stacks a recording
// must show are known by construction (the lab's tests list them):
//
//   open N      open_leaf <- open_mid <- open_top <- main, N times
//               (openat: kprobes and kretprobes on do_sys_openat2, the
//               syscalls:sys_enter_openat tracepoint, uprobes on open_leaf)
//   watch N     write_leaf <- write_mid <- main write the global counter N
//               times (hardware watchpoints)
//   libwatch N  lib_bump (liblab.so, through the PLT) <- lib_top <- main
//               write liblab.so's lib_counter N times (dynamic build only)
//   signal N    raise(SIGUSR1) from sig_raiser <- main; the handler
//               sig_handler -> sig_leaf opens a file, N times
//   spin MS     spin_leaf <- spin_mid <- main burn the CPU for MS ms
//               (cpu-clock)
//
// Built without frame pointers (-fomit-frame-pointer), without sibling
// calls (every function keeps its frame), static and dynamic (PIE); the
// PIE once more with frame pointers (lab-dyn-fp), for the frame-pointer
// audit.
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef LAB_DYNAMIC
extern void lib_bump(void);
#endif

#define NOINLINE __attribute__((noinline))

volatile long counter;
static const char *target = "/lab/target";

NOINLINE void open_leaf(void) {
	int fd = open(target, O_RDONLY);
	if (fd >= 0)
		close(fd);
}
NOINLINE void open_mid(void) { open_leaf(); __asm__ volatile(""); }
NOINLINE void open_top(void) { open_mid(); __asm__ volatile(""); }

NOINLINE void write_leaf(long v) { counter = counter + v; }
NOINLINE void write_mid(long v) { write_leaf(v + 1); __asm__ volatile(""); }

#ifdef LAB_DYNAMIC
NOINLINE void lib_top(void) { lib_bump(); __asm__ volatile(""); }
#endif

NOINLINE void sig_leaf(void) { open_leaf(); __asm__ volatile(""); }
NOINLINE void sig_handler(int sig) { (void)sig; sig_leaf(); __asm__ volatile(""); }
NOINLINE void sig_raiser(void) { raise(SIGUSR1); __asm__ volatile(""); }

static double now_ms(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}
NOINLINE long spin_leaf(long n) {
	long x = 0;
	for (long i = 0; i < n; i++)
		x += i ^ (x >> 3);
	return x;
}
NOINLINE long spin_mid(double ms) {
	long x = 0;
	double end = now_ms() + ms;
	while (now_ms() < end)
		x += spin_leaf(100000);
	__asm__ volatile("");
	return x;
}

int main(int argc, char **argv) {
	const char *mode = argc > 1 ? argv[1] : "open";
	long n = argc > 2 ? atol(argv[2]) : 8;
	if (!strcmp(mode, "open")) {
		for (long i = 0; i < n; i++)
			open_top();
	} else if (!strcmp(mode, "watch")) {
		for (long i = 0; i < n; i++)
			write_mid(i);
#ifdef LAB_DYNAMIC
	} else if (!strcmp(mode, "libwatch")) {
		for (long i = 0; i < n; i++)
			lib_top();
#endif
	} else if (!strcmp(mode, "signal")) {
		signal(SIGUSR1, sig_handler);
		for (long i = 0; i < n; i++)
			sig_raiser();
	} else if (!strcmp(mode, "spin")) {
		return spin_mid((double)n) == 42;
	} else {
		return 2;
	}
	return 0;
}
