package filestamp

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestStamp: a file changed less than MinAge ago is not stamped; an older
// one is, and is Checked while it stays as it was: not after a write in
// place (even with its modification time set back), nor with another
// checksum, nor after its stamp is damaged.
func TestStamp(t *testing.T) {
	defer func(d time.Duration) { MinAge = d }(MinAge)
	MinAge = time.Hour
	p := filepath.Join(t.TempDir(), "entry")
	if err := os.WriteFile(p, []byte("some cached bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := Changed(st); !ok {
		t.Skip("no change times here")
	}
	Stamp(p, st, 7)
	if _, err := os.Stat(Path(p)); !os.IsNotExist(err) {
		t.Fatalf("a file changed within MinAge was stamped (%v)", err)
	}
	MinAge = 0
	Stamp(p, st, 7)
	if !Checked(p, st, 7) {
		t.Fatal("not Checked right after its stamp")
	}
	if Checked(p, st, 8) {
		t.Fatal("Checked with another checksum")
	}
	if b, err := os.ReadFile(Path(p)); err != nil || len(b) != Size || string(b[:8]) != Magic {
		t.Fatalf("stamp %q, %v", b, err)
	}

	// Written in place, same size, modification time set back: only the
	// change time moved.
	time.Sleep(20 * time.Millisecond) // past a coarse clock's tick
	if err := os.WriteFile(p, []byte("SOME cached bytes"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	st2, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if Checked(p, st2, 7) {
		t.Fatal("Checked after a write in place")
	}

	// A damaged stamp is no stamp.
	Stamp(p, st2, 7)
	if !Checked(p, st2, 7) {
		t.Fatal("not Checked after stamping again")
	}
	if err := os.WriteFile(Path(p), []byte(Magic), 0o600); err != nil {
		t.Fatal(err)
	}
	if Checked(p, st2, 7) {
		t.Fatal("Checked with a short stamp")
	}
}
