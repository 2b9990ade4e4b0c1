package testfiles

import (
	"bufio"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/ulikunitz/xz"
)

// Dir returns the absolute path of the repository's testdata/ directory.
// It is found relative to this package's source file, falling back to
// walking up from the working directory to go.mod.
func Dir() string {
	if _, file, _, ok := runtime.Caller(0); ok {
		d := filepath.Join(filepath.Dir(file), "..", "..", "testdata")
		if st, err := os.Stat(d); err == nil && st.IsDir() {
			return filepath.Clean(d)
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "testdata"
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return filepath.Join(d, "testdata")
		}
		if filepath.Dir(d) == d {
			return filepath.Join(wd, "testdata")
		}
	}
}

// packedDirs are the directories of a testdata tree, relative to it, whose
// NAME.xz files are objects to unpack: testdata/objects/<arch> and
// testdata/cores/<arch>/bin and testdata/minidumps/<arch>/bin. Other .xz files (a recording, a test input
// that is meant to be compressed) are left alone.
var packedDirs = []string{"objects/*", "cores/*/bin", "minidumps/*/bin"}

// unpacked remembers, per testdata directory, the result of its one Unpack.
var unpacked sync.Map // absolute dir -> *unpackOnce

type unpackOnce struct {
	once sync.Once
	err  error
}

// Unpack decompresses every committed NAME.xz object of the testdata tree
// at dir (objects/<arch>/, cores/<arch>/bin/, minidumps/<arch>/bin/) to NAME beside it, where NAME
// is missing or older than the .xz. It does the work once per directory
// and process; later calls return the first call's result.
func Unpack(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	v, _ := unpacked.LoadOrStore(abs, &unpackOnce{})
	u := v.(*unpackOnce)
	u.once.Do(func() { u.err = unpackTree(abs) })
	return u.err
}

// MustUnpack is Unpack for tests: it stops the test with the error.
func MustUnpack(t testing.TB, dir string) {
	t.Helper()
	if err := Unpack(dir); err != nil {
		t.Fatalf("%v", err)
	}
}

func unpackTree(dir string) error {
	for _, pattern := range packedDirs {
		packed, err := filepath.Glob(filepath.Join(dir, filepath.FromSlash(pattern), "*.xz"))
		if err != nil {
			return err
		}
		for _, p := range packed {
			if err := unpackFile(p); err != nil {
				return err
			}
		}
	}
	return nil
}

// unpackFile decompresses packed (NAME.xz) to NAME unless NAME is at least
// as new as packed. NAME gets packed's mode and modification time.
func unpackFile(packed string) error {
	st, err := os.Stat(packed)
	if err != nil {
		return err
	}
	plain := strings.TrimSuffix(packed, ".xz")
	if pst, err := os.Stat(plain); err == nil && !pst.ModTime().Before(st.ModTime()) {
		return nil
	}
	in, err := os.Open(packed)
	if err != nil {
		return err
	}
	defer in.Close()
	zr, err := xz.NewReader(bufio.NewReader(in))
	if err != nil {
		return fmt.Errorf("testfiles: can't unpack %s: %w", packed, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(plain), "."+filepath.Base(plain)+".*")
	if err != nil {
		return fmt.Errorf("testfiles: can't unpack %s: %w", packed, err)
	}
	defer os.Remove(tmp.Name()) // after a successful rename, a no-op
	if _, err := io.Copy(tmp, zr); err != nil {
		tmp.Close()
		return fmt.Errorf("testfiles: can't unpack %s: %w", packed, err)
	}
	if err := tmp.Chmod(st.Mode() & fs.ModePerm); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chtimes(tmp.Name(), st.ModTime(), st.ModTime()); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), plain); err != nil {
		return fmt.Errorf("testfiles: can't unpack %s: %w", packed, err)
	}
	return nil
}
