package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestFetchLine checks the debuginfod progress line byte for byte: drawn
// while downloads run, cleared before a warning so that the warning starts
// its own line, cleared when every download has finished; and that a nil
// line (stderr no terminal) passes warnings through and draws nothing.
func TestFetchLine(t *testing.T) {
	var b bytes.Buffer
	l := newFetchLine(&b, true)
	warn := l.around(func(m string) { b.WriteString("ustack: warning: " + m + "\n") })
	l.update(1, 0)
	l.update(2, 0)
	warn("server down")
	l.update(2, 1)
	l.update(2, 2)
	l.finish()
	assert.Equal(t, "\r\033[Kdebuginfod: 0 of 1 files fetched"+
		"\r\033[Kdebuginfod: 0 of 2 files fetched"+
		"\r\033[K"+"ustack: warning: server down\n"+
		"\r\033[Kdebuginfod: 1 of 2 files fetched"+
		"\r\033[K", b.String())

	b.Reset()
	none := newFetchLine(&b, false)
	assert.Nil(t, none)
	none.around(func(m string) { b.WriteString(m) })("plain")
	none.finish()
	assert.Equal(t, "plain", b.String())
	t.Setenv("DEBUGINFOD_URLS", "")
	assert.False(t, newDebuginfod(func(string) {}, none).Enabled(), "a client with DEBUGINFOD_URLS empty")
	t.Setenv("DEBUGINFOD_URLS", "http://127.0.0.1:1 not-a-url")
	var warned []string
	c := newDebuginfod(func(m string) { warned = append(warned, m) }, none)
	assert.Equal(t, []string{"http://127.0.0.1:1"}, c.URLs())
	assert.Len(t, warned, 1, "no warning for a server that is not a URL")
}
