#!/usr/bin/env bash
# Benchmark ustack report against perf script on a large recording.
#
# Records gcc's cc1 compiling a generated C file with
# `perf record --call-graph dwarf` (at least 50,000 samples), then runs
# `perf script`, `perf script --no-inline` and `ustack report` on the same
# file, checks that their stacks agree (scripts/compare-stacks.py), and
# prints the wall times, speed ratios and peak memory of each.
#
# Needs root (or perf_event_paranoid <= 1), perf, gcc, python3 and GNU time;
# install libc6-dbg for the inline frames people debug with.
#
# Usage: scripts/bench-report.sh [WORKDIR]   (default: a new temporary dir)
#   FREQ=2000 FUNCS=3000 to change the sampling rate and the workload size;
#   SKIP_PERF_INLINE=1 to skip the slow `perf script` run.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d /tmp/ustack-bench.XXXXXX)}"
mkdir -p "$work"
cd "$work"
freq="${FREQ:-2000}"
funcs="${FUNCS:-3000}"

echo "== building ustack"
(cd "$here" && go build -o "$work/ustack" ./cmd/ustack)

echo "== generating a C file with $funcs functions"
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

if [ ! -s perf.data ]; then
	echo "== recording gcc -O2 -c gen.c at ${freq} Hz with --call-graph dwarf"
	perf record -q -e cpu-clock -F "$freq" --call-graph dwarf -o perf.data -- gcc -O2 -c gen.c -o gen.o
fi
ls -la perf.data

measure() { # name command...: runs the command, output to $name.txt, time to $name.time
	local name=$1; shift
	/usr/bin/time -f '%e %M' -o "$name.time" "$@" > "$name.txt" 2> "$name.err" || true
	read -r secs kb < "$name.time"
	printf '%-24s %8.2f s %8d MB\n' "$name" "$secs" "$((kb / 1024))"
}

fields=comm,tid,time,event,ip,sym,symoff,dso
echo "== running (wall time, peak RSS)"
measure ustack ./ustack report -F "$fields" -i perf.data
measure perf-noinline perf script -F "$fields" --no-inline -i perf.data
if [ -z "${SKIP_PERF_INLINE:-}" ]; then
	measure perf perf script -F "$fields" -i perf.data
fi
samples=$(grep -c -v -P '^\t|^$' ustack.txt || true)
echo "samples: $samples"

echo "== agreement"
echo "-- ustack vs perf script --no-inline (ustack with --no-inline):"
./ustack report -F "$fields" --no-inline -i perf.data > ustack-noinline.txt 2>/dev/null
python3 "$here/scripts/compare-stacks.py" perf-noinline.txt ustack-noinline.txt || true
if [ -s perf.txt ]; then
	echo "-- ustack vs perf script (inline frames):"
	python3 "$here/scripts/compare-stacks.py" perf.txt ustack.txt || true
fi

echo "== speed"
u=$(cut -d' ' -f1 ustack.time)
n=$(cut -d' ' -f1 perf-noinline.time)
python3 -c "print('ustack vs perf script --no-inline: %.1fx faster' % ($n / max($u, 0.01)))"
if [ -s perf.time ]; then
	p=$(cut -d' ' -f1 perf.time)
	python3 -c "print('ustack vs perf script:             %.1fx faster' % ($p / max($u, 0.01)))"
fi
