package report

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/perfdata"
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
		"3 of 10 stacks ended early: truncated 2 no_mapping 1\n",
		"/usr/lib/libfoo.so: not found",
		"reading stopped: perfdata: offset 0x1234",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "outermost 7") {
		t.Errorf("complete stacks listed among the early stops:\n%s", b.String())
	}
	// Samples without a user stack are no stacks that ended early.
	b.Reset()
	(&Summary{Samples: 5, Stops: map[string]int{"no_unwind_info": 2}}).WriteSummary(&b)
	if want := "ustack: 2 of 2 stacks ended early: no_unwind_info 2\n"; b.String() != want {
		t.Errorf("summary %q; want %q", b.String(), want)
	}
	// A clean report says nothing.
	b.Reset()
	(&Summary{Samples: 5, Stops: map[string]int{"outermost": 5}}).WriteSummary(&b)
	if b.Len() != 0 {
		t.Errorf("clean summary printed %q", b.String())
	}
}

// TestMissingFix checks which options the summary suggests for missing
// objects: only those that could find them (a build-id for the build-id
// ways, DEBUGINFOD_URLS only when unset, perf archive only for perf's
// recordings, nothing for anonymous memory or the vdso).
func TestMissingFix(t *testing.T) {
	s := &Summary{Missing: map[string]string{"/opt/a.so": "not found", "//anon": "not found", "[vdso]": "not found"},
		fix: missingFix{buildIDs: map[string][]byte{}, buildIDDir: true}}
	want := "to use them: --symfs DIR finds them under DIR, a copy of the recording machine's root, holding DIR/opt/a.so"
	if got := s.MissingFix(); got != want {
		t.Errorf("no build-id:\n got %q\nwant %q", got, want)
	}
	s.fix.buildIDs["/opt/a.so"] = []byte{1}
	s.Cmdline = []string{"/usr/bin/ustack", "record"}
	if got := s.MissingFix(); got != want {
		t.Errorf("ustack's recording, --buildid-dir given, DEBUGINFOD_URLS set:\n got %q\nwant %q", got, want)
	}
	s.fix.debuginfodOff = true
	if got, w := s.MissingFix(), want+"; DEBUGINFOD_URLS=URL fetches them by build-id from a debuginfod server"; got != w {
		t.Errorf("DEBUGINFOD_URLS unset:\n got %q\nwant %q", got, w)
	}
	s.Missing = map[string]string{"//anon": "not found", "/opt/b.so": "/opt/b.so: no loadable segment maps file offset 0x1000"}
	if got := s.MissingFix(); got != "" {
		t.Errorf("nothing an option could find, yet %q", got)
	}
	var b bytes.Buffer
	s.WriteSummary(&b)
	if strings.Contains(b.String(), "to use them") {
		t.Errorf("summary suggests a fix for what none fixes:\n%s", b.String())
	}
}

// TestMissingFixPathsUnderSymFS: a qemu-user core records its sysroot's
// libraries by their host paths (/usr/aarch64-linux-gnu/lib/libc.so.6);
// given that sysroot as --symfs, ustack looks for them under it twice
// over. The fix says so, rather than to copy them there.
func TestMissingFixPathsUnderSymFS(t *testing.T) {
	s := &Summary{core: true, Missing: map[string]string{"/usr/aarch64-linux-gnu/lib/libc.so.6": "not found under /usr/aarch64-linux-gnu"},
		fix: missingFix{symFS: "/usr/aarch64-linux-gnu"}}
	want := "to use them: their recorded paths (/usr/aarch64-linux-gnu/lib/libc.so.6) are already under --symfs /usr/aarch64-linux-gnu, " +
		"which looks for them at /usr/aarch64-linux-gnu/usr/aarch64-linux-gnu/lib/libc.so.6: without --symfs they are read at their recorded paths"
	if got := s.MissingFix(); got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
	s.fix.symFS = "/srv/root"
	if got, want := s.MissingFix(), "to use them: --symfs /srv/root finds them when copied there at their recorded paths"; got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
}

