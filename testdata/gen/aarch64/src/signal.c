/* main -> top -> mid -> leaf, leaf spins until SIGALRM (setitimer) arrives;
 * the handler calls hmid -> hleaf -> getppid(2).  The stop is just after the
 * svc in getppid (a frameless libc leaf).  The stack goes through qemu's
 * rt_sigreturn trampoline into the interrupted (frameless) leaf, whose
 * return address is only in the saved x30 of the signal frame. */
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

volatile int fired;
volatile long sink;

__attribute__((noinline)) long hleaf(long x)
{
	long r = getppid();
	sink += r;
	return r + x;
}

__attribute__((noinline)) long hmid(long x)
{
	volatile long v[6];
	v[1] = x;
	long r = hleaf(x + 1);
	sink += r + v[1];
	return r;
}

void handler(int sig)
{
	sink += hmid(sig);
	fired = 1;
}

__attribute__((noinline)) long leaf(long x)
{
	long n = 0;
	while (!fired)
		n += x;
	return n;
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

int main(int argc, char **argv)
{
	(void)argv;
	struct sigaction sa = {0};
	sa.sa_handler = handler;
	sigaction(SIGALRM, &sa, 0);
	struct itimerval it = {{0, 0}, {0, 20000}};
	setitimer(ITIMER_REAL, &it, 0);
	return (int)(top(argc) & 1);
}
