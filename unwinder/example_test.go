package unwinder_test

import (
	"fmt"
	"path/filepath"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/unwinder"
)

// Example unwinds a capture taken inside a signal handler: the registers and
// stack snapshot of a program stopped at a close() syscall that its SIGALRM
// handler made, with the process's maps. The frames match gdb's backtrace.
func Example() {
	f, err := fixture.Load(filepath.Join(fixture.Dir(), "fixtures/x86_64/signal_handler.json"))
	if err != nil {
		panic(err)
	}
	objects := elfcache.NewCache(elfcache.Options{DebugDirs: []string{}})
	defer objects.Close()

	// The process's memory map, each mapping with its object's unwind info.
	var maps []unwinder.Mapping
	for _, m := range f.Maps {
		um := unwinder.Mapping{Start: m.Start, End: m.End, Name: filepath.Base(m.Name)}
		if m.Object != "" {
			obj, err := objects.Open(f.Abs(m.Object))
			if err != nil {
				panic(err)
			}
			if bias, ok := obj.Bias(m.Start, m.Offset); ok {
				um.Object, um.Bias, um.Exec = obj, bias, m.Perms[2] == 'x'
			}
		}
		maps = append(maps, um)
	}
	space := unwinder.NewAddressSpace(maps)

	// The captured registers and stack.
	var regs arch.Regs
	for _, r := range f.Regs {
		regs.Set(r.Dwarf, r.Value)
	}
	stack := &unwinder.Stack{Addr: f.Stack.Addr, Data: f.Stack.Data}

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
