package archive_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ustack/ustack/archive"
)

// Write an archive as ustack record does, then serve an object from it in
// the form a report's resolver asks for.
func Example() {
	dir, _ := os.MkdirTemp("", "ustack-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "perf.data.ustack")

	w, err := archive.Create(path, archive.Meta{Hostname: "build-host"}, false)
	if err != nil {
		panic(err)
	}
	w.AddObject([]byte{0xab, 0xcd}, "/usr/bin/app", []byte("\x7fELF..."))
	w.AddKallsyms([]byte("ffffffff81000000 T _text\n"))
	if err := w.Close(); err != nil {
		panic(err)
	}
	if err := archive.Compact(path); err != nil {
		panic(err)
	}

	r, err := archive.Open(path, archive.Options{Warn: func(msg string) { fmt.Println("warning:", msg) }})
	if err != nil {
		panic(err)
	}
	defer r.Close()
	data, name, ok := r.Object([]byte{0xab, 0xcd}, "/usr/bin/app")
	fmt.Println(r.Meta().Hostname, name, len(data), ok)
	for _, e := range r.Entries() {
		fmt.Println(e.Kind, e.Member, e.Gzip)
	}
	// Output:
	// build-host /usr/bin/app 7 true
	// meta ustack-archive.json false
	// object objects/abcd.gz true
	// kallsyms kallsyms.gz true
	// manifest manifest.json false
}
