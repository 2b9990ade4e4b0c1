// Package testfiles is how tests (and ustack unwind, through
// internal/fixture) find the repository's committed test files: [Dir]
// locates testdata/, and [Unpack] makes its compressed objects usable.
//
// The large objects under testdata/objects/<arch>/ and
// testdata/cores/<arch>/bin/ (glibc, ld.so, C++ programs with libstdc++
// linked in, arm64 programs padded to 64 KiB segments) are committed as
// NAME.xz to keep the checkout small (testdata/FORMAT.md says which;
// testdata/gen/pack.py writes them). Everything that names them (fixture
// maps, core truth files, tests) keeps the plain NAME: Unpack decompresses
// each NAME.xz to NAME beside it, byte for byte the object the fixture's
// program mapped, once per directory and process, and again only when the
// .xz is newer than the unpacked file. The unpacked files are ignored by
// git (testdata/.gitignore).
//
// Data flows one way: compressed file -> a temporary file in the same
// directory -> rename onto NAME, so concurrent test binaries never see a
// half-written object. A file that cannot be unpacked is an error naming it.
package testfiles
