package resolve

import (
	"bytes"
	"debug/elf"
	"os"
	"path/filepath"
	"strings"

	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/coredump"
	"github.com/ustack/ustack/elfcache"
)

// LibraryQuery is a shared library named without a directory: a
// minidump written by Crashpad (Chrome, Electron, anything linking
// crashpad_client) names each module by its soname ("libc.so.6") and
// dumps no /proc/PID/maps, so nothing says which file it was.
type LibraryQuery struct {
	Name    string
	BuildID []byte // the module list's; a query without one is not looked for
	// BuildIDPrefix says that BuildID is only the first bytes of the
	// build-id (a PDB70 CodeView record keeps 16).
	BuildIDPrefix bool
}

// LibraryPaths returns, for each query, the path on the profiled machine
// of its file ("" where none is found), searched as the dynamic linker
// would have: in the directories of the known objects (the paths the dump
// does give: the program's own directory holds its bundled libraries), in
// the RUNPATH and RPATH of those and of each library found ($ORIGIN
// expanded), then in the system's library directories of the
// architecture. Each directory is looked in under symfs (perf's --symfs:
// a copy of the machine's root; "" for this machine). A file is taken
// only where it is an ELF object of the architecture whose build-id is
// the query's: a name alone never picks a file of another build, and a
// query without a build-id is not looked for.
func LibraryPaths(a arch.Arch, symfs string, known []string, queries []LibraryQuery) []string {
	out := make([]string, len(queries))
	var dirs []string
	seen := map[string]bool{}
	addDir := func(d string) {
		if d = filepath.Clean(d); filepath.IsAbs(d) && !seen[d] {
			seen[d] = true
			dirs = append(dirs, d)
		}
	}
	for _, k := range known {
		if filepath.IsAbs(k) {
			addDir(filepath.Dir(k))
		}
	}
	for _, k := range known {
		for _, d := range runPaths(a, symfs, k) {
			addDir(d)
		}
	}
	for _, d := range systemLibraryDirs(a) {
		addDir(d)
	}
	// A library found can name, in its RUNPATH, where the next one is
	// (libpulse.so.0's /usr/lib/x86_64-linux-gnu/pulseaudio): search
	// again while new directories turn up, at most once per query.
	for range len(queries) + 1 {
		before := len(dirs)
		for i, q := range queries {
			if out[i] != "" || q.Name == "" || strings.Contains(q.Name, "/") || len(q.BuildID) == 0 {
				continue
			}
			for _, d := range dirs {
				p := filepath.Join(d, q.Name)
				if libraryMatches(a, symfs, p, q.BuildID, q.BuildIDPrefix) {
					out[i] = p
					for _, r := range runPaths(a, symfs, p) {
						addDir(r)
					}
					break
				}
			}
		}
		if len(dirs) == before {
			break
		}
	}
	return out
}

// systemLibraryDirs are the directories the dynamic linker searches by
// default on a Debian-like (multiarch) and a Fedora-like (lib64) system.
func systemLibraryDirs(a arch.Arch) []string {
	triplet := map[arch.Arch]string{arch.AMD64: "x86_64-linux-gnu", arch.ARM64: "aarch64-linux-gnu"}[a]
	var out []string
	if triplet != "" {
		out = append(out, "/lib/"+triplet, "/usr/lib/"+triplet, "/usr/local/lib/"+triplet)
	}
	return append(out, "/lib64", "/usr/lib64", "/lib", "/usr/lib", "/usr/local/lib")
}

// elfMachine is the ELF machine of each architecture.
var elfMachine = map[arch.Arch]elf.Machine{arch.AMD64: elf.EM_X86_64, arch.ARM64: elf.EM_AARCH64}

// libraryMatches reports whether the file at path (under symfs) is a
// 64-bit ELF object of the architecture with the build-id want (one that
// starts with want, for prefix).
func libraryMatches(a arch.Arch, symfs, path string, want []byte, prefix bool) bool {
	file, err := elfcache.SymFSPath(symfs, path)
	if err != nil {
		return false
	}
	f, err := os.Open(file)
	if err != nil {
		return false
	}
	defer f.Close()
	ef, err := elf.NewFile(f)
	if err != nil || ef.Class != elf.ELFCLASS64 || ef.Machine != elfMachine[a] {
		return false
	}
	id, err := coredump.FileBuildID(f)
	if prefix && len(id) > len(want) {
		id = id[:len(want)]
	}
	return err == nil && bytes.Equal(id, want)
}

// runPaths returns the directories of the RUNPATH or RPATH of the object
// at path (on the profiled machine), $ORIGIN expanded to its directory;
// other tokens ($LIB, $PLATFORM) leave their entry out.
func runPaths(a arch.Arch, symfs, path string) []string {
	file, err := elfcache.SymFSPath(symfs, path)
	if err != nil {
		return nil
	}
	f, err := elf.Open(file)
	if err != nil {
		return nil
	}
	defer f.Close()
	if f.Machine != elfMachine[a] {
		return nil
	}
	var out []string
	for _, tag := range []elf.DynTag{elf.DT_RUNPATH, elf.DT_RPATH} {
		vals, _ := f.DynString(tag)
		for _, v := range vals {
			for _, d := range strings.Split(v, ":") {
				d = strings.ReplaceAll(d, "${ORIGIN}", "$ORIGIN")
				d = strings.ReplaceAll(d, "$ORIGIN", filepath.Dir(path))
				if d != "" && !strings.Contains(d, "$") {
					out = append(out, d)
				}
			}
		}
	}
	return out
}
