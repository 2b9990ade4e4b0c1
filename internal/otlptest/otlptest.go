// Package otlptest reads OpenTelemetry profiles back for tests, with pdata's
// pprofile and nothing of ustack's builder: Folded turns a request into the
// stacks ustack report --format folded prints for the same samples, and
// Check makes the structural checks of the profiles proto (what the
// profiling SIG's profcheck checks, which the module proxy does not serve
// here). Imports nothing of ustack.
package otlptest

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"

	"go.opentelemetry.io/collector/pdata/pprofile"
)

// Profiles is what Folded read.
type Profiles struct {
	// Stacks counts each stack in folded form: the thread's name, then
	// the frames outermost first; a location's lines last to first (the
	// last line is the physical function, those before it were inlined
	// into it, marked _[i]); a location of frame type kernel marked
	// _[k]; a location without lines named [base name of its mapping's
	// file], or [unknown] without a mapping, as folded stacks name an
	// unnamed frame. A sample counts once per timestamp.
	Stacks map[string]uint64
	// SampleTypes are the profiles' sample types, "type/unit", in order.
	SampleTypes []string
	// FrameTypes counts the locations of each profile.frame.type, one per
	// frame of every sample.
	FrameTypes map[string]int
	// Samples counts the timestamps of all samples.
	Samples int
}

// Folded reads p's stacks; an index out of its table is an error.
func Folded(p pprofile.Profiles) (*Profiles, error) {
	if err := Check(p); err != nil {
		return nil, err
	}
	d := p.Dictionary()
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	attrs := func(idx []int32) map[string]string {
		m := map[string]string{}
		for _, i := range idx {
			kv := d.AttributeTable().At(int(i))
			m[str(kv.KeyStrindex())] = kv.Value().AsString()
		}
		return m
	}
	out := &Profiles{Stacks: map[string]uint64{}, FrameTypes: map[string]int{}}
	for _, rp := range p.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				out.SampleTypes = append(out.SampleTypes, str(prof.SampleType().TypeStrindex())+"/"+str(prof.SampleType().UnitStrindex()))
				for _, s := range prof.Samples().All() {
					sa := attrs(s.AttributeIndices().AsRaw())
					for _, k := range []string{"process.pid", "thread.id", "thread.name"} {
						if _, ok := sa[k]; !ok {
							return nil, fmt.Errorf("a sample has no %s", k)
						}
					}
					n := s.TimestampsUnixNano().Len()
					parts := []string{sa["thread.name"]}
					locs := d.StackTable().At(int(s.StackIndex())).LocationIndices().AsRaw()
					for i := len(locs) - 1; i >= 0; i-- {
						loc := d.LocationTable().At(int(locs[i]))
						ft := attrs(loc.AttributeIndices().AsRaw())["profile.frame.type"]
						out.FrameTypes[ft] += n
						parts = append(parts, locationNames(d, loc, ft == "kernel")...)
					}
					out.Stacks[strings.Join(parts, ";")] += uint64(n)
					out.Samples += n
				}
			}
		}
	}
	return out, nil
}

// locationNames are a location's frames, outermost first.
func locationNames(d pprofile.ProfilesDictionary, loc pprofile.Location, kernel bool) []string {
	str := func(i int32) string { return d.StringTable().At(int(i)) }
	suffix := func(inlined bool) string {
		switch {
		case kernel:
			return "_[k]"
		case inlined:
			return "_[i]"
		}
		return ""
	}
	lines := loc.Lines()
	if lines.Len() == 0 {
		name := "[unknown]"
		if f := str(d.MappingTable().At(int(loc.MappingIndex())).FilenameStrindex()); loc.MappingIndex() != 0 && f != "" {
			name = "[" + filepath.Base(f) + "]"
		}
		return []string{name + suffix(false)}
	}
	var out []string
	for j := lines.Len() - 1; j >= 0; j-- {
		fn := d.FunctionTable().At(int(lines.At(j).FunctionIndex()))
		out = append(out, strings.ReplaceAll(str(fn.NameStrindex()), ";", ":")+suffix(j < lines.Len()-1))
	}
	return out
}

