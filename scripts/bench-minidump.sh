#!/usr/bin/env bash
# Benchmark ustack report on a minidump lldb wrote against lldb's own
# bt all of it (issue 24).
#
# testdata/gen/minidumps/gen.py --live makes the minidump: the threads64
# program (64 threads, each blocked at the end of 8 calls of its own in
# nanosleep, read, futex or poll; main in pthread_join; -O2 -g
# -fomit-frame-pointer), stopped by lldb 15 and saved with `process
# save-core --plugin-name=minidump --style stack`. Then it runs, RUNS times
# each, and prints the median wall time, its peak RSS and CPU time
# (user+sys: steadier than wall time on a busy machine) of:
#   ustack-cold   ustack report -i FILE.dmp with an empty cache directory
#   ustack-warm   the same again (ustack's section cache is filled)
#   ustack-json   ustack report --format json (warm)
#   lldb          lldb-15 --batch -o 'target create --core FILE.dmp' -o 'bt all'
# and the ratios, and checks that both show the 64 workers' chains.
# Both find the objects where the process mapped them (this machine's),
# glibc's debug file too where libc6-dbg is installed.
#
# Needs gcc, gdb, lldb-15, python3, GNU time, ptrace rights (root, or
# kernel.yama.ptrace_scope 0). Usage: scripts/bench-minidump.sh [WORKDIR];
# RUNS=5. report's BenchmarkLLDBMinidump64 measures the report alone on
# the committed threads64 minidump.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d /tmp/ustack-bench-minidump.XXXXXX)}"
mkdir -p "$work"
cd "$work"
runs="${RUNS:-5}"

echo "== building ustack (static, as the README installs it)"
(cd "$here" && CGO_ENABLED=0 go build -o "$work/ustack" ./cmd/ustack)

echo "== minidump (lldb-15)"
python3 "$here/testdata/gen/minidumps/gen.py" --live "$work/gen" threads64 2> gen.log || { cat gen.log >&2; exit 1; }
cp "$work/gen/run/threads64/lldb.dmp" threads64.dmp
ls -la threads64.dmp

. "$here/scripts/benchlib.sh"

: > results.txt
cache=$(mktemp -d "$work/cache.XXXXXX")
harness "$runs"
before_each="rm -rf '$work/cold' && mkdir '$work/cold'" \
	measure ustack-cold "$runs" env XDG_CACHE_HOME="$work/cold" ./ustack report -i threads64.dmp
fill_cache env XDG_CACHE_HOME="$cache" ./ustack report -i threads64.dmp
measure ustack-warm "$runs" env XDG_CACHE_HOME="$cache" ./ustack report -i threads64.dmp
measure ustack-json "$runs" env XDG_CACHE_HOME="$cache" ./ustack report --format json -i threads64.dmp
measure lldb "$runs" lldb-15 --batch -o "target create --core threads64.dmp" -o "bt all"
awk 'function r(a, b) { return b > 0 ? a / b : 0 } {t[$1]=$2; c[$1]=$3} END {
	h = t["harness/harness"]
	for (k in t) if (k != "harness/harness") t[k] -= h
	printf "  ratios (wall net of the harness, %.4f s; cpu):\n", h
	printf "    lldb / ustack-warm %6.1fx %6.1fx\n", r(t["lldb"], t["ustack-warm"]), r(c["lldb"], c["ustack-warm"])
	printf "    lldb / ustack-cold %6.1fx %6.1fx\n", r(t["lldb"], t["ustack-cold"]), r(c["lldb"], c["ustack-cold"])
}' results.txt

echo "== checks"
threads=$(grep -c ' core' ustack-warm.txt || true)
chains=$(grep -c ' f8+' ustack-warm.txt || true)
lldb_chains=$(grep -c '`f8' lldb.txt || true)
echo "  ustack: $threads threads, $chains worker chains through f8; lldb: $lldb_chains"
if [ "$threads" -ne 65 ] || [ "$chains" -ne 64 ] || [ "$lldb_chains" -ne 64 ]; then
	echo "the reports are not the 65 threads with 64 worker chains" >&2
	exit 1
fi
