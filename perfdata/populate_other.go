//go:build !linux

package perfdata

const canPopulate = false

func populatePages(b []byte) bool { return false }
