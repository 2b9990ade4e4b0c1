package report

import (
	"bufio"
	"bytes"
	"context"
	"debug/elf"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-delve/delve/pkg/proc"
	"github.com/go-delve/delve/pkg/proc/core"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/arch/x86/x86asm"

	"github.com/ustack/ustack/internal/testprog"
	"github.com/ustack/ustack/resolve"
)

// abortGoSwitch builds testdata/goswitch as b says and runs it with
// GOMAXPROCS=3, GODEBUG=asyncpreemptoff=1 and GOTRACEBACK=crash: once it
// prints "stopping", its main goroutine waits in runtime.ReadMemStats's stop
// of the world, on its thread's g0 stack inside runtime.systemstack, for a
// goroutine that spins without a call; 300 ms later the test sends SIGABRT
// and the runtime dumps core. A program built for arm64 on another machine
// runs under qemu-aarch64 (the test skips without it), which writes the
// program's core itself (qemu_goswitch_*.core, with no NT_FILE note).
func abortGoSwitch(t *testing.T, b goBuild) *goCrash {
	t.Helper()
	qemu := ""
	if b.goarch == "arm64" && runtime.GOARCH != "arm64" {
		var err error
		if qemu, err = exec.LookPath("qemu-aarch64"); err != nil {
			t.Skip("qemu-aarch64 is not installed (Debian package qemu-user): no arm64 program to crash here")
		}
	}
	p := ""
	if qemu == "" {
		p = fileCorePattern(t)
	}
	exe, run := buildGoTestProgram(t, b, "goswitch")
	var stderr bytes.Buffer
	cmd := exec.Command("sh", "-c", `ulimit -c unlimited && exec "$@"`, "sh", exe)
	if qemu != "" {
		cmd.Args = append(cmd.Args[:len(cmd.Args)-1], qemu, exe)
	}
	cmd.Dir, cmd.Stderr = run, &stderr
	cmd.Env = append(os.Environ(), "GOMAXPROCS=3", "GODEBUG=asyncpreemptoff=1", "GOTRACEBACK=crash")
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(out).ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		if strings.TrimSpace(s) != "stopping" {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("the program printed %q, not \"stopping\": %s", s, tail(stderr.String(), 2000))
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal("the program did not print \"stopping\" within a minute")
	}
	time.Sleep(300 * time.Millisecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGABRT))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatal("the program did not dump core within a minute of SIGABRT")
	}
	if qemu != "" {
		// qemu writes the program's core, then aborts itself (and the
		// kernel may dump qemu's own, named by core_pattern).
		cores, _ := filepath.Glob(filepath.Join(run, "qemu_goswitch_*.core"))
		if len(cores) != 1 {
			t.Fatalf("qemu-aarch64 wrote no core of the program (%v): %s", err, tail(stderr.String(), 2000))
		}
		return &goCrash{exe: exe, core: cores[0]}
	}
	return &goCrash{exe: exe, core: coreOf(t, err, run, p, stderr.String())}
}

