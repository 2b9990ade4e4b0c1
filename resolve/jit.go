package resolve

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/jitdump"
	"github.com/ustack/ustack/unwinder"
)

// jitDump is what a process's jitdump (jit-PID.dump) says of its JIT code:
// every function the JIT loaded, with the time span it held its addresses.
type jitDump struct {
	path  string     // the marker's path as mapped: the Module of its frames
	funcs []*jitFunc // in load order
	// bounds are the distinct times, ascending, at which a function
	// stopped holding its addresses (other code loaded over it, or it
	// moved). Between two bounds no address changes its function, so one
	// address space serves every sample in between: epoch i is
	// [bounds[i-1], bounds[i]).
	bounds []uint64
	// note is a warning about the dump as a whole.
	note string
	// created is the header's timestamp, when the JIT made the dump.
	created uint64
	// file is where the dump was read from ("" for the recording's
	// archive) and foundIn says which place that was (ObjectInfo.FoundIn:
	// FoundFile, FoundBeside or FoundArchive).
	file, foundIn string
}

// sources says which of a JIT's information its dump gave: the names,
// and lines and CFI when a function has them.
func (d *jitDump) sources() elfcache.Sources {
	s := elfcache.Sources{Symbols: elfcache.OriginJITDump}
	for _, f := range d.funcs {
		if len(f.lines) > 0 {
			s.Lines = elfcache.OriginJITDump
		}
		if f.table != nil {
			s.Unwind = elfcache.OriginJITDump
		}
	}
	return s
}

// jitFunc is one function's code at one place: its CODE_LOAD, or a
// CODE_MOVE of it. It is the unwinder.Object of the mapping laid over its
// addresses.
type jitFunc struct {
	start, end  uint64
	name        string
	code        []byte
	lines       []jitdump.DebugEntry
	table       *cfi.Table // from its UNWINDING_INFO; nil without one
	unwind      *jitdump.UnwindingInfo
	load, until uint64 // [load, until): when it held its addresses
}

// FindRow fills row from the function's own CFI; cfi.ErrNoFDE without it
// (the unwinder then follows the frame pointer).
func (f *jitFunc) FindRow(addr uint64, row *cfi.Row) error {
	if f.table == nil || addr < f.start || addr >= f.end {
		return cfi.ErrNoFDE
	}
	return f.table.Lookup(addr, row)
}

// ReadCode copies the function's code bytes at addr, which the dump holds.
func (f *jitFunc) ReadCode(addr uint64, buf []byte) int {
	if addr < f.start || addr >= f.end {
		return 0
	}
	return copy(buf, f.code[addr-f.start:])
}

// FunctionStart returns the function's first address, for addr within it
// (unwinder.FunctionObject: the unwinder checks a frame-pointer step by the
// function's prologue).
func (f *jitFunc) FunctionStart(addr uint64) (uint64, bool) {
	if addr < f.start || addr >= f.end {
		return 0, false
	}
	return f.start, true
}

// line returns the source line the JIT gave for addr: that of the last
// debug entry at or before it.
func (f *jitFunc) line(addr uint64) (file string, line int, ok bool) {
	i := sort.Search(len(f.lines), func(i int) bool { return f.lines[i].Addr > addr })
	if i == 0 {
		return "", 0, false
	}
	e := &f.lines[i-1]
	return e.File, int(e.Line), true
}

// epochOf returns the epoch whose time span holds t.
func (d *jitDump) epochOf(t uint64) int {
	return sort.Search(len(d.bounds), func(i int) bool { return d.bounds[i] > t })
}

// live returns the functions that held their addresses at some time of
// epoch i, sorted by address, without overlaps (where two would overlap,
// the later load wins).
func (d *jitDump) live(i int) []*jitFunc {
	lo, hi := uint64(0), uint64(math.MaxUint64)
	if i > 0 {
		lo = d.bounds[i-1]
	}
	if i < len(d.bounds) {
		hi = d.bounds[i]
	}
	var out []*jitFunc
	for _, f := range d.funcs {
		if f.load < hi && f.until > lo && f.end > f.start {
			out = append(out, f)
		}
	}
	sort.SliceStable(out, func(a, b int) bool { return out[a].start < out[b].start })
	kept := out[:0]
	for _, f := range out {
		if n := len(kept); n > 0 && kept[n-1].end > f.start {
			if kept[n-1].load > f.load {
				continue
			}
			kept = kept[:n-1]
		}
		kept = append(kept, f)
	}
	return kept
}

