package unwinder

import (
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/internal/testfiles"
)

// committedObjects returns the ELF files under testdata/objects: every object
// the fixtures map (the packed ones unpacked), and a few more.
func committedObjects(t *testing.T) []string {
	testfiles.MustUnpack(t, testfiles.Dir())
	root := filepath.Join(testfiles.Dir(), "objects")
	var paths []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		if f, err := elf.Open(p); err == nil {
			f.Close()
			paths = append(paths, p)
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, paths, "no objects under %s", root)
	return paths
}

// forEachRow calls fn with every CFI row of obj's executable sections, walking
// each section from its start: a row's End is the next row's start, and
// addresses without CFI are stepped over.
func forEachRow(t *testing.T, obj *elfcache.Object, fn func(row *cfi.Row)) {
	step := uint64(1)
	if obj.Arch() == arch.ARM64 {
		step = 4
	}
	var row cfi.Row
	for _, s := range obj.Sections() {
		if s.Flags&elf.SHF_EXECINSTR == 0 || s.Flags&elf.SHF_ALLOC == 0 || s.Type == elf.SHT_NOBITS {
			continue
		}
		for addr := s.Addr; addr < s.Addr+s.Size; {
			err := obj.FindRow(addr, &row)
			if err != nil {
				// No row, or a Go stack switch's answer (no row
				// describes the caller: TestGoStackSwitches).
				if !errors.Is(err, cfi.ErrNoFDE) && !errors.Is(err, cfi.ErrStackSwitch) {
					t.Errorf("%s: row at %#x: %v", obj.Path(), addr, err)
				}
				addr += step
				continue
			}
			fn(&row)
			addr = max(row.End, addr+step)
		}
	}
}

// agree applies the compact form f of row e.row and the general step to each
// state and checks that they agree; it returns whether the fast path
// deferred to the general step for any of them.
func agree(t *testing.T, c *Cache, u *Unwinder, e *rowEntry, f *fastRow, states []agreementState, path string) (deferred bool, restored int) {
	t.Helper()
	a := u.arch
	row := &e.row
	pacMask := uint64(0)
	if a == arch.ARM64 {
		pacMask = u.opts.PACMask
	}
	for i := range states {
		s := &states[i]
		fastRegs := s.regs
		c.win.set(&s.stack, 0)
		cfa, pc, newSP, known, stop := applyCompact(f, &fastRegs, &c.win, pacMask)
		fastRestored := c.win.restored
		var st stepResult
		st.stop = stopNone
		cur := s.regs
		var next arch.Regs
		u.applyRow(c, e, &cur, &next, &st)
		where := func() string {
			return fmt.Sprintf("%s %s row [%#x, %#x)", path, s.name, row.Start, row.End)
		}
		if stop == stopGeneral {
			deferred = true
			continue // the loop runs the general step, checked on its own
		}
		require.Equal(t, st.stop, stop, "%s: stop reason", where())
		if stop != stopNone {
			continue
		}
		require.Equal(t, st.cfa, cfa, "%s: CFA", where())
		wantPC, pcOK := next.Get(a.PC())
		wantPC = a.StripPAC(wantPC, pacMask)
		wantSP, spOK := next.Get(a.SP())
		require.Equal(t, next.KnownMask(), known, "%s: known registers", where())
		require.Equal(t, next.KnownMask(), fastRegs.KnownMask(), "%s: known registers in place", where())
		if pcOK {
			require.Equal(t, wantPC, pc, "%s: caller's PC", where())
		}
		if spOK {
			require.Equal(t, wantSP, newSP, "%s: caller's SP", where())
		}
		for r := 0; r < arch.MaxRegs; r++ {
			want, ok := next.Get(r)
			if r == a.PC() {
				want = a.StripPAC(want, pacMask)
			}
			got, _ := fastRegs.Get(r)
			if ok {
				require.Equal(t, want, got, "%s: register %s", where(), a.RegName(r))
			}
		}
		require.Equal(t, st.raFromRegister, f.flags&fastRAFromReg != 0 || fastRestored>>f.raReg&1 != 0, "%s: return address from a register", where())
		require.Equal(t, st.restored, fastRestored != 0, "%s: registers kept as restored (save slot below SP)", where())
		if st.restored {
			restored++
		}
	}
	return deferred, restored
}

// hasCFI reports whether obj has code and a CFI section with contents (the
// arm64 vdso of Linux 6.1 has no CFI: its sigreturn trampoline is
// recognised by its code; separate debug files have no code).
func hasCFI(obj *elfcache.Object) bool {
	code, cfi := false, false
	for _, s := range obj.Sections() {
		if s.Type == elf.SHT_NOBITS || s.Size == 0 {
			continue
		}
		switch {
		case s.Flags&elf.SHF_EXECINSTR != 0:
			code = true
		case s.Name == ".eh_frame" || s.Name == ".debug_frame" || s.Name == ".zdebug_frame":
			cfi = true
		}
	}
	return code && cfi
}

