#!/usr/bin/env bash
# Runs every Go fuzz target of the module for FUZZTIME each (default 10m),
# JOBS targets at a time (default 2), and prints each target's execution
# count and result. Findings are written by go test under the package's
# testdata/fuzz/<Target>/ and must become regression tests.
#
# Usage: scripts/fuzz-all.sh [TARGET_REGEXP]
set -uo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-10m}"
jobs="${JOBS:-2}"
filter="${1:-.}"
logdir="${LOGDIR:-/tmp/ustack-fuzz}"
mkdir -p "$logdir"
targets=()
for pkg in $(go list ./...); do
	dir=$(go list -f '{{.Dir}}' "$pkg")
	for fn in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
		[[ "$fn" =~ $filter ]] && targets+=("$pkg $fn")
	done
done
run() {
	local pkg=$1 fn=$2 log="$logdir/$(basename "$1")-$2.log"
	go test -run='^$' -fuzz="^$fn\$" -fuzztime="$fuzztime" "$pkg" > "$log" 2>&1
	local rc=$?
	local execs
	execs=$(grep -o 'execs: [0-9]*' "$log" | tail -1 | awk '{print $2}')
	printf '%-45s %-22s %s execs=%s\n' "$pkg" "$fn" "$([ $rc = 0 ] && echo ok || echo FAIL)" "${execs:-?}"
}
for t in "${targets[@]}"; do
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do sleep 1; done
	run $t &
done
wait
