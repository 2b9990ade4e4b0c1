package report

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/perfdata"
)

// TestHostVDSOOnlyForThisKernel checks when the running kernel's vdso may
// stand in for a recording's: a recording of this kernel release, or one
// that names its vdso's build-id (the resolver then compares it), never a
// recording of another kernel or of an unknown one.
func TestHostVDSOOnlyForThisKernel(t *testing.T) {
	rel, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		t.Skipf("no /proc/sys/kernel/osrelease: %v", err)
	}
	here := strings.TrimSpace(string(rel))
	img := []byte("\x7fELF image")
	read := func() ([]byte, error) { return img, nil }
	var warned []string
	warn := func(m string) { warned = append(warned, m) }
	session := func(osrelease string, ids ...perfdata.BuildID) *perfdata.Session {
		return &perfdata.Session{Features: perfdata.Features{OSRelease: osrelease, BuildIDs: ids}}
	}
	vdsoID := perfdata.BuildID{Filename: "[vdso]", BuildID: []byte{1, 2, 3}}
	libID := perfdata.BuildID{Filename: "/lib/libc.so.6", BuildID: []byte{4, 5, 6}}

	assert.Equal(t, img, hostVDSO(read, session(here), warn), "same kernel release")
	assert.Nil(t, hostVDSO(read, session(here+"-other"), warn), "another kernel release")
	assert.Nil(t, hostVDSO(read, session(""), warn), "no release recorded")
	assert.Nil(t, hostVDSO(read, session("", libID), warn), "build-ids, none for the vdso")
	assert.Equal(t, img, hostVDSO(read, session("", vdsoID), warn), "the vdso's build-id recorded")
	assert.Equal(t, img, hostVDSO(read, session(here+"-other", vdsoID), warn), "the vdso's build-id recorded")
	require.Empty(t, warned)

	fail := func() ([]byte, error) { return nil, errors.New("no [vdso] mapping") }
	assert.Nil(t, hostVDSO(fail, session(here), warn))
	require.Len(t, warned, 1)
	assert.Contains(t, warned[0], "no [vdso] mapping")
}
