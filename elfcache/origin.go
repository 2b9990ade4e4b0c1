package elfcache

// Origin says where one kind of an object's information came from, for a
// report's summary.
type Origin uint8

// The places information comes from.
const (
	// OriginNone: the object has no such information.
	OriginNone Origin = iota
	// OriginFile: the object file itself, wherever the caller found it
	// (its path, SymFS, perf's build-id cache or a recording's archive).
	OriginFile
	// OriginDebugFile: a separate debug file found locally, by build-id
	// or debug link.
	OriginDebugFile
	// OriginArchive: a separate debug file carried by the recording's
	// archive (Options.DebugData).
	OriginArchive
	// OriginDebuginfod: a file fetched through Options.Fetcher.
	OriginDebuginfod
	// OriginMiniDebugInfo: the xz-compressed .gnu_debugdata.
	OriginMiniDebugInfo
	// OriginGoPCLN: Go's .gopclntab.
	OriginGoPCLN
	// OriginJITDump: a JIT's jitdump (jit-PID.dump), for JIT code, which
	// no ELF file describes (set by package resolve).
	OriginJITDump
)

var originNames = [...]string{"none", "file", "debug file", "archive", "debuginfod", "MiniDebugInfo", "pclntab", "jitdump"}

// String returns the origin's name as a summary prints it.
func (g Origin) String() string {
	if int(g) < len(originNames) {
		return originNames[g]
	}
	return "origin?"
}

// Sources says where an object's unwind rows, function names and source
// lines come from.
type Sources struct {
	// Unwind is where the CFI (or, for Go, the pcsp tables) comes from.
	Unwind Origin
	// Symbols is where the function names come from.
	Symbols Origin
	// Lines is where the line tables and inline chains come from: DWARF,
	// or for Go binaries without it (OriginGoPCLN) the pclntab.
	Lines Origin
	// DebugFile is the path of the separate debug file; "" when none.
	DebugFile string
	// Supplementary is the path of the debug file's dwz supplementary
	// file; "" when none.
	Supplementary string
	// SplitDWARF are the .dwo files and .dwp package that split units'
	// inline chains were read from so far (gcc -gsplit-dwarf: the
	// line tables stay in the object), sorted; nil when none was read.
	SplitDWARF []string
}

// Sources reports where the object's information comes from. It builds
// whatever has not been built yet (the CFI table, the symbol table, the
// line index), so call it for a summary, not per sample.
func (o *Object) Sources() Sources {
	var s Sources
	if o.closed.Load() {
		return s
	}
	o.cfiOnce.Do(o.buildCFI)
	switch {
	case o.table != nil:
		s.Unwind = o.cfiFrom
	case o.goTable() != nil:
		s.Unwind = OriginGoPCLN
	}
	o.symbols()
	s.Symbols = o.symFrom
	if x := o.lineIndex(); x != nil {
		s.Lines = x.owner.origin()
		if a, _ := x.owner.supplementary(); a != nil && x.alt != nil {
			s.Supplementary = a.file
		}
		s.SplitDWARF = x.owner.splitFiles()
	} else if o.goTable() != nil {
		s.Lines = OriginGoPCLN
	}
	if d := o.DebugFile(); d != nil {
		s.DebugFile = d.file
	}
	return s
}

// origin says where the file of o came from.
func (o *Object) origin() Origin {
	switch {
	case o.fetched:
		return OriginDebuginfod
	case o.archive:
		return OriginArchive
	case o.isDebug:
		return OriginDebugFile
	}
	return OriginFile
}
