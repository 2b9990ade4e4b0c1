/* Four threads block in nanosleep, read, futex (a condition variable) and
 * poll; once all are about to block, a fifth thread waits a little and
 * crashes (null store in crash_leaf). main blocks in pthread_join (futex).
 * Thread stacks are 64 KiB to keep the core small. */
#include <poll.h>
#include <pthread.h>
#include <time.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
int *volatile target; /* null */
static int pipefd[2];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static pthread_barrier_t ready;

NOINLINE void in_nanosleep(void) {
	struct timespec ts = {1000, 0};
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
NOINLINE void crash_leaf(int x) { *target = x; sink = x; }
NOINLINE void crash_mid(int x) { crash_leaf(x + 1); sink = x; }

static void *sleeper(void *a) { (void)a; pthread_barrier_wait(&ready); in_nanosleep(); return 0; }
static void *reader(void *a) { (void)a; pthread_barrier_wait(&ready); in_read(); return 0; }
static void *waiter(void *a) { (void)a; pthread_barrier_wait(&ready); in_futex(); return 0; }
static void *poller(void *a) { (void)a; pthread_barrier_wait(&ready); in_poll(); return 0; }
static void *crasher(void *a) {
	(void)a;
	pthread_barrier_wait(&ready);
	struct timespec ts = {0, 300 * 1000 * 1000};
	nanosleep(&ts, 0); /* let the others reach their system calls */
	crash_mid(41);
	return 0;
}

int main(void) {
	void *(*fn[])(void *) = {sleeper, reader, waiter, poller, crasher};
	pthread_t t[5];
	pthread_attr_t attr;
	if (pipe(pipefd) != 0) return 1;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_barrier_init(&ready, 0, 5);
	for (int i = 0; i < 5; i++) pthread_create(&t[i], &attr, fn[i], 0);
	pthread_join(t[4], 0);
	return 0;
}
