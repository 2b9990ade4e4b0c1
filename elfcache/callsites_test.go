package elfcache

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// cTailCalls has direct calls, tail calls, a chain of them, two tail calls
// from one function, an indirect call and an indirect tail call.
const cTailCalls = `#include <string.h>
volatile int sink;
__attribute__((noipa)) void boom(char *p) { strcpy(p, "x"); }
__attribute__((noipa)) void x(int n) { sink = n; boom(0); }
__attribute__((noipa)) void y(int n) { sink = -n; boom(0); }
__attribute__((noipa)) void b(int n) { if (n > 5) x(n); else y(n); }
__attribute__((noipa)) void a(int n) { sink = n; b(n); }
void (*volatile fp)(int) = a;
__attribute__((noipa)) void ind(int n) { sink = n; fp(n); }
int main(int c, char **v) { a(c); fp(c); ind(c); sink = 0; return 0; }
`

// readelfDIE is one entry of readelf --debug-dump=info.
type readelfDIE struct {
	off, depth int
	tag        string
	attrs      map[string]string
}

var (
	readelfEntry = regexp.MustCompile(`^\s*<(\d+)><([0-9a-f]+)>: Abbrev Number: \d+ \((DW_TAG_\w+)\)`)
	readelfAttr  = regexp.MustCompile(`^\s*<[0-9a-f]+>\s+(DW_AT_\w+)\s*:\s*(.*)$`)
)

// readelfDIEs parses readelf's dump of .debug_info.
func readelfDIEs(t *testing.T, path string) []readelfDIE {
	t.Helper()
	var dies []readelfDIE
	for _, line := range strings.Split(run(t, "readelf", "--debug-dump=info", path), "\n") {
		if m := readelfEntry.FindStringSubmatch(line); m != nil {
			d := readelfDIE{tag: m[3], attrs: map[string]string{}}
			depth, err := strconv.Atoi(m[1])
			require.NoError(t, err)
			d.depth, d.off = depth, int(hexU(t, m[2]))
			dies = append(dies, d)
			continue
		}
		if m := readelfAttr.FindStringSubmatch(line); m != nil && len(dies) > 0 {
			dies[len(dies)-1].attrs[m[1]] = strings.TrimSpace(m[2])
		}
	}
	return dies
}

// lastWord returns the last field of a readelf attribute value ("(indirect
// string, offset: 0x75): boom" is boom, "<0xe8>" is <0xe8>).
func lastWord(s string) string {
	f := strings.Fields(s)
	if len(f) == 0 {
		return ""
	}
	return f[len(f)-1]
}