// readJITDump reads a dump from r (size bytes), named path. A damaged dump
// gives the functions before the damage and the error.
func readJITDump(path string, r io.ReaderAt, size int64) (*jitDump, error) {
	rd, err := jitdump.NewReader(path, r, size)
	if err != nil {
		return nil, err
	}
	a := arch.AMD64
	if rd.Header().ElfMach == 183 { // EM_AARCH64
		a = arch.ARM64
	}
	d := &jitDump{path: path, created: rd.Header().Timestamp}
	var (
		lines []jitdump.DebugEntry
		// linesAddr is the code address the pending DEBUG_INFO is for.
		linesAddr uint64
		// badLines counts the DEBUG_INFO records that do not fit their
		// function, the first one's function named.
		badLines        int
		badLinesExample string
		unwind          *jitdump.UnwindingInfo
		byIndex         = map[uint64]*jitFunc{}
		live            []*jitFunc // sorted by start, non-overlapping
		bounds          = map[uint64]bool{}
		damage          error
	)
	// end makes f stop holding its addresses at ts.
	end := func(f *jitFunc, ts uint64) {
		if f.until > ts {
			f.until = ts
			bounds[ts] = true
		}
	}
	// place makes f hold its addresses from time ts: the functions it
	// overlaps stop holding theirs.
	place := func(f *jitFunc, ts uint64) {
		i := sort.Search(len(live), func(i int) bool { return live[i].end > f.start })
		j := i
		for j < len(live) && live[j].start < f.end {
			end(live[j], ts)
			j++
		}
		live = append(live[:i], append([]*jitFunc{f}, live[j:]...)...)
		d.funcs = append(d.funcs, f)
	}
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			damage = err
			break
		}
		switch {
		case rec.Debug != nil:
			lines, linesAddr = rec.Debug.Entries, rec.Debug.CodeAddr
		case rec.Unwind != nil:
			unwind = rec.Unwind
		case rec.Load != nil:
			l := rec.Load
			f := &jitFunc{start: l.CodeAddr, end: l.CodeAddr + l.CodeSize, name: l.Name, code: l.Code,
				load: rec.Timestamp, until: math.MaxUint64}
			if lines != nil {
				if linesFit(lines, linesAddr, f) {
					f.lines = lines
					sort.SliceStable(f.lines, func(i, j int) bool { return f.lines[i].Addr < f.lines[j].Addr })
				} else {
					if badLines == 0 {
						badLinesExample = f.name
					}
					badLines++
				}
			}
			if unwind != nil {
				f.table, f.unwind = jitTable(a, unwind, f.start, l.CodeSize, path), unwind
			}
			lines, unwind = nil, nil
			byIndex[l.CodeIndex] = f
			place(f, rec.Timestamp)
		case rec.Move != nil:
			m := rec.Move
			old := byIndex[m.CodeIndex]
			if old == nil || m.NewCodeAddr+m.CodeSize < m.NewCodeAddr {
				continue // a move of a function the dump never loaded
			}
			f := &jitFunc{start: m.NewCodeAddr, end: m.NewCodeAddr + uint64(len(old.code)), name: old.name,
				code: old.code, load: rec.Timestamp, until: math.MaxUint64}
			// Its lines and CFI move with it.
			for _, e := range old.lines {
				e.Addr = e.Addr - old.start + f.start
				f.lines = append(f.lines, e)
			}
			if old.table != nil && old.unwind != nil {
				f.table = jitTable(a, old.unwind, f.start, uint64(len(old.code)), path)
			}
			f.unwind = old.unwind
			end(old, rec.Timestamp)
			for k, g := range live {
				if g == old {
					live = append(live[:k], live[k+1:]...)
					break
				}
			}
			byIndex[m.CodeIndex] = f
			place(f, rec.Timestamp)
		}
	}
	for t := range bounds {
		d.bounds = append(d.bounds, t)
	}
	sort.Slice(d.bounds, func(i, j int) bool { return d.bounds[i] < d.bounds[j] })
	var notes []string
	if rd.Header().Flags&jitdump.FlagArchTimestamp != 0 && len(d.bounds) > 0 {
		notes = append(notes, "its timestamps are the CPU's time-stamp counter, which ustack does not convert to the recording's clock: where the JIT reused or moved code, frames may name the code of another time")
	}
	if badLines > 0 {
		notes = append(notes, fmt.Sprintf("the DEBUG_INFO of %d functions (the first: %s) is for other code or has entries outside the function's code: those functions are left without source lines", badLines, badLinesExample))
	}
	d.note = strings.Join(notes, "; ")
	return d, damage
}

