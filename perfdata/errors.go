package perfdata

import (
	"errors"
	"fmt"
)

// FormatError reports malformed or truncated perf.data input: what was
// wrong and the byte offset in the file (or pipe stream) where it was found.
type FormatError struct {
	// Path is the file name when the Reader was made by Open.
	Path string
	// Offset is the byte offset of the offending record or structure.
	Offset int64
	Msg    string
	// Truncated is set when the input ended early; then errors.Is(err,
	// ErrTruncated) holds.
	Truncated bool
}

// Error formats the error as "perfdata: [path: ]offset 0x…: message".
func (e *FormatError) Error() string {
	if e.Path != "" {
		return fmt.Sprintf("perfdata: %s: offset %#x: %s", e.Path, e.Offset, e.Msg)
	}
	return fmt.Sprintf("perfdata: offset %#x: %s", e.Offset, e.Msg)
}

// Unwrap returns ErrTruncated for truncation errors, nil otherwise.
func (e *FormatError) Unwrap() error {
	if e.Truncated {
		return ErrTruncated
	}
	return nil
}

// ErrTruncated is what FormatError unwraps to when the input ends early.
var ErrTruncated = errors.New("perfdata: truncated input")

func formatErr(off int64, format string, args ...any) error {
	return &FormatError{Offset: off, Msg: fmt.Sprintf(format, args...)}
}

func truncErr(off int64, format string, args ...any) error {
	return &FormatError{Offset: off, Msg: fmt.Sprintf(format, args...), Truncated: true}
}

// withPath sets the path of a FormatError.
func withPath(err error, path string) error {
	var fe *FormatError
	if errors.As(err, &fe) {
		fe.Path = path
	}
	return err
}
