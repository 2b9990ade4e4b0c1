package tracefmt

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testFormat is a hand-written format file: fields of each kind and a
// print fmt set per case.
const testFormat = `name: probe
ID: 42
format:
	field:unsigned short common_type;	offset:0;	size:2;	signed:0;
	field:unsigned char common_flags;	offset:2;	size:1;	signed:0;
	field:unsigned char common_preempt_count;	offset:3;	size:1;	signed:0;
	field:int common_pid;	offset:4;	size:4;	signed:1;

	field:int neg;	offset:8;	size:4;	signed:1;
	field:unsigned long big;	offset:16;	size:8;	signed:0;
	field:char comm[8];	offset:24;	size:8;	signed:0;
	field:__data_loc char[] name;	offset:32;	size:4;	signed:0;
	field:u16 arr[4];	offset:36;	size:8;	signed:0;
	field:void * ptr;	offset:48;	size:8;	signed:0;
	field:short small;	offset:56;	size:2;	signed:1;

print fmt: `

// testRaw is a record for testFormat: neg=-5, big=0x1234abcd5678,
// comm="abc", name="hello" (dynamic, at 64), arr={1,2,3,4}, ptr=0,
// small=-2.
func testRaw() []byte {
	b := make([]byte, 72)
	le := binary.LittleEndian
	le.PutUint16(b, 42)
	le.PutUint32(b[4:], 77)
	le.PutUint32(b[8:], uint32(0xfffffffb))
	le.PutUint64(b[16:], 0x1234abcd5678)
	copy(b[24:], "abc")
	le.PutUint32(b[32:], 6<<16|64)
	for i := range 4 {
		le.PutUint16(b[36+2*i:], uint16(i+1))
	}
	le.PutUint16(b[56:], 0xfffe)
	b = append(b[:64], "hello\x00\x00\x00"...)
	return b
}

func compile(t *testing.T, printFmt string) *Format {
	t.Helper()
	f, err := parseFormat("test", []byte(testFormat+printFmt+"\n"), &Events{LongSize: 8, printk: map[uint64]string{0x1234abcd5678: "kernel string"}})
	require.NoError(t, err)
	return f
}

// TestPrintFmt checks the interpreter against what C's printf and
// libtraceevent print for the same arguments (worked out by hand).
func TestPrintFmt(t *testing.T) {
	cases := []struct{ name, fmt, want string }{
		{"signed int", `"%d %i", REC->neg, REC->neg`, "-5 -5"},
		{"unsigned of negative", `"%u", REC->neg`, "4294967291"},
		{"hex widths", `"0x%08lx 0x%08x %x", REC->big, REC->neg, REC->big`, "0x1234abcd5678 0xfffffffb abcd5678"},
		{"ld of 32-bit field is unsigned read", `"%ld", REC->neg`, "4294967291"},
		{"int cast masks", `"%ld", (int)REC->big`, "2882360952"},
		{"flags and width", `"[%5d][%-5d][%+d][% d][%05d]", REC->common_pid, REC->common_pid, REC->common_pid, REC->common_pid, REC->neg`, "[   77][77   ][+77][ 77][-0005]"},
		{"precision", `"[%.3d][%8.3x][%#x][%#o][%X]", REC->common_pid, REC->common_pid, REC->common_pid, REC->common_pid, REC->big`, "[077][     04d][0x4d][0115][ABCD5678]"},
		{"char", `"%c%c", 'x', REC->comm[1]`, "xb"},
		{"short", `"%hd %hu %hhx", REC->small, REC->small, REC->big`, "-2 65534 78"},
		{"char array string", `"[%s][%-6s][%6s][%.2s]", REC->comm, REC->comm, REC->comm, REC->comm`, "[abc][abc   ][   abc][ab]"},
		{"star width and precision", `"[%*d][%.*s]", 4, REC->common_pid, 2, REC->comm`, "[  77][ab]"},
		{"get_str", `"name=%s", __get_str(name)`, "name=hello"},
		{"dynamic length", `"%d", __get_dynamic_array_len(name)`, "6"},
		{"array index", `"%d,%d,%d", REC->arr[0], REC->arr[3], REC->arr[1] * 10`, "1,4,20"},
		{"long %s is a kernel pointer", `"%s", REC->big`, "kernel string"},
		{"null pointer", `"%p", REC->ptr`, "(nil)"},
		{"pointer", `"%p", REC->big`, "0x1234abcd5678"},
		{"pS without symbols", `"%pS", REC->big`, "0x1234abcd5678"},
		{"ternary string", `"%s%s", REC->neg < 0 ? "neg" : "pos", REC->common_pid == 77 ? "!" : "?"`, "pos!"},
		{"arithmetic", `"%d %d %d %d", (REC->common_pid + 3) / 8, REC->common_pid % 10, (1 << 4) | 3, !REC->ptr`, "10 7 19 1"},
		{"flags", `"%s", __print_flags(0x402, "|", { 0x2, "B" }, { 0x1, "A" })`, "B|0x400"},
		{"flags of zero", `"[%s]", __print_flags(0, "|", { 0x1, "A" })`, "[]"},
		{"symbolic", `"%s %s", __print_symbolic(REC->arr[1], { 1, "one" }, { 2, "two" }), __print_symbolic(9, { 1, "one" })`, "two 0x9"},
		{"enum name", `"%s=%d", SOME_ENUM, SOME_ENUM`, "SOME_ENUM=0"},
		{"escapes and percent", `"a\tb %% \"q\""`, "a\tb % \"q\""},
		{"concatenated strings", `"a=%d" " b", REC->common_pid`, "a=77 b"},
		{"REC in parens", `"%d", (REC)->common_pid`, "77"},
		{"empty format", `""`, ""},
	}
	raw := testRaw()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := compile(t, c.fmt)
			require.NoError(t, f.PrintErr)
			assert.Equal(t, c.want, string(f.Append(nil, raw)))
		})
	}
}

