package mmapfile

import "golang.org/x/sys/unix"

// CanPopulate says whether Populate can work here.
const CanPopulate = true

// Populate maps the pages of b now, read from the file where needed
// (MADV_POPULATE_READ, Linux 5.14), so that their first reads take no page
// fault. It returns false when the kernel does not know the advice.
func Populate(b []byte) bool {
	return unix.Madvise(b, unix.MADV_POPULATE_READ) != unix.EINVAL
}
