#!/usr/bin/env bash
# Benchmark ustack report against perf script and hotspot's perfparser on a
# small, a medium and a large recording made on this machine.
#
#   small:  a chain program (leaf <- mid <- top <- main) at syscall tracepoints
#   medium: the same program sampled with cpu-clock
#   large:  gcc's cc1 compiling a generated C file, cpu-clock
#
# For each recording it runs, RUNS times each, and prints the median wall
# time, the CPU time (user+system, all threads and children) of the same
# run, and peak RSS:
#   ustack-cold     ustack report with an empty cache directory (nothing
#                   decompressed or indexed yet: a first run on this machine)
#   ustack-warm     ustack report again (the section cache is filled)
#   perf            perf script (with inline frames: addr2line)
#   perf-noinline   perf script --no-inline
#   perfparser      hotspot-perfparser --input FILE --output /dev/null
#   base-warm       with BASE=BINARY: that ustack binary, warm (a build of
#                   the commit before a change, with CGO_ENABLED=0 as this
#                   script builds ustack: before and after in one run,
#                   their runs alternated)
#   ustack-j1, -j2  on the large recording: ustack warm with one and two
#                   unwinding workers
#   harness         env true, measured the same way: what measuring adds to
#                   every wall time (subtracted from all of them below)
#   floor           the least any reader of the file could take: reading
#                   the recording (dd FILE to /dev/null) plus writing
#                   ustack's output once (cat OUTPUT > /dev/null), both from
#                   the page cache, their medians added
# then ustack-warm's time per sample, the ratios (the floor's among them),
# and checks that ustack's stacks
# agree with perf's (scripts/compare-stacks.py).
#
# Needs root (or perf_event_paranoid <= 1), perf, gcc, python3 and GNU time;
# libc6-dbg for inline frames; Debian's hotspot package for perfparser.
#
# Usage: scripts/bench-report.sh [WORKDIR]   (default: a new temporary dir)
#   RUNS=5 runs per measurement (median); RECS="small medium" reports only
#   those of the three recordings; SLOW_RUNS=1 for perf script with
#   inline frames on the large recording (tens of seconds a run);
#   FREQ=2000 FUNCS=3000 for the large workload; SKIP_PERF_INLINE=1 skips
#   perf script with inline frames on the large recording; BASE=BINARY
#   measures another ustack binary too (e.g. one built from main); FUNCS=30000
#   makes a recording about 10x larger (time per sample should stay flat).
# Run it on a quiet machine: the figures are wall times. On a shared one the
# CPU times say more (ustack spreads over every core; perf script's
# addr2line children are counted in its CPU time).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d /tmp/ustack-bench.XXXXXX)}"
mkdir -p "$work"
cd "$work"
runs="${RUNS:-5}"
slow_runs="${SLOW_RUNS:-1}"
freq="${FREQ:-2000}"
funcs="${FUNCS:-3000}"
perfparser=""
for p in hotspot-perfparser /usr/lib/x86_64-linux-gnu/libexec/hotspot-perfparser /usr/libexec/hotspot-perfparser; do
	if command -v "$p" >/dev/null 2>&1 || [ -x "$p" ]; then perfparser=$p; break; fi
done

echo "== building ustack (static, as the README installs it)"
(cd "$here" && CGO_ENABLED=0 go build -o "$work/ustack" ./cmd/ustack)

cat > chain.c <<'EOF'
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) void leaf(int n) { for (long i = 0; i < 3000000; i++) sink += i * n; close(-1); sink++; }
__attribute__((noinline)) void mid(int n) { leaf(n); sink++; }
__attribute__((noinline)) void top(int n) { mid(n); sink++; }
int main(void) { for (int i = 0; i < 60; i++) top(i); return 0; }
EOF
# Built once: the small and medium recordings name this very file (a new
# build is refused as another program).
[ -x chain ] && [ -s small.data ] && [ -s medium.data ] || gcc -O2 -g -o chain chain.c

python3 - "$funcs" <<'PY'
import sys
n = int(sys.argv[1])
with open("gen.c", "w") as f:
    f.write("#include <stdio.h>\n#include <string.h>\n")
    for i in range(n):
        f.write(f"static inline int h{i}(int x){{ return x*{i%7+1} + {i}; }}\n")
        f.write(f"int f{i}(int a, int b){{ int s=0; for(int k=0;k<a;k++){{ s+=h{i}(k)^b; if(s>{i}) s-=b; }} "
                f"char buf[32]; snprintf(buf, sizeof buf, \"%d\", s); return (int)strlen(buf)+s; }}\n")
    f.write("int main(void){ int t=0;\n")
    for i in range(0, n, 7):
        f.write(f" t+=f{i}(t&15,{i});\n")
    f.write(" return t&1; }\n")
PY

echo "== recording"
[ -s small.data ] || perf record -q -e syscalls:sys_enter_close --call-graph dwarf -o small.data -- ./chain
[ -s medium.data ] || perf record -q -e cpu-clock -F 4000 --call-graph dwarf -o medium.data -- ./chain
[ -s large.data ] || perf record -q -e cpu-clock -F "$freq" --call-graph dwarf -o large.data -- gcc -O2 -c gen.c -o gen.o
ls -la small.data medium.data large.data

