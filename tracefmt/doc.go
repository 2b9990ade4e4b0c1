// Package tracefmt reads the tracing data of a perf.data file (the
// TRACING_DATA feature, perfdata.Features.TracingData) and formats the raw
// data of tracepoint samples (PERF_SAMPLE_RAW) as perf script prints it.
//
// # Data flow
//
//	Parse(tracingData)            "\x17\x08Dtracing" container: version,
//	  -> *Events                   long and page size, header_page/event,
//	                               ftrace and per-system event format files,
//	                               kallsyms, printk formats, saved cmdlines
//	  each format file -> *Format  name, ID, common and own fields
//	                               (offset/size/signed, arrays, __data_loc),
//	                               and the print fmt compiled once into parts
//	Events.Lookup(attr.Config)    the Format of a tracepoint event (or
//	  / Events.ForRaw(raw)         ForRaw, by the record's common_type)
//	Format.Append(dst, raw)       the fields as perf script prints them with
//	                               no -F, e.g. "prev_comm=sh prev_pid=1 ..."
//	Format.Fields(raw)            name -> value (int64, uint64, string,
//	                               []int64/[]uint64) for JSON's "fields"
//
// # How perf prints
//
// perf script hands the raw data to libtraceevent, which interprets the
// event's print fmt: a C format string and C expressions over the record
// (REC->field). This package does the same, with libtraceevent's rules:
// fields are read unsigned and converted by the conversion's length
// modifier ((int) for %d, (long) for %ld ...); casts to 8/16/32-bit types
// mask; %s of a char array prints up to its NUL, %s of a long-sized scalar
// is a kernel string pointer named by the printk formats (else bare hex);
// %p prints like glibc's %p ("(nil)" for 0). Supported: the conversions
// d i u x X o c s p (with flags - + space # 0, width, precision, '*' for
// either, hh h l ll z), %pS/%pF/%ps/%pf (named through Events.Resolve when
// set), %pU[bBlL],
// arithmetic, bitwise, comparison, logical and ternary operators, casts,
// fixed-array indexing, __get_str, __get_rel_str,
// __get_dynamic_array_len, __print_flags and __print_symbolic.
//
// # Fallback
//
// Identifiers the kernel left unexpanded (enum constants) evaluate to 0
// and print their name, as in libtraceevent. A print fmt using anything
// else (%pM, %pI4, __print_hex, __print_array, __get_cpumask, GNU
// statement expressions ...) is not guessed at:
// Format.PrintErr says what was not understood and Append prints the own
// fields as "name=value" pairs separated by spaces, each value as
// libtraceevent prints a raw field. Callers should warn once per event when
// PrintErr is set, since perf's output then differs.
//
// # Damaged input
//
// Errors are *Error values naming the offset in the tracing data and the
// event. A format file that cannot be parsed is left out (Parse returns the
// others and the error); a damaged container fails Parse. Formatting never
// reads outside raw: fields past its end read as zero or empty. Append
// allocates nothing beyond growing dst.
//
// Where to begin: Parse over the TRACING_DATA feature's bytes, then
// Events.ForRaw for a sample's Format and Format.Append (the package
// Example).
package tracefmt
