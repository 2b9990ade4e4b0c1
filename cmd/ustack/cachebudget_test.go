package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestCacheBudgetFlag: --cache-budget takes bytes or K, M, G (powers of
// 1024), 0 for none; anything else is a usage error naming the flag.
func TestCacheBudgetFlag(t *testing.T) {
	for in, want := range map[string]int64{"256M": 256 << 20, "0": 0, "1G": 1 << 30, "512k": 512 << 10, "4096": 4096, "64MB": 64 << 20} {
		got, err := parseByteSize(in)
		assert.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "-1", "12X", "M", "1.5G", "99999999999G"} {
		_, err := parseByteSize(in)
		assert.Error(t, err, in)
	}
	var out, errb bytes.Buffer
	assert.Equal(t, 2, run([]string{"record", "--unwind", "--cache-budget", "lots", "--", "true"}, &out, &errb))
	assert.Contains(t, errb.String(), `--cache-budget "lots"`)
	out.Reset()
	run([]string{"record", "-h"}, &out, &errb)
	assert.Contains(t, out.String(), "-cache-budget")
}
