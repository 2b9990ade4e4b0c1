package procmaps

import (
	"strconv"
	"strings"
)

// Unlinked reports whether path, a mapping's name as /proc/PID/maps, a
// perf MMAP2 record or a core's NT_FILE gives it, names a file that no
// path reaches any more: one deleted while mapped (the kernel appends
// " (deleted)": a library upgraded under a running process) or a memfd
// ("/memfd:NAME", a program or library run from memory).
func Unlinked(path string) bool {
	return strings.HasSuffix(path, " (deleted)") || strings.HasPrefix(path, "/memfd:")
}

// MappedFile returns the name under /proc through which the file mapped at
// [start, end) by live process pid can be opened, deleted or not: the
// kernel's /proc/PID/map_files/START-END, a link to the very file (for a
// reader with CAP_SYS_ADMIN or CAP_CHECKPOINT_RESTORE; others get EPERM).
// It names nothing once the process has gone or unmapped the range.
func MappedFile(pid int, start, end uint64) string {
	b := make([]byte, 0, 64)
	b = append(b, "/proc/"...)
	b = strconv.AppendInt(b, int64(pid), 10)
	b = append(b, "/map_files/"...)
	b = strconv.AppendUint(b, start, 16)
	b = append(b, '-')
	b = strconv.AppendUint(b, end, 16)
	return string(b)
}
