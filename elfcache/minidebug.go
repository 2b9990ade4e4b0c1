package elfcache

import (
	"bytes"
	"debug/elf"
	"fmt"
	"io"

	"github.com/ulikunitz/xz"
)

// miniDebugInfo returns the object embedded, xz-compressed, in
// .gnu_debugdata (MiniDebugInfo, as Fedora's find-debuginfo makes it: a
// debug-only ELF holding the .symtab of the functions .dynsym lacks), or
// nil when there is none. The decompressed size is bounded by
// Options.MaxSectionSize.
func (o *Object) miniDebugInfo() (*Object, error) {
	s := o.section(".gnu_debugdata")
	if s == nil || s.Type == elf.SHT_NOBITS {
		return nil, nil
	}
	raw, err := o.sectionData(s)
	if err != nil {
		return nil, err
	}
	zr, err := xz.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, newErr(o.path, s.Name, 0, fmt.Errorf("xz: %w", err))
	}
	max := o.opts.maxSection()
	data, err := io.ReadAll(io.LimitReader(zr, int64(min(max, 1<<62))+1))
	if err != nil {
		return nil, newErr(o.path, s.Name, 0, fmt.Errorf("xz: %w", err))
	}
	if uint64(len(data)) > max {
		return nil, newErr(o.path, s.Name, -1, fmt.Errorf("decompressed size exceeds the limit %#x", max))
	}
	opts := o.opts
	opts.NoDebugFile = true
	mini, err := newObject(o.path+"[.gnu_debugdata]", o.file, &source{data: data, size: int64(len(data))}, opts, true)
	if err != nil {
		return nil, err
	}
	return mini, nil
}
