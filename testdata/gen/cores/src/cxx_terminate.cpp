// main -> run -> thrower, which throws std::runtime_error that nothing
// catches: the unwinder (libgcc) finds no handler, __cxa_throw calls
// std::terminate, whose default handler calls abort(): SIGABRT with
// terminate -> abort on top of __cxa_throw and the program's frames.
// Built with libstdc++ and libgcc linked in statically, so only glibc is
// shared.
#include <stdexcept>
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
NOINLINE void thrower(int x) {
	sink = x;
	if (x > 0) throw std::runtime_error("uncaught");
	sink = x + 1;
}
NOINLINE int run(int x) { thrower(x); sink = x; return x + 1; }
int main(int argc, char **) { sink = run(argc); return 0; }
