package minidump

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"unicode/utf16"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/coredump"
)

// WriteOptions control what Write puts in a minidump. The zero value
// works.
type WriteOptions struct {
	// StackSize bounds each thread's stack: the bytes from its stack
	// pointer up (and x86_64's 128-byte red zone below it). Default
	// DefaultStackSize.
	StackSize uint64
	// CodeBytes is how much memory is kept on each side of each thread's
	// program counter (default 256).
	CodeBytes uint64
	// Environ keeps the process's environment: the LinuxEnviron stream,
	// and its strings where they lie in the stack memory written. Without
	// it both are left out (the bytes zeroed): environments hold secrets.
	Environ bool
	// Stacks are more stack pointers whose stack to keep (up to
	// StackSize each) where the threads' own do not cover them: the
	// frames an unwind reached on other stacks (report.WriteMinidump).
	Stacks []uint64
}

// DefaultStackSize is how much of each thread's stack Write keeps.
const DefaultStackSize = 64 << 10

// WriteStats says what Write wrote.
type WriteStats struct {
	Threads, Modules, Ranges int
	// MemoryBytes is the memory the minidump holds; Size the file's size.
	MemoryBytes, Size int64
	// StackShort counts the threads whose stack ended (memory not in the
	// core) before StackSize.
	StackShort int
}

const redZone = 128 // x86_64 SysV: below the stack pointer, leaf functions' own

// memSpan is a range of process memory to write, and its offset in the
// memory that follows the metadata.
type memSpan struct {
	lo, hi uint64
	data   []byte
	rel    uint32
}

// builder lays out a minidump's metadata: the header, then the threads'
// contexts, the strings and the streams appended to buf, then the
// directory; the memory follows it. A minidump cut short (a full disk, a
// killed writer) keeps what comes first, so that every thread's registers
// and the modules can still be read, and the memory as far as it goes.
// Offsets into the memory are written relative to its start and moved
// past the metadata (memRefs) once its size is known.
type builder struct {
	buf     []byte
	dir     []Stream
	arch    arch.Arch
	memRefs []int // where buf holds a memory offset
}

func (b *builder) align(n int) {
	for len(b.buf)%n != 0 {
		b.buf = append(b.buf, 0)
	}
}

func (b *builder) u16(v uint16) { b.buf = binary.LittleEndian.AppendUint16(b.buf, v) }
func (b *builder) u32(v uint32) { b.buf = binary.LittleEndian.AppendUint32(b.buf, v) }
func (b *builder) u64(v uint64) { b.buf = binary.LittleEndian.AppendUint64(b.buf, v) }

// str appends a MINIDUMP_STRING and returns its offset.
func (b *builder) str(s string) uint32 {
	b.align(4)
	off := uint32(len(b.buf))
	u := utf16.Encode([]rune(s))
	b.u32(uint32(2 * len(u)))
	for _, c := range u {
		b.u16(c)
	}
	b.u16(0)
	return off
}

// stream appends a stream's bytes and records it in the directory.
func (b *builder) stream(t uint32, data []byte) {
	b.align(8)
	b.dir = append(b.dir, Stream{Type: t, Size: uint32(len(data)), Offset: uint32(len(b.buf))})
	b.buf = append(b.buf, data...)
}

// memStream is stream for data holding offsets into the memory at refs.
func (b *builder) memStream(t uint32, data []byte, refs []int) {
	b.align(8)
	for _, r := range refs {
		b.memRefs = append(b.memRefs, len(b.buf)+r)
	}
	b.stream(t, data)
}

