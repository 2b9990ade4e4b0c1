package report

import (
	"path/filepath"
	"sort"
	"strings"
)

// missingFix is what the summary needs to say how the objects it lists as
// missing could be found: the options that were given and what each
// missing object is (Summary.MissingFix).
type missingFix struct {
	// exePath is a core's main executable's recorded path ("" for
	// recordings); exeGiven: --exe was given (and warned of why it was
	// not used).
	exePath  string
	exeGiven bool
	symFS    string
	// buildIDs are the recording's build-ids by path.
	buildIDs map[string][]byte
	// buildIDDir: --buildid-dir was given (it lacked them too).
	buildIDDir bool
	// perfArchive: a tarball from perf archive was used.
	perfArchive bool
	// debuginfodOff: DEBUGINFOD_URLS names no server (and fetching was
	// not turned off with --no-debuginfod).
	debuginfodOff bool
}

// coreFix is what MissingFix needs of a core's report.
func coreFix(c *Core, opts CoreOptions) missingFix {
	ids := map[string][]byte{}
	for _, o := range c.Objects() {
		if len(o.BuildID) > 0 && !o.BuildIDPrefix {
			ids[o.Path] = o.BuildID
		}
	}
	return missingFix{symFS: opts.SymFS, exePath: c.ExePath, exeGiven: opts.Exe != "", buildIDs: ids,
		debuginfodOff: opts.Debuginfod != nil && !opts.Debuginfod.Enabled()}
}

// fixable reports whether a missing object's reason is one a file of the
// object (the right build of it) would cure: not found, or found but
// another build. Anonymous memory, the vdso and jitdumps are not files a
// user can give.
func fixable(path, why string) bool {
	if !strings.HasPrefix(path, "/") && !bareName(path) || strings.HasPrefix(path, "//") || strings.HasPrefix(path, "/memfd:") {
		return false // [vdso], //anon, memfd: memory, not a file
	}
	return strings.HasPrefix(why, "not found") || strings.HasPrefix(why, "build-id mismatch")
}

// bareName reports whether path is a file's name without a directory, as
// Crashpad's minidumps name libraries (their sonames), rather than a
// mapping of no file ([vdso], anon_inode:[perf_event], memfd:NAME).
func bareName(path string) bool {
	return path != "" && !strings.ContainsAny(path, "/[:")
}

// MissingFix returns, when some of Summary.Missing could be found with an
// option, how: one line naming each option that could help, "" when none
// could. For a core: --exe for its main executable, --symfs for the other
// objects; for a recording: --symfs, and for objects with a build-id
// --buildid-dir, --perf-archive (perf recordings) and DEBUGINFOD_URLS
// when it is unset.
func (s *Summary) MissingFix() string {
	f := &s.fix
	var exe bool
	var others, withID []string
	for path, why := range s.Missing {
		if s.core && path == f.exePath && (fixable(path, why) || strings.HasPrefix(path, "/memfd:") && strings.HasPrefix(why, "not found")) {
			// A program run from a memfd too: no path names it,
			// but --exe does.
			exe = !f.exeGiven
			continue
		}
		if !fixable(path, why) {
			continue
		}
		switch {
		case len(f.buildIDs[path]) > 0:
			withID = append(withID, path)
			others = append(others, path)
		default:
			others = append(others, path)
		}
	}
	sort.Strings(others)
	var ways []string
	if exe {
		ways = append(ways, "--exe FILE gives the main executable (a file of the build the core ran)")
	}
	if len(others) > 0 {
		root := "a copy of the root of the machine it ran on"
		if !s.core {
			root = "a copy of the recording machine's root"
		}
		// Crashpad's minidumps name libraries by soname: they are
		// looked for in the library directories (resolve.LibraryPaths).
		bare := ""
		for _, p := range others {
			if bareName(p) {
				bare = p
				break
			}
		}
		switch under := underSymFS(others, f.symFS); {
		case bare != "" && f.symFS != "":
			ways = append(ways, "--symfs "+f.symFS+" finds them when copied into its library directories ("+
				filepath.Join(f.symFS, "usr/lib", bare)+") or beside the program: the dump names "+bare+" without a directory")
		case bare != "":
			ways = append(ways, "--symfs DIR finds them under DIR, "+root+", holding DIR/usr/lib/"+bare+
				" or a copy beside the program: the dump names "+bare+" without a directory")
		case under != "":
			// The recorded paths are the root's, and one already
			// lies in the symfs: qemu-user records the files of its
			// -L sysroot by their host paths.
			ways = append(ways, "their recorded paths ("+under+") are already under --symfs "+f.symFS+
				", which looks for them at "+filepath.Join(f.symFS, under)+": without --symfs they are read at their recorded paths")
		case f.symFS != "":
			ways = append(ways, "--symfs "+f.symFS+" finds them when copied there at their recorded paths")
		default:
			// A file deleted while mapped is looked for at its path.
			ways = append(ways, "--symfs DIR finds them under DIR, "+root+", holding DIR"+strings.TrimSuffix(others[0], " (deleted)"))
		}
	}
	if !s.core && len(withID) > 0 {
		if !f.buildIDDir {
			ways = append(ways, "--buildid-dir DIR finds them by build-id in DIR, a copy of the recording machine's ~/.debug")
		}
		if !f.perfArchive && !s.recordedByUstack() {
			ways = append(ways, "--perf-archive FILE finds them in the tarball that perf archive makes on the recording machine")
		}
	}
	if len(withID) > 0 && f.debuginfodOff {
		ways = append(ways, "DEBUGINFOD_URLS=URL fetches them by build-id from a debuginfod server")
	}
	if len(ways) == 0 {
		return ""
	}
	return "to use them: " + strings.Join(ways, "; ")
}

// underSymFS returns the first of paths that lies under symFS, or "".
func underSymFS(paths []string, symFS string) string {
	dir := strings.TrimSuffix(symFS, "/")
	if dir == "" {
		return ""
	}
	for _, p := range paths {
		if strings.HasPrefix(p, dir+"/") {
			return p
		}
	}
	return ""
}

// recordedByUstack reports whether ustack record made the recording (its
// objects are in its archive, not in a perf archive tarball).
func (s *Summary) recordedByUstack() bool {
	return len(s.Cmdline) > 0 && filepath.Base(s.Cmdline[0]) == "ustack"
}
