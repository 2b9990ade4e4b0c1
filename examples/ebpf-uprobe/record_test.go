package main

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/cilium/ebpf/ringbuf"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/internal/testprog"
)

var record = flag.Bool("record", false, "record testdata/bench anew from a live run of the static fixture (needs root)")

// The recorded events: testdata/bench/events.gz holds ring buffer records
// as the BPF program wrote them (each a little-endian uint32 length, then
// the header and the stack bytes it copied), maps the process's
// /proc/PID/maps at its first event with the fixture's path written as
// "chain", and chain the fixture itself, linked statically so that the
// events need no other object.
const benchDir = "testdata/bench"

// TestRecordBenchData rewrites testdata/bench with -record: the static
// fixture run under a uprobe on leaf and syscalls:sys_enter_write, 8 KiB
// of stack per event.
func TestRecordBenchData(t *testing.T) {
	if !*record {
		t.Skip("run with -record (as root) to record testdata/bench anew")
	}
	needLive(t)
	src, err := os.ReadFile("testdata/chain.c")
	require.NoError(t, err)
	bin := testprog.Build(t, t.TempDir(), "chain.c", string(src), "-O2", "-g", "-static")
	probes, err := parseProbes([]string{"u:" + bin + ":leaf", "syscalls:sys_enter_write"})
	require.NoError(t, err)

	cmd, err := startStopped([]string{bin, "16"})
	require.NoError(t, err)
	tr, err := newTracer(probes, cmd.Pid(), 8192)
	if err != nil {
		cmd.kill()
		t.Fatal(err)
	}
	defer tr.Close()
	require.NoError(t, cmd.resume())
	go func() {
		cmd.cmd.Wait()
		tr.detach()
		tr.rd.Flush()
	}()

	var events bytes.Buffer
	var maps []byte
	var rec ringbuf.Record
	n := 0
	for {
		err := tr.rd.ReadInto(&rec)
		if errors.Is(err, ringbuf.ErrFlushed) {
			break
		}
		require.NoError(t, err)
		var e event
		require.NoError(t, decodeEvent(rec.RawSample, &e))
		if maps == nil {
			maps, err = os.ReadFile("/proc/" + strconv.Itoa(int(e.Pid)) + "/maps")
			require.NoError(t, err)
		}
		b := rec.RawSample[:eventHeaderSize+len(e.Stack)]
		events.Write(binary.LittleEndian.AppendUint32(nil, uint32(len(b))))
		events.Write(b)
		n++
	}
	require.Equal(t, 32, n, "events: 16 at leaf and 16 at write(2)")
	require.Zero(t, tr.lost())

	var gz bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	zw.Write(events.Bytes())
	require.NoError(t, zw.Close())
	require.NoError(t, os.MkdirAll(benchDir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(benchDir, "events.gz"), gz.Bytes(), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(benchDir, "maps"), []byte(strings.ReplaceAll(string(maps), bin, "chain")), 0o644))
	exe, err := os.ReadFile(bin)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(benchDir, "chain"), exe, 0o755))
	t.Logf("recorded %d events (%d bytes, %d gzipped)", n, events.Len(), gz.Len())
}

// TestLiveLost: events the ring buffer has no room for are counted, not
// dropped silently. Nothing reads the ring while the fixture calls leaf
// 400 times with the largest stack copy (about 70 KiB a record, some 120
// of which fit in its 8 MiB), so every event is either in the ring or
// counted lost.
func TestLiveLost(t *testing.T) {
	needLive(t)
	lt := buildLive(t)
	probes, err := parseProbes([]string{"u:" + lt.fixture + ":leaf"})
	require.NoError(t, err)
	cmd, err := startStopped([]string{lt.fixture, "400"})
	require.NoError(t, err)
	tr, err := newTracer(probes, cmd.Pid(), maxStackSize)
	if err != nil {
		cmd.kill()
		t.Fatal(err)
	}
	defer tr.Close()
	require.NoError(t, cmd.resume())
	require.NoError(t, cmd.cmd.Wait())
	tr.detach()
	tr.rd.Flush()
	var rec ringbuf.Record
	read := 0
	for {
		err := tr.rd.ReadInto(&rec)
		if errors.Is(err, ringbuf.ErrFlushed) {
			break
		}
		require.NoError(t, err)
		read++
	}
	lost := tr.lost()
	t.Logf("%d events read, %d lost", read, lost)
	assert.Equal(t, uint64(400), uint64(read)+lost, "events read and lost")
	assert.Greater(t, lost, uint64(0))
}