// agreementState is one synthetic frame: the registers and the memory that
// both paths are applied to.
type agreementState struct {
	name  string
	regs  arch.Regs
	stack Stack
}

const (
	stateStackBase = 0x7ffd00000000
	stateStackSize = 1 << 17
)

// agreementStates returns the frames every row is tried on: all registers
// known and pointing into the middle of a snapshot full of distinct words;
// the same over a snapshot that ends just above the registers (reads beyond
// it are truncated) or starts above them (reads below it are outside); and
// only PC, SP and FP known, as after a frame-pointer step.
func agreementStates(a arch.Arch, data []byte) []agreementState {
	mid := uint64(stateStackBase + stateStackSize/2)
	var all arch.Regs
	for r := 0; r < arch.MaxRegs; r++ {
		all.Set(r, mid+uint64(r)*24)
	}
	all.Set(a.SP(), mid)
	full := Stack{Addr: stateStackBase, Data: data}
	short := Stack{Addr: stateStackBase, Data: data[:stateStackSize/2+16]}
	high := Stack{Addr: mid + 8, Data: data[stateStackSize/2+8:]}
	var few arch.Regs
	for _, r := range []int{a.PC(), a.SP(), a.FP()} {
		v, _ := all.Get(r)
		few.Set(r, v)
	}
	return []agreementState{
		{"all_known", all, full},
		{"truncated", all, short},
		{"below_snapshot", all, high},
		{"pc_sp_fp_known", few, full},
	}
}

// TestFastPathAgreesWithGeneralPath applies the compact form (applyFast) and
// the general step (applyRow) to every CFI row of the committed objects, on
// synthetic frames, and checks that they agree on the stop reason, the CFA,
// the caller's PC and SP, which registers are known and their values, and
// whether the return address came from a register. The general step
// evaluates expressions with cfi.Eval; the fast path runs their compiled
// forms, so this also checks the compilation of glibc's signal frames.
func TestFastPathAgreesWithGeneralPath(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	data := make([]byte, stateStackSize)
	rng.Read(data)
	cache := elfcache.NewCache(elfcache.Options{NoDebugFile: true})
	defer cache.Close()
	var c Cache
	total, compiled, compiledExpr, signalRows, fell, restoredRows, pltRows := 0, 0, 0, 0, 0, 0, 0
	for _, path := range committedObjects(t) {
		obj, err := cache.Open(path)
		require.NoError(t, err)
		a := obj.Arch()
		if a == arch.Unknown {
			continue
		}
		u := New(a, Options{})
		states := agreementStates(a, data)
		rows, objCompiled := 0, 0
		forEachRow(t, obj, func(row *cfi.Row) {
			rows++
			e := rowEntry{obj: obj, row: *row, explicit: explicitRules(row)}
			if pltEntered(obj, row) {
				pltRows++ // rowMiss gives these no compact form
				return
			}
			var f fastRow
			f.compile(a, row, e.explicit)
			if f.flags == 0 {
				return
			}
			objCompiled++
			if f.flags&fastExprCFA != 0 || row.CFA.Kind == cfi.RuleCFAExpression {
				compiledExpr++
			}
			if row.Signal {
				signalRows++
			}
			d, r := agree(t, &c, u, &e, &f, states, path)
			if d {
				fell++
			}
			restoredRows += min(r, 1)
		})
		compiled += objCompiled
		total += rows
		if hasCFI(obj) {
			require.NotZero(t, rows, "%s: no CFI rows found", path)
		}
		t.Logf("%s: %d rows, %d with a compact form", path, rows, objCompiled)
	}
	t.Logf("%d rows, %d compact (%d with compiled expressions, %d signal frames); %d deferred to the general step; %d with a save slot below SP in some state", total, compiled, compiledExpr, signalRows, fell, restoredRows)
	require.NotZero(t, signalRows, "no signal trampoline row compiled: glibc's __restore_rt should")
	// The arm64 ld.so's _dl_runtime_resolve: its entry row (bti c) and the
	// rows that save x30 at CFA+8.
	require.NotZero(t, pltRows, "no row of a function entered from arm64 PLT0: ld-linux-aarch64.so.1's resolver has them")
	t.Logf("%d rows of functions entered from arm64 PLT0 (general step only)", pltRows)
	// gcc -O0's "leave; ret" keeps rbp at CFA-16 at the ret, below SP.
	require.NotZero(t, restoredRows, "no row with a save slot below SP: chain_gcc_O0's epilogues have them")
}

