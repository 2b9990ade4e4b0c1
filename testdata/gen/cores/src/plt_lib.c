/* libcorecrash.so: lib_entry -> lib_crash, which stores through a null
 * pointer. Called from plt_crash through the PLT. */
#define NOINLINE __attribute__((noinline, noclone))
volatile long lib_sink;
int *volatile lib_target; /* null */
NOINLINE int lib_crash(int x) { *lib_target = x; lib_sink = x; return x + 1; }
NOINLINE int lib_entry(int x) { int r = lib_crash(x * 2); lib_sink = r; return r + 1; }
