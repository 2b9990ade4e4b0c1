package debuginfod_test

import (
	"bytes"
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ustack/ustack/debuginfod"
)

// FuzzResponse serves arbitrary answers (status code and body) and checks
// what the client makes of them: the cache gets a file only when the body
// is an ELF file with the requested build-id, and then exactly the body; a
// 404 leaves an empty negative entry; anything else leaves nothing, not
// even a temporary file. Nothing may panic or hang.
func FuzzResponse(f *testing.F) {
	data, id := testELF(f)
	f.Add(200, data)
	f.Add(200, data[:2048])
	f.Add(200, []byte("\x7fELF"))
	f.Add(404, []byte("not found"))
	f.Add(500, []byte{})
	f.Add(302, []byte("moved"))
	var status int
	var body []byte
	s, _ := server(f, func(w http.ResponseWriter, r *http.Request) {
		if status == http.StatusFound {
			w.Header().Set("Location", "/elsewhere")
		}
		w.WriteHeader(status)
		w.Write(body)
	})
	f.Fuzz(func(t *testing.T, st int, b []byte) {
		if st < 200 || st > 599 {
			st = 200
		}
		status, body = st, b
		cache := t.TempDir()
		c := debuginfod.New(debuginfod.Options{URLs: []string{s.URL}, CacheDir: cache,
			RequestTimeout: 5 * time.Second, MaxSize: 1 << 20})
		defer c.Close()
		p, err := c.Fetch(context.Background(), id, debuginfod.Debuginfo)
		var files []string
		filepath.Walk(cache, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				files = append(files, p)
			}
			return nil
		})
		want := c.CachePath(id, debuginfod.Debuginfo)
		switch {
		case err == nil:
			got, rerr := os.ReadFile(p)
			if p != want || rerr != nil || !bytes.Equal(got, b) || debuginfod.Verify(p, id) != nil {
				t.Fatalf("accepted %d bytes (status %d) as %s", len(b), st, p)
			}
			if len(files) != 1 {
				t.Fatalf("cache holds %v", files)
			}
		case st == http.StatusNotFound:
			if len(files) != 1 || files[0] != want {
				t.Fatalf("404: cache holds %v", files)
			}
		default:
			if len(files) != 0 {
				t.Fatalf("refused answer (%v) left %v", err, files)
			}
		}
	})
}