// TestRestoreRTCompiles checks that the row of glibc's x86_64 signal
// trampoline (__restore_rt), whose CFA and seventeen register rules are DWARF expressions,
// gets a compact form, and that the form reads the registers from the
// struct sigcontext the kernel laid out, at the offsets of the kernel ABI
// (fallback.go's amd64SigRegs) rather than the expressions' own numbers.
func TestRestoreRTCompiles(t *testing.T) {
	testfiles.MustUnpack(t, testfiles.Dir())
	path := filepath.Join(testfiles.Dir(), "objects", "x86_64", "libc.so.6")
	obj, err := elfcache.Open(path, elfcache.Options{NoDebugFile: true})
	require.NoError(t, err)
	defer obj.Close()
	// The library is stripped of __restore_rt's symbol: find the row by
	// its 'S' augmentation.
	var row cfi.Row
	found := 0
	forEachRow(t, obj, func(r *cfi.Row) {
		if r.Signal {
			row = *r
			found++
		}
	})
	require.Equal(t, 1, found, "%s: signal trampoline rows", path)
	require.True(t, row.Signal)
	require.Equal(t, cfi.RuleCFAExpression, row.CFA.Kind)
	var f fastRow
	f.compile(arch.AMD64, &row, explicitRules(&row))
	require.NotZero(t, f.flags&fastOK, "no compact form")
	require.NotZero(t, f.flags&fastSignal)
	require.NotZero(t, f.flags&fastCFADeref)
	require.Equal(t, uint8(arch.AMD64_RSP), f.cfaReg)
	// At the trampoline, rsp points at the ucontext; uc_mcontext starts
	// 40 bytes in, and its registers are r8..r15, rdi, rsi, rbp, rbx,
	// rdx, rax, rcx, rsp, rip. The CFA is the saved rsp.
	require.Equal(t, int64(amd64SigcontextOff+8*15), f.cfaOff)
	offs := map[uint8]int32{}
	for _, r := range f.rules[:f.nrules] {
		require.Equal(t, cfi.RuleOffset, r.kind)
		offs[r.col] = r.off
	}
	require.Len(t, offs, len(amd64SigRegs))
	// The rules are relative to the row's base, rsp + cfaOff (the saved
	// rsp's slot).
	for i, reg := range amd64SigRegs {
		require.Equal(t, int32(amd64SigcontextOff+8*i)-int32(f.cfaOff), offs[uint8(reg)], "register %s", arch.AMD64.RegName(reg))
	}
}

// exprRow builds rows whose rules are DWARF expressions, for the forms the
// committed objects do not hold.
type exprRow struct{ cfi.Row }

func sleb128(v int64) []byte {
	var out []byte
	for {
		b := byte(v & 0x7f)
		v >>= 7
		if (v == 0 && b&0x40 == 0) || (v == -1 && b&0x40 != 0) {
			return append(out, b)
		}
		out = append(out, b|0x80)
	}
}

// breg returns DW_OP_breg<reg> off, followed by DW_OP_deref when deref.
func breg(reg int, off int64, deref bool) []byte {
	e := append([]byte{byte(0x70 + reg)}, sleb128(off)...)
	if deref {
		e = append(e, 0x06)
	}
	return e
}

func (r *exprRow) expr(kind cfi.RuleKind, e []byte) cfi.Rule {
	rule := cfi.Rule{Kind: kind, Offset: int64(len(r.Exprs)), ExprLen: uint32(len(e))}
	r.Exprs = append(r.Exprs, e...)
	return rule
}

