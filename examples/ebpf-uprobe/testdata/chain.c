/* The live tests' fixture: leaf() under mid() under top() under main(),
   each a real call (noinline, and an empty asm after the call so that no
   call becomes a tail call). leaf() writes one byte to /dev/null, so a
   uprobe on leaf and the syscalls:sys_enter_write tracepoint both stop
   under the same chain. */
#include <fcntl.h>
#include <time.h>
#include <stdlib.h>
#include <unistd.h>

static int fd;

__attribute__((noinline)) void leaf(int i) { write(fd, "x", 1 + (i & 0)); __asm__ volatile(""); }
__attribute__((noinline)) void mid(int i) { leaf(i); __asm__ volatile(""); }
__attribute__((noinline)) void top(int i) { mid(i); __asm__ volatile(""); }

int main(int argc, char **argv)
{
	int n = argc > 1 ? atoi(argv[1]) : 20;
	struct timespec pause = {0, 2000000};
	fd = open("/dev/null", O_WRONLY);
	for (int i = 0; i < n; i++) {
		top(i);
		nanosleep(&pause, 0);
	}
	/* Give a tracer that reads /proc/PID/maps after the event (not from
	   mmap records, as perf does) time to read them. */
	nanosleep(&(struct timespec){0, 100000000}, 0);
	return 0;
}
