package resolve_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"path/filepath"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/perfdata"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// Example unwinds and symbolizes the one sample of a perf recording
// (`perf record --call-graph dwarf` of a static program at its close(2),
// testdata/recordings/static_close): follow the maps, resolve them into an
// address space, unwind the sample's registers and stack copy, and print
// each frame with its source line. The program's file is found under the
// recording's symfs directory, as perf's --symfs would; its build-id must be
// the one the recording names.
//
// The frames are gdb's for the same stop (gdb-bt.txt there): return
// addresses, then the functions in its symbol table (gdb names glibc's
// __libc_close by its alias close) and debug info. perf script stops after
// the first frame of this recording.
func Example() {
	dir := filepath.Join("..", "testdata", "recordings", "static_close")
	r, err := perfdata.Open(filepath.Join(dir, "perf.data"))
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	a := r.Session().Arch()
	buildIDs := map[string][]byte{}
	for _, b := range r.Session().Features.BuildIDs {
		buildIDs[b.Filename] = b.BuildID
	}

	res := resolve.New(resolve.Options{SymFS: filepath.Join(dir, "symfs")})
	defer res.Close()
	maps := procmaps.NewTracker()
	unw := unwinder.New(a, unwinder.Options{})
	sym := resolve.NewSymbolizer()
	for {
		rec, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		switch rec := rec.(type) {
		case *perfdata.Mmap:
			maps.Mmap(rec.Pid, procmaps.Map{Start: rec.Start, End: rec.Start + rec.Len, PgOff: rec.PgOff,
				Path: rec.Filename, BuildID: buildIDs[rec.Filename], Prot: rec.Prot, Exec: rec.Prot&procmaps.ProtExec != 0})
		case *perfdata.Sample:
			space := res.NewSpace(rec.Pid, resolve.FromProcmaps(nil, maps.Maps(rec.Pid).Maps))
			var regs arch.Regs
			rec.Attr.LoadUserRegs(a, rec, &regs, true)
			sp, _ := regs.Get(a.SP())
			stack := unwinder.Stack{Addr: sp, Data: rec.Stack()}
			frames := make([]unwinder.Frame, 64)
			result := unw.Unwind(new(unwinder.Cache), space.AddressSpace(), &regs, &stack, frames)

			var out []resolve.Frame
			sym.Reset() // a new stack
			for i := range frames[:result.Frames] {
				out = sym.Append(out, space, &frames[i], resolve.HowOf(frames[i].Method))
			}
			for _, f := range out {
				line := "??"
				if f.File != "" {
					line = fmt.Sprintf("%s:%d", filepath.Base(f.File), f.Line)
				}
				fmt.Printf("%#x %s+%#x %s (%s)\n", f.PC, f.Symbol, f.SymOff, line, f.How)
			}
			fmt.Println("stop:", result.Stop)
		}
	}
	// The vdso's image is neither in the recording nor in a build-id
	// cache here (Options.BuildIDDir); this stack does not pass through it.
	for path, why := range res.Missing() {
		fmt.Printf("not resolved: %s: %s\n", path, why)
	}
	// Output:
	// 0x4307c0 __libc_close+0x10 ?? (context)
	// 0x40164b leaf+0x1a prog.c:6 (cfi)
	// 0x401659 middle+0x8 prog.c:7 (cfi)
	// 0x401669 outer+0x8 prog.c:8 (cfi)
	// 0x4014f9 main+0x8 prog.c:9 (cfi)
	// 0x401994 __libc_start_call_main+0x63 ?? (cfi)
	// 0x403090 __libc_start_main_impl+0x89f ?? (cfi)
	// 0x401521 _start+0x20 ?? (cfi)
	// stop: outermost
	// not resolved: [vdso]: not found
}