// TestCallSitesVsReadelf builds cTailCalls with DWARF 4 (GNU call sites)
// and 5 and checks every call site readelf shows against CallSiteAt: its
// return pc, whether it is a tail call, the function it is in (the
// enclosing subprogram's DW_AT_low_pc) and its target (the low pc of the
// subprogram its origin names, or none for an indirect call); and each
// function's tail call sites against TailCallSites, its entry against
// FunctionEntry and its name against FunctionNamed (nm's address).
func TestCallSitesVsReadelf(t *testing.T) {
	needTool(t, "gcc")
	needTool(t, "readelf")
	for _, v := range []string{"4", "5"} {
		t.Run("dwarf"+v, func(t *testing.T) {
			dir := t.TempDir()
			src := filepath.Join(dir, "p.c")
			require.NoError(t, os.WriteFile(src, []byte(cTailCalls), 0o644))
			bin := filepath.Join(dir, "p")
			run(t, "gcc", "-O2", "-g", "-gdwarf-"+v, "-o", bin, src)
			o := mustOpen(t, bin, Options{})
			defer o.Close()
			dies := readelfDIEs(t, bin)
			byOff := map[int]*readelfDIE{}
			for i := range dies {
				byOff[dies[i].off] = &dies[i]
			}
			var fnAt []uint64 // enclosing subprogram's low pc by depth
			tails := map[uint64][]uint64{}
			n, nTail, nIndirect := 0, 0, 0
			for _, d := range dies {
				for len(fnAt) > d.depth {
					fnAt = fnAt[:len(fnAt)-1]
				}
				fn := uint64(0)
				if len(fnAt) > 0 {
					fn = fnAt[len(fnAt)-1]
				}
				switch d.tag {
				case "DW_TAG_subprogram":
					if lo, ok := d.attrs["DW_AT_low_pc"]; ok {
						fn = hexU(t, lo)
						name := lastWord(d.attrs["DW_AT_name"])
						e, ok := o.FunctionEntry(fn + 1)
						assert.True(t, ok && e == fn, "FunctionEntry inside %s = %#x, %v; want %#x", name, e, ok, fn)
					}
				case "DW_TAG_call_site", "DW_TAG_GNU_call_site":
					ret := d.attrs["DW_AT_call_return_pc"]
					if ret == "" {
						ret = d.attrs["DW_AT_low_pc"]
					}
					r := hexU(t, ret)
					_, tail := d.attrs["DW_AT_call_tail_call"]
					if _, ok := d.attrs["DW_AT_GNU_tail_call"]; ok {
						tail = true
					}
					var target uint64
					origin := d.attrs["DW_AT_call_origin"]
					if origin == "" {
						origin = d.attrs["DW_AT_abstract_origin"]
					}
					if origin != "" {
						od := byOff[int(hexU(t, strings.Trim(origin, "<>")))]
						require.NotNil(t, od, "origin %s", origin)
						target = hexU(t, od.attrs["DW_AT_low_pc"])
					} else {
						nIndirect++
					}
					cs, ok := o.CallSiteAt(r)
					require.True(t, ok, "call site returning to %#x", r)
					assert.Equal(t, CallSite{ReturnPC: r, Func: fn, Target: target, Tail: tail}, cs)
					n++
					if tail {
						nTail++
						tails[fn] = append(tails[fn], r)
					}
				}
				fnAt = append(fnAt, fn)
			}
			assert.GreaterOrEqual(t, n, 8, "call sites readelf shows")
			assert.GreaterOrEqual(t, nTail, 6, "tail call sites")
			assert.GreaterOrEqual(t, nIndirect, 2, "indirect call sites")
			for fn, rets := range tails {
				var got []uint64
				for _, s := range o.TailCallSites(fn) {
					got = append(got, s.ReturnPC)
				}
				assert.ElementsMatch(t, rets, got, "tail call sites of %#x", fn)
			}
			_, ok := o.CallSiteAt(1)
			assert.False(t, ok)
			for _, s := range nmSyms(t, "nm", bin) {
				if s.name == "boom" || s.name == "a" || s.name == "b" || s.name == "main" {
					e, ok := o.FunctionNamed(s.name)
					assert.True(t, ok && e == s.addr, "FunctionNamed(%s) = %#x, %v; nm says %#x", s.name, e, ok, s.addr)
				}
			}
			assert.NoError(t, o.CallSitesError())
		})
	}
}

// TestCallSitesAllocationFree checks that queries into a read unit
// allocate nothing.
func TestCallSitesAllocationFree(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	require.NoError(t, os.WriteFile(src, []byte(cTailCalls), 0o644))
	bin := filepath.Join(dir, "p")
	run(t, "gcc", "-O2", "-g", "-o", bin, src)
	o := mustOpen(t, bin, Options{})
	defer o.Close()
	a, ok := o.FunctionNamed("a")
	require.True(t, ok)
	sites := o.TailCallSites(a)
	require.NotEmpty(t, sites)
	allocs := testing.AllocsPerRun(100, func() {
		o.CallSiteAt(sites[0].ReturnPC)
		o.TailCallSites(a)
		o.FunctionEntry(a + 1)
		o.FunctionNamed("boom")
	})
	assert.Zero(t, allocs)
}

