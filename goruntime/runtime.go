package goruntime

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/elfcache"
)

// Memory is the process's memory at its runtime addresses (a core dump's):
// ReadAt copies what it has at addr into p and returns how many bytes it
// copied, with an error when fewer than len(p).
type Memory interface {
	ReadAt(p []byte, addr uint64) (int, error)
}

// ErrNotGo is the error of an executable with no Go runtime to read.
var ErrNotGo = errors.New("not a Go executable")

// ErrUnknownGo is the error of a Go version whose runtime layouts ustack
// does not know.
var ErrUnknownGo = errors.New("a Go runtime layout ustack does not know")

// Runtime is a Go program's runtime as its memory shows it.
type Runtime struct {
	// Version is the Go that built the program ("go1.26.8").
	Version string
	// Layout is where the fields of g and m are.
	Layout Layout
	// AllGs is the runtime address of runtime.allgs and AllGsFrom says how
	// it was found ("DWARF", "symbol table", "code of runtime.forEachG").
	AllGs     uint64
	AllGsFrom string
	// Warnings are what could not be found without making the goroutines
	// unreadable (the wait reasons' strings).
	Warnings []string

	arch        arch.Arch
	mem         Memory
	waitReasons []string
}

// Open finds the runtime's structures of the Go executable obj, loaded
// with bias (runtime address minus link-time address), in mem. It fails
// with ErrNotGo for an object that is not a Go executable and with
// ErrUnknownGo for a Go outside 1.21 to 1.26 or a runtime whose structs
// lack a field ustack reads.
func Open(obj *elfcache.Object, bias uint64, mem Memory) (*Runtime, error) {
	if a := obj.Arch(); a != arch.AMD64 && a != arch.ARM64 {
		return nil, fmt.Errorf("%s: goroutines of %v programs are not read", obj.Path(), a)
	}
	ver, err := obj.GoVersion()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotGo, err)
	}
	if !knownVersion(ver) {
		return nil, fmt.Errorf("%s: built with %s: %w (it reads Go 1.21 to 1.26)", obj.Path(), ver, ErrUnknownGo)
	}
	r := &Runtime{Version: ver, arch: obj.Arch(), mem: mem}
	d, derr := obj.DWARF()
	mod, haveMod := obj.GoModule()
	if d != nil {
		if r.Layout, err = dwarfLayout(d); err != nil {
			if !haveMod {
				return nil, fmt.Errorf("%s: %w", obj.Path(), err)
			}
			// DWARF without the runtime's types (a partial debug
			// file): the type descriptors are still there.
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s: %v: the runtime's type descriptors are read instead", obj.Path(), err))
			d = nil
		}
	}
	if d != nil {
		vars, _ := dwarfVariable(d, "runtime.allgs", "runtime.waitReasonStrings")
		if v, ok := vars["runtime.allgs"]; ok {
			r.AllGs, r.AllGsFrom = v[0]+bias, "DWARF"
		}
		if v, ok := vars["runtime.waitReasonStrings"]; ok && v[1] > 0 {
			r.readWaitReasons(v[0]+bias, v[1]/16)
		}
	}
	if d == nil {
		if !haveMod {
			why := "no moduledata record pointing to its pclntab"
			if e := obj.GoPCLNError(); e != nil {
				why = e.Error()
			}
			noDWARF := "no DWARF"
			if derr != nil {
				noDWARF = fmt.Sprintf("no readable DWARF (%v)", derr)
			}
			return nil, fmt.Errorf("%s: %s and %s: %w", obj.Path(), noDWARF, why, ErrUnknownGo)
		}
		if r.Layout, err = typeLayout(mem, mod.Types+bias, mod.ETypes+bias); err != nil {
			return nil, fmt.Errorf("%s: %w", obj.Path(), err)
		}
	}
	if r.AllGs == 0 {
		if a, _, ok := obj.DataSymbol("runtime.allgs"); ok {
			r.AllGs, r.AllGsFrom = a+bias, "symbol table"
		}
	}
	if r.AllGs == 0 {
		if !haveMod {
			return nil, fmt.Errorf("%s: runtime.allgs: no DWARF, no symbol, no moduledata to find it from", obj.Path())
		}
		if err := r.findAllGs(obj, bias, mod); err != nil {
			return nil, fmt.Errorf("%s: %w", obj.Path(), err)
		}
	}
	if r.waitReasons == nil {
		if a, size, ok := obj.DataSymbol("runtime.waitReasonStrings"); ok && size > 0 {
			r.readWaitReasons(a+bias, size/16)
		} else if haveMod {
			r.findWaitReasons(mod.Data+bias, mod.EData+bias)
		}
		if r.waitReasons == nil {
			r.Warnings = append(r.Warnings, fmt.Sprintf("%s: runtime.waitReasonStrings not found: wait reasons are given as numbers", obj.Path()))
		}
	}
	return r, nil
}

