package testprog

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io/fs"
	"path/filepath"
	"testing"
)

// Files returns the regular files below dir, in lexical order (for tests
// that inspect a cache directory).
func Files(dir string) []string {
	var files []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			files = append(files, p)
		}
		return nil
	})
	return files
}

// JSONLines decodes output with one JSON object per line (ustack report
// --format json) into values of type T, failing t on a line that does not
// decode.
func JSONLines[T any](t testing.TB, data []byte) []T {
	t.Helper()
	var out []T
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Fatalf("%v: %s", err, sc.Text())
		}
		out = append(out, v)
	}
	return out
}
