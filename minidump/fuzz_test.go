package minidump_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/minidump"
)

// FuzzParse: no input crashes, hangs or exhausts memory in Parse, in Core,
// or in a read of the Core's memory. Seeds: a minidump written of each
// core fixture, lldb 15's of a live C process (testdata/minidumps; its
// glibc text zeroed), a hand-built one with a PDB70 module, and a bare
// header.
func FuzzParse(f *testing.F) {
	for _, tr := range fixtures(f) {
		f.Add(written(f, tr))
	}
	z, err := os.ReadFile(filepath.Join("..", "testdata", "minidumps", "x86_64", "c_threads.dmp.zst"))
	require.NoError(f, err)
	lldb, err := decodeZstd(z)
	require.NoError(f, err)
	f.Add(lldb)
	f.Add([]byte("MDMP\x93\xa7\x00\x00\x01\x00\x00\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := minidump.Parse(data, "fuzz.dmp")
		if err != nil {
			if d != nil {
				t.Fatal("Dump and error both returned")
			}
			return
		}
		c, err := d.Core()
		if err != nil {
			return
		}
		if len(c.Threads) == 0 {
			t.Fatal("a Core without threads")
		}
		var buf [64]byte
		for _, th := range c.Threads {
			sp, _ := th.Regs.Get(c.Arch.SP())
			c.Memory().ReadAt(buf[:], sp)
		}
		c.Objects()
	})
}

func decodeZstd(z []byte) ([]byte, error) {
	d, err := zstd.NewReader(nil)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.DecodeAll(z, nil)
}
