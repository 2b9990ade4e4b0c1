package report

import (
	"fmt"
	"io"
	"testing"
)

// TestTextWriterFormat checks one sample against lines perf script 6.1
// printed for the same fields (comm tid time event, then one frame line
// per frame, a blank line), and that writing it allocates nothing once the
// writer's buffers have grown. perf labels the last, physical, frame
// "(inlined)"; ustack names its object (docs/PERF_DIFFERENCES.md).
func TestTextWriterFormat(t *testing.T) {
	s := &Sample{Comm: "busy", Tid: 28425, Time: 1348328971123, Event: "syscalls:sys_enter_close",
		Frames: []Frame{
			{Addr: 0xffffffff8225a6c1, Offset: 0xffffffff8225a6c1, Module: "[kernel.kallsyms]", Symbol: "do_syscall_64", SymOff: 0x71, Kernel: true},
			{Offset: 0x11a8, Module: "/tmp/ps/busy", Symbol: "mid", SymOff: 8},
			{Offset: 0x27304, Module: "/usr/lib/x86_64-linux-gnu/libc.so.6", Symbol: "__libc_start_main_impl", SymOff: 0x84},
		}}
	var out []byte
	w := NewTextWriter(writerFunc(func(p []byte) (int, error) { out = append(out, p...); return len(p), nil }), 24, false)
	if err := w.Write(s); err != nil {
		t.Fatal(err)
	}
	w.Flush()
	want := "busy 28425  1348.328971: syscalls:sys_enter_close: \n" +
		"\tffffffff8225a6c1 do_syscall_64+0x71 ([kernel.kallsyms])\n" +
		"\t            11a8 mid+0x8 (/tmp/ps/busy)\n" +
		"\t           27304 __libc_start_main_impl+0x84 (/usr/lib/x86_64-linux-gnu/libc.so.6)\n\n"
	if string(out) != want {
		t.Errorf("got\n%q\nwant\n%q", out, want)
	}
	w = NewTextWriter(io.Discard, 24, false)
	if n := testing.AllocsPerRun(100, func() { w.Write(s) }); n != 0 {
		t.Errorf("Write allocated %.0f times per sample", n)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestAppendUintPadded checks the padded numbers of the text format against
// fmt's: the hexadecimal addresses (appendHex16, space or zero padded) at
// every digit count, and the decimal fields.
func TestAppendUintPadded(t *testing.T) {
	vals := []uint64{0, 1, 9, 0xa, 0xf, 0x10, 0x11a8, 0x7fffffffe000, 0xffffffff8225a6c1, 1<<63 - 1, 1 << 63, ^uint64(0)}
	for k := 0; k < 64; k++ {
		vals = append(vals, 1<<k, 1<<k-1, 0x0123456789abcdef>>k)
	}
	prefix := []byte("x:")
	for _, v := range vals {
		for _, c := range []struct {
			base, width int
			pad         byte
			format      string
		}{{16, 16, ' ', "%16x"}, {16, 16, '0', "%016x"}, {10, 10, ' ', "%10d"}, {10, 6, '0', "%06d"}, {16, 8, ' ', "%8x"}} {
			got := string(appendUintPadded(prefix[:2:2], v, c.base, c.width, c.pad))
			if want := "x:" + fmt.Sprintf(c.format, v); got != want {
				t.Errorf("appendUintPadded(%#x, %d, %d, %q) = %q, want %q", v, c.base, c.width, c.pad, got, want)
			}
		}
	}
}
