/* The program of the README's first command (testdata/recordings/hello):
 * main -> greet -> say -> write(2), and main -> count -> tick -> say ->
 * write(2) three times, recorded at syscalls:sys_enter_write.
 *
 * It is freestanding (no libc: its own _start and syscall stub) so the
 * recording's archive holds one 10 KB program and the vdso, nothing of the
 * machine that made it. say() is always inlined, so each stack has an
 * inline frame; the write's return value is checked inside say(), so the
 * pc after the syscall instruction is still in say's inlined range.
 * Build: gcc -O2 -g -static -nostdlib -fno-stack-protector -fcf-protection=none. */
#define SYS_write 1
#define SYS_exit_group 231
#define NOINLINE __attribute__((noinline, noclone))

volatile long sink;

static long syscall3(long n, long a, long b, long c)
{
	long ret;
	__asm__ volatile("syscall" : "=a"(ret) : "a"(n), "D"(a), "S"(b), "d"(c) : "rcx", "r11", "memory");
	return ret;
}

static inline __attribute__((always_inline)) void say(const char *s, long n)
{
	if (syscall3(SYS_write, 1, (long)s, n) != n)
		sink = -1;
}

NOINLINE void greet(void) { say("hello\n", 6); sink = 1; }
NOINLINE void tick(int i) { char line[2] = {(char)('0' + i), '\n'}; say(line, 2); sink = i; }
NOINLINE void count(int n) { for (int i = n; i > 0; i--) tick(i); sink = n; }
NOINLINE int main(void) { greet(); count(3); sink = 0; return 0; }

/* _start's CFI marks the return address undefined: the outermost frame. */
__attribute__((noreturn, used)) void start_c(void)
{
	syscall3(SYS_exit_group, main(), 0, 0);
	__builtin_unreachable();
}
__asm__(".text\n.globl _start\n.type _start,@function\n_start:\n"
	".cfi_startproc\n.cfi_undefined rip\n"
	"xor %ebp, %ebp\nand $-16, %rsp\ncall start_c\nhlt\n"
	".cfi_endproc\n.size _start, .-_start\n");
