/* A second thread: worker -> t_top -> t_leaf -> close(-1). */
#include <pthread.h>
#include <unistd.h>
#include "common.h"
volatile long sink;
NOINLINE int t_leaf(int x) { int r = close(x); sink = r; return r + 1; }
NOINLINE int t_top(int x) { int r = t_leaf(x - 1); sink = r; return r * 3; }
NOINLINE void *worker(void *arg) { sink = t_top((int)(long)arg); return 0; }
int main(void) {
	pthread_t t;
	if (pthread_create(&t, 0, worker, (void *)0L) != 0) return 1;
	pthread_join(t, 0);
	return 0;
}
