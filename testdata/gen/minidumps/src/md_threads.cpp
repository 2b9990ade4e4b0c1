// C++ threads blocked in system calls for lldb's minidump and gdb's core of
// the same stop (testdata/gen/minidumps/gen.py): std::this_thread::sleep_for
// (nanosleep), std::condition_variable::wait (futex), a read through a
// member function of a class template, poll from a lambda, main in
// std::thread::join (futex), and one thread in a SIGUSR1 handler blocked in
// read there. Built -O2 -g -fomit-frame-pointer with libstdc++ and libgcc
// linked in statically; thread stacks are 64 KiB (pthread's default set
// before the threads start): lldb saves each thread's whole stack mapping.
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <mutex>
#include <thread>
#include <vector>

#include <poll.h>
#include <pthread.h>
#include <unistd.h>
#define NOINLINE __attribute__((noinline, noclone))

volatile long sink;
static int pipefd[2], sigpipe[2];

namespace blocking {
std::mutex mu;
std::condition_variable cv;
bool go;

NOINLINE void nap() {
	std::this_thread::sleep_for(std::chrono::hours(24));
	sink = 1;
}

NOINLINE void wait_cv() {
	std::unique_lock<std::mutex> lock(mu);
	cv.wait(lock, [] { return go; });
	sink = 2;
}

template <typename T> struct Reader {
	int fd;
	NOINLINE T get() const {
		T v{};
		sink = ::read(fd, &v, sizeof v);
		return v;
	}
};

NOINLINE void handler_leaf(int sig) {
	char c;
	sink = ::read(sigpipe[0], &c, 1) + sig;
}

extern "C" void on_usr1(int sig) { handler_leaf(sig); sink = sig; }

NOINLINE void wait_for_signal() {
	::pause();
	sink = 5;
}
} // namespace blocking

int main() {
	if (pipe(pipefd) != 0 || pipe(sigpipe) != 0) return 1;
	struct sigaction sa = {};
	sa.sa_handler = blocking::on_usr1;
	sigaction(SIGUSR1, &sa, nullptr);
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setstacksize(&attr, 64 * 1024);
	pthread_setattr_default_np(&attr);
	std::vector<std::thread> threads;
	threads.emplace_back(blocking::nap);
	threads.emplace_back(blocking::wait_cv);
	threads.emplace_back([] { sink = blocking::Reader<long>{pipefd[0]}.get(); });
	threads.emplace_back([] {
		struct pollfd p = {pipefd[0], POLLIN, 0};
		sink = ::poll(&p, 1, -1);
	});
	std::thread sig(blocking::wait_for_signal);
	std::this_thread::sleep_for(std::chrono::milliseconds(200));
	pthread_kill(sig.native_handle(), SIGUSR1);
	sig.join();
	return 0;
}
