/* main -> top -> mid -> leaf -> close(2).  Used for the -O0/-O2/fp/nofp/pac and
 * .debug_frame-only fixtures; the frames have locals of different sizes so
 * that CFA offsets differ, and every call result is used afterwards so that no
 * call becomes a tail call. */
#include <unistd.h>

volatile int sink;

__attribute__((noinline)) int leaf(int x)
{
	volatile char buf[48];
	buf[0] = (char)x;
	int r = close(x - 1000);	/* EBADF; the stop is just after the svc */
	sink = r + buf[0];
	return r + x;
}

__attribute__((noinline)) int mid(int x)
{
	volatile long v[20];
	v[3] = x;
	int r = leaf(x * 3);
	sink += r + (int)v[3];
	return r + 1;
}

__attribute__((noinline)) int top(int x)
{
	volatile int w[7];
	w[1] = x;
	int r = mid(x + 1);
	sink += r + w[1];
	return r * 2;
}

int main(int argc, char **argv)
{
	(void)argv;
	return top(argc) & 1;
}
