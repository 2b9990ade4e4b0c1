package report

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/testprog"
)

// cxxTerminateSrc throws through templates, std::function and lambdas
// into a noexcept function: std::terminate, SIGABRT. gcc gives the
// instances of templates over main's lambdas (std::for_each<..., main(int,
// char**)::<lambda(int)>>, _Function_handler<...>::_M_invoke) no linkage
// name, so their names come from the classes and namespaces they are in.
const cxxTerminateSrc = `#include <algorithm>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>
namespace app {
template <typename T> struct Box {
	T v;
	__attribute__((noinline)) T check(int depth) const {
		if (depth == 0) throw std::runtime_error("boom " + std::to_string(v));
		return v + 1;
	}
};
template <typename T, int N> __attribute__((noinline)) T deep(const Box<T> &b, int d) {
	if constexpr (N > 0) { volatile int x = d; return deep<T, N - 1>(b, x - 1) + 1; }
	else return b.check(d);
}
namespace {
struct Runner {
	std::function<int(int)> fn;
	__attribute__((noinline)) int run(int x) noexcept { return fn(x); }
};
}
int start(int argc) {
	std::vector<int> v{3, 2, 1};
	Box<long> b{argc + 41L};
	auto lam = [&](int d) { return (int)deep<long, 3>(b, d + 3 - argc); };
	Runner r{[&](int x) { int s = 0; std::for_each(v.begin(), v.end(), [&](int e) { s += lam(x + e - 1 - x); }); return s; }};
	return r.run(argc);
}
}
int main(int argc, char **) { return app::start(argc); }
`

// TestCxxNamesMatchGDB: every frame of the program's own code, inlined
// ones too, has gdb's name (without parameters) and pc, in gdb's order;
// among them the functions without a linkage name, qualified as gdb does
// (std::for_each<...>, std::_Function_handler<...>::_M_invoke, which were
// printed as for_each<...> and _M_invoke) and a function in an anonymous
// namespace.
func TestCxxNamesMatchGDB(t *testing.T) {
	dir := t.TempDir()
	bin := testprog.Build(t, dir, "term.cc", cxxTerminateSrc, "-O2", "-g")
	gdbFrames, core := crashUnderGDB(t, dir, bin)

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}}
	var got []Frame
	for _, f := range signalledFrames(t, core, opts) {
		if f.Kernel || f.Module != bin && len(got) == 0 {
			continue
		}
		got = append(got, f)
		if f.Symbol == "main" {
			break
		}
	}
	require.NotEmpty(t, got, "no frame in %s", bin)
	first := -1
	for i, g := range gdbFrames {
		if g.pc == got[0].PC {
			first = i
			break
		}
	}
	require.GreaterOrEqual(t, first, 0, "gdb has no frame at %#x, ustack's first in the program", got[0].PC)
	want := gdbFrames[first:]
	var gs, us []string
	for _, g := range want {
		gs = append(gs, fmt.Sprintf("%s@%#x", withoutParams(g.name), g.pc))
	}
	for _, f := range got {
		us = append(us, fmt.Sprintf("%s@%#x", elfcache.DemangleShort(f.Symbol), f.PC))
	}
	t.Logf("gdb:    %s", strings.Join(gs, "\n\t"))
	t.Logf("ustack: %s", strings.Join(us, "\n\t"))
	assert.Equal(t, gs, us, "the program's frames, inlined ones too, against gdb's")
	joined := strings.Join(gs, " ")
	for _, name := range []string{"std::for_each<", "std::_Function_handler<", ">::_M_invoke@", "app::(anonymous namespace)::Runner::run@", "app::deep<long, 3>@"} {
		assert.Contains(t, joined, name, "gdb's frames have %s: the program is the shape the test means", name)
	}
}
