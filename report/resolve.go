package report

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"github.com/ustack/ustack/elfcache"
	"github.com/ustack/ustack/procmaps"
	"github.com/ustack/ustack/unwinder"
)

// space is the unwinder's view of one maps snapshot, with what symbolizing
// needs for each mapping, indexed like the AddressSpace.
type space struct {
	as    *unwinder.AddressSpace
	infos []mapInfo
}

type mapInfo struct {
	path  string
	start uint64
	pgoff uint64
	obj   *elfcache.Object
	bias  uint64
}

// spaceFor returns the address space of a maps snapshot, building it on
// first use. It runs on the reader goroutine only.
func (p *processor) spaceFor(snap *procmaps.Snapshot) *space {
	if sp, ok := p.spaces[snap.Version]; ok {
		return sp
	}
	if len(p.spaces) > 4096 { // bound memory on recordings with many processes
		p.spaces = map[uint64]*space{}
	}
	maps := make([]unwinder.Mapping, 0, len(snap.Maps))
	infos := make([]mapInfo, 0, len(snap.Maps))
	for i := range snap.Maps {
		m := &snap.Maps[i]
		um := unwinder.Mapping{Start: m.Start, End: m.End, Exec: m.Exec, Name: m.Path}
		info := mapInfo{path: m.Path, start: m.Start, pgoff: m.PgOff}
		if m.Exec {
			if obj := p.object(m.Path, m.BuildID); obj != nil {
				if bias, ok := obj.Bias(m.Start, m.PgOff); ok {
					um.Object, um.Bias = obj, bias
					info.obj, info.bias = obj, bias
				}
			}
		}
		maps = append(maps, um)
		infos = append(infos, info)
	}
	sp := &space{as: unwinder.NewAddressSpace(maps), infos: infos}
	if sp.as.Len() != len(infos) {
		// Empty or overlapping mappings were dropped: realign by address.
		aligned := make([]mapInfo, sp.as.Len())
		for i := range aligned {
			m := sp.as.Mapping(i)
			for _, in := range infos {
				if in.start == m.Start {
					aligned[i] = in
				}
			}
		}
		sp.infos = aligned
	}
	p.spaces[snap.Version] = sp
	return sp
}

// object finds the object for a mapped path: the file itself (under
// SymFS) when its build-id matches the recording's, else a copy by build-id
// from the recording's archive or perf's build-id cache. A file whose
// build-id differs is refused, never silently used.
func (p *processor) object(path string, buildID []byte) *elfcache.Object {
	if path == "" || (isPseudoPath(path) && path != "[vdso]") {
		return nil
	}
	if p.opts.Objects != nil {
		if obj := p.archived(path, buildID); obj != nil {
			return obj
		}
	}
	var candidates []string
	if path != "[vdso]" {
		candidates = append(candidates, path)
	}
	if len(buildID) > 0 && p.opts.BuildIDDir != "" {
		id := hex.EncodeToString(buildID)
		if len(id) > 2 {
			candidates = append(candidates, filepath.Join(p.opts.BuildIDDir, ".build-id", id[:2], id[2:]+"/elf"),
				filepath.Join(p.opts.BuildIDDir, ".build-id", id[:2], id[2:]))
			if path == "[vdso]" {
				candidates = append(candidates, filepath.Join(p.opts.BuildIDDir, "[vdso]", id, "vdso"))
			}
		}
	}
	var why string
	for _, c := range candidates {
		// Object paths are opened through SymFS by the cache; build-id
		// cache paths are local.
		obj, err := p.objects.Open(c)
		if err != nil {
			if why == "" && !os.IsNotExist(err) {
				why = err.Error()
			}
			continue
		}
		if len(buildID) > 0 && len(obj.BuildID()) > 0 && !bytes.Equal(obj.BuildID(), buildID) {
			msg := fmt.Sprintf("build-id mismatch: the recording has %x, %s has %x", buildID, obj.Path(), obj.BuildID())
			if why == "" || c == path {
				why = msg
			}
			p.warnOnce(path, msg)
			continue
		}
		return obj
	}
	if why == "" {
		why = "not found"
	}
	p.noteMissing(path, why)
	return nil
}

// archived opens an object carried by the recording, once per object.
func (p *processor) archived(path string, buildID []byte) *elfcache.Object {
	key := path + "\x00" + string(buildID)
	if obj, ok := p.archiveObjs[key]; ok {
		return obj
	}
	var obj *elfcache.Object
	if data, name, ok := p.opts.Objects.Object(buildID, path); ok {
		o, err := elfcache.OpenBytes(name, data, elfcache.Options{DebugDirs: p.opts.DebugDirs, SymFS: p.opts.SymFS,
			DebugData: p.opts.DebugData})
		if err == nil && (len(buildID) == 0 || len(o.BuildID()) == 0 || bytes.Equal(o.BuildID(), buildID)) {
			obj = o
		}
	}
	p.archiveObjs[key] = obj
	return obj
}

func (p *processor) noteMissing(path, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if _, ok := p.missing[path]; !ok {
		p.missing[path] = why
	}
}

func (p *processor) warnOnce(path, msg string) {
	p.mu.Lock()
	seen := p.warned[path]
	p.warned[path] = true
	p.mu.Unlock()
	if !seen {
		p.warn("%s: %s", path, msg)
	}
}
