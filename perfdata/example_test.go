package perfdata_test

import (
	"fmt"
	"io"
	"log"

	"github.com/ustack/ustack/perfdata"
)

// Reading a recording in time order, as perf script does: OpenMapped reads
// the file in place, a Sorter orders its records, and each sample is
// released once done with, so that a large file is read through a few
// reused chunks.
func ExampleSorter() {
	r, err := perfdata.OpenMapped("testdata/dwarf.data")
	if err != nil {
		log.Fatal(err)
	}
	defer r.Close()
	s := perfdata.NewSorter(r, 0)
	var samples, stackBytes, maps int
	for {
		rec, err := s.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			log.Fatal(err)
		}
		switch rec := rec.(type) {
		case *perfdata.Sample:
			samples++
			stackBytes += len(rec.Stack())
			rec.Release() // its stack copy is not used past here
		case *perfdata.Mmap:
			maps++
		}
	}
	fmt.Printf("%d samples, %d bytes of user stack, %d mmaps\n", samples, stackBytes, maps)
	// Output: 24 samples, 23552 bytes of user stack, 26 mmaps
}