// TestGoStackSwitchMatchesDelve: a thread of a Go core that waits on its g0
// stack inside runtime.systemstack (a stop of the world) is unwound through
// the switch onto its goroutine's stack, from the registers
// gosave_systemstack_switch saved, to runtime.goexit, outermost: the
// frames from runtime.systemstack on, runtime.systemstack_switch,
// runtime.stopTheWorld, runtime.ReadMemStats, main.readStats, main.main,
// are Delve's (which goes on from the thread's m.curg the same way). Every
// thread ends outermost, or, where it ends at such a switch
// (stack_switch), Delve finds no goroutine on it (a goroutine preempted in
// runtime.morestack and descheduled). Delve's frames before the signal
// frame of the crash differ (it does not unwind through it).
func TestGoStackSwitchMatchesDelve(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    goBuild
	}{{"local", goBuild{}}, {"go1.21", goBuild{toolchain: goOldToolchain}}, {"arm64", goBuild{goarch: "arm64"}}} {
		t.Run(tc.name, func(t *testing.T) {
			// On a busy machine the main goroutine may not be waiting
			// in the stop of the world yet when the signal comes: up to
			// three crashes, until Delve finds a thread there.
			var c *goCrash
			var delve map[int][]string
			var delveG map[int]bool
			for try := 0; try < 3; try++ {
				c = abortGoSwitch(t, tc.b)
				delve, delveG = delveThreads(t, c)
				if slices.ContainsFunc(slices.Collect(maps.Values(delve)), func(s []string) bool {
					return slices.Contains(s, "runtime.stopTheWorldWithSema")
				}) {
					break
				}
			}

			var warnings []string
			opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir(),
				Warn: func(m string) { warnings = append(warnings, m) }}, Exe: c.exe}
			cc, err := OpenCore(c.core, opts)
			require.NoError(t, err)
			defer cc.Close()
			assert.Empty(t, cc.Warnings, "the core's problems")
			crossed := 0
			_, err = RunCore(cc, opts, func(s *Sample) error {
				var mine []string
				for _, f := range s.Frames {
					if !f.Kernel {
						mine = append(mine, f.Symbol)
					}
				}
				want, ok := delve[int(s.Tid)]
				require.True(t, ok, "Delve has no thread %d", s.Tid)
				switch s.Stop {
				case "outermost":
				case "stack_switch":
					last := mine[len(mine)-1]
					assert.Contains(t, []string{"runtime.morestack", "runtime.systemstack"}, last, "thread %d ends stack_switch", s.Tid)
					assert.False(t, delveG[int(s.Tid)], "thread %d ends at %s (stack_switch), but Delve finds a goroutine on it: %v", s.Tid, last, want)
				default:
					t.Errorf("thread %d ends %s (%s): %v", s.Tid, s.Stop, s.StopErr, mine)
				}
				if !slices.Contains(mine, "runtime.systemstack_switch") {
					return nil
				}
				crossed++
				k, dk := slices.Index(mine, "runtime.systemstack"), slices.Index(want, "runtime.systemstack")
				require.True(t, k >= 0 && dk >= 0, "thread %d: ustack %v, Delve %v", s.Tid, mine, want)
				assert.Equal(t, want[dk:], mine[k:], "thread %d from runtime.systemstack on", s.Tid)
				assert.Equal(t, "outermost", s.Stop, "thread %d", s.Tid)
				for _, fn := range []string{"runtime.stopTheWorld", "runtime.ReadMemStats", "main.readStats", "main.main", "runtime.goexit"} {
					assert.Contains(t, mine[k:], fn, "thread %d", s.Tid)
				}
				return nil
			})
			require.NoError(t, err)
			require.Equal(t, 1, crossed, "threads unwound through runtime.systemstack onto their goroutine's stack")
			if cc.NoFileNote {
				// qemu's core lists no mapped files: one warning says
				// where the executable was taken to be.
				require.Len(t, warnings, 1, "warnings: %q", warnings)
				assert.Contains(t, warnings[0], "no NT_FILE note")
				assert.Contains(t, warnings[0], c.exe+" is taken as mapped where the core's AT_ENTRY puts its entry point")
			}
		})
	}
}

// delveThreads returns Delve's stack of each thread of a core (function
// names, "?" where it has none) and whether it finds a goroutine on it.
func delveThreads(t *testing.T, c *goCrash) (stacks map[int][]string, withG map[int]bool) {
	t.Helper()
	tg, err := core.OpenCore(c.core, c.exe, nil)
	require.NoError(t, err)
	defer tg.Detach(true)
	tgt := tg.Selected
	stacks, withG = map[int][]string{}, map[int]bool{}
	for _, th := range tgt.ThreadList() {
		frames, err := proc.ThreadStacktrace(tgt, th, 200)
		require.NoError(t, err, "Delve's stack of thread %d", th.ThreadID())
		var names []string
		for _, f := range frames {
			name := "?"
			if f.Call.Fn != nil {
				name = f.Call.Fn.Name
			}
			names = append(names, name)
		}
		stacks[th.ThreadID()] = names
		g, _ := proc.GetG(th)
		withG[th.ThreadID()] = g != nil
	}
	return stacks, withG
}

