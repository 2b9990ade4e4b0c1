// Package kallsyms symbolizes kernel addresses from a kallsyms table (the
// format of /proc/kallsyms: "ADDRESS TYPE NAME [MODULE]" per line), as perf
// does for the kernel part of a sample's call chain.
//
// Data flow: Load (a file), Parse (a reader) or ParseBytes (an archive's
// copy) read the table once into a Table sorted by address; Table.Lookup
// then finds the symbol at or below a kernel address and the offset into
// it, without allocating. A table read from LoadProc's cache is the cache
// entry's own arrays (addresses, name ends, names): no Symbol is built
// per name, and the garbage collector has no pointer to follow in it. A Table is immutable and safe for concurrent use.
//
// The running kernel's table: LoadProc reads /proc/kallsyms, which costs
// tens of milliseconds of kernel time however it is read, and keeps the
// kernel image's symbols in a cache directory keyed by the boot's id
// (cache.go), checked against the first lines /proc/kallsyms shows now;
// the first LoadProc of a boot takes them from perf record's copy of
// /proc/kallsyms in perf's build-id cache when the running kernel's
// build-id names one whose first lines match, else reads /proc/kallsyms.
// The next LoadProc of the same boot reads the entry instead; its Table
// holds only the image's symbols, and Covers says which addresses it
// answers as the whole table would (a module's or BPF program's address
// needs Load of the whole table).
//
// Another kernel's table: RunningBuildID says which kernel runs here, and
// PerfCachePath where perf record kept the table of the kernel a recording
// names, for a report of a recording made on another machine; Address
// gives the reference symbol (_text) that a recording of another boot
// (KASLR) is relocated by, as perf relocates it.
//
// Where to begin: Load or Parse for a table, LoadProc for the running
// kernel's; Table.Lookup names an address.
package kallsyms
