/* 64 threads, each blocked at the end of a chain of 8 calls of its own
 * (f8 -> ... -> f1 -> block) in nanosleep, read, a condition variable
 * (futex) or poll by turns; main in pthread_join (futex). The minidump of
 * the benchmark of ustack report against lldb's bt all
 * (scripts/bench-minidump.sh, report's BenchmarkLLDBMinidump64). Built -O2
 * -g -fomit-frame-pointer; thread stacks are 64 KiB. */
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#define N 64
static pthread_barrier_t started;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int pipefd[2];
static volatile int sink;
__attribute__((noinline)) static void block(int kind) {
	switch (kind % 4) {
	case 0: { struct timespec ts = {100000, 0}; nanosleep(&ts, 0); break; }
	case 1: { char c; sink = read(pipefd[0], &c, 1); break; }
	case 2: pthread_mutex_lock(&mu); pthread_cond_wait(&cv, &mu); pthread_mutex_unlock(&mu); break;
	case 3: { struct pollfd p = {pipefd[0], POLLIN, 0}; sink = poll(&p, 1, -1); break; }
	}
}
#define LEVEL(n, next) __attribute__((noinline)) static void n(int k) { next(k); sink++; }
LEVEL(f1, block) LEVEL(f2, f1) LEVEL(f3, f2) LEVEL(f4, f3) LEVEL(f5, f4) LEVEL(f6, f5) LEVEL(f7, f6) LEVEL(f8, f7)
static void *worker(void *arg) {
	pthread_barrier_wait(&started);
	f8((int)(long)arg);
	return 0;
}
int main(void) {
	pthread_t t[N];
	pthread_attr_t a;
	if (pipe(pipefd) != 0) return 1;
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 64 << 10);
	pthread_barrier_init(&started, 0, N + 1);
	for (long i = 0; i < N; i++) pthread_create(&t[i], &a, worker, (void *)i);
	pthread_barrier_wait(&started);
	pthread_join(t[0], 0);
	return 0;
}
