// Package perfdata reads and writes the perf.data format of Linux perf
// (perf record), the capture format ustack unwinds offline: each SAMPLE
// carries the user registers (PERF_SAMPLE_REGS_USER) and a snapshot of the
// user stack (PERF_SAMPLE_STACK_USER), and the MMAP/MMAP2/COMM/FORK/EXIT
// records describe the address spaces the samples ran in.
//
// # Data flow
//
//	Open / NewFileReader      file mode ("PERFILE2" header of 104 bytes)
//	  header -> attrs section (perf_file_attr: attr + ids section)
//	         -> feature sections after the data (bitmap adds_features)
//	         -> data section, streamed record by record
//	OpenMapped                the same, the file mapped: records decoded in
//	                          place, no read or copy; pages 2 MB ahead of
//	                          the reader mapped by a goroutine of its own
//	                          (MADV_POPULATE_READ, prefetch.go), pages behind
//	                          it dropped (MADV_DONTNEED) so the resident set
//	                          stays small; queued samples alias the mapping.
//	                          A file of 16 MB or more is read with pread in
//	                          chunks of 1 MB instead (chunk.go), which queued
//	                          samples share; Sample.Release hands a chunk
//	                          back for reuse once all its samples are done
//	NewReader                 pipe mode (perf record -o -, 16-byte header)
//	  HEADER_ATTR, HEADER_FEATURE, EVENT_UPDATE, HEADER_BUILD_ID ... records
//	  fill the Session as they stream by; the TRACING_DATA payload is kept
//	  (Features.TracingData), AUXTRACE payloads are skipped
//	COMPRESSED / COMPRESSED2 records (perf record -z) -> one zstd stream
//	  decoded chunk by chunk (compressed.go); the records it holds come out
//	  of Next in their place, as if never compressed
//	Reader.Next  -> Record (*Sample, *Mmap, *Comm, *Fork, *Exit, ... or *Raw)
//	Sorter.Next  -> the same records in timestamp order, with perf's
//	               FINISHED_ROUND semantics (what perf script shows)
//	Writer       -> a file-mode perf.data perf script and perf report accept
//
// A Session holds the events (Attrs, with their sample ids and names from
// EVENT_DESC) and the decoded features (ARCH, BUILD_ID, HOSTNAME, OSRELEASE,
// VERSION, CMDLINE, NRCPUS, CPUDESC, CPUID, TOTAL_MEM, EVENT_DESC, CLOCKID,
// SAMPLE_TIME, COMPRESSED; TRACING_DATA kept as bytes for package tracefmt). Every record's sample id (the SAMPLE's own id fields or the
// sample_id_all trailer of other kernel records) maps it to its Attr and
// fills its RecordHeader's pid, tid, time, id, stream id and cpu.
//
// Samples are decoded field by field in the kernel's order (IDENTIFIER, IP,
// TID, TIME, ADDR, ID, STREAM_ID, CPU, PERIOD, READ, CALLCHAIN, RAW,
// BRANCH_STACK, REGS_USER, STACK_USER, WEIGHT/WEIGHT_STRUCT, DATA_SRC,
// TRANSACTION, REGS_INTR, PHYS_ADDR, CGROUP, DATA_PAGE_SIZE, CODE_PAGE_SIZE,
// AUX) as the sample's attr describes them. Attr.LoadUserRegs turns a
// sample's registers into arch.Regs with the architecture's perf register
// order (Session.Arch, from the ARCH feature).
//
// # Memory and ownership
//
// The Reader never loads the file: it keeps one read buffer (256 KiB, enough
// for the largest, 64 KiB, record) and one reusable value per record type.
// A Record returned by Next, and the slices inside it (a Sample's
// Callchain, Regs, StackData, Raw ...), are valid only until the next Next;
// Record.Clone (or Sample.Detach) makes a copy to keep. A Sorter queues
// copies; over OpenMapped their byte slices stay in the file's mapping (a
// small file) or in the 1 MB chunk it was read into (a large one), which
// the Reader reads into again once every sample of it is Released (a
// sample never released keeps its chunk, as any Go value). Decoding a
// sample does not allocate. Header and feature sections are checked against the
// file size before anything is allocated for them, and no record allocates
// more than its declared size.
//
// # Damaged input
//
// Errors are *FormatError values naming the byte offset and what was wrong;
// truncation errors also match ErrTruncated. A truncated file yields every
// complete record, then the error. In a file (not a stream), a record that
// cannot be read (its size smaller than its header or past the data
// section, a type perf does not write followed by no valid record, a body
// that does not decode, a sample whose fields do not fill it exactly, a
// name padded past its 8 bytes, an impossible pid) does not end the
// records: the reader scans forward for the next offset where several
// records in a row validate and resumes there, recording a Damage (file,
// offset, bytes skipped; Reader.Damages). Only when no valid record
// follows does the error end the records. See resync.go for what
// validates. A stream (pipe mode) stops at the first such record with its
// error. Damaged feature sections do not
// hide the records: Next returns the feature error at the end instead of
// io.EOF. No input panics, loops or allocates without bound (see the fuzz
// targets).
//
// # Limits
//
// Only little-endian files are read (big-endian ones are reported as such).
//
// # Compressed records
//
// perf record -z writes every record after the header ones into COMPRESSED
// records (COMPRESSED2 in perf 6.x: a data_size field, then padding to 8
// bytes) that together carry one zstd stream: a record, even a zstd block,
// can continue in the next COMPRESSED record. The Reader decompresses each
// COMPRESSED record as it reads it (github.com/klauspost/compress/zstd, in
// a coroutine that pauses when the chunk is used up, so nothing is read
// ahead) and returns the records it completes before reading on; the
// COMPRESSED records themselves are not returned. Each such record's
// Offset is that of the COMPRESSED record that completed it, as perf
// reports it. Output is bounded: one COMPRESSED record decompresses to at
// most the COMPRESSED feature's mmap_len (perf's ring size; 16 MiB without
// the feature) plus one record, the whole stream to at most 2048 times the
// compressed bytes plus 64 MiB, the zstd window to 128 MiB (perf -z 22).
// Damaged zstd data yields the records decoded before the damage, then an
// error naming the COMPRESSED record's offset.
//
// Where to begin: Open, then Reader.Next for each record in file order (a
// *Sample carries the registers and stack); package report does the rest of
// a report.
package perfdata
