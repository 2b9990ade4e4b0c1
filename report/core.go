package report

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/cfi"
	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/goruntime"
	"github.com/ustack/ustack/minidump"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/resolve"
	"github.com/ustack/ustack/unwinder"
)

// CoreEvent is the event name of the samples of a core dump: one per thread.
const CoreEvent = "core"

// CoreOptions configure the report of a core dump: the report's Options
// (SymFS, DebugDirs, BuildIDDir, NoInline, NoTailCall, MaxFrames, PACMask,
// Warn apply) and what only a core needs.
type CoreOptions struct {
	Options
	// Exe, when set, is the main executable's file, used instead of the
	// path the core records (for cores whose program has moved or gone).
	// Its build-id must be the one in the core's memory.
	Exe string

	// unwound, when set, sees each thread's unwound frames (WriteMinidump).
	unwound func(frames []unwinder.Frame)
	// Goroutines reports a Go program's goroutines, one sample of event
	// GoroutineEvent each, instead of its threads.
	Goroutines bool
}

// Core is an opened core dump with what its report needs: the core itself,
// the main executable's recorded path and the --exe override. A Core made
// without OpenCore (a coredump.Core opened by the caller) looks for mapped
// files at their recorded paths.
type Core struct {
	*coredump.Core
	// ExePath is the main executable's recorded path (the NT_FILE mapping
	// holding AT_ENTRY); "" when the core does not say.
	ExePath string
	exe     string
	// Minidump is the minidump the core was read from; nil for an ELF
	// core.
	Minidump *minidump.Dump
	// openMapped opens a mapped file where it is found now: --exe for
	// the main executable, else the path under --symfs.
	openMapped func(path string) (*os.File, error)
}

// OpenCore opens the core dump at path: an ELF core or a minidump, plain
// or compressed with zstd, xz or lz4 (recognised by content). Memory an
// ELF core did not dump is read from the mapped files under opts.SymFS,
// the main executable's from opts.Exe when set; a minidump's memory is
// only its own. OpenCore reads opts.SymFS and opts.Exe alone; the other
// fields are RunCore's.
func OpenCore(path string, opts CoreOptions) (*Core, error) {
	return openCore(path, opts, func(copts *coredump.Options) (*coredump.Core, *minidump.Dump, error) {
		if plainELF(path) {
			c, err := coredump.Open(path, copts)
			return c, nil, err
		}
		im, err := coredump.OpenImage(path, copts)
		if err != nil {
			return nil, nil, err
		}
		return parseImage(im, path, copts, opts.SymFS)
	})
}

// OpenCoreReader is OpenCore for a core read from a stream (the pipe from
// coredumpctl dump); name stands for it in messages.
func OpenCoreReader(r io.Reader, name string, opts CoreOptions) (*Core, error) {
	return openCore(name, opts, func(copts *coredump.Options) (*coredump.Core, *minidump.Dump, error) {
		im, err := coredump.OpenImageReader(r, name, copts)
		if err != nil {
			return nil, nil, err
		}
		return parseImage(im, name, copts, opts.SymFS)
	})
}

// plainELF reports whether the file at path starts as an ELF file does:
// coredump.Open maps it and says what it is.
func plainELF(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return true // coredump.Open says why
	}
	defer f.Close()
	var head [4]byte
	n, _ := io.ReadFull(f, head[:])
	comp, _ := coredump.Sniff(head[:n])
	return comp == coredump.None && !minidump.Sniff(head[:n])
}

// parseImage reads a dump's uncompressed bytes as a minidump or an ELF
// core, by its first bytes; the Core closes the image. A minidump's
// modules named without a directory are looked for under symfs
// (locateModules).
func parseImage(im *coredump.Image, name string, copts *coredump.Options, symfs string) (*coredump.Core, *minidump.Dump, error) {
	if minidump.Sniff(im.Data) {
		d, err := minidump.Parse(im.Data, name)
		if err != nil {
			im.Close()
			return nil, nil, err
		}
		locateModules(d, symfs)
		c, err := d.Core()
		if err != nil {
			im.Close()
			return nil, nil, err
		}
		if im.Damage != nil {
			c.Warnings = append(c.Warnings, im.Damage)
		}
		c.OnClose(im.Close)
		return c, d, nil
	}
	c, err := coredump.Parse(im.Data, name, copts)
	if err != nil {
		im.Close()
		if len(im.Data) >= 4 && string(im.Data[:4]) != "\x7fELF" {
			return nil, nil, fmt.Errorf("%s: %w (%s-compressed, but neither an ELF core nor a minidump inside)", name, coredump.ErrNotCore, im.Compression)
		}
		if im.Damage != nil {
			err = fmt.Errorf("%w (%v)", err, im.Damage)
		}
		return nil, nil, err
	}
	if im.Damage != nil {
		c.Warnings = append(c.Warnings, im.Damage)
	}
	c.OnClose(im.Close)
	return c, nil, nil
}

