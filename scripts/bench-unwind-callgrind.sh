#!/usr/bin/env bash
# Count the instructions the unwinder spends per frame, with valgrind's
# callgrind: a figure that, unlike ns/frame, does not depend on what else the
# machine is running.
#
# Builds the unwinder's test binary and runs each Unwind benchmark under
# callgrind three times, N, 2N and 3N calls, collecting only inside
# unwinder.(*Unwinder).Unwind. The difference of two instruction counts,
# over N calls times the frames of one stack (the benchmark's frames/op), is
# the cost per frame of an unwind with a warm cache: the fixture's loading,
# the cold warm-up call and the runtime's start cancel out. Only the
# instructions of package unwinder's functions count (the runtime runs
# work of its own where Unwind's prologue yields); the garbage collector
# and asynchronous preemption are off.
#
# Needs valgrind. Usage: scripts/bench-unwind-callgrind.sh [BENCH_REGEXP];
# N=10000 sets the calls, TEST=path reuses a test binary built with
# CGO_ENABLED=0 (callgrind trips over the cgo runtime's signal masks).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
command -v valgrind >/dev/null || { echo "valgrind is not installed (Debian package valgrind)" >&2; exit 1; }
pattern="${1:-Unwind}"
n="${N:-10000}"
work="$(mktemp -d /tmp/ustack-callgrind.XXXXXX)"
trap 'rm -rf "$work"' EXIT
test="${TEST:-$work/unwinder.test}"
if [ -z "${TEST:-}" ]; then
	(cd "$here" && CGO_ENABLED=0 go test -c -o "$test" ./unwinder)
fi
benches="$(cd "$here/unwinder" && "$test" -test.list "Benchmark.*" | grep -E -- "$pattern")"

# run BENCH CALLS prints the benchmark's frames/op and the Ir inside Unwind.
run() {
	local out line
	# cpu.rdtscp=off: valgrind does not know RDTSCP, which the Go runtime
	# executes when one of its locks is contended (sysmon's), and the test
	# binary died of SIGILL halfway through its benchmark line now and then.
	out="$(cd "$here/unwinder" && GOGC=off GODEBUG=asyncpreemptoff=1,cpu.rdtscp=off valgrind --tool=callgrind \
		--callgrind-out-file="$work/cg.out" \
		--toggle-collect='github.com/ustack/ustack/unwinder.(*Unwinder).Unwind' \
		"$test" -test.run '^$' -test.bench "^$1\$" -test.benchtime "$2x" -test.cpu 1 2>"$work/vg.err")" ||
		{ cat "$work/vg.err" >&2; exit 1; }
	line="$(grep -E "^$1" <<<"$out")" || { echo "$1: no benchmark line" >&2; echo "$out" >&2; exit 1; }
	# frames/op, or (a binary older than that metric) ns/op over ns/frame.
	awk '{for (i = 1; i <= NF; i++) { if ($(i) == "frames/op") f = $(i-1); if ($(i) == "ns/op") op = $(i-1);
		if ($(i) == "ns/frame") fr = $(i-1) } } END { if (f == "") printf "%.0f\n", op / fr; else print f }' <<<"$line"
	# The instructions of the unwinder's own functions (with what they
	# inline): the runtime's occasional work done where Unwind's
	# prologue yields is not the unwinder's.
	callgrind_annotate --threshold=100 --show-percs=no "$work/cg.out" 2>/dev/null |
		awk '$2 ~ /:github\.com\/ustack\/ustack\/unwinder\./ { gsub(",", "", $1); s += $1 } END { print s }'
}

printf '%-40s %10s %8s\n' benchmark Ir/frame frames
for b in $benches; do
	# A first run fills the caches on disk (decompressed debug sections)
	# that the cold warm-up call of the later runs then reads.
	run "$b" 1 >/dev/null
	read -r -d '' f1 ir1 < <(run "$b" "$n") || true
	read -r -d '' f2 ir2 < <(run "$b" "$((2 * n))") || true
	read -r -d '' f3 ir3 < <(run "$b" "$((3 * n))") || true
	# The two slopes should agree; the smaller is reported (something
	# outside the unwinder, such as a GC cycle, only adds).
	awk -v b="$b" -v f="$f1" -v a="$ir1" -v c="$ir2" -v d="$ir3" -v n="$n" \
		'BEGIN { s1 = (c - a) / (n * f); s2 = (d - c) / (n * f); s = s1 < s2 ? s1 : s2
			printf "%-40s %10.1f %8.0f", b, s, f
			if (s1 > 1.05 * s2 || s2 > 1.05 * s1) printf "   (slopes %.1f and %.1f disagree)", s1, s2
			printf "\n" }'
done
