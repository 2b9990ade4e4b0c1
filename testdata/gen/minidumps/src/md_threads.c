/* Threads blocked in system calls for lldb's minidump and gdb's core of the
 * same stop (testdata/gen/minidumps/gen.py): nanosleep, read, a condition
 * variable (futex) and poll, main in pthread_join (futex), and one thread
 * in a SIGUSR1 handler, blocked in read there. Built -O2 -g
 * -fomit-frame-pointer. Thread stacks are 64 KiB: lldb saves each thread's
 * whole stack mapping. */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
static int pipefd[2], sigpipe[2];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t ready;

NOINLINE void in_nanosleep(void) {
	struct timespec ts = {100000, 0};
	nanosleep(&ts, 0);
	sink = 1;
}
NOINLINE void in_read(void) {
	char c;
	sink = read(pipefd[0], &c, 1);
}
NOINLINE void in_futex(void) {
	pthread_mutex_lock(&mu);
	pthread_cond_wait(&cv, &mu);
	pthread_mutex_unlock(&mu);
	sink = 3;
}
NOINLINE void in_poll(void) {
	struct pollfd p = {pipefd[0], POLLIN, 0};
	sink = poll(&p, 1, -1);
}
NOINLINE void handler_leaf(int sig) {
	char c;
	sink = read(sigpipe[0], &c, 1) + sig;
}
static void on_usr1(int sig) { handler_leaf(sig); sink = sig; }
NOINLINE void wait_for_signal(void) {
	pause();
	sink = 5;
}

static void *sleeper(void *a) { (void)a; pthread_barrier_wait(&ready); in_nanosleep(); return 0; }
static void *reader(void *a) { (void)a; pthread_barrier_wait(&ready); in_read(); return 0; }
static void *waiter(void *a) { (void)a; pthread_barrier_wait(&ready); in_futex(); return 0; }
static void *poller(void *a) { (void)a; pthread_barrier_wait(&ready); in_poll(); return 0; }
static void *signalled(void *a) { (void)a; pthread_barrier_wait(&ready); wait_for_signal(); return 0; }

int main(void) {
	void *(*fn[])(void *) = {sleeper, reader, waiter, poller, signalled};
	pthread_t t[5];
	pthread_attr_t attr;
	struct sigaction sa = {0};
	if (pipe(pipefd) != 0 || pipe(sigpipe) != 0) return 1;
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, 0);
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_barrier_init(&ready, 0, 6);
	for (int i = 0; i < 5; i++) pthread_create(&t[i], &attr, fn[i], 0);
	pthread_barrier_wait(&ready);
	struct timespec ts = {0, 100 * 1000 * 1000};
	nanosleep(&ts, 0); /* let the signalled thread reach pause */
	pthread_kill(t[4], SIGUSR1);
	pthread_join(t[4], 0);
	return 0;
}