func openCore(name string, opts CoreOptions, open func(*coredump.Options) (*coredump.Core, *minidump.Dump, error)) (*Core, error) {
	cc := &Core{exe: opts.Exe}
	cc.openMapped = func(p string) (*os.File, error) {
		if cc.exe != "" && (p == cc.ExePath || p == cc.exe) {
			// The recorded path of the main executable, or, in a
			// core without NT_FILE, the --exe path its mappings carry
			// (coredump.Options.Executable).
			return os.Open(cc.exe)
		}
		f, err := openUnder(opts.SymFS, p)
		if q, ok := strings.CutSuffix(p, " (deleted)"); ok && err != nil && cc.hasBuildID(p) {
			// Deleted while mapped: the file now at the path, whose
			// build-id coredump checks against the core's.
			return openUnder(opts.SymFS, q)
		}
		return f, err
	}
	copts := &coredump.Options{OpenMapped: func(p string) (coredump.ReaderAt, error) { return cc.openMapped(p) }, Executable: opts.Exe}
	c, md, err := open(copts)
	if err != nil {
		return nil, err
	}
	cc.Core, cc.Minidump = c, md
	cc.ExePath = mainExecutable(c)
	if opts.Exe != "" && cc.ExePath == "" {
		c.Close()
		return nil, fmt.Errorf("%s: --exe %s: the core names no main executable (no NT_FILE mapping holds AT_ENTRY)", name, opts.Exe)
	}
	return cc, nil
}

// openUnder opens the file at path on the machine a core was dumped on,
// under symfs as elfcache resolves object paths there.
func openUnder(symfs, path string) (*os.File, error) {
	p, err := elfcache.SymFSPath(symfs, path)
	if err != nil {
		return nil, err
	}
	return os.Open(p)
}

// mainExecutable returns the recorded path of the mapping holding the
// program's entry point.
func mainExecutable(c *coredump.Core) string {
	entry, ok := c.AuxvValue(coredump.AT_ENTRY)
	if !ok {
		entry, ok = c.AuxvValue(coredump.AT_PHDR)
	}
	for _, m := range c.Mappings {
		if ok && entry >= m.Start && entry < m.End {
			return m.Path
		}
	}
	return ""
}

// coreSession is what RunCore and WriteCoreInfo share: the resolver and
// the address space of the core's mappings.
type coreSession struct {
	core     *Core
	opts     CoreOptions
	cache    *elfcache.Cache // the resolver's, with the section cache
	resolver *resolve.Resolver
	space    *resolve.Space
	maps     []resolve.Mapping
	warnings []string
	vdsoWhy  string // why the core's own vdso image could not be used
	warm     warmer // the tables of the objects needed first, built ahead

	// gos are a Go program's goroutines, read when a thread's stack first
	// ends at a stack switch (goroutineOn).
	gos    []goruntime.Goroutine
	goRead bool
}

// missing is the resolver's objects that could not be used, the vdso with
// the reason the core's image of it could not be read.
func (s *coreSession) missing() map[string]string {
	m := s.resolver.Missing()
	if _, ok := m["[vdso]"]; ok && s.vdsoWhy != "" {
		m["[vdso]"] = s.vdsoWhy
	}
	return m
}

