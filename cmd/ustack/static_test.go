package main

import (
	"debug/elf"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestInstallIsStatic runs the README's install block as a user would and
// reads the ELF program it installed: a static binary has no program
// interpreter (PT_INTERP) and needs no shared library (DT_NEEDED), so it
// runs on any Linux machine of its architecture.
func TestInstallIsStatic(t *testing.T) {
	j := newJourney(t)
	exe := j.install()
	f, err := elf.Open(exe)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "%s has a program interpreter: it is dynamically linked", exe)
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs, "%s needs shared libraries", exe)
}

// TestNoCgoOutsideGo: no package ustack builds on, other than Go's own
// (net, os/user and runtime/cgo, which CGO_ENABLED=0 replaces by their
// pure Go versions), has C code, so CGO_ENABLED=0 loses nothing.
func TestNoCgoOutsideGo(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{if and .CgoFiles (not .Standard)}}{{.ImportPath}}{{end}}", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=1")
	out, err := cmd.Output()
	require.NoError(t, err)
	assert.Empty(t, strings.TrimSpace(string(out)), "packages with C code")
}
