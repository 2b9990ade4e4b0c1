/* main -> top -> mid -> leaf; leaf is a true leaf (no calls, no stack frame),
 * the stop is a few instructions into it, before it returns: the return
 * address is only in x30 and CFA = sp. */
volatile long sink;

__attribute__((noinline)) long leaf(long x)
{
	long s = 0;
	for (long i = 0; i < x; i++)
		s += i * x ^ (s >> 3);
	return s;
}

__attribute__((noinline)) long mid(long x)
{
	volatile long v[10];
	v[2] = x;
	long r = leaf(x + 40);
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
	return (int)(top(argc) & 1);
}
