#!/usr/bin/env bash
# Count the instructions the unwinder spends per frame, with valgrind's
# callgrind: a figure that, unlike ns/frame, does not depend on what else the
# machine is running.
#
# Builds the unwinder's test binary, runs each Unwind benchmark N times under
# callgrind collecting only inside unwinder.(*Unwinder).Unwind (the fixture's
# loading is left out), and prints the instructions per frame: the Ir count
# divided by the frames unwound (N+1 calls, the benchmark's warm-up included,
# times the frames of one stack, from the benchmark's ns/op over ns/frame).
#
# Needs valgrind. Usage: scripts/bench-unwind-callgrind.sh [BENCH_REGEXP];
# N=20000 sets the calls per benchmark, TEST=path reuses a built binary.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
command -v valgrind >/dev/null || { echo "valgrind is not installed (Debian package valgrind)" >&2; exit 1; }
pattern="${1:-Unwind}"
n="${N:-20000}"
work="$(mktemp -d /tmp/ustack-callgrind.XXXXXX)"
trap 'rm -rf "$work"' EXIT
test="${TEST:-$work/unwinder.test}"
if [ -z "${TEST:-}" ]; then
	(cd "$here" && CGO_ENABLED=0 go test -c -o "$test" ./unwinder)
fi
benches="$(cd "$here/unwinder" && "$test" -test.list "Benchmark.*" | grep -E -- "$pattern")"
printf '%-40s %10s %8s\n' benchmark Ir/frame frames
for b in $benches; do
	out="$(cd "$here/unwinder" && GODEBUG=asyncpreemptoff=1 valgrind --tool=callgrind --callgrind-out-file="$work/cg.out" \
		--toggle-collect='github.com/ustack/ustack/unwinder.(*Unwinder).Unwind' \
		"$test" -test.run '^$' -test.bench "^$b\$" -test.benchtime "${n}x" -test.cpu 1 2>"$work/vg.err")" ||
		{ cat "$work/vg.err" >&2; exit 1; }
	line="$(grep -E "^$b" <<<"$out")"
	nsop="$(awk '{for(i=1;i<=NF;i++) if($(i)=="ns/op") print $(i-1)}' <<<"$line")"
	nsframe="$(awk '{for(i=1;i<=NF;i++) if($(i)=="ns/frame") print $(i-1)}' <<<"$line")"
	ir="$(awk '/^summary:/ {print $2}' "$work/cg.out")"
	awk -v b="$b" -v ir="$ir" -v n="$n" -v op="$nsop" -v fr="$nsframe" \
		'BEGIN { f = op / fr; printf "%-40s %10.1f %8.0f\n", b, ir / ((n + 1) * f), f }'
done
