package archive

import (
	"errors"
	"fmt"
)

// FormatError reports damage in an archive: the file, the byte offset where
// it was found, the member it cost (when known) and what was wrong.
type FormatError struct {
	// Path is the archive's file name (Options.Name).
	Path string
	// Offset is the byte offset in the archive of the damaged structure.
	Offset int64
	// Member is the tar member the damage cost, "" when none is known.
	Member string
	Msg    string
}

// Error formats the error as "archive PATH: offset 0x…: member M: message".
func (e *FormatError) Error() string {
	s := "archive"
	if e.Path != "" {
		s += " " + e.Path
	}
	s += fmt.Sprintf(": offset %#x", e.Offset)
	if e.Member != "" {
		s += ": member " + e.Member
	}
	return s + ": " + e.Msg
}

// ErrNotArchive is what NewReader's error unwraps to when the input holds
// no ustack archive member at all.
var ErrNotArchive = errors.New("not a ustack archive")
