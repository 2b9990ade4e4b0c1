package report

import (
	"bufio"
	"fmt"
	"io"
	"slices"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/resolve"
)

// WriteCoreInfo describes a core dump for ustack report --core-info: the
// process, the signal (with the fault address where siginfo has one), each
// thread's pc and sp, the mapped files, and for each ELF object the build-id
// the core's memory gives and the file the report would use for it (or why
// there is none).
func WriteCoreInfo(w io.Writer, c *Core, opts CoreOptions) error {
	s := newCoreSession(c, opts)
	defer s.close()
	bw := bufio.NewWriter(w)
	a := c.Arch
	if d := c.Minidump; d != nil {
		fmt.Fprintf(bw, "minidump: %s (%s): %d streams", c.File, a, len(d.Streams))
		if d.System != nil && d.System.OS != "" {
			fmt.Fprintf(bw, ", system %q", d.System.OS)
		}
		fmt.Fprintln(bw)
		if len(d.CmdLine) > 0 {
			fmt.Fprintf(bw, "command line: %q\n", d.CmdLine)
		}
		fmt.Fprintf(bw, "modules: %d\n", len(d.Modules))
		for _, m := range d.Modules {
			id := "no build-id"
			switch {
			case m.BuildIDPrefix:
				id = fmt.Sprintf("build-id %x... (PDB70: its first 16 bytes)", m.BuildID)
			case m.BuildID != nil:
				id = fmt.Sprintf("build-id %x (%s)", m.BuildID, m.CodeView)
			}
			fmt.Fprintf(bw, "  %#x-%#x %s, %s\n", m.Base, m.Base+m.Size, m.Name, id)
		}
	} else {
		fmt.Fprintf(bw, "core: %s (%s)\n", c.File, a)
	}
	if p := c.Process; p.Known {
		fmt.Fprintf(bw, "process: pid %d ppid %d comm %q args %q\n", p.PID, p.PPID, p.Comm, p.Args)
	} else {
		fmt.Fprintf(bw, "process: unknown (no NT_PRPSINFO)\n")
	}
	if exe := c.ExePath; exe != "" {
		fmt.Fprintf(bw, "executable: %s\n", exe)
	}
	switch sg := c.Signal; {
	case sg == nil || sg.Signo == 0:
		fmt.Fprintf(bw, "signal: none\n")
	case sg.FromPRStatus:
		fmt.Fprintf(bw, "signal: %s (from NT_PRSTATUS; the core has no NT_SIGINFO: no code, no fault address)\n", sg.Name())
	default:
		fmt.Fprintf(bw, "signal: %s (%s)", sg.Name(), coredump.CodeName(sg.Signo, sg.Code))
		if sg.HasAddr {
			fmt.Fprintf(bw, " fault address %#x", sg.Addr)
		}
		if sg.HasSender {
			fmt.Fprintf(bw, " sent by pid %d uid %d", sg.SenderPID, sg.SenderUID)
		}
		fmt.Fprintln(bw)
	}
	fmt.Fprintf(bw, "threads: %d\n", len(c.Threads))
	for i := range c.Threads {
		th := &c.Threads[i]
		pc, _ := th.Regs.Get(a.PC())
		sp, _ := th.Regs.Get(a.SP())
		fmt.Fprintf(bw, "  tid %d pc %#x sp %#x", th.TID, pc, sp)
		if th.Name != "" {
			fmt.Fprintf(bw, " name %q", th.Name)
		}
		if i == 0 && c.Signal != nil && c.Signal.Signo != 0 {
			fmt.Fprintf(bw, " received %s", c.Signal.Name())
		}
		if th.PAC.Known {
			fmt.Fprintf(bw, " pac-mask insn %#x data %#x", th.PAC.Insn, th.PAC.Data)
		}
		fmt.Fprintln(bw)
	}
	if slices.ContainsFunc(c.Mappings, func(m coredump.Mapping) bool { return m.Module }) {
		// A minidump without /proc/PID/maps (Crashpad's): its modules,
		// placed segment by segment from each one's file.
		placed := slices.DeleteFunc(slices.Clone(s.maps), func(m resolve.Mapping) bool { return m.Path == anonPath })
		fmt.Fprintf(bw, "mappings: %d, of the module list (the dump holds no /proc/PID/maps), placed from each object's segments\n", len(placed))
		for _, m := range placed {
			fmt.Fprintf(bw, "  %016x-%016x %08x %s\n", m.Start, m.End, m.PgOff, m.Path)
		}
	} else {
		fmt.Fprintf(bw, "mappings: %d\n", len(c.Mappings))
		for _, m := range c.Mappings {
			fmt.Fprintf(bw, "  %016x-%016x %08x %s\n", m.Start, m.End, m.FileOffset, m.Path)
		}
	}
	// Executable memory no file backs (a JIT's code): NT_FILE leaves it
	// out, the report walks it by frame pointers.
	var anon []resolve.Mapping
	for _, m := range s.maps {
		if m.Path == anonPath {
			anon = append(anon, m)
		}
	}
	if len(anon) > 0 {
		fmt.Fprintf(bw, "anonymous executable memory (JIT code; no file, no unwind information): %d\n", len(anon))
		for _, m := range anon {
			fmt.Fprintf(bw, "  %016x-%016x %s\n", m.Start, m.End, m.Path)
		}
	}
	// The objects, and the file behind each as the report resolves it.
	found := map[string]string{}
	as := s.space.AddressSpace()
	for i := 0; i < as.Len(); i++ {
		if o := s.space.Object(i); o != nil {
			found[as.Mapping(i).Name] = o.Path()
		}
	}
	missing := s.missing()
	objs := c.Objects()
	fmt.Fprintf(bw, "objects: %d\n", len(objs))
	for _, o := range objs {
		id := "build-id unknown"
		if o.BuildID != nil {
			id = fmt.Sprintf("build-id %x", o.BuildID)
		} else if o.Err != nil {
			id = fmt.Sprintf("build-id unknown (%v)", o.Err)
		}
		fmt.Fprintf(bw, "  %s at %#x, %s: ", o.Path, o.Start, id)
		switch {
		case found[o.Path] != "":
			fmt.Fprintf(bw, "found %s\n", found[o.Path])
		case missing[o.Path] != "":
			fmt.Fprintf(bw, "missing: %s\n", missing[o.Path])
		case o.BuildID == nil && c.isData(o.Path):
			fmt.Fprintf(bw, "not used (a data file, not an ELF object)\n")
		default:
			fmt.Fprintf(bw, "not used (no executable mapping)\n")
		}
	}
	fixes := &Summary{Missing: missing, core: true, fix: coreFix(c, opts)}
	if fix := fixes.MissingFix(); fix != "" {
		fmt.Fprintf(bw, "%s\n", fix)
	}
	if len(s.warnings) > 0 {
		fmt.Fprintf(bw, "warnings: %d\n", len(s.warnings))
		for _, w := range s.warnings {
			fmt.Fprintf(bw, "  %s\n", w)
		}
	}
	return bw.Flush()
}
