package report

import (
	"testing"

	"github.com/ustack/ustack/perfdata"
)

// FuzzParseFields checks that no -F argument crashes the parser or the
// layout rules, and that an accepted list prints back as fields it knows.
func FuzzParseFields(f *testing.F) {
	for _, s := range []string{"comm,tid,time,event,ip,sym,symoff,dso", "+srcline", "-cpu,-time", "comm,+tid", "sw:comm", "", ",", "+", "trace"} {
		f.Add(s)
	}
	attrs := []*perfdata.Attr{tracepointAttr(true), cpuClockAttr(false)}
	f.Fuzz(func(t *testing.T, s string) {
		fs, err := ParseFields(s)
		if err != nil {
			return
		}
		if fs.Replace && fs.Set == 0 {
			t.Fatalf("%q: a list that sets no field", s)
		}
		for _, name := range []string{fs.Set.String(), fs.Add.String(), fs.Remove.String()} {
			if name == "" {
				continue
			}
			if _, err := ParseFields(name); err != nil {
				t.Fatalf("%q: fields %q do not parse back: %v", s, name, err)
			}
		}
		eventLayouts(attrs, fs, false)
		eventLayouts(attrs, fs, true)
	})
}

// FuzzParseFilters checks that no --time, --cpu or --pid argument crashes
// or hangs the parsers, and that accepted time ranges are ordered.
func FuzzParseFilters(f *testing.F) {
	for _, s := range []string{"309.5,310", "1,", ",2", "1.123456789,2 3,4", "0-3,5", "4294967295", "0-4294967295", "1,2,3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if r, err := ParseTimeRanges(s); err == nil {
			for _, tr := range r {
				if tr.End != 0 && tr.Start > tr.End {
					t.Fatalf("%q: range %+v ends before it starts", s, tr)
				}
			}
		}
		if c, err := ParseCPUList(s); err == nil && len(c) > 1<<16 {
			t.Fatalf("%q: %d CPUs", s, len(c))
		}
		ParseIDList(s)
	})
}
