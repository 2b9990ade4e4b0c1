//go:build linux

package elfcache

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/unwinder"
)

// gdbCapture is a gdb Python script: at the stop, print every register
// with a DWARF number below 33, dump the stack from SP, and print gdb's
// backtrace (pc, sp, file:line, whether inlined, function) frame by frame.
const gdbCapture = `
import gdb
f = gdb.newest_frame()
for i in range(31):
    print("REG %d %#x" % (i, int(f.read_register("x%d" % i)) & 0xffffffffffffffff))
sp = int(f.read_register("sp"))
print("REG 31 %#x" % sp)
print("REG 32 %#x" % (int(f.read_register("pc")) & 0xffffffffffffffff))
inf = gdb.selected_inferior()
for n in (16384, 8192, 4096, 1024):
    try:
        mem = inf.read_memory(sp, n)
        open(STACKFILE, "wb").write(bytes(mem))
        break
    except gdb.MemoryError:
        pass
while f is not None:
    sal = f.find_sal()
    loc = "%s:%d" % (sal.symtab.filename if sal.symtab else "?", sal.line)
    print("FRAME %#x %#x %s %s %s" % (f.pc(), int(f.read_register("sp")), loc, "inline" if f.type() == gdb.INLINE_FRAME else "real", f.name() or ""))
    f = f.older()
`

type gdbFrame struct {
	pc, sp  uint64
	loc     string // file:line
	inlined bool
	name    string
}

// TestStrippedGoARM64VsGDB runs the arm64 Go test program under
// qemu-aarch64, stops it with gdb-multiarch at four places (main.c's
// entry, where the return address is still in x30; main.c after its
// prologue, where x30 is saved at SP+0; the frameless assembly Syscall6;
// and inside runtime.lockOSThread inlined into runtime.main), and unwinds
// gdb's registers and stack dump with the twin built with -ldflags='-s
// -w': the frames, inlined ones included, with their PCs, SPs, names,
// files and lines must be gdb's (which reads the unstripped binary's
// .debug_frame and DWARF), the twin's lines and inline chains coming from
// its pclntab.
func TestStrippedGoARM64VsGDB(t *testing.T) {
	for _, tool := range []string{"qemu-aarch64", "gdb-multiarch"} {
		needTool(t, tool)
	}
	full, stripped := buildGoprog(t, "arm64")
	fo := mustOpen(t, full, Options{NoDebugFile: true})
	so := mustOpen(t, stripped, Options{NoDebugFile: true})
	fileText := func(o *Object) []byte {
		s := o.section(".text")
		b, err := o.sectionData(s)
		require.NoError(t, err)
		return b
	}
	require.True(t, bytes.Equal(fileText(fo), fileText(so)), ".text differs between the twins")
	addr := func(name string) uint64 {
		for _, s := range fo.Symbols() {
			if strings.TrimSuffix(s.Name, ".abi0") == name {
				return s.Addr
			}
		}
		t.Fatalf("no symbol %s", name)
		return 0
	}
	// main.c after its prologue: the first PC whose pcsp row has a frame.
	mainC := addr("main.c")
	tab := so.goTable()
	var f goFunc
	require.True(t, tab.find(mainC, &f))
	afterPrologue := uint64(0)
	for pc := f.entry; pc < f.end; pc += 4 {
		if d, _, _, ok := tab.spDelta(&f, pc); ok && d > 0 {
			afterPrologue = pc + 4
			break
		}
	}
	require.NotZero(t, afterPrologue)
	// In runtime.main, run once at start-up, the second instruction of
	// the inlined runtime.lockOSThread (at the first, gdb shows the call
	// site rather than the inlined frame).
	inlinedPC := uint64(0)
	require.True(t, tab.find(addr("runtime.main"), &f))
	for pc := f.entry + 4; pc < f.end && inlinedPC == 0; pc += 4 {
		prev, cur := so.SourceFrames(pc-4, nil), so.SourceFrames(pc, nil)
		if len(cur) == 2 && cur[0].Function == "runtime.lockOSThread" && len(prev) == 2 && prev[0].Function == cur[0].Function {
			inlinedPC = pc
		}
	}
	require.NotZero(t, inlinedPC, "no inlined runtime.lockOSThread in runtime.main")

	for _, c := range []struct {
		name      string
		break_    uint64
		minFrames int
	}{
		{"main.c_entry", mainC, 5},
		{"main.c_after_prologue", afterPrologue, 5},
		{"Syscall6_entry", addr("internal/runtime/syscall/linux.Syscall6"), 5},
		{"inlined_lockOSThread", inlinedPC, 3},
	} {
		t.Run(c.name, func(t *testing.T) {
			regs, stack, gdbFrames := runUnderGDB(t, full, c.break_)
			require.Equal(t, c.break_, regs[32], "gdb stopped elsewhere")
			var maps []unwinder.Mapping
			for _, p := range so.LoadSegments() {
				maps = append(maps, unwinder.Mapping{Start: p.Vaddr, End: p.Vaddr + p.Memsz,
					Exec: p.Flags&elf.PF_X != 0, Object: so, Name: "goprog_stripped"})
			}
			space := unwinder.NewAddressSpace(maps)
			var r arch.Regs
			for n, v := range regs {
				r.Set(n, v)
			}
			u := unwinder.New(arch.ARM64, unwinder.Options{})
			frames := make([]unwinder.Frame, 64)
			res := u.Unwind(new(unwinder.Cache), space, &r, &unwinder.Stack{Addr: regs[31], Data: stack}, frames)
			got := frames[:res.Frames]
			// gdb walks on past runtime.goexit (the top frame); the
			// unwinder stops there.
			want := gdbFrames
			for i, g := range gdbFrames {
				if g.name == "runtime.goexit" {
					want = gdbFrames[:i+1]
					break
				}
			}
			require.GreaterOrEqual(t, len(want), c.minFrames, "gdb's backtrace: %v", gdbFrames)
			// The unwound frames with their source frames from the
			// stripped twin's pclntab: gdb lists an inlined call as a
			// frame of its own, at the PC and SP of the real one.
			var src []gdbFrame
			for i := range got {
				sfs := so.SourceFrames(got[i].LookupPC(), nil)
				if len(sfs) == 0 {
					name, _, _ := so.Symbolize(got[i].LookupPC())
					sfs = []SourceFrame{{Function: name}}
				}
				for _, sf := range sfs {
					loc := fmt.Sprintf("%s:%d", sf.File, sf.Line)
					if sf.File == "" {
						loc = "?:0"
					}
					src = append(src, gdbFrame{pc: got[i].PC, sp: got[i].SP, loc: loc, inlined: sf.Inlined, name: sf.Function})
				}
			}
			// gdb prints the files of the twin's DWARF as written, with
			// "./" before some.
			for i := range want {
				if f, l, ok := strings.Cut(want[i].loc, ":"); ok {
					want[i].loc = path.Clean(f) + ":" + l
				}
			}
			require.Len(t, src, len(want), "unwound %v (%v); gdb %v", src, res.Stop, want)
			lines := 0
			for i, w := range want {
				assert.Equal(t, w, src[i], "frame %d (%s)", i, w.name)
				if w.loc != "?:0" {
					lines++
				}
			}
			assert.GreaterOrEqual(t, lines, c.minFrames-1, "few frames with lines in gdb's backtrace %v", want)
			t.Logf("gdb: %v", want)
			assert.Equal(t, "outermost", res.Stop.String(), "%v", res.Err)
		})
	}
}