// TestMissingFixBareNames: a Crashpad minidump names its libraries by
// soname; the fix says where under --symfs such a name is looked for
// (resolve.LibraryPaths searches /usr/lib among the system's library
// directories), not "at their recorded paths".
func TestMissingFixBareNames(t *testing.T) {
	s := &Summary{core: true, Missing: map[string]string{"libz.so.1": "not found", "/usr/lib/chromium/chromium": "not found"}}
	want := "to use them: --symfs DIR finds them under DIR, a copy of the root of the machine it ran on, holding DIR/usr/lib/libz.so.1 " +
		"or a copy beside the program: the dump names libz.so.1 without a directory"
	if got := s.MissingFix(); got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
	s.fix.symFS = "/srv/root"
	want = "to use them: --symfs /srv/root finds them when copied into its library directories (/srv/root/usr/lib/libz.so.1) " +
		"or beside the program: the dump names libz.so.1 without a directory"
	if got := s.MissingFix(); got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
}

// TestMissingFixCore: a core's program and libraries gone, no --symfs:
// --exe for the program, --symfs for the others, naming where one of them
// goes; none of the recordings' build-id ways.
func TestMissingFixCore(t *testing.T) {
	s := &Summary{core: true, Missing: map[string]string{"/srv/prog": "not found", "/lib/libc.so.6": "not found", "/lib/libm.so.6": "not found"},
		fix: missingFix{exePath: "/srv/prog"}}
	want := "to use them: --exe FILE gives the main executable (a file of the build the core ran); " +
		"--symfs DIR finds them under DIR, a copy of the root of the machine it ran on, holding DIR/lib/libc.so.6"
	if got := s.MissingFix(); got != want {
		t.Errorf("\n got %q\nwant %q", got, want)
	}
	s.fix.exeGiven = true
	s.Missing = map[string]string{"/srv/prog": "build-id mismatch: ..."}
	if got := s.MissingFix(); got != "" {
		t.Errorf("--exe given (its warning says why it was not used), yet %q", got)
	}
}

// TestNoUnwindInNamesObjects: "no_unwind_info 48" alone did not say which
// object lacked its unwind information when the object was found (a
// missing one is listed with why). The summary now names the objects
// where such stacks ended, by the last user frame's module, most first;
// JIT code has its own line, missing objects theirs.
func TestNoUnwindInNamesObjects(t *testing.T) {
	s := &Summary{Stops: map[string]int{}, Missing: map[string]string{"/gone/libx.so": "not found"}}
	stop := func(stopReason string, modules ...string) {
		out := &Sample{Stop: stopReason}
		for _, m := range modules {
			out.Frames = append(out.Frames, Frame{Module: m})
		}
		out.Frames = append(out.Frames, Frame{Module: "[kernel.kallsyms]", Kernel: true})
		s.Samples++
		s.Stops[stopReason]++
		s.countNoUnwind(out)
	}
	for range 3 {
		stop("no_unwind_info", "/usr/lib/libc.so.6", "/opt/app/prog")
	}
	stop("no_unwind_info", "/usr/lib/libc.so.6", "/opt/app/libplugin.so")
	stop("no_unwind_info", "/gone/libx.so")
	stop("no_unwind_info", "//anon")
	stop("outermost", "/usr/lib/libc.so.6", "/opt/app/other")
	var b bytes.Buffer
	s.WriteSummary(&b)
	want := "ustack: 4 stacks stopped (no_unwind_info) in code without unwind information that no fallback could leave: /opt/app/prog (3), /opt/app/libplugin.so (1);"
	if !strings.Contains(b.String(), want) {
		t.Errorf("summary lacks %q:\n%s", want, b.String())
	}
	if s.JITStops != 1 || !strings.Contains(b.String(), "/gone/libx.so: not found") {
		t.Errorf("JIT stops %d; summary:\n%s", s.JITStops, b.String())
	}
}

// TestKallsymsWithoutSymbols: --kallsyms given a file that is no copy of
// /proc/kallsyms (no line parses) was taken as an empty table: every
// kernel frame [unknown], exit 0, not a word. It now warns, naming it.
func TestKallsymsWithoutSymbols(t *testing.T) {
	notKallsyms := filepath.Join(t.TempDir(), "run.sh")
	require.NoError(t, os.WriteFile(notKallsyms, []byte("#!/bin/sh\nexec ustack report \"$@\"\n"), 0o600))
	r, err := perfdata.Open(filepath.Join("..", "perfdata", "testdata", "dwarf.data"))
	require.NoError(t, err)
	defer r.Close()
	var warnings []string
	kernel := 0
	_, err = Run(r, Options{Kallsyms: notKallsyms, Warn: func(m string) { warnings = append(warnings, m) }}, func(s *Sample) error {
		for _, f := range s.Frames {
			if f.Kernel {
				kernel++
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, kernel, "the recording has kernel frames")
	assert.Contains(t, strings.Join(warnings, "\n"), notKallsyms+" holds no kernel symbol")
}
