/* main -> call_lib -> lib_entry@plt -> lib_entry -> lib_crash (SIGSEGV in
 * the shared library libcorecrash.so). */
#define NOINLINE __attribute__((noinline, noclone))
int lib_entry(int x);
volatile long sink;
NOINLINE int call_lib(int x) { int r = lib_entry(x + 1); sink = r; return r * 2; }
int main(int argc, char **argv) { (void)argv; sink = call_lib(argc); return 0; }
