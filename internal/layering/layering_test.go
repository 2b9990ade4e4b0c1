package layering

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/ustack/ustack"

// tableOrder returns the packages of ARCHITECTURE.md's table, bottom to top.
func tableOrder(t *testing.T) []string {
	_, file, _, _ := runtime.Caller(0)
	doc := filepath.Join(filepath.Dir(file), "..", "..", "docs", "ARCHITECTURE.md")
	f, err := os.Open(doc)
	require.NoError(t, err)
	defer f.Close()
	row := regexp.MustCompile("^\\| `([a-z0-9/]+)` \\|")
	var order []string
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			order = append(order, m[1])
		}
	}
	require.NotEmpty(t, order, "no package table in %s", doc)
	return order
}

// TestImportsFollowTheTable runs go list and checks every non-test import
// between the module's packages against the table: a package imports only
// packages listed above it, and every package is in the table.
func TestImportsFollowTheTable(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	order := tableOrder(t)
	rank := map[string]int{}
	for i, p := range order {
		rank[p] = i
	}
	cmd := exec.Command(goTool, "list", "-json", module+"/...")
	out, err := cmd.Output()
	require.NoError(t, err)
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p struct {
			ImportPath string
			Imports    []string
			Name       string
		}
		require.NoError(t, dec.Decode(&p))
		rel := strings.TrimPrefix(strings.TrimPrefix(p.ImportPath, module), "/")
		if rel == "internal/layering" {
			continue
		}
		r, ok := rank[rel]
		if !assert.True(t, ok, "package %s is missing from ARCHITECTURE.md's table", rel) {
			continue
		}
		for _, imp := range p.Imports {
			if !strings.HasPrefix(imp, module+"/") {
				continue
			}
			dep := strings.TrimPrefix(imp, module+"/")
			dr, ok := rank[dep]
			assert.True(t, ok && dr < r, "%s imports %s, which ARCHITECTURE.md lists above it (or not at all)", rel, dep)
		}
	}
}

// TestOneAddressSpaceBuilder: exactly one non-test package builds
// unwinder address spaces (the resolver), so there is one place for it.
func TestOneAddressSpaceBuilder(t *testing.T) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	builders := map[string]bool{}
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil || info.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, _ := os.ReadFile(p)
		if strings.Contains(string(b), "unwinder.NewAddressSpace(") {
			rel, _ := filepath.Rel(root, filepath.Dir(p))
			builders[rel] = true
		}
		return nil
	})
	assert.Equal(t, map[string]bool{"resolve": true}, builders)
}
