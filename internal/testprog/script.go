package testprog

import "strings"

// ScriptSample is one sample of perf script's default output: its header
// line and the symbol names of its call chain, innermost first, with
// perf's "+0xOFF" cut off.
type ScriptSample struct {
	Header string
	Syms   []string
}

// ParseScript splits perf script's default output (blank-line separated
// samples, a header line then one "ADDR SYM+OFF (DSO)" line per frame)
// into samples.
func ParseScript(out string) []ScriptSample {
	var res []ScriptSample
	for _, block := range strings.Split(out, "\n\n") {
		lines := strings.Split(strings.Trim(block, "\n"), "\n")
		if len(lines) == 0 || lines[0] == "" {
			continue
		}
		s := ScriptSample{Header: lines[0]}
		for _, l := range lines[1:] {
			f := strings.Fields(l)
			if len(f) >= 2 {
				sym := f[1]
				if i := strings.LastIndex(sym, "+0x"); i > 0 {
					sym = sym[:i]
				}
				s.Syms = append(s.Syms, sym)
			}
		}
		res = append(res, s)
	}
	return res
}

// HasChain reports whether syms holds want as consecutive frames.
func HasChain(syms, want []string) bool {
	for i := 0; i+len(want) <= len(syms); i++ {
		ok := true
		for j, w := range want {
			if syms[i+j] != w {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// ChainCount counts the samples of perf script or ustack report text
// output (blank-line separated blocks, frames written " SYM+OFF") whose
// stack names every function of chain, innermost first, in this order.
func ChainCount(out string, chain ...string) int {
	n := 0
	for _, block := range strings.Split(out, "\n\n") {
		if inOrder(block, chain) {
			n++
		}
	}
	return n
}

// inOrder reports whether block holds " F+" for every F of chain, each
// after the one before.
func inOrder(block string, chain []string) bool {
	prev := -1
	for _, f := range chain {
		i := strings.Index(block, " "+f+"+")
		if i < 0 || i <= prev {
			return false
		}
		prev = i
	}
	return len(chain) > 0
}
