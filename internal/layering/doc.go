// Package layering checks that the packages import one another as
// docs/ARCHITECTURE.md says: each only packages listed above it.
//
// It holds tests only. They read the package table of
// docs/ARCHITECTURE.md (bottom to top), run go list over the module, and
// fail for any import of a package listed above the importer or missing
// from the table, and for any non-test package other than resolve that
// builds an unwinder address space.
package layering