// TestCompiledExpressionForms checks the compilation of register-plus-offset
// expressions on hand-made rows: relative to the CFA's register (converted
// to CFA offsets), relative to a register the CFA is loaded through, with
// DW_OP_bregx, on an arm64 signal frame that says where the PC was saved,
// and the forms that must be left to the general step. Each compiled row
// must agree with the general step on every state.
func TestCompiledExpressionForms(t *testing.T) {
	data := make([]byte, stateStackSize)
	rand.New(rand.NewSource(2)).Read(data)
	const rsp, rbp, rbx, r12, rip = arch.AMD64_RSP, arch.AMD64_RBP, arch.AMD64_RBX, arch.AMD64_R8 + 4, arch.AMD64_RIP
	cases := []struct {
		name    string
		a       arch.Arch
		build   func(r *exprRow)
		compile bool
		flags   uint16 // flags the compact form must have
	}{
		{"breg_of_cfa_register", arch.AMD64, func(r *exprRow) {
			r.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: rsp, Offset: 16}
			r.Regs[rip] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
			r.Regs[rbx] = r.expr(cfi.RuleExpression, breg(rsp, 0, false))
			r.Regs[r12] = r.expr(cfi.RuleValExpression, breg(rsp, 40, false))
		}, true, fastSetSP | fastRAOff},
		{"cfa_expression_without_deref", arch.AMD64, func(r *exprRow) {
			r.CFA = r.expr(cfi.RuleCFAExpression, breg(rsp, 24, false))
			r.Regs[rip] = r.expr(cfi.RuleExpression, breg(rsp, 16, false))
			r.Regs[rbx] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -24}
		}, true, fastExprCFA | fastRAOff},
		{"cfa_loaded_through_rbp", arch.AMD64, func(r *exprRow) {
			r.CFA = r.expr(cfi.RuleCFAExpression, breg(rbp, 16, true))
			r.Regs[rip] = r.expr(cfi.RuleExpression, breg(rbp, 8, false))
			r.Regs[rbp] = r.expr(cfi.RuleExpression, breg(rbp, 0, false))
			r.Regs[rsp] = r.expr(cfi.RuleValExpression, breg(rbp, 16, false))
		}, true, fastExprCFA | fastCFADeref | fastRAOff},
		{"bregx", arch.AMD64, func(r *exprRow) {
			r.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: rsp, Offset: 8}
			r.Regs[rip] = r.expr(cfi.RuleExpression, append([]byte{0x92, rsp}, sleb128(0)...))
		}, true, fastRAOff},
		{"arm64_signal_frame_saves_pc", arch.ARM64, func(r *exprRow) {
			r.RA = arch.ARM64_X30
			r.Signal = true
			r.CFA = r.expr(cfi.RuleCFAExpression, breg(arch.ARM64_SP, 0x208, true))
			r.Regs[arch.ARM64_PC] = r.expr(cfi.RuleExpression, breg(arch.ARM64_SP, 0x210, false))
			r.Regs[arch.ARM64_X30] = r.expr(cfi.RuleExpression, breg(arch.ARM64_SP, 0x200, false))
			r.Regs[arch.ARM64_X29] = r.expr(cfi.RuleExpression, breg(arch.ARM64_SP, 0x1f8, false))
		}, true, fastSignal | fastCFADeref | fastRAOff},
		{"breg_of_another_register", arch.AMD64, func(r *exprRow) {
			r.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: rsp, Offset: 16}
			r.Regs[rip] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
			r.Regs[rbx] = r.expr(cfi.RuleExpression, breg(rbp, 8, false))
		}, false, 0},
		{"cfa_offset_rule_under_loaded_cfa", arch.AMD64, func(r *exprRow) {
			r.CFA = r.expr(cfi.RuleCFAExpression, breg(rsp, 160, true))
			r.Regs[rip] = cfi.Rule{Kind: cfi.RuleOffset, Offset: -8}
		}, false, 0},
		{"dereferencing_register_rule", arch.AMD64, func(r *exprRow) {
			r.CFA = cfi.Rule{Kind: cfi.RuleCFAOffset, Reg: rsp, Offset: 16}
			r.Regs[rip] = r.expr(cfi.RuleExpression, breg(rsp, 8, true))
		}, false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &exprRow{}
			r.Start, r.End, r.RA = 0x1000, 0x1010, rip
			tc.build(r)
			e := rowEntry{row: r.Row, explicit: explicitRules(&r.Row)}
			var f fastRow
			f.compile(tc.a, &e.row, e.explicit)
			if !tc.compile {
				require.Zero(t, f.flags, "compiled a row the general step must handle")
				return
			}
			require.NotZero(t, f.flags&fastOK, "no compact form")
			require.Equal(t, tc.flags, f.flags&tc.flags)
			states := agreementStates(tc.a, data)
			// And with only the PC and SP known: the base register of
			// cfa_loaded_through_rbp is unknown, which the general step
			// reports as the expression's error.
			var pcsp arch.Regs
			for _, reg := range []int{tc.a.PC(), tc.a.SP()} {
				v, _ := states[0].regs.Get(reg)
				pcsp.Set(reg, v)
			}
			states = append(states, agreementState{"pc_sp_known", pcsp, states[0].stack})
			var c Cache
			deferred, _ := agree(t, &c, New(tc.a, Options{}), &e, &f, states, tc.name)
			// Only an expression CFA defers: with its base register
			// unknown, or the word holding it unreadable.
			if tc.name == "cfa_loaded_through_rbp" {
				require.True(t, deferred, "rbp unknown: deferred to the general step")
			} else if f.flags&fastExprCFA == 0 {
				require.False(t, deferred, "deferred to the general step")
			}
		})
	}
}