// knownVersion reports whether ver ("go1.26.8", "go1.22rc1") is a Go from
// 1.21 to 1.26.
func knownVersion(ver string) bool {
	v, ok := strings.CutPrefix(ver, "go1.")
	if !ok {
		return false
	}
	end := 0
	for end < len(v) && v[end] >= '0' && v[end] <= '9' {
		end++
	}
	minor, err := strconv.Atoi(v[:end])
	return err == nil && minor >= 21 && minor <= 26
}

// allgsFuncs are the runtime functions that load runtime.allgs's word and
// length, the first that the pclntab names is read.
var allgsFuncs = []string{"runtime.forEachG", "runtime.allgadd", "runtime.checkdead"}

// findAllGs finds runtime.allgs in a binary without symbols: the slice in
// the runtime's zero-initialized data that a function walking every
// goroutine loads, checked in memory.
func (r *Runtime) findAllGs(obj *elfcache.Object, bias uint64, mod elfcache.GoModule) error {
	var tried []string
	for _, fn := range allgsFuncs {
		entry, end, ok := obj.GoFunction(fn)
		if !ok || end <= entry || end-entry > 1<<16 {
			continue
		}
		code := make([]byte, end-entry)
		if obj.ReadCode(entry, code) < len(code) {
			continue
		}
		cands := sliceCandidates(codeRefs(r.arch, code, entry), mod.Bss, mod.EBss)
		var good []uint64
		for _, c := range cands {
			if r.checkAllGs(c + bias) {
				good = append(good, c+bias)
			}
		}
		if len(good) == 1 {
			r.AllGs, r.AllGsFrom = good[0], "code of "+fn
			return nil
		}
		tried = append(tried, fmt.Sprintf("%s: %d candidates, %d whose first goroutine is goroutine 1", fn, len(cands), len(good)))
	}
	if len(tried) == 0 {
		return fmt.Errorf("runtime.allgs: none of %s in the pclntab: %w", strings.Join(allgsFuncs, ", "), ErrUnknownGo)
	}
	return fmt.Errorf("runtime.allgs not found (%s): %w", strings.Join(tried, "; "), ErrUnknownGo)
}

// checkAllGs reports whether the slice at addr looks like runtime.allgs:
// a length within its capacity and a first element whose goid is 1 (the
// main goroutine is the first the runtime adds).
func (r *Runtime) checkAllGs(addr uint64) bool {
	ptr, n, c, err := r.slice(addr)
	if err != nil || n == 0 || n > c || c > 1<<28 || ptr == 0 {
		return false
	}
	g0, err := r.word(ptr)
	if err != nil || g0 == 0 {
		return false
	}
	id, err := r.word(g0 + uint64(r.Layout.Goid))
	return err == nil && id == 1
}

// readWaitReasons reads the array of n strings at addr.
func (r *Runtime) readWaitReasons(addr, n uint64) {
	if n == 0 || n > 256 {
		return
	}
	hdrs := make([]byte, n*16)
	if k, _ := r.mem.ReadAt(hdrs, addr); k < len(hdrs) {
		return
	}
	out := make([]string, n)
	for i := range out {
		p, l := binary.LittleEndian.Uint64(hdrs[i*16:]), binary.LittleEndian.Uint64(hdrs[i*16+8:])
		if l == 0 {
			continue
		}
		if l > 128 {
			return
		}
		b := make([]byte, l)
		if k, _ := r.mem.ReadAt(b, p); k < len(b) {
			return
		}
		out[i] = string(b)
	}
	r.waitReasons = out
}

