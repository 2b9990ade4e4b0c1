package capture

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// tracingData builds the TRACING_DATA feature section perf needs to decode
// tracepoint samples (the format written by perf's trace-event-info.c,
// version 0.6): the header_page and header_event descriptions, the format
// files of the recorded tracepoints, and the printk formats.
func tracingData(events []*Event) ([]byte, error) {
	dir, err := TracefsDir()
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	var b []byte
	b = append(b, 0x17, 0x08, 0x44)
	b = append(b, "tracing"...)
	b = append(b, "0.6"...)
	b = append(b, 0)
	b = append(b, 0) // little endian
	b = append(b, 8) // sizeof(long)
	b = le.AppendUint32(b, uint32(unix.Getpagesize()))
	file := func(p string) []byte {
		d, _ := os.ReadFile(p)
		return d
	}
	b = append(b, "header_page\x00"...)
	hp := file(filepath.Join(dir, "events", "header_page"))
	b = le.AppendUint64(b, uint64(len(hp)))
	b = append(b, hp...)
	b = append(b, "header_event\x00"...)
	he := file(filepath.Join(dir, "events", "header_event"))
	b = le.AppendUint64(b, uint64(len(he)))
	b = append(b, he...)
	// No ftrace-internal event formats.
	b = le.AppendUint32(b, 0)
	// The recorded tracepoints, by system.
	systems := map[string][]string{}
	for _, ev := range events {
		switch {
		case ev.Kind == KindTracepoint:
			sys, name, _ := strings.Cut(ev.Name, ":")
			systems[sys] = append(systems[sys], name)
		case ev.probe != nil:
			p := ev.probe
			systems[p.group] = append(systems[p.group], p.event)
		}
	}
	names := make([]string, 0, len(systems))
	for s := range systems {
		names = append(names, s)
	}
	sort.Strings(names)
	b = le.AppendUint32(b, uint32(len(names)))
	for _, sys := range names {
		b = append(b, sys...)
		b = append(b, 0)
		evs := systems[sys]
		b = le.AppendUint32(b, uint32(len(evs)))
		for _, e := range evs {
			f := file(filepath.Join(dir, "events", sys, e, "format"))
			b = le.AppendUint64(b, uint64(len(f)))
			b = append(b, f...)
		}
	}
	// kallsyms: none (perf takes kernel symbols from elsewhere).
	b = le.AppendUint32(b, 0)
	pf := file(filepath.Join(dir, "printk_formats"))
	b = le.AppendUint32(b, uint32(len(pf)))
	b = append(b, pf...)
	// saved_cmdlines: none.
	b = le.AppendUint64(b, 0)
	return b, nil
}
