// cxx_exception dtor     : thrower() throws; ~Guard runs during unwinding (in
//                          thrower's landing pad) and calls close(-1).
// cxx_exception terminate: the throw escapes a noexcept function; the personality
//                          routine calls std::terminate from inside
//                          _Unwind_RaiseException; our terminate handler calls close(-1).
#include <cstring>
#include <exception>
#include <stdexcept>
#include <unistd.h>
#define NOINLINE __attribute__((noinline, noclone))
volatile long sink;
struct Guard {
	int fd;
	explicit Guard(int f) : fd(f) { sink = f; }
	NOINLINE ~Guard() { int r = close(fd); sink = r; }
};
NOINLINE void thrower(int x) {
	Guard g(x);
	sink = x;
	if (x < 0) throw std::runtime_error("boom");
	sink = x + 1;
}
NOINLINE int middle(int x) { thrower(x - 1); sink = x; return x + 1; }
NOINLINE void term_leaf() { int r = close(-3); sink = r; _exit(0); }
NOINLINE void on_terminate() { term_leaf(); }
NOINLINE void nothrow_caller(int x) noexcept { middle(x); sink = x; }
int main(int argc, char **argv) {
	if (argc > 1 && std::strcmp(argv[1], "terminate") == 0) {
		std::set_terminate(on_terminate);
		nothrow_caller(argc - 2);
		return 0;
	}
	try {
		sink = middle(argc - 1);
	} catch (const std::exception &e) {
		sink = 1;
	}
	return 0;
}