func newCoreSession(c *Core, opts CoreOptions) *coreSession {
	s := &coreSession{core: c, opts: opts}
	if opts.MaxFrames <= 0 {
		s.opts.MaxFrames = 1024
	}
	if opts.BuildIDDir == "" {
		s.opts.BuildIDDir = resolve.DefaultBuildIDDir()
	}
	for _, w := range c.Warnings {
		s.warn(w.Error())
	}
	if c.NoFileNote {
		if opts.Exe != "" {
			mapped := 0
			for _, l := range c.Libraries {
				if l.Err == nil {
					mapped++
				}
			}
			libs, them := fmt.Sprintf("%d shared libraries", mapped), "them"
			if mapped == 1 {
				libs, them = "1 shared library", "it"
			}
			s.warn(fmt.Sprintf("%s lists no mapped files (no NT_FILE note, as qemu-user writes): %s is taken as mapped where the core's AT_ENTRY puts its entry point, and %s where the dynamic linker's list in the core's memory puts %s", c.File, opts.Exe, libs, them))
			for _, l := range c.Libraries {
				if l.Err != nil {
					s.warn(fmt.Sprintf("%s: shared library %s (at %#x in the dynamic linker's list) is left unmapped: %v", c.File, l.Path, l.Base, l.Err))
				}
			}
		} else {
			s.warn(fmt.Sprintf("%s lists no mapped files (no NT_FILE note, as qemu-user writes): no object is known at any address; give the program's executable (--exe)", c.File))
		}
	}
	ropts := &s.opts.Options
	var vdso []byte
	if _, ok := c.VDSO(); ok {
		img, err := c.VDSOImage()
		if err != nil {
			// Said in the summary's missing objects, unless found
			// elsewhere.
			s.vdsoWhy = fmt.Sprintf("not in the core: %v", err)
			if at, _ := c.VDSO(); c.Minidump != nil && errors.Is(err, coredump.ErrUnmapped) {
				// lldb 15 keeps no memory but the stacks and the
				// mappings around the threads' pcs.
				s.vdsoWhy = fmt.Sprintf("not in the minidump: %s holds no memory at %#x, where the vdso was mapped; "+
					"nor was it found by its build-id", c.File, at)
			}
		}
		vdso = img
	}
	if opts.Exe != "" {
		if src := s.exeSource(); src != nil {
			ropts.Objects = src
		}
	}
	// Decompressed debug sections (glibc's line tables) are kept on disk
	// between reports: most of a core's report is spent inflating them
	// otherwise.
	eo := elfcache.Options{DebugDirs: ropts.DebugDirs, SymFS: ropts.SymFS, Fetcher: fetcher(ropts.Debuginfod)}
	if dir, err := elfcache.DefaultSectionCacheDir(); err == nil {
		if sc, err := elfcache.NewSectionCache(dir, 0); err == nil {
			eo.SectionCache = sc
		}
	}
	s.cache = elfcache.NewCache(eo)
	s.resolver = resolve.New(resolve.Options{Cache: s.cache,
		SymFS: ropts.SymFS, DebugDirs: ropts.DebugDirs, BuildIDDir: ropts.BuildIDDir,
		MoreBuildIDDirs: ropts.MoreBuildIDDirs, Objects: ropts.Objects, VDSO: vdso, HostVDSO: s.hostVDSO(vdso), Fetcher: fetcher(ropts.Debuginfod),
		NoInline: ropts.NoInline, NoTailCall: ropts.NoTailCall, Warn: s.warn, Origin: "the core",
	})
	s.maps = coreMappings(c)
	if len(s.maps) == 0 {
		s.warn(fmt.Sprintf("%s: the core lists no mapped files (no NT_FILE note): frames will not be symbolized", c.File))
	}
	s.space = s.resolver.NewSpace(pidOf(c.Core), s.maps)
	return s
}

// hostVDSO returns, for a dump that holds no image of its vdso but names
// its build-id (a minidump's module list: Crashpad and lldb dump none of
// it), the running kernel's vdso, which the resolver takes only where
// that build-id is its own: the dump was written on this kernel. Else nil.
func (s *coreSession) hostVDSO(img []byte) func() []byte {
	read := s.opts.HostVDSO
	if read == nil || len(img) > 0 {
		return nil
	}
	for _, o := range s.core.Objects() {
		if o.Path == "[vdso]" && len(o.BuildID) > 0 && !o.BuildIDPrefix {
			want := o.BuildID
			return func() []byte {
				// Another kernel's vdso is no surprise: it is left
				// out quietly (the resolver would warn of the
				// mismatch).
				b, err := read()
				if err != nil {
					return nil
				}
				if id, err := coredump.FileBuildID(bytes.NewReader(b)); err != nil || !bytes.Equal(id, want) {
					return nil
				}
				return b
			}
		}
	}
	return nil
}

