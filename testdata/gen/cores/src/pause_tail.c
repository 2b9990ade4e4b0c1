/* A thread blocked in pause() that it reached by a tail call: waiter_leaf
 * ends in "jmp pause@plt" (-O2), so its frame is gone and only DWARF's call
 * sites (waiter's call of waiter_leaf, waiter_leaf's tail call of pause,
 * a function of another object) say it was there, as gdb shows it. The
 * main thread then crashes. */
#include <pthread.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
NOINLINE void waiter_leaf(void) { pause(); }
NOINLINE void *waiter(void *arg) {
	waiter_leaf();
	sink = 1;
	return arg;
}
NOINLINE void crash_leaf(int x) { *(volatile int *)(long)sink = x; }
int main(void) {
	pthread_t t;
	pthread_create(&t, 0, waiter, 0);
	usleep(200000); /* until the waiter is in pause */
	crash_leaf(3);
	return 0;
}
