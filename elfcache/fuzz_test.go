package elfcache

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/ustack/ustack/cfi"
)

// FuzzOpen opens arbitrary bytes and calls every method: none may panic or
// hang, whatever the input.
func FuzzOpen(f *testing.F) {
	for _, p := range []string{ldAMD64} {
		if data, err := os.ReadFile(p); err == nil && len(data) < 1<<20 {
			f.Add(data[:min(len(data), 8192)])
		}
	}
	if seeds, err := filepath.Glob("testdata/seed/*"); err == nil {
		for _, s := range seeds {
			if data, err := os.ReadFile(s); err == nil {
				f.Add(data)
			}
		}
	}
	f.Add([]byte("\x7fELF\x02\x01\x01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// The fuzzer does not detect hangs: turn one into a crash, which
		// it records.
		tm := time.AfterFunc(10*time.Second, func() {
			buf := make([]byte, 1<<16)
			panic("input hangs:\n" + string(buf[:runtime.Stack(buf, true)]))
		})
		defer tm.Stop()
		o, err := OpenReader("fuzz", bytes.NewReader(data), int64(len(data)), Options{MaxSectionSize: 1 << 20})
		if err != nil {
			return
		}
		defer o.Close()
		o2, err := OpenBytes("fuzz", data, Options{MaxSectionSize: 1 << 20})
		if err != nil {
			t.Fatalf("OpenBytes failed where OpenReader did not: %v", err)
		}
		defer o2.Close()
		exercise(o)
		exercise(o2)
	})
}

func exercise(o *Object) {
	o.Arch()
	o.BuildIDHex()
	o.DebugLink()
	o.Sections()
	o.DebugFile()
	o.SymbolsError()
	syms := o.Symbols()
	var addrs []uint64
	for i, s := range syms {
		if i > 8 {
			break
		}
		addrs = append(addrs, s.Addr, s.Addr+s.Size/2)
	}
	for _, p := range o.PLTs() {
		addrs = append(addrs, p.Start, p.Start+4, p.Start+16, p.Start+35, p.End-1)
	}
	for _, l := range o.LoadSegments() {
		addrs = append(addrs, l.Vaddr, l.Vaddr+l.Memsz-1)
		o.Bias(0x7f0000000000, l.Off&^0xfff)
		o.BiasProt(0x7f0000000000, l.Off, l.Flags)
	}
	for _, s := range o.ef.Sections {
		addrs = append(addrs, s.Addr, s.Addr+8, s.Addr+s.Size-8)
	}
	addrs = append(addrs, 0, 0x1000, ^uint64(0))
	var row cfi.Row
	buf := make([]byte, 32)
	var srcs []uint64
	for _, a := range addrs {
		o.Symbolize(a)
		o.ReadCode(a, buf)
		o.FindRow(a, &row)
		o.CallTarget(a)
		o.InitFiniEntry(a)
		o.StartBefore(a)
		srcs = o.JumpSources(a, srcs[:0])
		o.Outermost(a)
		o.cloneChild(a)
	}
	o.CFIError()
	o.cfiSections()
	o.GoPCLNError()
	o.SourceError()
	o.Sources()
}