// runUnderGDB runs bin under qemu-aarch64's gdbstub, stops at addr and
// returns gdb's registers (by DWARF number), the stack from SP and gdb's
// backtrace.
func runUnderGDB(t *testing.T, bin string, addr uint64) (map[int]uint64, []byte, []gdbFrame) {
	dir := t.TempDir()
	stackFile := filepath.Join(dir, "stack")
	script := filepath.Join(dir, "capture.py")
	require.NoError(t, os.WriteFile(script, []byte(fmt.Sprintf("STACKFILE = %q\n", stackFile)+gdbCapture), 0o644))
	var out []byte
	var err error
	// On a busy machine qemu may not listen yet when gdb connects, or gdb
	// may give up on a slow reply; qemu's gdbstub serves one connection,
	// so each try starts a qemu of its own.
	for deadline := time.Now().Add(3 * time.Minute); ; {
		out, err = gdbUnderQEMU(t, bin, addr, script)
		if err == nil && bytes.Contains(out, []byte("FRAME ")) || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.NoError(t, err, "gdb: %s", out)
	regs := map[int]uint64{}
	var frames []gdbFrame
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		switch {
		case len(fields) == 3 && fields[0] == "REG":
			n, _ := strconv.Atoi(fields[1])
			regs[n] = hexU(t, fields[2])
		case len(fields) >= 5 && fields[0] == "FRAME":
			g := gdbFrame{pc: hexU(t, fields[1]), sp: hexU(t, fields[2]), loc: fields[3], inlined: fields[4] == "inline"}
			if len(fields) > 5 {
				g.name = fields[5]
			}
			frames = append(frames, g)
		}
	}
	require.Len(t, regs, 33, "gdb output: %s", out)
	stack, err := os.ReadFile(stackFile)
	require.NoError(t, err)
	return regs, stack, frames
}

// gdbUnderQEMU starts bin under a new qemu-aarch64 gdbstub and runs gdb's
// capture script at addr through it, once.
func gdbUnderQEMU(t *testing.T, bin string, addr uint64, script string) ([]byte, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	qemu := exec.Command("qemu-aarch64", "-g", strconv.Itoa(port), bin)
	// One P and no preemption signals: fewer threads and no SIGURG for
	// qemu's gdbstub to stop on (a run beside other work hung until its
	// timeout, twice, with the breakpoint set and never reported).
	qemu.Env = []string{"GOMAXPROCS=1", "GODEBUG=asyncpreemptoff=1"}
	qemu.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, qemu.Start())
	defer func() {
		qemu.Process.Kill()
		qemu.Wait()
	}()
	cmd := exec.Command("timeout", "40", "gdb-multiarch", "-nx", "-batch",
		"-ex", "set pagination off", "-ex", "set backtrace past-main on",
		"-ex", "set remotetimeout 30", "-ex", "set tcp connect-timeout 30",
		"-ex", "target remote 127.0.0.1:"+strconv.Itoa(port),
		"-ex", fmt.Sprintf("break *%#x", addr), "-ex", "continue", "-x", script, bin)
	return cmd.CombinedOutput()
}