// TestGoCgoCallMatchesDelve: the thread of a cgo program that runs a C
// function (testdata/gocgo's csleep, on the thread's g0 stack, called
// through runtime.asmcgocall) is unwound through the C frames (gcc's CFI,
// libc's pause) and asmcgocall's switch onto its goroutine's stack, from
// the registers entersyscall saved (g.syscallsp), to runtime.goexit,
// outermost: the frames after runtime.asmcgocall are Delve's after
// runtime.systemstack_switch (Delve starts the goroutine's stack from
// g.sched, which asmcgocall's gosave_systemstack_switch set, and shows no
// C frames): runtime.cgocall, main._Cfunc_csleep, main.callC. Every
// thread ends outermost (or stack_switch at runtime.morestack where Delve
// finds no goroutine): the threads cgo started through crosscall1, which
// has no CFI and no frame pointer, go on by its instructions (how
// prologue) into threadentry and start_thread, where gdb and Delve walk
// into garbage.
func TestGoCgoCallMatchesDelve(t *testing.T) {
	var c *goCrash
	var stacks map[int][]string
	tid := -1
	for try := 0; try < 3 && tid < 0; try++ {
		p := fileCorePattern(t)
		exe, run := buildGoTestProgram(t, goBuild{cgo: true}, "gocgo")
		var stderr bytes.Buffer
		cmd := exec.Command("sh", "-c", `ulimit -c unlimited && exec "$0"`, exe)
		cmd.Dir, cmd.Stderr = run, &stderr
		cmd.Env = append(os.Environ(), "GOTRACEBACK=crash")
		err := cmd.Run()
		c = &goCrash{exe: exe, core: coreOf(t, err, run, p, stderr.String())}
		stacks, _ = delveThreads(t, c)
		for id, names := range stacks {
			if slices.Contains(names, "main.callC") {
				tid = id
			}
		}
	}
	require.GreaterOrEqual(t, tid, 0, "in three crashes, no thread was in the C call (Delve finds main.callC on none)")
	want := stacks[tid]

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}, Exe: c.exe}
	cc, err := OpenCore(c.core, opts)
	require.NoError(t, err)
	defer cc.Close()
	_, withG := delveThreads(t, c)
	seen, started := false, 0
	_, err = RunCore(cc, opts, func(s *Sample) error {
		var mine []string
		var how []resolve.How
		for _, f := range s.Frames {
			if !f.Kernel {
				mine = append(mine, f.Symbol)
				how = append(how, f.How)
			}
		}
		switch {
		case s.Stop == "outermost":
		case s.Stop == "stack_switch" && mine[len(mine)-1] == "runtime.morestack" && !withG[int(s.Tid)]:
		default:
			t.Errorf("thread %d ends %s (%s): %v", s.Tid, s.Stop, s.StopErr, mine)
		}
		if k := slices.Index(mine, "crosscall1"); k >= 0 {
			// A thread cgo started: pthread_create's start_thread
			// calls threadentry (runtime/cgo/gcc_linux_amd64.c),
			// which calls crosscall1 (gcc_amd64.S: no CFI, six
			// pushes, then the calls), which calls runtime.mstart.
			started++
			require.Less(t, k+2, len(mine), "thread %d: %v", s.Tid, mine)
			assert.Equal(t, []string{"runtime.mstart", "crosscall1", "threadentry", "start_thread"}, mine[k-1:k+3], "thread %d", s.Tid)
			assert.Equal(t, resolve.HowPrologue, how[k+1], "thread %d: threadentry found by crosscall1's instructions", s.Tid)
		}
		if int(s.Tid) != tid {
			return nil
		}
		seen = true
		k, dk := slices.Index(mine, "runtime.asmcgocall"), slices.Index(want, "runtime.systemstack_switch")
		require.True(t, k >= 0 && dk >= 0, "thread %d: ustack %v, Delve %v", tid, mine, want)
		assert.Equal(t, want[dk+1:], mine[k+1:], "thread %d after the switch", tid)
		assert.True(t, slices.ContainsFunc(mine[:k], func(s string) bool { return strings.Contains(s, "Cfunc_csleep") }),
			"thread %d: the C frames before runtime.asmcgocall: %v", tid, mine)
		assert.Equal(t, "outermost", s.Stop, "thread %d (%s): %v", tid, s.StopErr, mine)
		return nil
	})
	require.NoError(t, err)
	require.True(t, seen, "ustack reported no thread %d", tid)
	require.Positive(t, started, "no thread started by cgo (crosscall1)")
}