// BenchmarkCallSiteAt looks up the call sites of glibc (with its debug
// file where installed) at the return addresses of its call sites.
func BenchmarkCallSiteAt(b *testing.B) {
	needFile(b, libcAMD64)
	o := mustOpen(b, libcAMD64, Options{})
	defer o.Close()
	x := o.callSiteIndex()
	if x == nil {
		b.Skip("glibc has no DWARF here")
	}
	var rets []uint64
	for i := range x.units {
		for _, s := range x.unit(int32(i)).sites {
			rets = append(rets, s.ReturnPC)
		}
	}
	if len(rets) == 0 {
		b.Skip("glibc's DWARF has no call sites")
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, ok := o.CallSiteAt(rets[i%len(rets)]); !ok {
			b.Fatal("call site not found")
		}
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "lookups/s")
}

// FuzzCallSites damages the DWARF sections of cTailCalls built with DWARF
// 4 and 5 (each input names a section, an offset and bytes to write there)
// and checks that the call-site queries neither panic nor hang.
func FuzzCallSites(f *testing.F) {
	d := newDWARFDamage(f, "p.c", cTailCalls, func(o *Object) []uint64 {
		var addrs []uint64
		for _, s := range o.Symbols() {
			addrs = append(addrs, s.Addr, s.Addr+1, s.Addr+s.Size/2)
			for _, c := range o.TailCallSites(s.Addr) {
				addrs = append(addrs, c.ReturnPC)
			}
		}
		return addrs
	})
	for k := 0; k < 8; k++ {
		f.Add(uint8(k&1), uint8(k), uint32(k*53), []byte{0xff, 0x7f, 0x80, 0})
	}
	f.Add(uint8(1), uint8(0), uint32(0), []byte{0x48, 0x00, 0x7d})
	f.Fuzz(func(t *testing.T, which, secIdx uint8, off uint32, patch []byte) {
		defer failIfSlow(10 * time.Second)()
		o, addrs, ok := d.open(which, secIdx, off, patch)
		if !ok {
			return
		}
		defer o.Close()
		for _, a := range addrs {
			if cs, ok := o.CallSiteAt(a); ok && cs.ReturnPC != a {
				t.Fatalf("CallSiteAt(%#x) returned the call site of %#x", a, cs.ReturnPC)
			}
			o.TailCallSites(a)
			o.FunctionEntry(a)
		}
		o.FunctionNamed("boom")
		if err := o.CallSitesError(); err != nil && !strings.Contains(err.Error(), "fuzz") {
			t.Fatalf("error does not name the file: %v", err)
		}
	})
}

// TestCallSitesSplitDWARF builds cTailCalls with and without
// -gsplit-dwarf (the same code, objdump says) and checks that the split
// build's call sites, read from its .dwo, are the plain build's (which
// TestCallSitesVsReadelf checks against readelf).
func TestCallSitesSplitDWARF(t *testing.T) {
	needTool(t, "gcc")
	needTool(t, "objdump")
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	require.NoError(t, os.WriteFile(src, []byte(cTailCalls), 0o644))
	plain, split := filepath.Join(dir, "p"), filepath.Join(dir, "ps")
	run(t, "gcc", "-O2", "-g", "-o", plain, src)
	testprog.Tool(t, dir, "gcc", "-O2", "-g", "-gsplit-dwarf", "-o", split, src)
	code := func(p string) string {
		out := run(t, "objdump", "-d", p)
		return out[strings.Index(out, "Disassembly"):]
	}
	require.Equal(t, code(plain), code(split), "the split build's code is the plain build's")
	po, so := mustOpen(t, plain, Options{}), mustOpen(t, split, Options{})
	defer po.Close()
	defer so.Close()
	x := po.callSiteIndex()
	require.NotNil(t, x)
	n := 0
	for i := range x.units {
		for _, want := range x.unit(int32(i)).sites {
			got, ok := so.CallSiteAt(want.ReturnPC)
			assert.True(t, ok, "split: call site returning to %#x", want.ReturnPC)
			assert.Equal(t, want, got)
			n++
		}
		for _, f := range x.unit(int32(i)).funcs {
			e, ok := so.FunctionEntry(f.lo)
			assert.True(t, ok && e == f.entry, "split: FunctionEntry(%#x)", f.lo)
		}
	}
	assert.GreaterOrEqual(t, n, 8)
	assert.NoError(t, so.CallSitesError())
}

