#!/usr/bin/env bash
# The README's test command on a busy machine (issue 21): RUNS (3) runs of
# `go test ./...` in a row in one clone while a second full `go test
# -count=1 ./...` runs again and again in another clone the whole time.
# Each run starts from an empty test cache (go clean -testcache), so that
# every test really runs. Prints each run's start, end, exit status and the
# load average, and the packages of each run that did not pass.
#
# Usage: scripts/test-busy.sh [WORKDIR]   (default: a new temporary dir)
set -uo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d /tmp/ustack-busy.XXXXXX)}"
runs="${RUNS:-3}"
mkdir -p "$work"
rm -rf "$work/a" "$work/b"
git clone -q "$here" "$work/a"
git clone -q "$here" "$work/b"
echo "== $(git -C "$here" rev-parse --short HEAD), $(nproc) CPUs; logs in $work"
(
	cd "$work/a"
	i=0
	while [ ! -e "$work/stop" ]; do
		i=$((i + 1))
		go test -count=1 ./... > "$work/second.$i.log" 2>&1
		echo "second run $i: exit $? at $(date -u +%T)" >> "$work/second.txt"
	done
) &
bg=$!
sleep 30 # the second run is under way
fail=0
for i in $(seq 1 "$runs"); do
	cd "$work/b"
	go clean -testcache
	start=$(date -u +%T)
	go test ./... > "$work/run.$i.log" 2>&1
	rc=$?
	echo "run $i: $start - $(date -u +%T), exit $rc, load $(cut -d' ' -f1-3 /proc/loadavg)"
	grep -E '^(FAIL|---)' "$work/run.$i.log" | head -20
	grep -E 'SKIP: TestLab' "$work/run.$i.log" | head -5
	[ $rc -eq 0 ] || fail=1
done
touch "$work/stop"
echo "== the second go test ./... meanwhile:"
cat "$work/second.txt" 2>/dev/null
echo "(a run of it still under way is left to finish: pid $bg)"
exit $fail
