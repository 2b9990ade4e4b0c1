# Sourced by scripts/bench-core.sh, scripts/bench-report.sh and
# scripts/bench-minidump.sh.
#
# once OUTFILE command...: one run, its output in OUTFILE; prints
# "wall-seconds peak-kb user-seconds sys-seconds".
# measure LABEL N command...: N runs; prints the median run's wall time,
# peak RSS and CPU time and appends "LABEL wall cpu" to results.txt
# (measure_pair: two commands' runs alternated). With
# before_each set (a shell command), it is run, untimed, before each run:
# e.g. to empty a cache directory for a cold run.
# harness N: measures `env true` the same way, 3N times, and keeps the
# least as "harness": what the measurement itself adds to every wall time (GNU time, env: about 10 ms
# on a small VM, where starting a program is slow), to subtract from short
# runs before comparing them.
# fill_cache command...: runs a ustack command to fill its cache, waits
# until the entries written are older than the section cache's stamp age
# (2 s: elfcache's stampMinAge), and runs it again, which stamps them: the
# warm runs measured next find the cache as a report finds it any time
# after the one that filled it, not within the same two seconds (when
# every entry is still read in full for its checksum).
fill_cache() {
	"$@" > /dev/null 2>&1 || true
	sleep 2.2
	"$@" > /dev/null 2>&1 || true
}
once() {
	local out=$1; shift
	# Wall time from bash's clock in microseconds, read without starting
	# a program (GNU time's is in 10 ms steps); peak RSS and CPU time from
	# GNU time.
	local t0 t1
	t0=$EPOCHREALTIME
	/usr/bin/time -f '%M %U %S' -o "$out.time" "$@" > "$out" 2> "$out.err" || true
	t1=$EPOCHREALTIME
	# (a locale may write the clock with a decimal comma)
	echo "$(awk -v a="${t0/,/.}" -v b="${t1/,/.}" 'BEGIN { printf "%.4f", b - a }') $(cat "$out.time")"
}
measure() {
	local label=$1 n=$2; shift 2
	local t=()
	for _ in $(seq "$n"); do
		if [ -n "${before_each:-}" ]; then
			eval "$before_each"
		fi
		t+=("$(once "$label.txt" "$@")")
	done
	median "$label" "$n" "${t[@]}"
}
# measure_pair LABEL-A LABEL-B N command-A... -- command-B...: measure for
# two commands, their runs alternated (A, B, A, B, ...), so that a machine
# whose speed drifts from minute to minute (a VM beside others) slows both
# alike: for before and after.
measure_pair() {
	local la=$1 lb=$2 n=$3; shift 3
	local a=() b=() ta=() tb=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do a+=("$1"); shift; done
	shift
	b=("$@")
	for _ in $(seq "$n"); do
		ta+=("$(once "$la.txt" "${a[@]}")")
		tb+=("$(once "$lb.txt" "${b[@]}")")
	done
	median "$la" "$n" "${ta[@]}"
	median "$lb" "$n" "${tb[@]}"
}
# median LABEL N RUN...: prints and records the median of runs of once.
median() {
	local label=$1 n=$2; shift 2
	local t=("$@")
	local med
	med=$(printf '%s\n' "${t[@]}" | sort -n | awk -v n="$n" 'NR == int((n + 1) / 2)')
	# shellcheck disable=SC2086
	set -- $med
	local cpu
	cpu=$(awk -v u="$3" -v s="$4" 'BEGIN { printf "%.2f", u + s }')
	printf '  %-24s %8.4f s %7d MB  cpu %5.2f s  (%d runs)\n' "$label" "$1" "$(( $2 / 1024 ))" "$cpu" "$n"
	echo "$label $1 $cpu" >> results.txt
}
harness() {
	mkdir -p harness
	local t=() i
	for i in $(seq $((3 * $1))); do
		t+=("$(once harness/harness.txt env USTACK_HARNESS=1 true)")
	done
	# The least of 3N runs: the overhead is a fixed cost that noise only
	# adds to, and subtracting the least never takes away more than it.
	local least
	least=$(printf '%s\n' "${t[@]}" | sort -n | head -1 | cut -d' ' -f1)
	printf '  %-24s %8.4f s  (least of %d runs)\n' "harness" "$least" "$((3 * $1))"
	echo "harness/harness $least 0" >> results.txt
}
