package elfcache

import (
	"debug/elf"
	"encoding/binary"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/ustack/ustack/internal/testfiles"
)

// TestARM64CallTargets: an arm64 object's call targets are the targets of
// its bl instructions as objdump disassembles them and the functions its
// init and fini arrays hold, all of them and no other, and
// callTargetBefore gives the nearest at or before an address.
func TestARM64CallTargets(t *testing.T) {
	needTool(t, "aarch64-linux-gnu-objdump")
	testfiles.MustUnpack(t, testfiles.Dir())
	for _, name := range []string{"a64_chain_O2_nofp", "a64_plt_lazy"} {
		path := filepath.Join(testfiles.Dir(), "objects", "aarch64", name)
		// "  400614:	bl	400580 <leaf>"
		bl := regexp.MustCompile(`(?m)^\s*[0-9a-f]+:\s+[0-9a-f]{8}\s+bl\s+([0-9a-f]+)\b`)
		var want []uint64
		for _, m := range bl.FindAllStringSubmatch(run(t, "aarch64-linux-gnu-objdump", "-d", path), -1) {
			v, err := strconv.ParseUint(m[1], 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, v)
		}
		if len(want) < 3 {
			t.Fatalf("%s: objdump shows %d bl targets", name, len(want))
		}
		// And the functions the init and fini arrays hold (crtstuff's
		// frame_dummy and __do_global_dtors_aux), as debug/elf reads them.
		ef, err := elf.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range ef.Sections {
			if s.Type != elf.SHT_INIT_ARRAY && s.Type != elf.SHT_FINI_ARRAY {
				continue
			}
			b, err := s.Data()
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+8 <= len(b); i += 8 {
				want = append(want, binary.LittleEndian.Uint64(b[i:]))
			}
		}
		ef.Close()
		slices.Sort(want)
		want = slices.Compact(want)
		o := mustOpen(t, path, Options{})
		o.targetOnce.Do(o.findCallTargets)
		if !slices.Equal(o.callTargets, want) {
			t.Fatalf("%s: call targets %#x; objdump's bl targets %#x", name, o.callTargets, want)
		}
		for _, w := range want {
			if !o.CallTarget(w) || o.CallTarget(w+4) && !slices.Contains(want, w+4) {
				t.Errorf("%s: CallTarget wrong at %#x", name, w)
			}
			if got, ok := o.callTargetBefore(w + 2); !ok || got != w {
				t.Errorf("%s: callTargetBefore(%#x) = %#x, %v; want %#x", name, w+2, got, ok, w)
			}
		}
	}
}

// TestJumpSources: every direct jmp and jcc with a 32-bit displacement
// that objdump disassembles in an x86_64 object (glibc's libc.so.6 and
// ld.so) is among JumpSources of its target, at its address; the
// raw scan may add look-alikes, never lose one.
func TestJumpSources(t *testing.T) {
	needTool(t, "objdump")
	testfiles.MustUnpack(t, testfiles.Dir())
	for _, name := range []string{"libc.so.6", "ld-linux-x86-64.so.2"} {
		path := filepath.Join(testfiles.Dir(), "objects", "x86_64", name)
		// "   2a1e4:	0f 85 a6 00 00 00    	jne    2a290 <...>"
		// "   2a1f0:	e9 1b ff ff ff       	jmp    2a110 <...>"
		re := regexp.MustCompile(`(?m)^\s*([0-9a-f]+):\s+((?:e9|0f 8[0-9a-f])(?: [0-9a-f]{2}){4})\s+j[a-z]+\s+([0-9a-f]+)\b`)
		out := run(t, "objdump", "-d", path)
		ms := re.FindAllStringSubmatch(out, -1)
		if len(ms) < 10 {
			t.Fatalf("%s: objdump shows %d rel32 jumps", name, len(ms))
		}
		o := mustOpen(t, path, Options{})
		var got []uint64
		for _, m := range ms {
			src, err1 := strconv.ParseUint(m[1], 16, 64)
			dst, err2 := strconv.ParseUint(m[3], 16, 64)
			if err1 != nil || err2 != nil {
				t.Fatal(err1, err2)
			}
			got = o.JumpSources(dst, got[:0])
			if !slices.Contains(got, src) {
				t.Fatalf("%s: the jump at %#x to %#x is not among its target's sources %#x", name, src, dst, got)
			}
		}
		t.Logf("%s: %d jumps objdump shows, %d in the table", name, len(ms), len(o.jumps))
	}
}
