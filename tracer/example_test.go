package tracer_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"time"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/tracer"
	"golang.org/x/sys/unix"
)

// Example unwinds the stack of a live process the way a tracer does: it
// stops a thread (here with ptrace; an eBPF program copies the same
// registers and stack bytes), hands the registers and the stack bytes to a
// Walker, and prints the symbolized frames. The process is sleep(1),
// stopped in glibc's clock_nanosleep.
func Example() {
	cmd := exec.Command("sleep", "60")
	if err := cmd.Start(); err != nil {
		panic(err)
	}
	defer cmd.Process.Kill()
	pid := cmd.Process.Pid
	for b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid)); !strings.HasPrefix(string(b), "230 "); b, _ = os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid)) {
		time.Sleep(10 * time.Millisecond) // until it sleeps (clock_nanosleep)
	}

	// The tracer's capture: registers by name, stack bytes from SP up.
	runtime.LockOSThread()
	unix.PtraceSeize(pid)
	unix.PtraceInterrupt(pid)
	var ws unix.WaitStatus
	unix.Wait4(pid, &ws, 0, nil)
	var r unix.PtraceRegs
	unix.PtraceGetRegs(pid, &r)
	regs := new(arch.Regs)
	for name, v := range map[string]uint64{"rip": r.Rip, "rsp": r.Rsp, "rbp": r.Rbp, "rbx": r.Rbx,
		"r12": r.R12, "r13": r.R13, "r14": r.R14, "r15": r.R15} {
		n, _ := arch.AMD64.RegByName(name)
		regs.Set(n, v)
	}
	mem, _ := os.Open(fmt.Sprintf("/proc/%d/mem", pid))
	stack := make([]byte, 8192)
	n, _ := mem.ReadAt(stack, int64(r.Rsp))
	mem.Close()
	unix.PtraceDetach(pid)
	runtime.UnlockOSThread()

	// The front door: one Tracer for the run, one Walker per goroutine.
	t := tracer.New(tracer.Options{})
	defer t.Close()
	p, err := t.Process(pid)
	if err != nil {
		panic(err)
	}
	w := t.NewWalker()
	st := w.Unwind(p, regs, stack[:n])
	// st.Frames are the symbolized frames, innermost first, with Symbol,
	// Module, Offset, File, Line, Inlined and How; on Debian 12:
	// __GI___clock_nanosleep and __GI___nanosleep in libc.so.6, sleep's
	// own frames (a stripped program: no names), __libc_start_call_main,
	// __libc_start_main_impl, and sleep's _start.
	fmt.Println("innermost in", filepath.Base(st.Frames[0].Module), "| stop:", st.Stop)
	// Output:
	// innermost in libc.so.6 | stop: outermost
}

//go:noinline
func normalizeMe() int { return 42 }

// ExampleProcess_Normalize normalizes an address of a live process (this
// one) into its object's path, build-id and file offset, and symbolizes the
// normalized address as another process, on another machine, would: by
// build-id, without the pid.
func ExampleProcess_Normalize() {
	t := tracer.New(tracer.Options{})
	defer t.Close()
	p, err := t.Process(os.Getpid())
	if err != nil {
		panic(err)
	}
	addr := uint64(reflect.ValueOf(normalizeMe).Pointer())
	n := p.Normalize(nil, addr)[0]
	exe, _ := os.Executable()
	fmt.Println("object is this program:", n.Path == exe, "file offset below the address:", n.FileOffset < addr)

	// Elsewhere: a Tracer that has the object by path or by build-id.
	elsewhere := tracer.New(tracer.Options{BuildIDDirs: []string{"/var/cache/build-ids"}})
	defer elsewhere.Close()
	for _, f := range elsewhere.NewWalker().SymbolizeNormalized(n) {
		fmt.Println(f.Symbol, filepath.Base(f.File))
	}
	// Output:
	// object is this program: true file offset below the address: true
	// github.com/ustack/ustack/tracer_test.normalizeMe example_test.go
}
