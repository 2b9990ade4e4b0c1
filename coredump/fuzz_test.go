package coredump_test

import (
	"bytes"
	"compress/flate"
	"compress/zlib"
	"encoding/base64"
	"encoding/binary"
	"hash/crc32"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/internal/fixture"
)

// FuzzParse: no input crashes, hangs or exhausts memory in Parse or in any
// read of the Core it returns. Seeds: the headers and notes of each fixture
// core (its first 16 KiB) and a minimal header.
func FuzzParse(f *testing.F) {
	for _, tr := range fixtures(f) {
		raw := rawCore(f, tr)
		n := min(len(raw), 16<<10)
		f.Add(raw[:n])
	}
	f.Add([]byte("\x7fELF\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x04\x00\x3e\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := coredump.Parse(data, "fuzz", &coredump.Options{NoMappedFiles: true})
		if err != nil {
			if c != nil {
				t.Fatal("Core and error both returned")
			}
			return
		}
		if len(c.Threads) == 0 {
			t.Fatal("a Core without threads")
		}
		exercise(c)
	})
}

// FuzzParseExecutable: the same for a core that lists no mapped files
// read with Options.Executable (an arm64 PIE fixture), whose auxiliary
// vector places it: seeded with a core that agrees with it.
func FuzzParseExecutable(f *testing.F) {
	const bias = 0xaaaaaaab0000
	notes := append(note("CORE", 1, arm64PRStatus(9, 6, [34]uint64{})), auxvNote(3, bias+0x40, 5, 9, 9, bias+0x680)...)
	f.Add(machineCore(183, notes, nil, []seg{{bias, 0x1000, 5, nil}}))
	exe := filepath.Join(fixture.Dir(), "objects", "aarch64", "a64_chain_O2_fp")
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := coredump.Parse(data, "fuzz", &coredump.Options{Executable: exe})
		if err != nil {
			if c != nil {
				t.Fatal("Core and error both returned")
			}
			return
		}
		exercise(c)
		c.Close()
	})
}

// FuzzApportReport: no apport report crashes, hangs or exhausts memory in
// OpenReader (its lines, base64 blocks, gzip header and deflate data are
// untrusted); a damaged one gives an error naming the input. Seeds: a
// report holding a small core (the first fixture's first 4 KiB), gzip and
// legacy zlib, and one without a CoreDump.
func FuzzApportReport(f *testing.F) {
	raw := rawCore(f, fixtures(f)[0])
	core := raw[:min(len(raw), 4<<10)]
	f.Add(apportReport(f, core, false))
	f.Add(apportReport(f, core, true))
	f.Add([]byte("ProblemType: Crash\nSignal: 11\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := coredump.OpenReader(bytes.NewReader(data), "fuzz", &coredump.Options{NoMappedFiles: true, MaxDecompressed: 1 << 20, TempDir: t.TempDir()})
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz") {
				t.Fatalf("error does not name the input: %v", err)
			}
			return
		}
		c.Close()
	})
}

// apportReport lays core out as apport's problem_report writes a binary
// value (gzip, or legacy zlib), as testdata/gen/apport_write.py does.
func apportReport(t testing.TB, core []byte, legacy bool) []byte {
	t.Helper()
	var b bytes.Buffer
	b.WriteString("ProblemType: Crash\nSignal: 11\nCoreDump: base64\n")
	line := func(p []byte) { b.WriteString(" " + base64.StdEncoding.EncodeToString(p) + "\n") }
	var z bytes.Buffer
	if legacy {
		w := zlib.NewWriter(&z)
		w.Write(core)
		w.Close()
		line(z.Bytes())
	} else {
		line([]byte("\x1f\x8b\x08\x08\x00\x00\x00\x00\x02\xffCoreDump\x00"))
		w, _ := flate.NewWriter(&z, 6)
		w.Write(core)
		w.Close()
		var trailer [8]byte
		binary.LittleEndian.PutUint32(trailer[:], crc32.ChecksumIEEE(core))
		binary.LittleEndian.PutUint32(trailer[4:], uint32(len(core)))
		line(append(z.Bytes(), trailer[:]...))
	}
	b.WriteString("UserGroups: N/A\n")
	return b.Bytes()
}
