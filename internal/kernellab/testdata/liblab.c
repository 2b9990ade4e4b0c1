// liblab.c: the shared library of lab.c's dynamic build: a global written
// through a call into the library (a watchpoint on a library's symbol).
volatile long lib_counter;
__attribute__((noinline)) void lib_bump(void) { lib_counter = lib_counter + 1; }