// lineSlack is how far past a function's code a DEBUG_INFO entry may lie:
// perf reads entries GEN_ELF_TEXT_OFFSET (0x80) past where the
// specification puts them, and V8 writes them 0x40 past (for perf's
// earlier offset); this package follows the specification.
const lineSlack = 0x80

// linesFit reports whether a DEBUG_INFO (for code at addr) can describe f:
// for f's address, every entry inside f's code (a damaged record, or a JIT
// that wrote a file name it had freed, misaligns the entries after it).
func linesFit(lines []jitdump.DebugEntry, addr uint64, f *jitFunc) bool {
	if addr != f.start {
		return false
	}
	for _, e := range lines {
		if e.Addr < f.start || e.Addr > f.end+lineSlack {
			return false
		}
	}
	return true
}

// jitTable makes the CFI table of code at addr from its UNWINDING_INFO:
// the .eh_frame placed after the code as perf inject places it (its
// pc-relative pointers were computed for that place), the .eh_frame_hdr
// after it. nil when the CFI cannot be used.
func jitTable(a arch.Arch, u *jitdump.UnwindingInfo, addr, size uint64, path string) *cfi.Table {
	eh := jitdump.EHFrameAddr(addr, size)
	ehData := u.EHFrame()
	t, err := cfi.NewTable(a, cfi.Sections{
		EHFrame:    cfi.Section{Name: path + ":.eh_frame", Data: ehData, Addr: eh},
		EHFrameHdr: cfi.Section{Name: path + ":.eh_frame_hdr", Data: u.EHFrameHdr(), Addr: eh + uint64(len(ehData))},
	}, cfi.Options{})
	if err != nil {
		return nil
	}
	return t
}

// jitState is a Space's jitdump: the mappings as the process had them and
// the Spaces of the dump's epochs, built on first use.
type jitState struct {
	dump *jitDump
	ums  []unwinder.Mapping // the process's own mappings
	base []spaceMap         // their details, indexed by Tag

	mu     sync.Mutex
	epochs map[int]*Space
}

// maxEpochSpaces bounds the epoch Spaces kept per Space NewSpace made (each
// holds a mapping per live JIT function): samples come in time order, so
// the last few serve nearly all.
const maxEpochSpaces = 4

// At returns the Space of a sample taken at time (in the recording's
// clock): the same Space unless the process's jitdump says that some
// address held other JIT code at that time. Safe for concurrent use.
func (s *Space) At(time uint64) *Space {
	if s.jitd == nil || len(s.jitd.dump.bounds) == 0 {
		return s
	}
	e := s.jitd.dump.epochOf(time)
	if e == s.epoch {
		return s
	}
	return s.jitd.space(s, e)
}

// space returns the Space of epoch e, derived from the mappings of s.
func (j *jitState) space(s *Space, e int) *Space {
	j.mu.Lock()
	defer j.mu.Unlock()
	if sp, ok := j.epochs[e]; ok {
		return sp
	}
	if len(j.epochs) >= maxEpochSpaces {
		j.epochs = map[int]*Space{}
	}
	sp := j.build(s, e)
	j.epochs[e] = sp
	return sp
}

// build lays the functions live in epoch e over the process's mappings,
// each its own mapping (as perf inject maps a jitted-PID-N.so over the
// JIT's memory: builtins V8 logs lie inside node's own text).
func (j *jitState) build(s *Space, e int) *Space {
	funcs := j.dump.live(e)
	maps := append(make([]spaceMap, 0, len(j.base)+len(funcs)), j.base...)
	ums := make([]unwinder.Mapping, 0, len(j.ums)+len(funcs))
	for _, m := range j.ums {
		// The parts of m no function covers.
		start := m.Start
		k := sort.Search(len(funcs), func(i int) bool { return funcs[i].end > m.Start })
		for ; k < len(funcs) && funcs[k].start < m.End; k++ {
			if funcs[k].start > start {
				p := m
				p.Start, p.End = start, funcs[k].start
				ums = append(ums, p)
			}
			start = funcs[k].end
		}
		if start < m.End {
			p := m
			p.Start = start
			ums = append(ums, p)
		}
	}
	for _, f := range funcs {
		ums = append(ums, unwinder.Mapping{Start: f.start, End: f.end, Exec: true, Object: f, Name: j.dump.path, Tag: len(maps)})
		maps = append(maps, spaceMap{path: j.dump.path, start: f.start, jit: f})
	}
	sp := &Space{as: unwinder.NewAddressSpace(ums), pid: s.pid, maps: maps, jit: s.jit, jitd: j, epoch: e,
		noInline: s.noInline, noTailCall: s.noTailCall, r: s.r, refs: s.refs}
	return sp
}