// TestGoGogoCoreMatchesGDB: a thread stopped in gogo past its switch onto
// the stack of the goroutine it resumes (at its last instruction, JMP BX,
// after gogo cleared g.sched.sp) is unwound on that goroutine's stack,
// from g.sched.pc and the SP and frame pointer gogo loaded, to
// runtime.goexit, outermost. The truth is gdb's: in the live process, after
// gcore, its backtrace from the PC gogo jumps to (BX), up to goexit. Before,
// the stack ended there at one frame (the word at the SP is no return
// address).
func TestGoGogoCoreMatchesGDB(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("the test stops the program at gogo's amd64 JMP BX")
	}
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		t.Skip("gdb is not installed (Debian package gdb): no truth for the goroutine's frames")
	}
	exe, run := buildGoTestProgram(t, goBuild{}, "gogo")
	f, err := elf.Open(exe)
	require.NoError(t, err)
	syms, err := f.Symbols()
	require.NoError(t, err)
	var gogo elf.Symbol
	for _, s := range syms {
		if s.Name == "gogo" {
			gogo = s
		}
	}
	require.NotZero(t, gogo.Size, "%s has no symbol gogo", exe)
	text := f.Section(".text")
	code := make([]byte, gogo.Size)
	_, err = text.ReadAt(code, int64(gogo.Value-text.Addr))
	require.NoError(t, err)
	f.Close()
	jmp := uint64(0)
	for off := 0; off < len(code); {
		in, err := x86asm.Decode(code[off:], 64)
		require.NoError(t, err, "gogo+%#x", off)
		if in.Op == x86asm.JMP && in.Args[0] == x86asm.RBX {
			jmp = gogo.Value + uint64(off)
			break
		}
		off += in.Len
	}
	require.NotZero(t, jmp, "no JMP BX in gogo")

	core := filepath.Join(run, "core.gogo")
	script := fmt.Sprintf(`set pagination off
set confirm off
set backtrace past-main on
break *%#x
ignore 1 200
run
delete
gcore %s
set $pc = $rbx
bt
kill
`, jmp, core)
	gdbScript := filepath.Join(run, "stop.gdb")
	require.NoError(t, os.WriteFile(gdbScript, []byte(script), 0o644))
	ctx, cancel := context.WithTimeout(context.Background(), testprog.Timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, gdb, "-nx", "-batch", "-x", gdbScript, exe)
	cmd.Env = append(os.Environ(), "LC_ALL=C", "GOMAXPROCS=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "gdb: %s", out)
	require.FileExists(t, core, "gdb did not stop at gogo's JMP BX: %s", out)
	var want []string
	frame := regexp.MustCompile(`^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(`)
	for _, line := range strings.Split(string(out), "\n") {
		if m := frame.FindStringSubmatch(line); m != nil {
			want = append(want, m[1])
		}
	}
	// gdb walks on past goexit, into the word above it (0, "??").
	k := slices.Index(want, "runtime.goexit")
	require.Positive(t, k, "gdb's backtrace reaches goexit: %s", out)
	want = want[:k+1]
	require.Contains(t, want, "runtime.gopark", "the goroutine gogo resumes was parked (the breakpoint's 201st hit, in the ping-pong): %s", out)

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir()}, Exe: exe}
	cc, err := OpenCore(core, opts)
	require.NoError(t, err)
	defer cc.Close()
	found := 0
	_, err = RunCore(cc, opts, func(s *Sample) error {
		if len(s.Frames) == 0 || s.Frames[0].Symbol != "gogo" {
			return nil
		}
		found++
		var mine []string
		for _, fr := range s.Frames[1:] {
			mine = append(mine, fr.Symbol)
		}
		assert.Equal(t, want, mine, "thread %d's frames after gogo", s.Tid)
		assert.Equal(t, "outermost", s.Stop, "thread %d (%s)", s.Tid, s.StopErr)
		return nil
	})
	require.NoError(t, err)
	require.Equal(t, 1, found, "threads in gogo")
}

