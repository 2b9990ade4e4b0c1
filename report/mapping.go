package report

import "github.com/ustack/ustack/resolve"

// Mapping is one executable mapping of a sample's process, for writers
// that describe the address space (pprof's mappings).
type Mapping = resolve.MappingInfo

// MappingOf returns the mapping holding a user frame's address in the
// sample's process; false for kernel frames and addresses in no mapping.
func (s *Sample) MappingOf(f *Frame) (Mapping, bool) {
	if f.Kernel || s.space == nil {
		return Mapping{}, false
	}
	return s.space.Mapping(s.space.AddressSpace().Find(f.Addr))
}

// MainMapping returns the sample's main binary: the process's executable
// file mapping at the lowest address; false when the process has no
// file-backed executable mapping.
func (s *Sample) MainMapping() (Mapping, bool) {
	if s.space == nil {
		return Mapping{}, false
	}
	return s.space.MainMapping()
}
