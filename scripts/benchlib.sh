# Sourced by scripts/bench-core.sh and scripts/bench-minidump.sh.
#
# once OUTFILE command...: one run, its output in OUTFILE; prints
# "wall-seconds peak-kb user-seconds sys-seconds".
# measure LABEL N command...: N runs; prints the median run's wall time,
# peak RSS and CPU time and appends "LABEL wall cpu" to results.txt.
once() {
	local out=$1; shift
	# Wall time from the clock in nanoseconds (GNU time's is in 10 ms
	# steps); peak RSS and CPU time from GNU time.
	local t0 t1
	t0=$(date +%s%N)
	/usr/bin/time -f '%M %U %S' -o "$out.time" "$@" > "$out" 2> "$out.err" || true
	t1=$(date +%s%N)
	echo "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e9 }') $(cat "$out.time")"
}
measure() {
	local label=$1 n=$2; shift 2
	local t=()
	for _ in $(seq "$n"); do
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