// Check makes the profiles proto's structural checks: index 0 of every
// dictionary table is its zero value (string_table[0] is ""); every index
// into a table is in range; every sample has values or timestamps, as many
// of each when it has both; attribute keys are not empty.
func Check(p pprofile.Profiles) error {
	d := p.Dictionary()
	ns := d.StringTable().Len()
	if ns == 0 || d.StringTable().At(0) != "" {
		return fmt.Errorf("string_table[0] is not empty")
	}
	inStr := func(what string, i int32) error {
		if i < 0 || int(i) >= ns {
			return fmt.Errorf("%s: string index %d out of [0, %d)", what, i, ns)
		}
		return nil
	}
	in := func(what string, i int32, n int) error {
		if i < 0 || int(i) >= n {
			return fmt.Errorf("%s: index %d out of [0, %d)", what, i, n)
		}
		return nil
	}
	if d.MappingTable().Len() == 0 || d.LocationTable().Len() == 0 || d.FunctionTable().Len() == 0 ||
		d.StackTable().Len() == 0 || d.AttributeTable().Len() == 0 {
		return fmt.Errorf("a dictionary table lacks its zero entry")
	}
	if !d.MappingTable().At(0).Equal(pprofile.NewMapping()) || !d.LocationTable().At(0).Equal(pprofile.NewLocation()) ||
		!d.FunctionTable().At(0).Equal(pprofile.NewFunction()) || !d.StackTable().At(0).Equal(pprofile.NewStack()) {
		return fmt.Errorf("a dictionary table's entry 0 is not its zero value")
	}
	na := d.AttributeTable().Len()
	attrs := func(what string, idx []int32) error {
		for _, i := range idx {
			if err := in(what+" attribute", i, na); err != nil {
				return err
			}
		}
		return nil
	}
	for i, kv := range d.AttributeTable().All() {
		if err := inStr("attribute key", kv.KeyStrindex()); err != nil {
			return err
		}
		if i > 0 && d.StringTable().At(int(kv.KeyStrindex())) == "" {
			return fmt.Errorf("attribute_table[%d] has no key", i)
		}
	}
	for i, m := range d.MappingTable().All() {
		if err := inStr("mapping filename", m.FilenameStrindex()); err != nil {
			return err
		}
		if err := attrs(fmt.Sprintf("mapping_table[%d]", i), m.AttributeIndices().AsRaw()); err != nil {
			return err
		}
	}
	for _, f := range d.FunctionTable().All() {
		for _, s := range []int32{f.NameStrindex(), f.SystemNameStrindex(), f.FilenameStrindex()} {
			if err := inStr("function", s); err != nil {
				return err
			}
		}
	}
	for i, l := range d.LocationTable().All() {
		what := fmt.Sprintf("location_table[%d]", i)
		if err := in(what+" mapping", l.MappingIndex(), d.MappingTable().Len()); err != nil {
			return err
		}
		for _, line := range l.Lines().All() {
			if err := in(what+" line function", line.FunctionIndex(), d.FunctionTable().Len()); err != nil {
				return err
			}
		}
		if err := attrs(what, l.AttributeIndices().AsRaw()); err != nil {
			return err
		}
	}
	for i, s := range d.StackTable().All() {
		for _, l := range s.LocationIndices().All() {
			if err := in(fmt.Sprintf("stack_table[%d]", i), l, d.LocationTable().Len()); err != nil {
				return err
			}
		}
	}
	for _, rp := range p.ResourceProfiles().All() {
		for _, sp := range rp.ScopeProfiles().All() {
			for _, prof := range sp.Profiles().All() {
				for _, s := range []int32{prof.SampleType().TypeStrindex(), prof.SampleType().UnitStrindex()} {
					if err := inStr("sample type", s); err != nil {
						return err
					}
				}
				for j, s := range prof.Samples().All() {
					what := fmt.Sprintf("sample %d", j)
					if err := in(what+" stack", s.StackIndex(), d.StackTable().Len()); err != nil {
						return err
					}
					if err := attrs(what, s.AttributeIndices().AsRaw()); err != nil {
						return err
					}
					nv, nt := s.Values().Len(), s.TimestampsUnixNano().Len()
					if nv == 0 && nt == 0 || nv != 0 && nt != 0 && nv != nt {
						return fmt.Errorf("%s has %d values and %d timestamps", what, nv, nt)
					}
				}
			}
		}
	}
	return nil
}

// ParseFolded parses ustack report --format folded: each stack and its
// count.
func ParseFolded(out string) (map[string]uint64, error) {
	m := map[string]uint64{}
	for n, l := range strings.Split(strings.TrimSpace(out), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i <= 0 {
			return nil, fmt.Errorf("folded line %d %q has no count", n+1, l)
		}
		c, err := strconv.ParseUint(l[i+1:], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("folded line %d %q: %v", n+1, l, err)
		}
		m[l[:i]] += c
	}
	return m, nil
}

// StripNative removes the lines of every location whose mapping has a GNU
// build-id (process.executable.build_id.gnu), as the OpenTelemetry eBPF
// profiler sends native frames, and returns the function names each
// stripped location had, by location index.
func StripNative(p pprofile.Profiles) map[int][]string {
	d := p.Dictionary()
	names := map[int][]string{}
	for i, loc := range d.LocationTable().All() {
		if i == 0 || loc.Lines().Len() == 0 || !hasBuildID(d, d.MappingTable().At(int(loc.MappingIndex()))) {
			continue
		}
		names[i] = LineNames(d, loc)
		loc.Lines().RemoveIf(func(pprofile.Line) bool { return true })
	}
	return names
}

func hasBuildID(d pprofile.ProfilesDictionary, m pprofile.Mapping) bool {
	for _, i := range m.AttributeIndices().All() {
		kv := d.AttributeTable().At(int(i))
		if d.StringTable().At(int(kv.KeyStrindex())) == "process.executable.build_id.gnu" {
			return true
		}
	}
	return false
}

// LineNames returns the function names of a location's lines, in order.
func LineNames(d pprofile.ProfilesDictionary, loc pprofile.Location) []string {
	var out []string
	for _, l := range loc.Lines().All() {
		fn := d.FunctionTable().At(int(l.FunctionIndex()))
		out = append(out, d.StringTable().At(int(fn.NameStrindex())))
	}
	return out
}
