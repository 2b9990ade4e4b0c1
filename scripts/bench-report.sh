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
# then the ratios, and checks that ustack's stacks agree with perf's
# (scripts/compare-stacks.py).
#
# Needs root (or perf_event_paranoid <= 1), perf, gcc, python3 and GNU time;
# libc6-dbg for inline frames; Debian's hotspot package for perfparser.
#
# Usage: scripts/bench-report.sh [WORKDIR]   (default: a new temporary dir)
#   RUNS=5 runs per measurement (median); SLOW_RUNS=1 for perf script with
#   inline frames on the large recording (tens of seconds a run);
#   FREQ=2000 FUNCS=3000 for the large workload; SKIP_PERF_INLINE=1 skips
#   perf script with inline frames on the large recording.
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

echo "== building ustack"
(cd "$here" && go build -o "$work/ustack" ./cmd/ustack)

cat > chain.c <<'EOF'
#include <unistd.h>
static volatile long sink;
__attribute__((noinline)) void leaf(int n) { for (long i = 0; i < 3000000; i++) sink += i * n; close(-1); sink++; }
__attribute__((noinline)) void mid(int n) { leaf(n); sink++; }
__attribute__((noinline)) void top(int n) { mid(n); sink++; }
int main(void) { for (int i = 0; i < 60; i++) top(i); return 0; }
EOF
gcc -O2 -g -o chain chain.c

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

# once NAME OUTFILE command...: one run; prints "secs kb cpusecs".
once() {
	local out=$1; shift
	/usr/bin/time -f '%e %M %U %S' -o "$out.time" "$@" > "$out" 2> "$out.err" || true
	tail -n 1 "$out.time" | awk '{ printf "%s %s %.2f\n", $1, $2, $3 + $4 }' > "$out.time2" && mv "$out.time2" "$out.time"
	cat "$out.time"
}

# measure LABEL N command...: N runs; prints and records the median time
# and the peak RSS of the median run in results.txt.
measure() {
	local label=$1 n=$2; shift 2
	local t=()
	for _ in $(seq "$n"); do
		t+=("$(once "$label.txt" "$@")")
	done
	local med
	med=$(printf '%s\n' "${t[@]}" | sort -n | awk -v n="$n" 'NR == int((n + 1) / 2)')
	local rss cpu
	read -r _ rss cpu <<< "$med"
	printf '  %-15s %8.3f s %7.2f s cpu %7d MB   (%d runs)\n' "$label" "${med%% *}" "$cpu" "$(( rss / 1024 ))" "$n"
	echo "$label ${med%% *}" >> results.txt
}

fields=comm,tid,time,event,ip,sym,symoff,dso
for rec in small medium large; do
	echo "== $rec.data ($(./ustack report -i $rec.data --format folded 2>/dev/null | awk '{s+=$NF} END {print s}') samples)"
	: > results.txt
	cache=$(mktemp -d "$work/cache.XXXXXX")
	# Cold: a new, empty cache directory for every run.
	cold() { local c; c=$(mktemp -d "$work/cold.XXXXXX"); XDG_CACHE_HOME="$c" ./ustack report -F "$fields" -i "$rec.data"; rm -rf "$c"; }
	measure ustack-cold "$runs" bash -c "$(declare -f cold); rec=$rec work=$work fields=$fields; cold"
	XDG_CACHE_HOME="$cache" ./ustack report -i "$rec.data" > /dev/null 2>&1 || true
	measure ustack-warm "$runs" env XDG_CACHE_HOME="$cache" ./ustack report -F "$fields" -i "$rec.data"
	cp ustack-warm.txt "ustack-$rec.txt"
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
	python3 - <<'PY'
r = dict(l.split() for l in open("results.txt"))
w, c = float(r["ustack-warm"]), float(r["ustack-cold"])
for k in ("perf", "perf-noinline", "perfparser"):
    if k in r:
        print(f"  {k:15s} / ustack: {float(r[k]) / max(c, 1e-3):6.1f}x cold, {float(r[k]) / max(w, 1e-3):6.1f}x warm")
PY
	echo "  agreement with perf script --no-inline (ustack --no-inline):"
	./ustack report -F "$fields" --no-inline -i "$rec.data" > "ustack-noinline-$rec.txt" 2>/dev/null
	python3 "$here/scripts/compare-stacks.py" "perf-noinline-$rec.txt" "ustack-noinline-$rec.txt" | sed 's/^/    /' || true
	rm -rf "$cache"
done