func (s *coreSession) close() {
	s.warm.wait()
	s.resolver.Close()
	s.cache.Close()
}

func (s *coreSession) warn(msg string) {
	s.warnings = append(s.warnings, msg)
	if s.opts.Warn != nil {
		s.opts.Warn(msg)
	}
}

// exeSource checks --exe against the build-id the core's memory holds for
// the main executable and returns it as the object for that path, or nil
// (with a warning naming both ids) when it is another build.
func (s *coreSession) exeSource() resolve.ObjectSource {
	c := s.core
	data, err := os.ReadFile(c.exe)
	if err != nil {
		s.warn(fmt.Sprintf("--exe: %v", err))
		return nil
	}
	obj, err := elfcache.OpenBytes(c.exe, data, elfcache.Options{NoDebugFile: true})
	if err != nil {
		s.warn(fmt.Sprintf("--exe %s: %v", c.exe, err))
		return nil
	}
	got := obj.BuildID()
	obj.Close()
	var want []byte
	for _, o := range c.Objects() {
		if o.Path == c.ExePath {
			want = c.wholeBuildID(o)
		}
	}
	if len(want) > 0 && len(got) > 0 && !bytes.Equal(want, got) {
		s.warn(fmt.Sprintf("--exe %s: build-id mismatch: the core's %s has %x, %s has %x; not used", c.exe, c.ExePath, want, c.exe, got))
		c.exe = "" // nor for reading the program text
		return nil
	}
	return exeSource{path: c.ExePath, file: c.exe, data: data, next: s.opts.Objects}
}

// exeSource supplies --exe for the main executable's recorded path.
type exeSource struct {
	path, file string
	data       []byte
	next       resolve.ObjectSource
}

// Given is true for the main executable's path: --exe comes first.
func (e exeSource) Given(path string) bool { return path == e.path }

func (e exeSource) Object(buildID []byte, path string) ([]byte, string, bool) {
	if path == e.path {
		return e.data, e.file, true
	}
	if e.next != nil {
		return e.next.Object(buildID, path)
	}
	return nil, "", false
}

func pidOf(c *coredump.Core) uint32 {
	if c.Process.Known {
		return uint32(c.Process.PID)
	}
	if len(c.Threads) > 0 {
		return uint32(c.Threads[0].PID)
	}
	return 0
}