// TestCallSitesDWZ tail-calls puts, whose declaration dwz -m moves into a
// supplementary file shared by two copies of the program (readelf shows
// DW_AT_call_origin <alt 0x...>): the call site's target is then known by
// the declaration's name there, as in the plain build.
func TestCallSitesDWZ(t *testing.T) {
	needTool(t, "gcc")
	needTool(t, "dwz")
	needTool(t, "readelf")
	dir := t.TempDir()
	src := filepath.Join(dir, "q.c")
	require.NoError(t, os.WriteFile(src, []byte(`#include <stdio.h>
volatile int sink;
__attribute__((noipa)) void say(const char *s) { sink = 1; puts(s); }
int main(int c, char **v) { say(v[0]); sink = 0; return 0; }
`), 0o644))
	plain := filepath.Join(dir, "q")
	run(t, "gcc", "-O2", "-g", "-o", plain, src)
	var copies []string
	for _, n := range []string{"q1", "q2"} {
		data, err := os.ReadFile(plain)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), data, 0o755))
		copies = append(copies, filepath.Join(dir, n))
	}
	common := filepath.Join(dir, "common.dwz")
	testprog.Tool(t, dir, "dwz", "-m", common, "-M", common, copies[0], copies[1])
	info := run(t, "readelf", "--debug-dump=info", copies[0])
	m := regexp.MustCompile(`DW_AT_call_return_pc: (0x[0-9a-f]+)\s+<[0-9a-f]+>\s+DW_AT_call_tail_call: 1\s+<[0-9a-f]+>\s+DW_AT_call_origin : <alt 0x[0-9a-f]+>`).FindStringSubmatch(info)
	require.NotNil(t, m, "a tail call whose origin is in the supplementary file:\n%s", info)
	ret := hexU(t, m[1])
	for _, p := range []string{plain, copies[0]} {
		o := mustOpen(t, p, Options{})
		cs, ok := o.CallSiteAt(ret)
		require.True(t, ok, "%s: call site returning to %#x", p, ret)
		assert.Equal(t, "puts", cs.TargetName, p)
		assert.True(t, cs.Tail, p)
		say, ok := o.FunctionNamed("say")
		assert.True(t, ok && cs.Func == say, "%s: in say", p)
		assert.NoError(t, o.CallSitesError())
		o.Close()
	}
}

// TestConstantAddr: only an expression that is exactly DW_OP_addr ADDR is
// a constant call target.
func TestConstantAddr(t *testing.T) {
	for _, c := range []struct {
		expr  []byte
		asize int
		want  uint64
	}{
		{[]byte{0x03, 0x40, 0x11, 0, 0, 0, 0, 0, 0}, 8, 0x1140},
		{[]byte{0x03, 0x40, 0x11, 0, 0}, 4, 0x1140},
		{[]byte{0x03, 0x40, 0x11, 0, 0}, 8, 0},                   // short
		{[]byte{0x03, 0x40, 0x11, 0, 0, 0, 0, 0, 0, 0x06}, 8, 0}, // then DW_OP_deref
		{[]byte{0x73, 0x00}, 8, 0},                               // DW_OP_breg3 0: a register
		{nil, 8, 0},
	} {
		assert.Equal(t, c.want, constantAddr(c.expr, c.asize), "% x", c.expr)
	}
}