// Write writes a minidump of the core c to w: the system information,
// the threads with their registers and stacks, the memory around each
// thread's program counter and the vdso, the modules with their build-ids
// ('BpEL' CodeView records) and paths, the exception (the signal, its code
// and address) and the Linux streams (maps, auxv, cmdline, status; environ
// only with opts.Environ).
func Write(w io.Writer, c *coredump.Core, opts WriteOptions) (WriteStats, error) {
	var st WriteStats
	if opts.StackSize == 0 {
		opts.StackSize = DefaultStackSize
	}
	if opts.CodeBytes == 0 {
		opts.CodeBytes = 256
	}
	if c.Arch != arch.AMD64 && c.Arch != arch.ARM64 {
		return st, fmt.Errorf("%s: architecture %v: minidumps are written for x86_64 and arm64", c.File, c.Arch)
	}
	mem := c.Memory()
	b := &builder{buf: make([]byte, headerSize), arch: c.Arch}

	// The memory to keep: stacks, code around each PC, the vdso.
	var want []memSpan
	stacks := make([][2]uint64, len(c.Threads))
	for i := range c.Threads {
		th := &c.Threads[i]
		sp, _ := th.Regs.Get(c.Arch.SP())
		got := stackFrom(mem, c.Arch, sp, opts.StackSize)
		if got[1]-got[0] < opts.StackSize {
			st.StackShort++
		}
		stacks[i] = got
		if got[1] > got[0] {
			want = append(want, memSpan{lo: got[0], hi: got[1]})
		}
		pc, _ := th.Regs.Get(c.Arch.PC())
		plo, phi := pc-min(pc, opts.CodeBytes), pc+opts.CodeBytes
		if g := readable(mem, plo, phi, false); g[1] > g[0] {
			want = append(want, memSpan{lo: g[0], hi: g[1]})
		} else if g := readable(mem, pc, phi, false); g[1] > g[0] {
			want = append(want, memSpan{lo: g[0], hi: g[1]})
		}
	}
	for _, sp := range opts.Stacks {
		if inSpans(want, sp) {
			continue
		}
		if g := stackFrom(mem, c.Arch, sp, opts.StackSize); g[1] > g[0] {
			want = append(want, memSpan{lo: g[0], hi: g[1]})
		}
	}
	if v, ok := c.VDSO(); ok {
		if img, err := c.VDSOImage(); err == nil {
			want = append(want, memSpan{lo: v, hi: v + uint64(len(img))})
		}
	}
	spans := mergeSpans(want)
	env := environ(c)
	for i := range spans {
		s := &spans[i]
		s.data = make([]byte, s.hi-s.lo)
		n, _ := mem.ReadAt(s.data, s.lo)
		s.data = s.data[:n]
		s.hi = s.lo + uint64(n)
		if !opts.Environ {
			scrub(s, env.span)
		}
	}

	// The memory's place after the metadata, from its start: the threads'
	// stacks first, in the threads' order (the signalled thread's first),
	// then the rest, so that a minidump cut short keeps what unwinding
	// needs most.
	rank := make([]int, len(spans))
	for i := range rank {
		rank[i] = len(c.Threads) + i
	}
	for i := range c.Threads {
		if s := stacks[i]; s[1] > s[0] {
			for k := range spans {
				if s[0] >= spans[k].lo && s[0] < spans[k].hi {
					rank[k] = min(rank[k], i)
				}
			}
		}
	}
	order := make([]int, len(spans))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return rank[order[a]] < rank[order[b]] })
	var memSize uint64
	for _, i := range order {
		memSize = (memSize + 15) &^ 15
		if memSize > 1<<32-1 {
			return st, fmt.Errorf("%s: the minidump would hold more memory than the format's 4 GiB offsets reach", c.File)
		}
		spans[i].rel = uint32(memSize)
		memSize += uint64(len(spans[i].data))
		st.MemoryBytes += int64(len(spans[i].data))
	}
	st.Ranges = len(spans)
	relOf := func(lo, hi uint64) (uint32, uint32) {
		for _, s := range spans {
			if lo >= s.lo && hi <= s.hi && hi > lo {
				return s.rel + uint32(lo-s.lo), uint32(hi - lo)
			}
		}
		return 0, 0
	}

	// Contexts.
	ctxRVA := make([]uint32, len(c.Threads))
	for i := range c.Threads {
		b.align(16)
		ctxRVA[i] = uint32(len(b.buf))
		b.buf = appendContext(b.buf, c.Arch, &c.Threads[i].Regs, c.Threads[i].PState)
	}
	ctxSize := uint32(amd64ContextSize)
	if c.Arch == arch.ARM64 {
		ctxSize = arm64ContextSize
	}

	// Strings, before the streams that point to them.
	names := make([]uint32, len(c.Threads))
	for i := range c.Threads {
		if n := c.Threads[i].Name; n != "" {
			names[i] = b.str(n)
		}
	}
	objs := c.Objects()
	modName := make([]uint32, len(objs))
	cvRVA := make([]uint32, len(objs))
	for i, o := range objs {
		name := o.Path
		if name == "[vdso]" {
			name = "linux-vdso.so.1"
		}
		modName[i] = b.str(name)
		if len(o.BuildID) > 0 {
			b.align(4)
			cvRVA[i] = uint32(len(b.buf))
			b.u32(0x4270454c)
			b.buf = append(b.buf, o.BuildID...)
		}
	}
	osName := b.str("Linux")

	// SystemInfo.
	si := make([]byte, 56)
	if c.Arch == arch.AMD64 {
		le.PutUint16(si, cpuAMD64)
	} else {
		le.PutUint16(si, cpuARM64)
	}
	si[6] = 1
	le.PutUint32(si[20:], platLinux)
	le.PutUint32(si[24:], osName)
	b.stream(StreamSystemInfo, si)

	// ThreadList.
	tl := binary.LittleEndian.AppendUint32(nil, uint32(len(c.Threads)))
	var tlRefs []int
	for i := range c.Threads {
		th := &c.Threads[i]
		e := make([]byte, threadSize)
		le.PutUint32(e, uint32(th.TID))
		if s := stacks[i]; s[1] > s[0] {
			rel, size := relOf(s[0], s[1])
			le.PutUint64(e[24:], s[0])
			le.PutUint32(e[32:], size)
			le.PutUint32(e[36:], rel)
			if size > 0 {
				tlRefs = append(tlRefs, len(tl)+36)
			}
		}
		le.PutUint32(e[40:], ctxSize)
		le.PutUint32(e[44:], ctxRVA[i])
		tl = append(tl, e...)
	}
	b.memStream(StreamThreadList, tl, tlRefs)
	st.Threads = len(c.Threads)

	// ThreadNameList.
	var tn []byte
	count := 0
	for i := range c.Threads {
		if names[i] != 0 {
			tn = binary.LittleEndian.AppendUint32(tn, uint32(c.Threads[i].TID))
			tn = binary.LittleEndian.AppendUint64(tn, uint64(names[i]))
			count++
		}
	}
	if count > 0 {
		b.stream(StreamThreadNameList, append(binary.LittleEndian.AppendUint32(nil, uint32(count)), tn...))
	}

	// ModuleList.
	ml := binary.LittleEndian.AppendUint32(nil, uint32(len(objs)))
	for i, o := range objs {
		e := make([]byte, moduleSize)
		le.PutUint64(e, o.Start)
		le.PutUint32(e[8:], uint32(min(o.End-o.Start, 1<<32-1)))
		le.PutUint32(e[20:], modName[i])
		le.PutUint32(e[24:], 0xfeef04bd) // VS_FIXEDFILEINFO's signature
		le.PutUint32(e[28:], 0x10000)
		if cvRVA[i] != 0 {
			le.PutUint32(e[76:], uint32(4+len(o.BuildID)))
			le.PutUint32(e[80:], cvRVA[i])
		}
		ml = append(ml, e...)
	}
	b.stream(StreamModuleList, ml)
	st.Modules = len(objs)

	// MemoryList.
	mlist := binary.LittleEndian.AppendUint32(nil, uint32(len(spans)))
	var mlRefs []int
	for _, s := range spans {
		mlist = binary.LittleEndian.AppendUint64(mlist, s.lo)
		mlist = binary.LittleEndian.AppendUint32(mlist, uint32(len(s.data)))
		mlRefs = append(mlRefs, len(mlist))
		mlist = binary.LittleEndian.AppendUint32(mlist, s.rel)
	}
	b.memStream(StreamMemoryList, mlist, mlRefs)

	// Exception: the signalled thread, first in a Core.
	if sg := c.Signal; sg != nil && sg.Signo != 0 && len(c.Threads) > 0 {
		x := make([]byte, 168)
		le.PutUint32(x, uint32(c.Threads[0].TID))
		le.PutUint32(x[8:], uint32(sg.Signo))
		le.PutUint32(x[12:], uint32(int32(sg.Code)))
		if sg.HasAddr {
			le.PutUint64(x[24:], sg.Addr)
		}
		le.PutUint32(x[160:], ctxSize)
		le.PutUint32(x[164:], ctxRVA[0])
		b.stream(StreamException, x)
	}

	// Linux streams. A core made of a module list (a minidump without
	// /proc/PID/maps: Crashpad's) has no maps to write: lines made of
	// its modules would claim read-only mappings of whole objects, and
	// a reader takes maps over the module list.
	if !slices.ContainsFunc(c.Mappings, func(m coredump.Mapping) bool { return m.Module }) {
		b.stream(StreamLinuxMaps, procMaps(c))
	}
	var auxv []byte
	for _, e := range c.Auxv {
		auxv = binary.LittleEndian.AppendUint64(auxv, e.Type)
		auxv = binary.LittleEndian.AppendUint64(auxv, e.Value)
	}
	if len(auxv) > 0 {
		b.stream(StreamLinuxAuxv, append(auxv, make([]byte, 16)...))
	}
	if args := cmdline(c, env); len(args) > 0 {
		b.stream(StreamLinuxCmdLine, []byte(strings.Join(args, "\x00")+"\x00"))
	}
	if opts.Environ && len(env.vars) > 0 {
		b.stream(StreamLinuxEnviron, []byte(strings.Join(env.vars, "\x00")+"\x00"))
	}
	if p := c.Process; p.Known {
		state := p.State
		if state == 0 {
			state = 'R'
		}
		status := fmt.Sprintf("Name:\t%s\nState:\t%c\nTgid:\t%d\nPid:\t%d\nPPid:\t%d\nUid:\t%d\t%d\t%d\t%d\nGid:\t%d\t%d\t%d\t%d\nThreads:\t%d\n",
			p.Comm, state, p.PID, p.PID, p.PPID, p.UID, p.UID, p.UID, p.UID, p.GID, p.GID, p.GID, p.GID, len(c.Threads))
		b.stream(StreamLinuxStatus, []byte(status))
	}

	// MINIDUMP_MISC_INFO (its first version, 24 bytes) with the process
	// id alone (MINIDUMP_MISC1_PROCESS_ID): what says the threads'
	// process where no status stream does.
	if len(c.Threads) > 0 && c.Threads[0].PID > 0 {
		mi := make([]byte, 24)
		le.PutUint32(mi, 24)
		le.PutUint32(mi[4:], 1)
		le.PutUint32(mi[8:], uint32(c.Threads[0].PID))
		b.stream(StreamMiscInfo, mi)
	}

	// The directory and the header; then the memory, its offsets moved
	// past the metadata.
	b.align(4)
	dirRVA := uint32(len(b.buf))
	for _, s := range b.dir {
		b.u32(s.Type)
		b.u32(s.Size)
		b.u32(s.Offset)
	}
	b.align(16)
	memBase := uint64(len(b.buf))
	if memBase+memSize > 1<<32-1 {
		return st, fmt.Errorf("%s: the minidump would be %d bytes, more than the format's 4 GiB offsets reach", c.File, memBase+memSize)
	}
	for _, p := range b.memRefs {
		le.PutUint32(b.buf[p:], le.Uint32(b.buf[p:])+uint32(memBase))
	}
	h := b.buf[:headerSize]
	copy(h, Signature)
	le.PutUint32(h[4:], 0xa793)
	le.PutUint32(h[8:], uint32(len(b.dir)))
	le.PutUint32(h[12:], dirRVA)
	bw := bufio.NewWriterSize(w, 64<<10)
	n, err := bw.Write(b.buf)
	st.Size = int64(n)
	var pad [16]byte
	for _, i := range order {
		if err != nil {
			break
		}
		if gap := memBase + uint64(spans[i].rel) - uint64(st.Size); gap > 0 {
			n, err = bw.Write(pad[:gap])
			st.Size += int64(n)
			if err != nil {
				break
			}
		}
		n, err = bw.Write(spans[i].data)
		st.Size += int64(n)
	}
	if err == nil {
		err = bw.Flush()
	}
	return st, err
}

