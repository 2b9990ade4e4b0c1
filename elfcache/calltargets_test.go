package elfcache

import (
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"

	"github.com/ustack/ustack/internal/testfiles"
)

// TestARM64CallTargets: an arm64 object's call targets are the targets of
// its bl instructions as objdump disassembles them, all of them and no
// other, and callTargetBefore gives the nearest at or before an address.
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
		slices.Sort(want)
		want = slices.Compact(want)
		if len(want) < 3 {
			t.Fatalf("%s: objdump shows %d bl targets", name, len(want))
		}
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
