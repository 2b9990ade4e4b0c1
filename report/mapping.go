package report

// Mapping is one executable mapping of a sample's process, for writers
// that describe the address space (pprof's mappings).
type Mapping struct {
	// Start and Limit bound the mapping's addresses [Start, Limit);
	// Offset is the file offset mapped at Start.
	Start, Limit, Offset uint64
	// File is the mapped path ("[vdso]" for the vdso).
	File string
	// BuildID is the object's build-id, when ustack found the object.
	BuildID []byte
}

// MappingOf returns the mapping holding a user frame's address in the
// sample's process; false for kernel frames and addresses in no mapping.
func (s *Sample) MappingOf(f *Frame) (Mapping, bool) {
	if f.Kernel || s.space == nil {
		return Mapping{}, false
	}
	i := s.space.as.Find(f.Addr)
	if i < 0 || i >= len(s.space.infos) {
		return Mapping{}, false
	}
	return s.space.mapping(i), true
}

// MainMapping returns the sample's main binary: the process's executable
// file mapping at the lowest address (where both position-dependent and
// PIE executables sit below their libraries); false when the process has
// no file-backed executable mapping.
func (s *Sample) MainMapping() (Mapping, bool) {
	if s.space == nil {
		return Mapping{}, false
	}
	for i := range s.space.infos {
		m := s.space.as.Mapping(i)
		if m.Exec && !isPseudoPath(s.space.infos[i].path) && !isAnon(s.space.infos[i].path) {
			return s.space.mapping(i), true
		}
	}
	return Mapping{}, false
}

func (sp *space) mapping(i int) Mapping {
	m, info := sp.as.Mapping(i), &sp.infos[i]
	out := Mapping{Start: m.Start, Limit: m.End, Offset: info.pgoff, File: info.path}
	if info.obj != nil {
		out.BuildID = info.obj.BuildID()
	}
	return out
}
