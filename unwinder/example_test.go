package unwinder_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/unwinder"
)

// capture is what a tracer saved of a thread it stopped: its registers by
// name, the stack from the stack pointer up, and the process's maps with
// a copy of each mapped object (the repository's testdata keeps one).
type capture struct {
	Regs []struct{ Name, Value string }
	// The stack snapshot: its address and the file holding its bytes.
	Stack struct{ Addr, File string }
	Maps  []struct{ Start, End, Offset, Perms, Name, Object string }
}

func hex(s string) uint64 {
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil {
		panic(err)
	}
	return v
}

// Example unwinds a capture taken inside a signal handler: the registers and
// stack snapshot of a program stopped at a close() syscall that its SIGALRM
// handler made, with the process's maps. The frames match gdb's backtrace.
// It uses exported API only: a tracer's own capture works the same way.
func Example() {
	const testdata = "../testdata"
	b, err := os.ReadFile(filepath.Join(testdata, "fixtures/x86_64/signal_handler.json"))
	if err != nil {
		panic(err)
	}
	var c capture
	if err := json.Unmarshal(b, &c); err != nil {
		panic(err)
	}
	objects := elfcache.NewCache(elfcache.Options{DebugDirs: []string{}})
	defer objects.Close()

	// The process's memory map, each mapping with its object's unwind info.
	var maps []unwinder.Mapping
	for _, m := range c.Maps {
		um := unwinder.Mapping{Start: hex(m.Start), End: hex(m.End), Name: filepath.Base(m.Name)}
		if m.Object != "" {
			obj, err := objects.Open(filepath.Join(testdata, m.Object))
			if err != nil {
				panic(err)
			}
			if bias, ok := obj.Bias(um.Start, hex(m.Offset)); ok {
				um.Object, um.Bias, um.Exec = obj, bias, m.Perms[2] == 'x'
			}
		}
		maps = append(maps, um)
	}
	space := unwinder.NewAddressSpace(maps)

	// The captured registers, by name, and stack.
	var regs arch.Regs
	for _, r := range c.Regs {
		if n, ok := arch.AMD64.RegByName(r.Name); ok {
			regs.Set(n, hex(r.Value))
		}
	}
	data, err := os.ReadFile(filepath.Join(testdata, "fixtures/x86_64", c.Stack.File))
	if err != nil {
		panic(err)
	}
	stack := &unwinder.Stack{Addr: hex(c.Stack.Addr), Data: data}

	u := unwinder.New(arch.AMD64, unwinder.Options{})
	var cache unwinder.Cache // one per goroutine, reused across samples
	frames := make([]unwinder.Frame, 64)
	res := u.Unwind(&cache, space, &regs, stack, frames)

	for _, fr := range frames[:res.Frames] {
		m := space.Mapping(int(fr.Mapping))
		name := "??"
		if obj, ok := m.Object.(*elfcache.Object); ok {
			if sym, _, ok := obj.Symbolize(fr.LookupPC() - m.Bias); ok {
				name = sym
			}
		}
		if fr.Flags&unwinder.FrameSignalTrampoline != 0 {
			name = "<signal handler called>"
		}
		fmt.Printf("%-24s %-10s %s\n", name, m.Name, fr.Method)
	}
	fmt.Println("stopped:", res.Stop)
	// Output:
	// __close                  libc.so.6  context
	// handler_leaf             signal     cfi
	// handler                  signal     cfi
	// <signal handler called>  libc.so.6  cfi
	// busy                     signal     signal
	// spinner                  signal     cfi
	// main                     signal     cfi
	// ??                       libc.so.6  cfi
	// __libc_start_main        libc.so.6  cfi
	// _start                   signal     cfi
	// stopped: outermost
}