// TestFallback checks what is printed for a print fmt outside the
// supported set: the own fields as libtraceevent prints raw fields.
func TestFallback(t *testing.T) {
	for _, pf := range []string{
		`"%pI4", REC->big`,
		`"%d", __print_hex(REC->arr, 8)`,
		`"%d %d", REC->neg`,
		`"%d", ({ int x = 1; x; })`,
		`"%d", REC->nosuch`,
	} {
		f := compile(t, pf)
		require.Error(t, f.PrintErr, pf)
		var fe *Error
		require.True(t, errors.As(f.PrintErr, &fe), "%T", f.PrintErr)
		assert.Equal(t, "test:probe", fe.Event)
		assert.Equal(t, "neg=-5 big=0x1234abcd5678 comm=abc name=hello arr=ARRAY[01, 00, 02, 00, 03, 00, 04, 00] ptr=0x0 small=-2",
			string(f.Append(nil, testRaw())), pf)
	}
}

// TestFields checks the structured values.
func TestFields(t *testing.T) {
	f := compile(t, `"x"`)
	got := map[string]any{}
	var order []string
	for k, v := range f.Fields(testRaw()) {
		got[k] = v
		order = append(order, k)
	}
	assert.Equal(t, []string{"neg", "big", "comm", "name", "arr", "ptr", "small"}, order)
	assert.Equal(t, map[string]any{
		"neg": int64(-5), "big": uint64(0x1234abcd5678), "comm": "abc", "name": "hello",
		"arr": []uint64{1, 2, 3, 4}, "ptr": uint64(0), "small": int64(-2),
	}, got)
	// A short record reads as zeros and empties, never past its end.
	for _, v := range f.Fields(testRaw()[:20]) {
		_ = v
	}
	assert.Equal(t, "", string(compile(t, `"%s", __get_str(name)`).Append(nil, testRaw()[:30])))
}

// TestParseErrors damages the committed tracing data: errors name the
// offset; a damaged format file costs only that event.
func TestParseErrors(t *testing.T) {
	td := committedTracingData(t)
	ev, err := Parse(td)
	require.NoError(t, err)
	n := len(ev.Formats)
	_, err = Parse(td[:len(td)/2])
	var fe *Error
	require.ErrorAs(t, err, &fe)
	assert.Contains(t, err.Error(), "runs past the end")
	_, err = Parse(append([]byte("garbage!!!"), td[10:]...))
	require.ErrorAs(t, err, &fe)
	assert.Zero(t, fe.Offset)

	// Break the first event format's "field:" line after its header.
	i := bytes.Index(td, []byte("\tfield:int common_pid"))
	require.Greater(t, i, 0)
	b := append([]byte(nil), td...)
	copy(b[i:], "\tfield:int common_pid;\toffset:x;")
	ev, err = Parse(b)
	require.ErrorAs(t, err, &fe)
	require.NotNil(t, ev)
	assert.Equal(t, n-1, len(ev.Formats), "only the damaged format is lost")
	assert.Greater(t, fe.Offset, int64(i-200))
}

// committedTracingData extracts the tracing data of testdata/tp.data.
func committedTracingData(t testing.TB) []byte {
	b, err := os.ReadFile("testdata/tp.data")
	require.NoError(t, err)
	// perf.data file header: the features bitmap at 72, the feature table
	// after the data section; TRACING_DATA (bit 1) is its first entry.
	le := binary.LittleEndian
	dataEnd := le.Uint64(b[40:]) + le.Uint64(b[48:])
	require.NotZero(t, le.Uint64(b[72:])&2, "tp.data has no TRACING_DATA feature")
	off, size := le.Uint64(b[dataEnd:]), le.Uint64(b[dataEnd+8:])
	return b[off : off+size]
}

// TestAppendAllocs checks that formatting allocates nothing once dst has
// room.
func TestAppendAllocs(t *testing.T) {
	f := compile(t, `"%d %s %s %08lx %s %p", REC->neg, REC->comm, __get_str(name), REC->big, __print_flags(3, "|", {1, "A"}, {2, "B"}), REC->big`)
	raw := testRaw()
	dst := make([]byte, 0, 256)
	assert.Zero(t, testing.AllocsPerRun(100, func() { dst = f.Append(dst[:0], raw) }))
}

func BenchmarkAppendSchedSwitch(b *testing.B) {
	ev, err := Parse(committedTracingData(b))
	require.NoError(b, err)
	var f *Format
	for _, x := range ev.Formats {
		if x.Name == "sched_switch" {
			f = x
		}
	}
	require.NotNil(b, f)
	raw := make([]byte, 64)
	binary.LittleEndian.PutUint16(raw, uint16(f.ID))
	copy(raw[8:], "bash")
	copy(raw[40:], "kworker/0:1")
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst = f.Append(dst[:0], raw)
	}
}
