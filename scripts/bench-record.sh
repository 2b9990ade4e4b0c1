#!/bin/sh
# bench-record.sh: record the same busy multi-threaded workload with
# `perf record --call-graph dwarf,8192` and with `ustack record` at the same
# rate and stack size, and print for each: the samples kept and lost, the
# workload's wall time, its wall time per 1000 kept samples (the kernel's
# cost is per sample, so a recorder that keeps more samples slows the
# workload more), and the recorder's own CPU time while the workload ran
# (read from /proc/RECORDER/stat, so perf's build-id pass after the run and
# ustack's archive compaction are not counted). Plus the wall time without
# any recorder.
#
# usage: scripts/bench-record.sh [-F HZ] [-t THREADS] [-n ITERATIONS] [-r RUNS]
# Needs root (or CAP_PERFMON), gcc, perf and go.
set -eu
HZ=10000 THREADS=4 ITER=400000000 RUNS=3
while getopts F:t:n:r: o; do
	case $o in
	F) HZ=$OPTARG ;; t) THREADS=$OPTARG ;; n) ITER=$OPTARG ;; r) RUNS=$OPTARG ;;
	*) echo "usage: $0 [-F HZ] [-t THREADS] [-n ITERATIONS] [-r RUNS]" >&2; exit 2 ;;
	esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
W=$(mktemp -d /tmp/ustack-bench.XXXXXX)
trap 'rm -rf "$W"' EXIT
cat >"$W/work.c" <<'C'
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
static long iters;
__attribute__((noinline)) static unsigned long leaf(unsigned long x) { return x * 2654435761u + (x >> 7); }
__attribute__((noinline)) static unsigned long mid(unsigned long x) { return leaf(x) ^ leaf(x + 1); }
__attribute__((noinline)) static unsigned long top(unsigned long x) { return mid(x) + 1; }
static void *worker(void *arg) {
	unsigned long acc = (unsigned long)arg;
	for (long i = 0; i < iters; i++) acc = top(acc + i);
	return (void *)acc;
}
int main(int argc, char **argv) {
	int n = atoi(argv[1]);
	iters = atol(argv[2]) / n;
	pthread_t t[256];
	for (int i = 0; i < n; i++) pthread_create(&t[i], 0, worker, (void *)(long)i);
	unsigned long s = 0;
	for (int i = 0; i < n; i++) { void *r; pthread_join(t[i], &r); s += (unsigned long)r; }
	printf("%lu\n", s & 1);
	return 0;
}
C
gcc -O2 -g -pthread -o "$W/work" "$W/work.c"
(cd "$ROOT" && CGO_ENABLED=0 go build -o "$W/ustack" ./cmd/ustack)

# samples FILE: SAMPLE records in a perf.data file.
samples() { perf report --stats -i "$1" 2>/dev/null | awk '/^ *SAMPLE events:/{print $3; exit}'; }
# lost FILE: samples the kernel dropped (LOST and LOST_SAMPLES records), as
# perf's per-event stats sum them.
lost() {
	perf report --stats -i "$1" 2>/dev/null | awk '/ stats:$/{ev=1} ev && /LOST_SAMPLES events:/{s+=$3} END{print s+0}'
}
# The workload runs under this wrapper, a direct child of the recorder (the
# ustack gate shell execs it): it writes "wall_s workload_cpu_s
# recorder_cpu_s" to $4, the recorder's CPU being what its parent spent
# while the workload ran.
cat >"$W/wrap.sh" <<'SH'
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
clk=$(getconf CLK_TCK)
r0=$(cpu $PPID); t0=$(date +%s.%N)
"$1" "$2" "$3" >/dev/null
t1=$(date +%s.%N); r1=$(cpu $PPID)
echo "$t1 $t0 $r1 $r0 $clk" | awk '{printf "%.3f %.2f\n", $1-$2, ($3-$4)/$5}' >"$4"
SH

row() { # tool run datafile
	read -r wall rcpu <"$W/out"
	s=$(samples "$3")
	printf '%-8s %4d %10s %8s %8.3f %12.3f %10.2f %8s\n' "$1" "$2" "$s" "$(lost "$3")" "$wall" \
		"$(echo "$wall $s" | awk '{printf "%.1f", $2 ? 1e6*$1/$2 : 0}')" "$rcpu" "$(du -m "$3" | cut -f1)"
}

printf '%-8s %4s %10s %8s %8s %12s %10s %8s\n' tool run kept lost wall_s wall_ms/1k rec_cpu_s rec_MB
for run in $(seq 1 "$RUNS"); do
	t0=$(date +%s.%N); "$W/work" "$THREADS" "$ITER" >/dev/null; t1=$(date +%s.%N)
	printf '%-8s %4d %10s %8s %8.3f %12s %10s %8s\n' none "$run" - - "$(echo "$t1 $t0" | awk '{print $1-$2}')" - - -

	perf record -q -o "$W/perf.data" -F "$HZ" -e cpu-clock --call-graph dwarf,8192 -- \
		sh "$W/wrap.sh" "$W/work" "$THREADS" "$ITER" "$W/out" 2>"$W/perf.err" || cat "$W/perf.err" >&2
	row perf "$run" "$W/perf.data"

	"$W/ustack" record -q -o "$W/ustack.data" -F "$HZ" -e cpu-clock --stack-size 8192 -- \
		sh "$W/wrap.sh" "$W/work" "$THREADS" "$ITER" "$W/out" 2>"$W/ustack.err" || cat "$W/ustack.err" >&2
	row ustack "$run" "$W/ustack.data"
done
