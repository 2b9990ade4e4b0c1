package perfdata

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"testing"
)

// The bounds tests craft files that claim huge lengths and check that the
// reader refuses them with an error naming the offset, without allocating
// anything near the claimed size.

// allocated returns the bytes f allocated.
func allocated(f func()) uint64 {
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	f()
	runtime.ReadMemStats(&m1)
	return m1.TotalAlloc - m0.TotalAlloc
}

const boundsAllocLimit = 16 << 20 // the test file is 37 KiB

func boundsFile(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/dwarf.data")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// openCrafted opens data, reads it to the end and returns the first error:
// from the header, from a feature section or from the records.
func openCrafted(data []byte) error {
	r, err := NewFileReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return err
	}
	if err := r.FeatureError(); err != nil {
		return err
	}
	for {
		if _, err := r.Next(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

func checkBound(t *testing.T, data []byte, wantOff int64, wantMsg string) {
	t.Helper()
	var err error
	n := allocated(func() { err = openCrafted(data) })
	if n > boundsAllocLimit {
		t.Errorf("allocated %d bytes", n)
	}
	var fe *FormatError
	if !errors.As(err, &fe) {
		t.Fatalf("error %v (%T); want a *FormatError", err, err)
	}
	if fe.Offset != wantOff || !strings.Contains(err.Error(), wantMsg) || !strings.Contains(err.Error(), fmt.Sprintf("offset %#x", wantOff)) {
		t.Errorf("error %q; want offset %#x and %q", err, wantOff, wantMsg)
	}
}

func featureTable(data []byte) int64 {
	dataOff, dataLen := binary.LittleEndian.Uint64(data[40:]), binary.LittleEndian.Uint64(data[48:])
	return int64(dataOff + dataLen)
}

func TestBoundFeatureSection1TB(t *testing.T) {
	data := boundsFile(t)
	table := featureTable(data)
	binary.LittleEndian.PutUint64(data[table+8:], 1<<40) // the first feature's size
	checkBound(t, data, table, "exceeds file size")
}

func TestBoundFeatureTableOffset(t *testing.T) {
	data := boundsFile(t)
	binary.LittleEndian.PutUint64(data[48:], 1<<40) // data size: the table lies past the end
	var err error
	if n := allocated(func() { err = openCrafted(data) }); n > boundsAllocLimit {
		t.Errorf("allocated %d bytes", n)
	}
	if err == nil || !strings.Contains(err.Error(), "offset 0x") {
		t.Errorf("error %v; want one naming an offset", err)
	}
}

func TestBoundStringLength(t *testing.T) {
	data := boundsFile(t)
	table := featureTable(data)
	// Find the HOSTNAME section (feature 2), the first string feature.
	var feat [4]uint64
	for i := range feat {
		feat[i] = binary.LittleEndian.Uint64(data[72+8*i:])
	}
	idx := 0
	for f := 0; f < int(FeatHostname); f++ {
		if feat[f/64]&(1<<(f%64)) != 0 {
			idx++
		}
	}
	if feat[0]&(1<<FeatHostname) == 0 {
		t.Skip("no HOSTNAME feature")
	}
	so := binary.LittleEndian.Uint64(data[table+int64(16*idx):])
	binary.LittleEndian.PutUint32(data[so:], 0xffffffff)
	checkBound(t, data, int64(so), "too short")
}

func TestBoundIDsArray(t *testing.T) {
	data := boundsFile(t)
	attrSize := binary.LittleEndian.Uint64(data[16:])
	attrsOff := binary.LittleEndian.Uint64(data[24:])
	at := int64(attrsOff + attrSize - 8) // the first attr's ids size
	binary.LittleEndian.PutUint64(data[at:], 0xfffffffffffffff8)
	checkBound(t, data, at-8, "ids section")
}

func TestBoundAttrSize(t *testing.T) {
	data := boundsFile(t)
	binary.LittleEndian.PutUint64(data[16:], 1<<32)
	checkBound(t, data, 16, "attr size")
}

func TestBoundAttrsSection(t *testing.T) {
	data := boundsFile(t)
	attrSize := binary.LittleEndian.Uint64(data[16:])
	binary.LittleEndian.PutUint64(data[32:], attrSize*(1<<30)) // 2^30 attrs
	var err error
	if n := allocated(func() { err = openCrafted(data) }); n > boundsAllocLimit {
		t.Errorf("allocated %d bytes", n)
	}
	if err == nil || !strings.Contains(err.Error(), "offset 0x") {
		t.Errorf("error %v; want one naming an offset", err)
	}
}
