package elfcache

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestSources checks what Sources says for objects whose information is
// known to come from one place each (readelf -S of the committed files:
// goprog has .debug_frame, .symtab and DWARF; goprog_stripped none of
// them; chain_stripped keeps .eh_frame, its .symtab and DWARF are in
// objects/x86_64/debug by build-id).
func TestSources(t *testing.T) {
	debugDir := "../testdata/objects/x86_64/debug"
	chain := mustOpen(t, "../testdata/objects/x86_64/chain_stripped", Options{DebugDirs: []string{debugDir}})
	id := readelfBuildID(t, "../testdata/objects/x86_64/chain_stripped")
	for _, c := range []struct {
		name string
		o    *Object
		want Sources
	}{
		{"go unstripped", mustOpen(t, goprogAMD64, Options{NoDebugFile: true}),
			Sources{Unwind: OriginFile, Symbols: OriginFile, Lines: OriginFile}},
		{"go stripped", mustOpen(t, goprogStrippedAMD64, Options{NoDebugFile: true}),
			Sources{Unwind: OriginGoPCLN, Symbols: OriginGoPCLN, Lines: OriginGoPCLN}},
		{"debug file by build-id", chain,
			Sources{Unwind: OriginFile, Symbols: OriginDebugFile, Lines: OriginDebugFile,
				DebugFile: filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug")}},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, c.o.Sources())
		})
	}
	assert.Equal(t, "pclntab", OriginGoPCLN.String())
	assert.Equal(t, "debuginfod", OriginDebuginfod.String())
}