// stackFrom returns the stack memory the core holds from sp up to size
// bytes (with x86_64's red zone below sp). A stack pointer in no dumped
// memory (in the guard page below an overflowed stack) gets the memory
// that begins above it within size.
func stackFrom(mem *coredump.Memory, a arch.Arch, sp, size uint64) [2]uint64 {
	lo := sp
	if a == arch.AMD64 && lo >= redZone {
		lo -= redZone
	}
	lo &^= 15
	hi := sp + size
	if hi < sp {
		hi = ^uint64(0)
	}
	if g := readable(mem, lo, hi, true); g[1] > g[0] {
		return g
	}
	if g := readable(mem, sp, hi, true); g[1] > g[0] {
		return g
	}
	for _, s := range mem.Segments() {
		if s.Addr > sp && s.Addr < hi && s.Present > 0 {
			return readable(mem, s.Addr, hi, true)
		}
	}
	return [2]uint64{sp, sp}
}

func inSpans(spans []memSpan, addr uint64) bool {
	for _, s := range spans {
		if addr >= s.lo && addr < s.hi {
			return true
		}
	}
	return false
}

// readable returns the part of [lo, hi) from lo on that the core holds
// (dumpedOnly) or can give (from mapped files too).
func readable(mem *coredump.Memory, lo, hi uint64, dumpedOnly bool) [2]uint64 {
	if hi <= lo {
		return [2]uint64{lo, lo}
	}
	// Grow by pages: a read fails at the first byte missing and says how
	// many it got.
	buf := make([]byte, min(hi-lo, 1<<20))
	end := lo
	for end < hi {
		k := min(uint64(len(buf)), hi-end)
		var n int
		if dumpedOnly {
			n, _ = mem.ReadDumped(buf[:k], end)
		} else {
			n, _ = mem.ReadAt(buf[:k], end)
		}
		end += uint64(n)
		if uint64(n) < k {
			break
		}
	}
	return [2]uint64{lo, end}
}