// findWaitReasons finds runtime.waitReasonStrings in [data, edata) without
// symbols: the array of strings beginning "", "GC assist marking" (the
// first two wait reasons of every Go since 1.11), as long as its entries
// are short strings of printable text.
func (r *Runtime) findWaitReasons(data, edata uint64) {
	if edata <= data || edata-data > 64<<20 {
		return
	}
	buf := make([]byte, edata-data)
	if k, _ := r.mem.ReadAt(buf, data); k < len(buf) {
		return
	}
	const first = "GC assist marking"
	for off := 0; off+32 <= len(buf); off += 8 {
		if binary.LittleEndian.Uint64(buf[off+8:]) != 0 || binary.LittleEndian.Uint64(buf[off+24:]) != uint64(len(first)) {
			continue
		}
		var b [len(first)]byte
		if k, _ := r.mem.ReadAt(b[:], binary.LittleEndian.Uint64(buf[off+16:])); k < len(b) || string(b[:]) != first {
			continue
		}
		n := 2
		for ; off+(n+1)*16 <= len(buf) && n < 256; n++ {
			p, l := binary.LittleEndian.Uint64(buf[off+n*16:]), binary.LittleEndian.Uint64(buf[off+n*16+8:])
			if l == 0 || l > 64 {
				break
			}
			s := make([]byte, l)
			if k, _ := r.mem.ReadAt(s, p); k < len(s) || !printable(s) {
				break
			}
		}
		r.readWaitReasons(data+uint64(off), uint64(n))
		return
	}
}

func printable(b []byte) bool {
	for _, c := range b {
		if c < ' ' || c > '~' {
			return false
		}
	}
	return true
}

func (r *Runtime) word(addr uint64) (uint64, error) {
	var b [8]byte
	if k, err := r.mem.ReadAt(b[:], addr); k < len(b) {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b[:]), nil
}

func (r *Runtime) slice(addr uint64) (ptr, n, c uint64, err error) {
	var b [24]byte
	if k, err := r.mem.ReadAt(b[:], addr); k < len(b) {
		return 0, 0, 0, err
	}
	return binary.LittleEndian.Uint64(b[0:]), binary.LittleEndian.Uint64(b[8:]), binary.LittleEndian.Uint64(b[16:]), nil
}

// Goroutine status values (runtime._Gidle...), the same from Go 1.21 to
// 1.26 (_Gleaked and _Gdeadextra are 1.26's).
const (
	StatusIdle      = 0
	StatusRunnable  = 1
	StatusRunning   = 2
	StatusSyscall   = 3
	StatusWaiting   = 4
	StatusDead      = 6
	StatusCopystack = 8
	StatusPreempted = 9
	StatusLeaked    = 10
	StatusDeadExtra = 11
	StatusScan      = 0x1000
)

var statusNames = map[uint32]string{StatusIdle: "idle", StatusRunnable: "runnable", StatusRunning: "running",
	StatusSyscall: "syscall", StatusWaiting: "waiting", 5: "moribund", StatusDead: "dead", 7: "enqueue",
	StatusCopystack: "copystack", StatusPreempted: "preempted", StatusLeaked: "leaked", StatusDeadExtra: "dead"}

// Goroutine is one goroutine as the runtime left it.
type Goroutine struct {
	// Addr is the address of its g.
	Addr uint64
	// ID is its goid, ParentID the goid of the goroutine that created it
	// (0 when unknown).
	ID, ParentID uint64
	// Status is g.atomicstatus (with StatusScan while the GC scans it).
	Status uint32
	// WaitReason is why it waits (Status StatusWaiting), as the runtime
	// prints it ("chan receive"); "" otherwise.
	WaitReason string
	// GoPC is the address of the go statement that created it, StartPC
	// its function's entry.
	GoPC, StartPC uint64
	// SP, PC, BP and LR are the registers it was descheduled with
	// (g.sched, or g.syscallsp, pc and bp in a system call; LR on arm64
	// only, while the PC is in a function that has not saved it).
	SP, PC, BP, LR uint64
	// SchedSP, SchedPC, SchedBP and SchedLR are g.sched itself: SP, PC,
	// BP and LR outside a system call; in one, what runtime.systemstack
	// saved where the thread left the goroutine's stack for its g0 stack
	// inside entersyscall or exitsyscall (gosave_systemstack_switch).
	SchedSP, SchedPC, SchedBP, SchedLR uint64
	// M is its m's address while it runs (or is in a system call) and
	// ThreadID that thread's id (m.procid); both 0 otherwise.
	M, ThreadID uint64
	// CurThreadID is the id of the thread whose m runs it (g.m, set while
	// it is that m's curg), whatever its status: also a goroutine that
	// waits while its thread works for it on the g0 stack (forEachP, a
	// stop for the GC). 0 when no m runs it.
	CurThreadID uint64
	// StackLo and StackHi bound its stack.
	StackLo, StackHi uint64
}