// TestGoCgoMmapFrames: in a cgo program the runtime maps memory through C:
// runtime.mmap's closure calls runtime.callCgoMmap, which aligns SP to 16
// bytes (on the same stack) and calls x_cgo_mmap. Its CFI does not know the
// alignment, and in about half the calls the walk read the saved frame
// pointer for its return address (no_mapping, 52 of 172 samples). At every
// mmap system call of the program (a recording at syscalls:sys_enter_mmap),
// a stack through callCgoMmap goes on into its one caller in Go's source
// (runtime/cgo_mmap.go: the closure runtime.mmap passes to systemstack,
// runtime.mmap.func1) and ends outermost or at that systemstack
// (stack_switch), never no_mapping.
func TestGoCgoMmapFrames(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("callCgoMmap aligns SP on amd64 only")
	}
	requirePerf(t)
	testprog.NeedTracefs(t, "syscalls/sys_enter_mmap")
	exe, run := buildGoTestProgram(t, goBuild{cgo: true}, "cgommap")
	data := testprog.Record(t, filepath.Join(run, "mmap.data"), "-e", "syscalls:sys_enter_mmap", "--call-graph", "dwarf", "--", exe)
	r, _ := openRecording(t, data)
	through := 0
	_, err := Run(r, Options{BuildIDDir: t.TempDir(), Warn: func(string) {}}, func(s *Sample) error {
		var names []string
		for _, f := range s.Frames {
			if !f.Kernel {
				names = append(names, strings.TrimSuffix(f.Symbol, ".abi0"))
			}
		}
		k := slices.Index(names, "runtime.callCgoMmap")
		if k < 0 {
			return nil
		}
		through++
		if assert.Less(t, k+1, len(names), "sample at %d: nothing after callCgoMmap (%s: %s)", s.Time, s.Stop, s.StopErr) {
			assert.Equal(t, "runtime.mmap.func1", names[k+1], "sample at %d: %v", s.Time, names)
		}
		assert.Contains(t, []string{"outermost", "stack_switch"}, s.Stop, "sample at %d: %v (%s)", s.Time, names, s.StopErr)
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, through, 10, "samples through runtime.callCgoMmap")
}

// TestGoRaceCallFrames: a program built with -race calls into the race
// detector's C runtime at every memory access, through racecall<>
// (runtime/race_amd64.s), which keeps the SP in %r12, moves SP to the g0
// stack and aligns it before the call. Its CFI is wrong past the move: in
// a recording the walk read a word of the g0 stack for its return address
// and went on into runtime.morestack (712 of 2,581 samples), which never
// calls racecall (it calls newstack only), or stopped no_mapping (860). Now
// no stack goes from racecall into morestack or ends no_mapping there; a
// stack whose goroutine's frames the switch left uncaptured ends
// stack_switch.
func TestGoRaceCallFrames(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("racecall<>'s %r12 frame is amd64's")
	}
	requirePerf(t)
	exe, run := buildGoTestProgram(t, goBuild{cgo: true, race: true}, "gorace")
	t.Setenv("GORACE", "atexit_sleep_ms=0") // the race runtime sleeps a second at exit
	data := testprog.Record(t, filepath.Join(run, "race.data"), "-F", "2000", "--call-graph", "dwarf", "--", exe)
	r, _ := openRecording(t, data)
	through, switched := 0, 0
	_, err := Run(r, Options{BuildIDDir: t.TempDir(), Warn: func(string) {}}, func(s *Sample) error {
		var names []string
		for _, f := range s.Frames {
			if !f.Kernel && !f.Inlined {
				names = append(names, f.Symbol)
			}
		}
		k := slices.Index(names, "racecall")
		if k < 0 {
			return nil
		}
		through++
		if k+1 < len(names) {
			assert.NotEqual(t, "runtime.morestack", names[k+1], "sample at %d: %v", s.Time, names)
		} else {
			assert.NotEqual(t, "no_mapping", s.Stop, "sample at %d: %v (%s)", s.Time, names, s.StopErr)
		}
		if s.Stop == "stack_switch" {
			switched++
		}
		return nil
	})
	require.NoError(t, err)
	require.Greater(t, through, 50, "samples through racecall")
	t.Logf("%d samples through racecall, %d of them stack_switch", through, switched)
}