// mergeSpans sorts spans and merges those that overlap or touch.
func mergeSpans(in []memSpan) []memSpan {
	sort.Slice(in, func(i, j int) bool { return in[i].lo < in[j].lo })
	var out []memSpan
	for _, s := range in {
		if s.hi <= s.lo {
			continue
		}
		if n := len(out); n > 0 && s.lo <= out[n-1].hi {
			out[n-1].hi = max(out[n-1].hi, s.hi)
			continue
		}
		out = append(out, s)
	}
	return out
}

// scrub zeroes the bytes of s inside the span env.
func scrub(s *memSpan, env [2]uint64) {
	if env[1] <= env[0] {
		return
	}
	lo, hi := max(s.lo, env[0]), min(s.hi, env[1])
	for a := lo; a < hi; a++ {
		s.data[a-s.lo] = 0
	}
}

// procMaps writes /proc/PID/maps lines for the core's mappings: NT_FILE's
// file-backed ones and the other segments, with the segments' permissions.
func procMaps(c *coredump.Core) []byte {
	type line struct {
		start, end, off uint64
		perm, path      string
	}
	segs := c.Memory().Segments()
	permAt := func(addr uint64) (string, bool) {
		i := sort.Search(len(segs), func(i int) bool { return segs[i].Addr+segs[i].Size > addr })
		if i >= len(segs) || segs[i].Addr > addr {
			return "", false
		}
		s := segs[i]
		p := []byte("---p")
		if s.Read {
			p[0] = 'r'
		}
		if s.Write {
			p[1] = 'w'
		}
		if s.Exec {
			p[2] = 'x'
		}
		return string(p), true
	}
	var lines []line
	covered := func(a, z uint64) bool {
		for _, l := range lines {
			if l.start < z && a < l.end {
				return true
			}
		}
		return false
	}
	for _, m := range c.Mappings {
		perm, ok := permAt(m.Start)
		if !ok {
			perm = "r--p" // gdb's gcore leaves out what it did not dump
		}
		lines = append(lines, line{m.Start, m.End, m.FileOffset, perm, m.Path})
	}
	vdso, hasVDSO := c.VDSO()
	for _, s := range segs {
		if covered(s.Addr, s.Addr+s.Size) {
			continue
		}
		perm, _ := permAt(s.Addr)
		path := ""
		if hasVDSO && s.Addr == vdso {
			path = "[vdso]"
		}
		lines = append(lines, line{s.Addr, s.Addr + s.Size, 0, perm, path})
	}
	sort.SliceStable(lines, func(i, j int) bool { return lines[i].start < lines[j].start })
	var out bytes.Buffer
	for _, l := range lines {
		fmt.Fprintf(&out, "%08x-%08x %s %08x 00:00 0", l.start, l.end, l.perm, l.off)
		if l.path != "" {
			fmt.Fprintf(&out, "                          %s", l.path)
		}
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// WriteFile writes the minidump of c to path, created with mode 0600
// (a minidump holds the process's stacks). An existing file at path is
// kept as path.old; the new file is written beside it and renamed into
// place, so a failed write leaves the old one where it was.
func WriteFile(path string, c *coredump.Core, opts WriteOptions) (WriteStats, error) {
	tmp, err := os.CreateTemp(dirOf(path), ".ustack-minidump-*")
	if err != nil {
		return WriteStats{}, err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return WriteStats{}, err
	}
	st, err := Write(tmp, c, opts)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return st, fmt.Errorf("%s: %w", path, err)
	}
	if _, err := os.Lstat(path); err == nil {
		if err := os.Rename(path, path+".old"); err != nil {
			return st, fmt.Errorf("can't keep the existing %s: %w", path, err)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return st, err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return st, err
	}
	return st, nil
}

func dirOf(path string) string {
	if i := strings.LastIndexByte(path, '/'); i >= 0 {
		return path[:i+1]
	}
	return "."
}