// State is the goroutine's status by name ("running", "waiting",
// "runnable"), without the GC's scan bit.
func (g *Goroutine) State() string {
	st := g.Status &^ StatusScan
	if n, ok := statusNames[st]; ok {
		return n
	}
	return fmt.Sprintf("status %d", st)
}

// StatusName is the goroutine's status as the runtime's traceback shows it
// between brackets: the wait reason of a waiting goroutine ("chan
// receive"), else its State.
func (g *Goroutine) StatusName() string {
	if g.Status&^StatusScan == StatusWaiting && g.WaitReason != "" {
		return g.WaitReason
	}
	return g.State()
}

// Dead reports whether the goroutine is free for reuse (no stack to show).
func (g *Goroutine) Dead() bool {
	st := g.Status &^ StatusScan
	return st == StatusDead || st == StatusDeadExtra || st == StatusIdle
}

// Goroutines reads every goroutine of runtime.allgs, dead ones included
// (Dead says which), in the runtime's order. An error names the address
// that could not be read.
func (r *Runtime) Goroutines() ([]Goroutine, error) {
	ptr, n, c, err := r.slice(r.AllGs)
	if err != nil {
		return nil, fmt.Errorf("runtime.allgs at %#x: %v", r.AllGs, err)
	}
	if n > c || n > 1<<24 {
		return nil, fmt.Errorf("runtime.allgs at %#x: length %d, capacity %d: not a slice", r.AllGs, n, c)
	}
	ptrs := make([]byte, n*8)
	if k, err := r.mem.ReadAt(ptrs, ptr); k < len(ptrs) {
		return nil, fmt.Errorf("runtime.allgs's %d goroutines at %#x: %v", n, ptr, err)
	}
	l := &r.Layout
	buf := make([]byte, l.GSize)
	mbuf := make([]byte, l.MSize)
	out := make([]Goroutine, 0, n)
	for i := uint64(0); i < n; i++ {
		addr := binary.LittleEndian.Uint64(ptrs[i*8:])
		if k, err := r.mem.ReadAt(buf, addr); k < len(buf) {
			return out, fmt.Errorf("goroutine %d of runtime.allgs, g at %#x: %v", i, addr, err)
		}
		u64 := func(off int64) uint64 {
			if off < 0 {
				return 0
			}
			return binary.LittleEndian.Uint64(buf[off:])
		}
		g := Goroutine{Addr: addr, ID: u64(l.Goid), ParentID: u64(l.ParentGoid),
			Status: binary.LittleEndian.Uint32(buf[l.Status:]), GoPC: u64(l.GoPC), StartPC: u64(l.StartPC),
			SP: u64(l.SchedSP), PC: u64(l.SchedPC), BP: u64(l.SchedBP), StackLo: u64(l.StackLo), StackHi: u64(l.StackHi)}
		if r.arch == arch.ARM64 {
			g.LR = u64(l.SchedLR)
		}
		g.SchedSP, g.SchedPC, g.SchedBP, g.SchedLR = g.SP, g.PC, g.BP, g.LR
		st := g.Status &^ StatusScan
		if st == StatusWaiting {
			g.WaitReason = r.waitReason(buf[l.WaitReason])
		}
		if st == StatusSyscall {
			if sp := u64(l.SyscallSP); sp != 0 {
				g.SP, g.PC, g.BP, g.LR = sp, u64(l.SyscallPC), u64(l.SyscallBP), 0
			}
		}
		if m := u64(l.M); m != 0 {
			if k, _ := r.mem.ReadAt(mbuf, m); k == len(mbuf) {
				g.CurThreadID = binary.LittleEndian.Uint64(mbuf[l.MProcID:])
			}
			if st == StatusRunning || st == StatusSyscall {
				g.M, g.ThreadID = m, g.CurThreadID
			}
		}
		out = append(out, g)
	}
	return out, nil
}

// waitReason names reason code w.
func (r *Runtime) waitReason(w byte) string {
	if int(w) < len(r.waitReasons) && r.waitReasons[w] != "" {
		return r.waitReasons[w]
	}
	if w == 0 {
		return ""
	}
	return "wait reason " + strconv.Itoa(int(w))
}