// coreMappings turns the core's NT_FILE mappings and its vdso into the
// resolver's mappings: a mapping is executable when its PT_LOAD segment
// is, or, where the core has no segment for it (gdb's gcore leaves out
// what it did not dump), when it is file-backed memory the core did not
// write and its file is not known to be data there (mappedFile.dataAt);
// each carries the build-id read from the core's memory.
func coreMappings(cc *Core) []resolve.Mapping {
	c := cc.Core
	segs := c.Memory().Segments()
	ids := map[string][]byte{}
	for _, o := range c.Objects() {
		if o.BuildID != nil {
			ids[o.Path] = cc.wholeBuildID(o)
		}
	}
	var out []resolve.Mapping
	files := map[string]*mappedFile{}
	for _, m := range c.Mappings {
		if m.Module {
			f := files[m.Path]
			if f == nil {
				f = cc.readMappedFile(m.Path)
				files[m.Path] = f
			}
			out = append(out, moduleMappings(m, f, ids[m.Path])...)
			continue
		}
		prot, exec := uint32(0), true
		i := sort.Search(len(segs), func(i int) bool { return segs[i].Addr+segs[i].Size > m.Start })
		if i >= len(segs) || segs[i].Addr > m.Start {
			f := files[m.Path]
			if f == nil {
				f = cc.readMappedFile(m.Path)
				files[m.Path] = f
			}
			exec = !f.dataAt(m.FileOffset)
		} else {
			sg := segs[i]
			exec = sg.Exec
			if sg.Read {
				prot |= 1
			}
			if sg.Write {
				prot |= 2
			}
			if sg.Exec {
				prot |= 4
			}
		}
		out = append(out, resolve.Mapping{Map: procmaps.Map{Start: m.Start, End: m.End, PgOff: m.FileOffset,
			Path: m.Path, BuildID: ids[m.Path], Prot: prot, Exec: exec}})
	}
	for _, o := range c.Objects() {
		if o.Path == "[vdso]" && o.End > o.Start {
			out = append(out, resolve.Mapping{Map: procmaps.Map{Start: o.Start, End: o.End, Path: "[vdso]",
				BuildID: o.BuildID, Prot: 5, Exec: true}})
		}
	}
	out = append(out, anonCode(segs, out, c.MappingsComplete)...)
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// moduleMappings returns the mappings of a module of a minidump that holds
// no /proc/PID/maps (coredump.Mapping.Module): those of its file's PT_LOAD
// segments, as NT_FILE would list them, its first at the module's base.
// Without its file, what of it is code is unknown: the whole module is one
// mapping, taken for code (its object is then looked for, and named
// missing).
func moduleMappings(m coredump.Mapping, f *mappedFile, buildID []byte) []resolve.Mapping {
	whole := []resolve.Mapping{{Map: procmaps.Map{Start: m.Start, End: m.End, Path: m.Path, BuildID: buildID, Exec: true}}}
	if !f.elf || len(f.loads) == 0 {
		return whole
	}
	const page = 4096
	first := f.loads[0].Vaddr &^ (page - 1)
	for _, p := range f.loads[1:] {
		first = min(first, p.Vaddr&^(page-1))
	}
	bias := m.Start - first
	var out []resolve.Mapping
	for _, p := range f.loads {
		if p.Filesz == 0 {
			continue
		}
		start := (p.Vaddr + bias) &^ (page - 1)
		end := (p.Vaddr + bias + p.Filesz + page - 1) &^ (page - 1)
		if start >= m.End || end <= start {
			return whole // not the image the module list describes
		}
		prot := uint32(0)
		if p.Flags&elf.PF_R != 0 {
			prot |= 1
		}
		if p.Flags&elf.PF_W != 0 {
			prot |= 2
		}
		if p.Flags&elf.PF_X != 0 {
			prot |= 4
		}
		out = append(out, resolve.Mapping{Map: procmaps.Map{Start: start, End: end, PgOff: p.Off &^ (page - 1),
			Path: m.Path, BuildID: buildID, Prot: prot, Exec: p.Flags&elf.PF_X != 0}})
	}
	return out
}

// anonPath is the path of anonymous executable memory, as perf names it.
const anonPath = "//anon"

// anonCode returns the executable segments of user memory no mapping in
// have covers (NT_FILE lists only file-backed memory) as anonymous
// mappings, "//anon" as perf names them: the code a JIT (V8, the JVM,
// LuaJIT) wrote, which the unwinder walks by frame pointers and a perf
// map (/tmp/perf-PID.map) names. Without them a thread stopped in JIT code
// ended at its first frame with no_mapping. Where the core's NT_FILE is
// missing or damaged (complete false), memory outside it need not be
// anonymous: those segments get no path (an unknown mapping), not "//anon".
func anonCode(segs []coredump.Segment, have []resolve.Mapping, complete bool) []resolve.Mapping {
	path := anonPath
	if !complete {
		path = ""
	}
	var out []resolve.Mapping
	for _, sg := range segs {
		// The upper half is the kernel's ([vsyscall] on x86_64).
		if !sg.Exec || sg.Size == 0 || sg.Addr >= 1<<63 {
			continue
		}
		covered := false
		for i := range have {
			if have[i].Start < sg.Addr+sg.Size && sg.Addr < have[i].End {
				covered = true
				break
			}
		}
		if covered {
			continue
		}
		prot := uint32(4)
		if sg.Read {
			prot |= 1
		}
		if sg.Write {
			prot |= 2
		}
		out = append(out, resolve.Mapping{Map: procmaps.Map{Start: sg.Addr, End: sg.Addr + sg.Size,
			Path: path, Prot: prot, Exec: true}})
	}
	return out
}

// wholeBuildID returns the object's build-id. A minidump's PDB70 record
// holds only its first 16 bytes: the file at the object's path (under
// --symfs) gives the whole id when its own begins with them. Otherwise
// the prefix stays, and the resolver refuses the file with a warning that
// names both ids; build-id caches and debuginfod, which need the whole
// id, cannot be asked.
func (c *Core) wholeBuildID(o coredump.Object) []byte {
	if !o.BuildIDPrefix {
		return o.BuildID
	}
	f, err := c.openFile(o.Path)
	if err != nil {
		return o.BuildID
	}
	defer f.Close()
	if id, err := coredump.FileBuildID(f); err == nil && len(id) > len(o.BuildID) && bytes.HasPrefix(id, o.BuildID) {
		return id
	}
	return o.BuildID
}

// hasBuildID reports whether the core's memory gives the build-id of the
// object mapped from path.
func (c *Core) hasBuildID(path string) bool {
	if c.Core == nil {
		return false
	}
	for _, o := range c.Objects() {
		if o.Path == path && o.BuildID != nil {
			return true
		}
	}
	return false
}

// openFile opens a mapped file where it is found now (openMapped, else
// at its recorded path).
func (c *Core) openFile(path string) (*os.File, error) {
	if c.openMapped == nil {
		return os.Open(path)
	}
	return c.openMapped(path)
}

// isData reports whether the file mapped at path, where it is found now,
// is no ELF object (a locale archive, gconv's module cache: data a
// process maps read-only), so that a mapping of it the core has no
// segment for is not taken for code whose object is missing. A file that
// cannot be read is not known to be data.
func (c *Core) isData(path string) bool {
	f, err := c.openFile(path)
	if err != nil {
		return false
	}
	defer f.Close()
	var magic [4]byte
	n, err := f.ReadAt(magic[:], 0)
	if n < len(magic) && err != io.EOF {
		return false
	}
	return !bytes.Equal(magic[:n], []byte(elf.ELFMAG))
}

// mappedFile is what the file at a mapping's path, where it is found now,
// says of the mappings of it the core has no segment for.
type mappedFile struct {
	known bool             // the file was read
	elf   bool             // it is an ELF object
	code  []elf.ProgHeader // its executable loadable segments
	loads []elf.ProgHeader // all its loadable segments
}

// readMappedFile reads the file mapped at path: whether it is an ELF
// object, and its executable segments. A file that cannot be read is
// known as nothing.
func (c *Core) readMappedFile(path string) *mappedFile {
	mf := &mappedFile{}
	f, err := c.openFile(path)
	if err != nil {
		return mf
	}
	defer f.Close()
	var magic [4]byte
	if n, err := f.ReadAt(magic[:], 0); n < len(magic) && err != io.EOF {
		return mf
	} else if !bytes.Equal(magic[:n], []byte(elf.ELFMAG)) {
		mf.known = true // no ELF object: data
		return mf
	}
	ef, err := elf.NewFile(f)
	if err != nil {
		return mf
	}
	mf.known, mf.elf = true, true
	for _, p := range ef.Progs {
		if p.Type != elf.PT_LOAD {
			continue
		}
		mf.loads = append(mf.loads, p.ProgHeader)
		if p.Flags&elf.PF_X != 0 {
			mf.code = append(mf.code, p.ProgHeader)
		}
	}
	return mf
}

// dataAt reports whether a mapping of the file at file offset off is data:
// the file is no ELF object (a locale archive, gconv's module cache), or
// one none of whose executable segments holds off (a debugger's or a
// linker's mapping of its sections: gdb maps those of the programs it
// debugs). Not known to be data, it is taken for code, whose object is
// then looked for.
func (mf *mappedFile) dataAt(off uint64) bool {
	if !mf.known {
		return false
	}
	if !mf.elf {
		return true
	}
	for _, p := range mf.code {
		// A mapping of the segment begins at most a page (64 KiB on
		// some arm64 kernels) before its file offset.
		if off < p.Off+p.Filesz && off+maxPageSize > p.Off {
			return false
		}
	}
	return true
}

// maxPageSize is the largest page size of the architectures read.
const maxPageSize = 64 << 10

// RunCore reports every thread of a core dump as one sample of event
// CoreEvent, the signalled thread first: it unwinds each thread's registers
// through the core's whole memory (and the mapped files for what the core
// did not dump), symbolizes the frames with the objects the core's mappings
// name, and calls emit for each in turn. The signalled thread's sample
// carries the signal's name in Signal. emit's Sample is valid only during
// the call.
func RunCore(c *Core, opts CoreOptions, emit func(*Sample) error) (*Summary, error) {
	s := newCoreSession(c, opts)
	defer s.close()
	a := c.Arch
	sum := &Summary{Stops: map[string]int{}, Skipped: map[string]int{}, MaxFrames: s.opts.MaxFrames, core: true, goroutines: opts.Goroutines}
	defaultMask := opts.PACMask
	if a == arch.ARM64 {
		sum.PACMask, sum.PACSource = opts.PACMask, "--pac-mask"
		if opts.PACMask == 0 {
			defaultMask = arch.PACMask(48)
			sum.PACMask, sum.PACSource = defaultMask, "default: 48-bit virtual addresses"
		}
	}
	unws := map[uint64]*unwinder.Unwinder{}
	unwinderFor := func(mask uint64) *unwinder.Unwinder {
		u := unws[mask]
		if u == nil {
			u = unwinder.New(a, unwinder.Options{PACMask: mask})
			unws[mask] = u
		}
		return u
	}
	var cache unwinder.Cache
	sym := resolve.NewSymbolizer()
	frames := make([]unwinder.Frame, s.opts.MaxFrames)
	mem := c.Memory()
	// The frame-pointer audit (fpaudit.go): a debugger's walk, bounded
	// like the CFI walk rather than by the kernel's max_stack.
	var fp fpSample
	var fpFrames []unwinder.FPFrame
	as := s.space.AddressSpace()
	s.warmThreads(opts.Filter)
	// Each thread stands for one stack: period 1 (pprof's and the flame
	// graph's weights).
	if opts.Goroutines {
		if err := s.runGoroutines(sum, unwinderFor(defaultMask), &cache, sym, frames, emit); err != nil {
			return sum, err
		}
		s.finish(sum)
		return sum, nil
	}
	out := Sample{Event: CoreEvent, Period: 1, space: s.space}
	notDumped := 0 // threads whose stack the kernel left out of the core
	for i := range c.Threads {
		th := &c.Threads[i]
		comm := th.Name
		if comm == "" {
			comm = c.Process.Comm
		}
		if f := opts.Filter; f != nil && !f.Keep(uint32(th.PID), uint32(th.TID), 0, 0, comm) {
			sum.Filtered++
			continue
		}
		mask := defaultMask
		if a == arch.ARM64 && th.PAC.Known && opts.PACMask == 0 {
			mask = th.PAC.Insn | th.PAC.Data
			sum.PACMask, sum.PACSource = mask, "NT_ARM_PAC_MASK"
		}
		pc, _ := th.Regs.Get(a.PC())
		out.Index, out.Pid, out.Tid, out.Comm, out.IP = i, uint32(th.PID), uint32(th.TID), comm, pc
		out.Signal = ""
		if i == 0 && c.Signal != nil && c.Signal.Signo != 0 {
			out.Signal = c.Signal.Name()
		}
		out.StackSize = stackBytes(c.Core, th)
		res := unwinderFor(mask).Unwind(&cache, as, &th.Regs, mem, frames)
		if n, err := cutInstallCaller(as, &th.Regs, frames[:res.Frames]); err != nil {
			res.Frames, res.Stop, res.Err = n, unwinder.StopStackSwitch, err
		}
		if res.Stop == unwinder.StopStackSwitch {
			if g := s.goroutineOn(uint64(th.TID)); g != nil {
				res = s.goSwitched(unwinderFor(mask), &cache, g, &th.Regs, frames, res)
			}
		}
		out.Stop, out.StopErr = res.Stop.String(), ""
		if res.Err != nil {
			out.StopErr = res.Err.Error()
		} else if res.Stop == unwinder.StopTruncated {
			if why, filtered := stackNotDumped(c.Core, th); why != "" {
				out.StopErr = why
				if filtered {
					notDumped++
				}
			}
		}
		if opts.unwound != nil {
			opts.unwound(frames[:res.Frames])
		}
		out.FPFrames, out.FPStop, out.FPLost = 0, "", nil
		if res, ok := fp.audit(unwinderFor(mask), &th.Regs, mem, nil, frames[:res.Frames], s.space, s.opts.MaxFrames, &fpFrames); ok {
			out.FPFrames, out.FPStop = res.Frames, res.Stop.String()
			sum.addFP(&fp)
		}
		out.Frames = out.Frames[:0]
		sym.Reset()
		for k := 0; k < res.Frames; k++ {
			start := len(out.Frames)
			out.Frames = sym.Append(out.Frames, s.space, &frames[k], resolve.HowOf(frames[k].Method))
			fp.markLost(&out, start, k)
		}
		sum.Samples++
		sum.Stops[out.Stop]++
		if errors.Is(res.Err, cfi.ErrInstallingHandler) {
			sum.installing++
		}
		sum.countNoUnwind(&out)
		if err := emit(&out); err != nil {
			return sum, err
		}
	}
	if notDumped > 0 {
		s.warn(fmt.Sprintf("%s holds no stack memory of %d of %d threads: the kernel did not dump it (the process's /proc/PID/coredump_filter "+
			"left out anonymous private memory, bit 0, or the stacks were marked MADV_DONTDUMP): those stacks end where their registers alone lead", c.File, notDumped, sum.Samples))
	}
	s.finish(sum)
	return sum, nil
}

// warmThreads builds ahead (warmer) the tables of the objects the report
// needs first: the main executable's and those holding the kept threads'
// pcs (glibc's, for threads blocked in system calls), while the first
// threads are unwound.
func (s *coreSession) warmThreads(f *SampleFilter) {
	as := s.space.AddressSpace()
	s.warm.tailCalls = !s.opts.NoTailCall
	if m, ok := s.space.MainMapping(); ok {
		s.warm.start(s.space, s.space.Object(as.Find(m.Start)))
	}
	c := s.core
	for i := range c.Threads {
		th := &c.Threads[i]
		comm := th.Name
		if comm == "" {
			comm = c.Process.Comm
		}
		if f != nil && !f.Keep(uint32(th.PID), uint32(th.TID), 0, 0, comm) {
			continue
		}
		if pc, ok := th.Regs.Get(c.Arch.PC()); ok {
			s.warm.start(s.space, s.space.Object(as.Find(pc)))
		}
	}
}

// finish fills in what the summary says of the whole core.
func (s *coreSession) finish(sum *Summary) {
	sum.Missing = s.missing()
	sum.fix = coreFix(s.core, s.opts)
	sum.warned = s.opts.Warn != nil
	if s.opts.ObjectSources {
		sum.Objects = s.resolver.Objects()
	}
}

// stackNotDumped says, for a thread whose unwind ran out of stack, when
// the core holds none of its stack at the stack pointer: the kernel did
// not dump that memory (filtered: /proc/PID/coredump_filter left out
// anonymous private memory, or the process marked it MADV_DONTDUMP), or
// the core file was cut short before it. "" when the core holds the
// stack there.
func stackNotDumped(c *coredump.Core, th *coredump.Thread) (why string, filtered bool) {
	sp, _ := th.Regs.Get(c.Arch.SP())
	sg, ok := c.Memory().SegmentAt(sp)
	switch {
	case !ok || sp < sg.Addr+sg.Present:
		return "", false
	case sp >= sg.Addr+sg.Dumped:
		return fmt.Sprintf("the core holds none of the stack: the memory at the stack pointer %#x is mapped but was not dumped "+
			"(the process's /proc/PID/coredump_filter left out anonymous private memory, bit 0, or it was marked MADV_DONTDUMP)", sp), true
	default:
		return fmt.Sprintf("the core holds none of the stack: the memory at the stack pointer %#x lies past the end of the truncated core", sp), false
	}
}

// stackBytes returns how many bytes of the thread's stack the core holds
// from its stack pointer on; at least 1, since the whole of the core's
// memory was there to unwind from.
func stackBytes(c *coredump.Core, th *coredump.Thread) int {
	sp, _ := th.Regs.Get(c.Arch.SP())
	if sg, ok := c.Memory().SegmentAt(sp); ok {
		if sp < sg.Addr+sg.Present {
			return int(min(sg.Addr+sg.Present-sp, 1<<30))
		}
		return 1
	}
	// A stack overflow: the stack pointer is in the guard gap below the
	// stack. The unwinder reads what it can.
	return 1
}
