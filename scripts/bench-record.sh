#!/bin/sh
# bench-record.sh: record the same busy multi-threaded workload with
# `perf record --call-graph dwarf,8192` and with `ustack record` at the same
# rate and stack size, and print for each the samples kept and lost and the
# workload's wall time (plus the wall time without any recorder).
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
(cd "$ROOT" && go build -o "$W/ustack" ./cmd/ustack)

now() { date +%s.%N; }
# samples FILE: SAMPLE records in a perf.data file.
samples() { perf report --stats -i "$1" 2>/dev/null | awk '/^ *SAMPLE events:/{print $3; exit}'; }
# lost FILE: samples the kernel dropped (LOST and LOST_SAMPLES records).
lost() {
	perf report -D -i "$1" 2>/dev/null | awk '/PERF_RECORD_LOST(_SAMPLES)?:/{for(i=1;i<=NF;i++) if ($i ~ /^lost:/) {split($i,a,":"); s+=a[2]}} END{print s+0}'
}
elapsed() { echo "$2 - $1" | bc; }

printf '%-8s %4s %10s %10s %10s %10s\n' tool run samples lost wall_s rec_MB
for run in $(seq 1 "$RUNS"); do
	t0=$(now); "$W/work" "$THREADS" "$ITER" >/dev/null; t1=$(now)
	printf '%-8s %4d %10s %10s %10.3f %10s\n' none "$run" - - "$(elapsed "$t0" "$t1")" -

	# perf: the workload's own wall time is measured inside the recording.
	perf record -q -o "$W/perf.data" -F "$HZ" -e cpu-clock --call-graph dwarf,8192 -- \
		sh -c 't0=$(date +%s.%N); "$0" "$1" "$2" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc >"$3"' \
		"$W/work" "$THREADS" "$ITER" "$W/wall" 2>"$W/perf.err" || cat "$W/perf.err" >&2
	mb=$(du -m "$W/perf.data" | cut -f1)
	printf '%-8s %4d %10s %10s %10.3f %10s\n' perf "$run" "$(samples "$W/perf.data")" "$(lost "$W/perf.data")" "$(cat "$W/wall")" "$mb"

	"$W/ustack" record -q -o "$W/ustack.data" -F "$HZ" -e cpu-clock --stack-size 8192 -- \
		sh -c 't0=$(date +%s.%N); "$0" "$1" "$2" >/dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc >"$3"' \
		"$W/work" "$THREADS" "$ITER" "$W/wall" 2>"$W/ustack.err" || cat "$W/ustack.err" >&2
	mb=$(du -m "$W/ustack.data" | cut -f1)
	printf '%-8s %4d %10s %10s %10.3f %10s\n' ustack "$run" "$(samples "$W/ustack.data")" "$(lost "$W/ustack.data")" "$(cat "$W/wall")" "$mb"
done
