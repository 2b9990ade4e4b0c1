package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestReportDamagedExitsPartial checks that `ustack report` on a truncated
// recording prints the intact samples, says where reading stopped and exits
// with the "partial" status, and that the intact file exits 0.
func TestReportDamagedExitsPartial(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "perfdata", "testdata", "dwarf.data"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	intact := filepath.Join(dir, "intact.data")
	damaged := filepath.Join(dir, "damaged.data")
	if err := os.WriteFile(intact, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Cut the data section in the middle of a record.
	if err := os.WriteFile(damaged, data[:len(data)/2+3], 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"report", "-kallsyms", "-", "-no-inline", "-archive", "-"}

	var out, errb bytes.Buffer
	if st := run(append(args, "-i", intact), &out, &errb); st != exitOK {
		t.Fatalf("intact recording: status %d\n%s", st, errb.String())
	}
	whole := out.String()

	out.Reset()
	errb.Reset()
	st := run(append(args, "-i", damaged), &out, &errb)
	if st != exitPartial {
		t.Fatalf("damaged recording: status %d, want %d (partial)\n%s", st, exitPartial, errb.String())
	}
	if !strings.Contains(errb.String(), "damaged") || !strings.Contains(errb.String(), "offset 0x") {
		t.Errorf("the summary does not say where reading stopped:\n%s", errb.String())
	}
	part := out.String()
	if part == "" || !strings.HasPrefix(whole, part) {
		t.Errorf("the damaged report does not start with the intact samples of the whole one:\n%s", part)
	}
}
