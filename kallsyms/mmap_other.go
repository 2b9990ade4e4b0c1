//go:build !unix

package kallsyms

import "os"

// readEntry returns the bytes of the cache entry at path (see the unix
// version, which maps them).
func readEntry(path string) (b []byte, release func(keep bool), err error) {
	b, err = os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if len(b) > maxEntryBytes {
		return nil, nil, errEntrySize
	}
	return b, func(bool) {}, nil
}
