package main

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestAsyncWriterOrder writes pieces of every size, across block edges,
// and checks that what reaches the writer is what was given, in order.
func TestAsyncWriterOrder(t *testing.T) {
	var want, got bytes.Buffer
	a := newAsyncWriter(&got)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; want.Len() < 5*asyncBlock; i++ {
		p := make([]byte, rng.IntN(3*asyncBlock/2))
		for k := range p {
			p[k] = byte(i + k)
		}
		want.Write(p)
		if n, err := a.Write(p); n != len(p) || err != nil {
			t.Fatalf("Write(%d bytes) = %d, %v", len(p), n, err)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("wrote %d bytes, %d reached the writer, or not in order", want.Len(), got.Len())
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

type failAfter struct {
	n   int
	err error
}

func (f *failAfter) Write(p []byte) (int, error) {
	if f.n <= 0 {
		return 0, f.err
	}
	f.n--
	return len(p), nil
}

// TestAsyncWriterError checks that a write error reaches the Writes after
// it and Close, and that nothing more is written.
func TestAsyncWriterError(t *testing.T) {
	bad := errors.New("disk full")
	f := &failAfter{n: 1, err: bad}
	a := newAsyncWriter(f)
	block := make([]byte, asyncBlock)
	var werr error
	for i := 0; i < 100 && werr == nil; i++ {
		_, werr = a.Write(block)
	}
	if !errors.Is(werr, bad) {
		t.Errorf("100 blocks written past the failing one, last Write error %v", werr)
	}
	if err := a.Close(); !errors.Is(err, bad) {
		t.Errorf("Close = %v, want %v", err, bad)
	}
	if err := a.Close(); !errors.Is(err, bad) {
		t.Errorf("second Close = %v, want %v", err, bad)
	}
}
