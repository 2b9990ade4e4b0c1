// Package kallsyms symbolizes kernel addresses from a kallsyms table (the
// format of /proc/kallsyms: "ADDRESS TYPE NAME [MODULE]" per line), as perf
// does for the kernel part of a sample's call chain.
//
// Data flow: Load (a file), Parse (a reader) or ParseBytes (an archive's
// copy) read the table once into a Table sorted by address; Table.Lookup
// then finds the symbol at or below a kernel address and the offset into
// it, without allocating. A Table is immutable and safe for concurrent use.
package kallsyms
