package main

import (
	"bytes"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/ustack/ustack/report"
	"github.com/ustack/ustack/unwinder"
)

const glossaryPath = "../../docs/GLOSSARY.md"

// codeHowValues returns every "how" a frame can carry: the String of every
// unwinder.Method, and the string literals the report and resolve packages
// give frames they make themselves (How: "kernel" in a Frame literal, the
// how argument of Symbolizer.Append, constants named How*), read from their
// source with go/ast.
func codeHowValues(t *testing.T) []string {
	set := map[string]bool{}
	for m := unwinder.Method(0); ; m++ {
		s := m.String()
		if strings.HasPrefix(s, "method(") {
			break
		}
		set[s] = true
	}
	for _, dir := range []string{"../../report", "../../resolve"} {
		fset := token.NewFileSet()
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, 0)
			require.NoError(t, err)
			ast.Inspect(f, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.ValueSpec: // const HowTailCall = "tailcall"
					for i, id := range n.Names {
						if strings.HasPrefix(id.Name, "How") && i < len(n.Values) {
							if s, ok := stringLit(n.Values[i]); ok {
								set[s] = true
							}
						}
					}
				case *ast.KeyValueExpr:
					if id, ok := n.Key.(*ast.Ident); ok && id.Name == "How" {
						if s, ok := stringLit(n.Value); ok {
							set[s] = true
						}
					}
				case *ast.CallExpr:
					if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Append" && len(n.Args) == 4 {
						if s, ok := stringLit(n.Args[3]); ok {
							set[s] = true
						}
					}
				}
				return true
			})
		}
	}
	return sortedSet(set)
}

// codeStopValues returns the String of every unwinder.StopReason.
func codeStopValues() []string {
	set := map[string]bool{}
	for s := unwinder.StopReason(0); ; s++ {
		name := s.String()
		if strings.HasPrefix(name, "stop(") {
			break
		}
		set[name] = true
	}
	// The report's own stop: a sample taken inside execve is not unwound.
	set[report.StopExec] = true
	// And one of a stack the kernel's call chain carried on past the end
	// of its snapshot.
	set[report.StopCallchain] = true
	return sortedSet(set)
}

func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

func sortedSet(set map[string]bool) []string {
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// glossaryRows returns the values of the table rows ("| `name` | ...") of
// the glossary's section whose heading starts with heading.
func glossaryRows(t *testing.T, doc, heading string) []string {
	i := strings.Index(doc, "\n## "+heading)
	require.GreaterOrEqual(t, i, 0, "%s has no section %q", glossaryPath, heading)
	sec := doc[i+1:]
	if j := strings.Index(sec[3:], "\n## "); j >= 0 {
		sec = sec[:j+3]
	}
	set := map[string]bool{}
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(sec, -1) {
		set[m[1]] = true
	}
	return sortedSet(set)
}

// TestGlossaryCoversCode checks that docs/GLOSSARY.md explains every frame
// tag and stop reason the code can emit, and nothing it cannot, and that
// the JSON schema's enums list the same values.
func TestGlossaryCoversCode(t *testing.T) {
	b, err := os.ReadFile(glossaryPath)
	require.NoError(t, err)
	doc := string(b)
	how, stops := codeHowValues(t), codeStopValues()
	// Sanity: the extraction found what it must (the kernel's frames,
	// the unwinder's first method and last stop).
	require.Contains(t, how, "kernel")
	require.Contains(t, how, "callchain")
	require.Contains(t, how, "context")
	require.Contains(t, stops, "bad_memory")

	assert.Equal(t, how, glossaryRows(t, doc, "How a frame"), "the how values of %s", glossaryPath)
	// null: a sample without user registers has no stop.
	assert.Equal(t, sortedSet(mapOf(append(stops, "null"))), glossaryRows(t, doc, "Why a stack"), "the stop values of %s", glossaryPath)

	var schema struct {
		Defs map[string]struct {
			Properties map[string]struct {
				Enum []any `json:"enum"`
			} `json:"properties"`
		} `json:"$defs"`
	}
	raw, err := os.ReadFile("../../docs/report.schema.json")
	require.NoError(t, err)
	require.NoError(t, json.NewDecoder(bytes.NewReader(raw)).Decode(&schema))
	enum := func(def, prop string) []string {
		set := map[string]bool{}
		for _, v := range schema.Defs[def].Properties[prop].Enum {
			if s, ok := v.(string); ok {
				set[s] = true
			}
		}
		return sortedSet(set)
	}
	assert.Equal(t, how, enum("frame", "how"), "report.schema.json's how enum")
	assert.Equal(t, stops, enum("sample", "stop"), "report.schema.json's stop enum")
}

func mapOf(s []string) map[string]bool {
	m := map[string]bool{}
	for _, v := range s {
		m[v] = true
	}
	return m
}

// TestHelpListsCommands checks that ustack --help gives every subcommand
// ustack help knows one line, points to 'ustack help COMMAND' and to the
// glossary.
func TestHelpListsCommands(t *testing.T) {
	var out, errb bytes.Buffer
	require.Equal(t, 0, run([]string{"--help"}, &out, &errb))
	help := out.String()
	for cmd := range commands {
		lines := regexp.MustCompile(`(?m)^  `+cmd+` +\S.*$`).FindAllString(help, -1)
		assert.Len(t, lines, 1, "--help's line for %s", cmd)
	}
	assert.Contains(t, help, "ustack help COMMAND")
	assert.Contains(t, help, "docs/GLOSSARY.md")
	for _, l := range strings.Split(help, "\n") {
		assert.LessOrEqual(t, len(l), 100, "help line too long: %q", l)
	}
}
