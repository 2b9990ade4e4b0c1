package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"path/filepath"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/fixture"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// jsonFrame is one frame of `ustack unwind -json`.
type jsonFrame struct {
	PC     string `json:"pc"`
	SP     string `json:"sp"`
	CFA    string `json:"cfa,omitempty"`
	Module string `json:"module,omitempty"`
	Offset string `json:"offset,omitempty"`
	Symbol string `json:"symbol,omitempty"`
	SymOff uint64 `json:"symoff,omitempty"`
	How    string `json:"how"`
	Signal bool   `json:"signal_trampoline,omitempty"`
}

type jsonStack struct {
	Name   string      `json:"name"`
	Arch   string      `json:"arch"`
	Frames []jsonFrame `json:"frames"`
	Stop   string      `json:"stop"`
	Error  string      `json:"error,omitempty"`
}

func cmdUnwind(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("unwind", flag.ContinueOnError)
	asJSON := fs.Bool("json", false, "print one JSON object per stack")
	maxFrames := fs.Int("max-frames", 1024, "stop after `N` frames")
	noFP := fs.Bool("no-fp", false, "do not fall back to frame pointers where CFI is missing")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: ustack unwind [flags] FIXTURE.json... [flags]\n\n"+
			"Unwinds test fixtures: stops of real programs under gdb saved as registers, a stack snapshot\n"+
			"and maps (testdata/FORMAT.md), and prints each frame tagged with how it was recovered.\n"+
			"A fixture's objects are read relative to the testdata/ directory holding its JSON file\n"+
			"(testdata/fixtures/ARCH/NAME.json), so a checkout or a copy of testdata/ works from any\n"+
			"directory. Tags and stop reasons: %s\n"+
			"Exit status: 0 ok, 1 a fixture could not be read, 2 usage.\n\nflags:\n", glossaryURL)
		printFlags(fs)
	}
	paths, code, ok := parseInterleaved(fs, args, stdout, stderr)
	if !ok {
		return code
	}
	switch {
	case len(paths) == 0:
		fmt.Fprintf(stderr, "ustack unwind: no fixture given\nrun 'ustack unwind -h' for its flags\n")
		return 2
	case *maxFrames < 1:
		fmt.Fprintf(stderr, "ustack unwind: --max-frames %d: a stack has at least one frame\n", *maxFrames)
		return 2
	}
	status := 0
	for _, path := range paths {
		if err := unwindFixture(path, *asJSON, *maxFrames, *noFP, stdout); err != nil {
			fmt.Fprintf(stderr, "ustack: %v\n", err)
			status = 1
		}
	}
	return status
}

func unwindFixture(path string, asJSON bool, maxFrames int, noFP bool, w io.Writer) error {
	f, err := fixture.Load(path)
	if err != nil {
		return err
	}
	cache := f.NewCache()
	defer cache.Close()
	p, err := f.Prepare(cache)
	if err != nil {
		return err
	}
	u := unwinder.New(p.Arch, unwinder.Options{NoFramePointer: noFP})
	frames := make([]unwinder.Frame, maxFrames)
	res := u.Unwind(new(unwinder.Cache), p.Space, &p.Regs, &p.Stack, frames)
	sym := resolve.NewSymbolizer()
	var sf []resolve.Frame

	out := jsonStack{Name: f.Name, Arch: p.Arch.String(), Stop: res.Stop.String()}
	if res.Err != nil {
		out.Error = res.Err.Error()
	}
	for i := 0; i < res.Frames; i++ {
		fr := &frames[i]
		jf := jsonFrame{PC: hex(fr.PC), SP: hex(fr.SP), How: fr.Method.String(),
			Signal: fr.Flags&unwinder.FrameSignalTrampoline != 0}
		if fr.CFA != 0 {
			jf.CFA = hex(fr.CFA)
		}
		if fr.Mapping >= 0 {
			jf.Module = p.Space.Mapping(int(fr.Mapping)).Name
			if p.Resolved.Object(int(fr.Mapping)) != nil {
				jf.Offset = hex(fr.PC - p.Resolved.Bias(int(fr.Mapping)))
				// The physical frame ends its inline chain.
				sym.Reset()
				sf = sym.Append(sf[:0], p.Resolved, fr, resolve.HowOf(fr.Method))
				if phys := &sf[len(sf)-1]; phys.Symbol != "" {
					jf.Symbol = elfcache.Demangle(phys.Symbol)
					// symoff is relative to the PC, like perf's sym+off.
					jf.SymOff = phys.SymOff + (fr.PC - phys.Addr)
				}
			}
		}
		out.Frames = append(out.Frames, jf)
	}
	if asJSON {
		b, _ := json.Marshal(out)
		fmt.Fprintf(w, "%s\n", b)
		return nil
	}
	fmt.Fprintf(w, "%s (%s): %d frames, stopped: %s", out.Name, out.Arch, res.Frames, out.Stop)
	if out.Error != "" {
		fmt.Fprintf(w, " (%s)", out.Error)
	}
	fmt.Fprintln(w)
	for i, jf := range out.Frames {
		sym := "??"
		if jf.Symbol != "" {
			sym = fmt.Sprintf("%s+%#x", jf.Symbol, jf.SymOff)
		}
		if jf.Signal {
			sym += " <signal handler called>"
		}
		mod := jf.Module
		if mod == "" {
			mod = "[unknown]"
		}
		fmt.Fprintf(w, "#%-3d %18s in %s (%s) [%s]\n", i, jf.PC, sym, filepath.Base(mod), jf.How)
	}
	return nil
}

func hex(v uint64) string { return fmt.Sprintf("%#x", v) }
