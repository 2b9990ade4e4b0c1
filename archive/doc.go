// Package archive reads and writes the .ustack archive that `ustack record`
// writes next to its perf.data: the objects, separate debug files, vDSO and
// kallsyms of the recording machine, keyed by build-id, so that a report
// needs none of that machine's files (docs/DUMP_FORMAT.md).
//
// # Writing
//
// Create starts an archive whose first member is the Meta; AddObject,
// AddObjectFile, AddDebugFile, AddVDSO and AddKallsyms each append one
// member, written whole and flushed, with PAX records naming its kind,
// build-id, path, size and CRC-32C checksums of its contents and of those
// records; Close appends manifest.json and the tar trailer. Compact rewrites
// a finished archive with every member gzip-compressed.
//
// # Reading
//
// Open (or NewReader over an io.ReaderAt) indexes the members without
// reading their data. A member's data is read, decompressed and checked
// against its checksums when asked for (ObjectByID, ObjectByPath, DebugFile,
// VDSO, Kallsyms, and Object, the form a resolver consults).
//
// A damaged archive costs only the members it damaged. Indexing walks the
// member headers; where a header is unreadable it scans forward, block by
// block, for the next intact one, and where the archive ends early (a killed
// recorder) it keeps every complete member. The manifest, when it survived,
// names the members that were lost. Each damage is a *FormatError naming
// the file, the offset and the member; they are passed to Options.Warn as
// they are found and kept in Damage. A member whose data fails its
// checksum or decompression is reported once and treated as absent.
//
// Where to begin: Open and Reader.Object to read (the package Example);
// Create to write.
package archive