# once and measure (wall time in nanoseconds, peak RSS, CPU time; medians).
. "$here/scripts/benchlib.sh"

fields=comm,tid,time,event,ip,sym,symoff,dso
for rec in ${RECS:-small medium large}; do
	nsamples=$(./ustack report -i $rec.data --format folded 2>/dev/null | awk '{s+=$NF} END {print s}')
	echo "== $rec.data ($nsamples samples)"
	: > results.txt
	harness "$runs"
	cache=$(mktemp -d "$work/cache.XXXXXX")
	# Cold: a new, empty cache directory for every run.
	before_each="rm -rf '$work/cold' && mkdir '$work/cold'" \
		measure ustack-cold "$runs" env XDG_CACHE_HOME="$work/cold" ./ustack report -F "$fields" -i "$rec.data"
	fill_cache env XDG_CACHE_HOME="$cache" ./ustack report -i "$rec.data"
	if [ -n "${BASE:-}" ]; then
		# The base's runs alternate with ustack's (the tables an older
		# binary keeps are written by its first run, untimed).
		XDG_CACHE_HOME="$cache" "$BASE" report -i "$rec.data" > /dev/null 2>&1 || true
		measure_pair ustack-warm base-warm "$runs" \
			env XDG_CACHE_HOME="$cache" ./ustack report -F "$fields" -i "$rec.data" -- \
			env XDG_CACHE_HOME="$cache" "$BASE" report -F "$fields" -i "$rec.data"
	else
		measure ustack-warm "$runs" env XDG_CACHE_HOME="$cache" ./ustack report -F "$fields" -i "$rec.data"
	fi
	cp ustack-warm.txt "ustack-$rec.txt"
	if [ -n "${BASE:-}" ]; then
		if cmp -s base-warm.txt "ustack-$rec.txt"; then echo "  base-warm's output is ustack-warm's, byte for byte"; else echo "  base-warm's output DIFFERS from ustack-warm's"; fi
	fi
	if [ "$rec" = large ]; then
		measure ustack-j1 "$runs" env XDG_CACHE_HOME="$cache" ./ustack report -j 1 -F "$fields" -i "$rec.data"
		measure ustack-j2 "$runs" env XDG_CACHE_HOME="$cache" ./ustack report -j 2 -F "$fields" -i "$rec.data"
	fi
	measure read-file "$runs" dd if="$rec.data" of=/dev/null bs=1M status=none
	measure write-output "$runs" cat "ustack-$rec.txt"
	n=$runs
	if [ "$rec" = large ]; then n=$slow_runs; fi
	if [ "$rec" != large ] || [ -z "${SKIP_PERF_INLINE:-}" ]; then
		measure perf "$n" perf script -F "$fields" -i "$rec.data"
		cp perf.txt "perf-$rec.txt"
	fi
	measure perf-noinline "$runs" perf script -F "$fields" --no-inline -i "$rec.data"
	cp perf-noinline.txt "perf-noinline-$rec.txt"
	if [ -n "$perfparser" ]; then
		measure perfparser "$runs" "$perfparser" --input "$rec.data" --output /dev/null
	else
		echo "  perfparser: not installed (Debian package hotspot)"
	fi
	NSAMPLES=$nsamples python3 - <<'PY'
import os
r = {l.split()[0]: float(l.split()[1]) for l in open("results.txt")}
# Every wall time net of the harness (what measuring adds to any run:
# starting GNU time and env; harness line above), so that short runs
# compare as they would under perf stat.
h = r.pop("harness/harness", 0.0)
r = {k: max(v - h, 0.0) for k, v in r.items()}
w, c = r["ustack-warm"], r["ustack-cold"]
print(f"  net of the harness's {h:.4f} s: ustack-warm {w:.4f} s, ustack-cold {c:.4f} s")
n = int(os.environ.get("NSAMPLES") or 0)
if n:
    print(f"  {'per sample':15s} {1e6 * w / n:8.1f} us warm ({n} samples; flat from 10k to 300k samples is the aim)")
floor = r["read-file"] + r["write-output"]
if floor >= 0.005:
    print(f"  {'floor':15s} {floor:8.3f} s   (read the file + write the output); ustack-warm / floor: {w / floor:6.1f}x")
else:
    print(f"  {'floor':15s} {floor:8.3f} s   (read the file + write the output: within the harness's noise, no ratio)")
if "base-warm" in r:
    print(f"  {'base-warm':15s} / ustack: {r['base-warm'] / max(w, 1e-3):6.2f}x warm")
if "ustack-j1" in r:
    print(f"  {'ustack-j1':15s} / ustack-j2: {r['ustack-j1'] / max(r['ustack-j2'], 1e-3):6.2f}x")
for k in ("perf", "perf-noinline", "perfparser"):
    if k in r:
        print(f"  {k:15s} / ustack: {r[k] / max(c, 1e-3):6.1f}x cold, {r[k] / max(w, 1e-3):6.1f}x warm")
PY
	echo "  agreement with perf script --no-inline (ustack --no-inline):"
	./ustack report -F "$fields" --no-inline -i "$rec.data" > "ustack-noinline-$rec.txt" 2>/dev/null
	python3 "$here/scripts/compare-stacks.py" "perf-noinline-$rec.txt" "ustack-noinline-$rec.txt" | sed 's/^/    /' || true
	rm -rf "$cache"
done
