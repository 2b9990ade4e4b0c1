package report

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestOTLPFrameType checks profile.frame.type against the values the
// OpenTelemetry eBPF profiler gives (libpf's interpreter names): kernel
// frames, native code, and JIT code from perf maps and jitdumps by the
// runtime the process or the symbol shows.
func TestOTLPFrameType(t *testing.T) {
	for _, c := range []struct {
		comm, module, symbol string
		kernel               bool
		want                 string
	}{
		{"prog", "[kernel.kallsyms]", "do_syscall_64", true, "kernel"},
		{"prog", "/usr/lib/x86_64-linux-gnu/libc.so.6", "write", false, "native"},
		{"prog", "", "", false, "native"},
		{"node", "/tmp/perf-42.map", "LazyCompile:*fib /app/fib.js:1", false, "v8js"},
		{"node", "/work/jit-42.dump", "JS:*fib", false, "v8js"},
		{"java", "/tmp/perf-7.map", "Interpreter", false, "jvm"},
		{"worker", "/tmp/perf-7.map", "LMain;::loop", false, "jvm"},
		{"python3", "/tmp/perf-9.map", "py::fib:/app/fib.py", false, "cpython"},
		{"dotnet", "/tmp/perf-5.map", "Program::Main", false, "dotnet"},
		{"luajit", "/tmp/perf-5.map", "TRACE_1", false, "unknown"},
	} {
		s := &Sample{Comm: c.comm}
		f := &Frame{Module: c.module, Symbol: c.symbol, Kernel: c.kernel}
		assert.Equal(t, c.want, frameType(s, f), "%+v", c)
	}
}
