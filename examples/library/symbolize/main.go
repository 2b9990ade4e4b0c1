// Command symbolize names normalized addresses ("path build-id offset" lines, from livestack) by
// build-id: the path, the build-id dirs given (.build-id/XX/REST), else $DEBUGINFOD_URLS.
package main

import (
	"bufio"
	"encoding/hex"
	"fmt"
	"log"
	"os"

	"github.com/ustack/ustack/debuginfod"
	"github.com/ustack/ustack/tracer"
)

func main() {
	opts := tracer.Options{BuildIDDirs: os.Args[1:]}
	if c := debuginfod.New(debuginfod.Options{}); c.Enabled() {
		opts.Fetcher = c
	}
	t := tracer.New(opts)
	defer t.Close()
	w := t.NewWalker()
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		var n tracer.Normalized
		var id string
		if _, err := fmt.Sscanf(sc.Text(), "%s %s 0x%x", &n.Path, &id, &n.FileOffset); err != nil {
			log.Fatalf("line %q: %v", sc.Text(), err)
		}
		n.BuildID, _ = hex.DecodeString(id)
		for _, f := range w.SymbolizeNormalized(n) {
			fmt.Println(f.Symbol)
		}
	}
}
