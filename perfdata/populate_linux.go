package perfdata

import "golang.org/x/sys/unix"

// canPopulate says whether populatePages can work here.
const canPopulate = true

// populatePages maps the pages of b, read from the file where needed
// (MADV_POPULATE_READ, Linux 5.14). It returns false when the kernel does
// not know the advice.
func populatePages(b []byte) bool {
	return unix.Madvise(b, unix.MADV_POPULATE_READ) != unix.EINVAL
}