// jitDump returns the dump of a process's marker mapping at path, read on
// first use; nil (with one warning) when it cannot be found or read.
func (r *Resolver) jitDump(pid uint32, path string) *jitDump {
	r.mu.Lock()
	if d, ok := r.dumps[path]; ok || r.closed {
		r.mu.Unlock()
		return d
	}
	r.mu.Unlock()
	d, warn := r.readJITDump(path)
	if d != nil {
		d.path = path // frames name the mapped file, wherever its copy was found
		if w := r.alignJITClock(d, path); w != "" && warn == "" {
			warn = w
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dumps == nil {
		return nil
	}
	if _, ok := r.dumps[path]; !ok {
		r.dumps[path] = d
		if warn != "" {
			if d == nil {
				if _, ok := r.missing[path]; !ok {
					r.missing[path] = warn
				}
			}
			r.warnLocked(fmt.Sprintf("%s: %s", path, warn))
		}
	}
	return r.dumps[path]
}

// alignJITClock shifts the dump's times into the samples' clock when that
// is not CLOCK_MONOTONIC (Options.JITClock), by the time the marker was
// mapped: JITs map it right after writing the header. It returns a
// warning where the times matter (code reused or moved).
func (r *Resolver) alignJITClock(d *jitDump, path string) string {
	if r.opts.JITClock == nil {
		return ""
	}
	mapped, mono := r.opts.JITClock(path)
	if mono || mapped == 0 {
		return ""
	}
	off := mapped - d.created // modular: adding it shifts either way
	for _, f := range d.funcs {
		f.load += off
		if f.until != math.MaxUint64 {
			f.until += off
		}
	}
	for i := range d.bounds {
		d.bounds[i] += off
	}
	if len(d.bounds) == 0 {
		return ""
	}
	return "the recording's clock is not CLOCK_MONOTONIC, the dump's (record with perf record -k 1): its times were matched to the samples' by when the dump was mapped, so frames near a reload or move of JIT code may name the code of another time"
}

// dumpWarning is the warning for a dump read with readJITDump: none, a
// damaged one, or one that cannot be used at all (the error names it).
func dumpWarning(d *jitDump, err error) string {
	switch {
	case d == nil:
		return fmt.Sprintf("the JIT's jitdump cannot be used: %v; its JIT code stays unnamed", err)
	case err != nil:
		return fmt.Sprintf("jitdump damaged, the functions before the damage are used: %v", err)
	}
	return d.note
}

// readJITDump looks for a marker's dump where it was written (under
// SymFS), beside the recording (Options.JITDumpDirs) and in the
// recording's archive; it returns the dump, and a warning to give.
func (r *Resolver) readJITDump(path string) (*jitDump, string) {
	var tried []string
	var cands []string
	if r.opts.SymFS != "" {
		cands = append(cands, filepath.Join(r.opts.SymFS, path))
	}
	cands = append(cands, path)
	recorded := len(cands) // the ones before are where the JIT wrote it
	for _, dir := range r.opts.JITDumpDirs {
		cands = append(cands, filepath.Join(dir, filepath.Base(path)))
	}
	seen := map[string]bool{}
	for i, c := range cands {
		if seen[c] {
			continue
		}
		seen[c] = true
		f, err := os.Open(c)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				tried = append(tried, err.Error())
			} else {
				tried = append(tried, c)
			}
			continue
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			tried = append(tried, err.Error())
			continue
		}
		d, err := readJITDump(c, f, st.Size())
		f.Close()
		if d != nil {
			d.file, d.foundIn = c, FoundFile
			if i >= recorded {
				d.foundIn = FoundBeside
			}
		}
		return d, dumpWarning(d, err)
	}
	if r.opts.Objects != nil {
		if data, _, ok := r.opts.Objects.Object(nil, path); ok {
			name := path + " (in the recording's archive)"
			d, err := readJITDump(name, bytes.NewReader(data), int64(len(data)))
			if d != nil {
				d.foundIn = FoundArchive
			}
			return d, dumpWarning(d, err)
		}
		tried = append(tried, "the recording's archive")
	}
	return nil, fmt.Sprintf("the JIT's jitdump (the file its JIT code is named from) was not found: tried %s; its JIT code stays unnamed (copy the dump beside the recording, or record with ustack record, which archives it)",
		strings.Join(tried, ", "))
}
