package minidump

import (
	"bytes"
	"encoding/binary"
	"strings"

	"github.com/ustack/ustack/coredump"
)

// startStrings is what the kernel put at the top of the main thread's
// stack at exec: the arguments and the environment, found in the core's
// memory.
type startStrings struct {
	args, vars []string
	// span is where the environment's strings lie, [lo, hi).
	span [2]uint64
}

// environ finds argv and envp through the auxiliary vector: the kernel
// lays out argc, argv[], NULL, envp[], NULL, auxv[] at the initial stack
// pointer, so the auxv's bytes, found in the stack segment, lead back to
// both arrays. Empty when the core does not hold them.
func environ(c *coredump.Core) startStrings {
	var out startStrings
	execfn, ok := c.AuxvValue(coredump.AT_EXECFN)
	if !ok || len(c.Auxv) < 2 {
		return out
	}
	var seg *coredump.Segment
	segs := c.Memory().Segments()
	for i := range segs {
		if execfn >= segs[i].Addr && execfn < segs[i].Addr+segs[i].Present {
			seg = &segs[i]
		}
	}
	if seg == nil {
		return out
	}
	data := make([]byte, seg.Present)
	if n, _ := c.Memory().ReadDumped(data, seg.Addr); uint64(n) != seg.Present {
		return out
	}
	var pat []byte
	for _, e := range c.Auxv[:2] {
		pat = binary.LittleEndian.AppendUint64(pat, e.Type)
		pat = binary.LittleEndian.AppendUint64(pat, e.Value)
	}
	at := bytes.Index(data, pat)
	if at < 16 || at%8 != 0 {
		return out
	}
	word := func(off int) uint64 { return binary.LittleEndian.Uint64(data[off:]) }
	// envp's NULL is just below the auxv; walk down to argv's NULL.
	k := at - 8
	if word(k) != 0 {
		return out
	}
	var envp []uint64
	for k -= 8; k >= 0 && word(k) != 0; k -= 8 {
		envp = append(envp, word(k))
	}
	var argv []uint64
	for k -= 8; k >= 0; k -= 8 {
		if w := word(k); w == uint64(len(argv)) {
			break // argc
		} else {
			argv = append(argv, w)
		}
		if len(argv) > 1<<16 {
			return out
		}
	}
	if k < 0 {
		return out
	}
	read := func(addr uint64) (string, bool) {
		if addr < seg.Addr || addr >= seg.Addr+seg.Present {
			return "", false
		}
		off := addr - seg.Addr
		end := bytes.IndexByte(data[off:], 0)
		if end < 0 {
			return "", false
		}
		return string(data[off : off+uint64(end)]), true
	}
	for i := len(argv) - 1; i >= 0; i-- {
		s, ok := read(argv[i])
		if !ok {
			return startStrings{}
		}
		out.args = append(out.args, s)
	}
	lo, hi := ^uint64(0), uint64(0)
	for i := len(envp) - 1; i >= 0; i-- {
		s, ok := read(envp[i])
		if !ok {
			continue
		}
		out.vars = append(out.vars, s)
		lo, hi = min(lo, envp[i]), max(hi, envp[i]+uint64(len(s))+1)
	}
	if hi > lo {
		out.span = [2]uint64{lo, hi}
	}
	return out
}

// cmdline is the process's arguments: argv from its memory, else
// NT_PRPSINFO's pr_psargs split at spaces (which it joined them with).
func cmdline(c *coredump.Core, s startStrings) []string {
	if len(s.args) > 0 {
		return s.args
	}
	if c.Process.Known && c.Process.Args != "" {
		return strings.Fields(c.Process.Args)
	}
	return nil
}
