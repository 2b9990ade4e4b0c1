// Package debuginfod fetches executables and separate debug files by GNU
// build-id from debuginfod servers (the protocol of elfutils' debuginfod:
// GET URL/buildid/HEX/debuginfo and URL/buildid/HEX/executable), for the
// objects of a recording that are missing on the machine that reports it.
//
// Data flow. New reads the server list from Options.URLs or, when that is
// nil, from $DEBUGINFOD_URLS (space-separated); with no servers (the
// variable unset or empty) or Options.Off, the client is disabled and
// Fetch never makes a request. Fetch first looks in the cache that elfutils'
// client (and so gdb, perf, eu-stack and systemd-coredump) share:
// $DEBUGINFOD_CACHE_PATH, else $XDG_CACHE_HOME/debuginfod_client, else
// ~/.cache/debuginfod_client, with one directory per build-id holding the
// files "debuginfo" and "executable". A file found there is used without a
// request; an empty file is elfutils' negative entry (the servers said 404)
// and is honoured for cache_miss_s seconds (600 unless the cache says
// otherwise). Otherwise every server is asked at once and the first valid
// answer wins: the body is streamed to a temporary file (mode 0600) in the
// build-id's directory, checked to be an ELF file with the requested
// build-id, and renamed into place, so that a reader never sees a partial
// file. Concurrent Fetch calls for one file share one download; at most
// Options.Parallel downloads run at once.
//
// Time is bounded per request (Options.RequestTimeout, $DEBUGINFOD_TIMEOUT)
// and in total (Options.TotalTimeout: once spent, no request starts). A
// server that cannot be reached or times out is not asked again by this
// client. Every failure other than "not found" is reported once through
// Options.Warn and returned as an error; callers carry on without the file.
//
// Where to begin: New(Options{}) reads DEBUGINFOD_URLS as elfutils does;
// hand the Client to resolve.Options.Fetcher or tracer.Options.Fetcher.
package debuginfod
