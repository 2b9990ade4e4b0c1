package report

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestWriteSummary(t *testing.T) {
	s := &Summary{
		PACMask: 0xffff000000000000, PACSource: "default: 48-bit virtual addresses",
		Samples: 10, Lost: 3,
		Stops:       map[string]int{"outermost": 7, "truncated": 2, "no_mapping": 1},
		Missing:     map[string]string{"/usr/lib/libfoo.so": "not found"},
		DecodeError: errors.New("perfdata: offset 0x1234: truncated record"),
	}
	var b bytes.Buffer
	s.WriteSummary(&b)
	for _, want := range []string{
		"3 samples lost by the kernel",
		"PAC mask 0xffff000000000000 (default: 48-bit virtual addresses)",
		"3 of 10 stacks ended before the outermost frame: outermost 7 truncated 2 no_mapping 1",
		"/usr/lib/libfoo.so: not found",
		"reading stopped: perfdata: offset 0x1234",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	// A clean report says nothing.
	b.Reset()
	(&Summary{Samples: 5, Stops: map[string]int{"outermost": 5}}).WriteSummary(&b)
	if b.Len() != 0 {
		t.Errorf("clean summary printed %q", b.String())
	}
}
