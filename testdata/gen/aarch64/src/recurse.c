/* main -> top -> recurse x DEPTH -> leaf -> close(2): a stack deeper than the
 * 4 KiB snapshot that the truncation fixture keeps. */
#include <unistd.h>

#define DEPTH 40
volatile long sink;

__attribute__((noinline)) long leaf(long x)
{
	long r = close((int)x - 1000);
	sink += r;
	return r + x;
}

__attribute__((noinline)) long recurse(long n)
{
	volatile long pad[12];
	pad[n % 12] = n;
	long r = n ? recurse(n - 1) : leaf(n + 7);
	sink += r + pad[n % 12];
	return r + 1;
}

__attribute__((noinline)) long top(long x)
{
	long r = recurse(DEPTH + x - 1);
	sink += r;
	return r * 2;
}

int main(int argc, char **argv)
{
	(void)argv;
	return (int)(top(argc) & 1);
}
