package report

import (
	"github.com/ustack/ustack/kallsyms"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// LiveNamer names the frames of samples unwound at capture time (ustack
// record --unwind), as Run names those of the recording made so: the
// kernel's call chain from a kernel symbol table, then the user frames'
// addresses as a call chain (how "callchain"), in the process's address
// space. One goroutine at a time.
type LiveNamer struct {
	sym   *resolve.Symbolizer
	ksyms *kallsyms.Table
}

// NewLiveNamer returns a namer; ksyms names kernel frames (nil: they stay
// unnamed).
func NewLiveNamer(ksyms *kallsyms.Table) *LiveNamer {
	return &LiveNamer{sym: resolve.NewSymbolizer(), ksyms: ksyms}
}

// Name fills s.Frames (reusing its slice) from a sample's kernel call
// chain and user frame addresses in space (nil: no user frames), and
// makes space the sample's for MappingOf.
func (n *LiveNamer) Name(s *Sample, space *resolve.Space, kernel, user []uint64) {
	s.space = space
	s.Frames = s.Frames[:0]
	for _, ip := range kernel {
		if ip >= perfdata.ContextMax {
			continue
		}
		f := Frame{Addr: ip, PC: ip, Offset: ip, Module: "[kernel.kallsyms]", Kernel: true, How: "kernel"}
		if sym, off, ok := n.ksyms.Lookup(ip); ok {
			f.Symbol, f.SymOff = sym.Name, off
			if sym.Module != "" {
				f.Module = "[" + sym.Module + "]"
			}
		}
		s.Frames = append(s.Frames, f)
	}
	if space == nil {
		return
	}
	as := space.AddressSpace()
	for _, ip := range user {
		if ip >= perfdata.ContextMax {
			continue
		}
		fr := unwinder.Frame{PC: ip, Mapping: int32(as.Find(ip))}
		s.Frames = n.sym.Append(s.Frames, space, &fr, "callchain")
	}
}

// Forget lets go of the answers the namer remembers for the last
// addresses it named (its Symbolizer's memo). Their names are parts of
// their objects' string tables and keep those alive, also after a budget
// closed the objects (resolve.Options.CacheBudget): a long-lived namer,
// such as an agent's, calls Forget now and then (the agent at each
// interval) so that what it holds stays that of the objects in use.
func (n *LiveNamer) Forget() { n.sym.Forget() }
