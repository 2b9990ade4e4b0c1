/* A second pthread runs worker -> top -> mid -> leaf -> usleep -> nanosleep
 * -> clock_nanosleep(2) while the main thread waits in pthread_join.  The
 * thread's chain ends in glibc's clone3 thread_start (outermost). */
#include <pthread.h>
#include <unistd.h>

volatile long sink;

__attribute__((noinline)) long leaf(long x)
{
	volatile char buf[40];
	buf[0] = (char)x;
	long r = usleep(1000);
	sink += r + buf[0];
	return r + x;
}

__attribute__((noinline)) long mid(long x)
{
	volatile long v[10];
	v[2] = x;
	long r = leaf(x + 2);
	sink += r + v[2];
	return r + 1;
}

__attribute__((noinline)) long top(long x)
{
	volatile int w[5];
	w[1] = (int)x;
	long r = mid(x + 1);
	sink += r + w[1];
	return r * 2;
}

static void *worker(void *arg)
{
	sink += top((long)arg);
	return 0;
}

int main(int argc, char **argv)
{
	(void)argv;
	pthread_t t;
	pthread_create(&t, 0, worker, (void *)(long)argc);
	pthread_join(t, 0);
	return (int)(sink & 1);
}
