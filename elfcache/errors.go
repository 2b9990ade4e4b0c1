package elfcache

import (
	"errors"
	"fmt"
)

// Error describes a problem with one object file: which file, which section
// (empty when the problem is not in a section) and at which file or section
// offset (negative when unknown).
type Error struct {
	// Path is the file name as given to Open (or the debug file's path).
	Path string
	// Section names the ELF section, such as ".debug_frame"; it may be empty.
	Section string
	// Offset is the byte offset of the problem, within the section when
	// Section is set and within the file otherwise; negative when unknown.
	Offset int64
	// Err is the underlying error.
	Err error
}

// Error returns "elfcache: PATH: SECTION at offset 0xN: ERR", leaving out
// the parts that are unknown.
func (e *Error) Error() string {
	s := "elfcache: " + e.Path
	if e.Section != "" {
		s += ": section " + e.Section
	}
	if e.Offset >= 0 {
		s += fmt.Sprintf(" at offset %#x", e.Offset)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// ErrUnsupported is wrapped by the errors Open returns for ELF files that
// are valid but that ustack cannot unwind: 32-bit or big-endian files and
// machines other than x86_64 and aarch64.
var ErrUnsupported = errors.New("unsupported ELF file")

// ErrClosed is returned for objects whose file has been closed.
var ErrClosed = errors.New("object is closed")

func newErr(path, section string, off int64, err error) *Error {
	return &Error{Path: path, Section: section, Offset: off, Err: err}
}
