# Sourced by scripts/bench-core.sh, scripts/bench-report.sh and
# scripts/bench-minidump.sh.
#
# once OUTFILE command...: one run, its output in OUTFILE; prints
# "wall-seconds peak-kb user-seconds sys-seconds".
# measure LABEL N command...: N runs; prints the median run's wall time,
# peak RSS and CPU time and appends "LABEL wall cpu" to results.txt. With
# before_each set (a shell command), it is run, untimed, before each run:
# e.g. to empty a cache directory for a cold run.
# harness N: measures `env true` the same way, 3N times, and keeps the
# least as "harness": what the measurement itself adds to every wall time (GNU time, env: about 10 ms
# on a small VM, where starting a program is slow), to subtract from short
# runs before comparing them.
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
