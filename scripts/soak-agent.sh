#!/bin/sh
# The agent's soak (issue 25): ustack record -a -F FREQ --unwind sending
# to a local Collector (examples/otelcol, the file exporter) every
# INTERVAL for DURATION (default 10m), while the machine does whatever it
# does. Every 10 s it prints the agent's VmRSS, RssAnon and VmHWM (from
# /proc/PID/status) and the intervals the Collector has written so far;
# at the end the RSS series' start, peak and end, the agent's own summary
# (profiles sent and dropped, object cache: open, evicted, opened again)
# and what the Collector received (intervals, samples, profiles that
# carried ustack.dropped_intervals). Needs root (perf_event_open -a), go,
# python3 (a free port) and jq. The environment goes to the agent:
# GODEBUG=gctrace=1 puts the Go collector's live heap after each cycle in
# agent.log; USTACK_MEMPROFILE=FILE has the agent write a Go heap profile
# to FILE every interval (go tool pprof -sample_index=inuse_space FILE).
# RESTART=SECONDS stops the Collector that far into the run and starts a
# new one on the same ports 5 s later (writing profiles2.jsonl): the agent
# retries, and what both received is counted together.
#   scripts/soak-agent.sh [DURATION] [FREQ] [INTERVAL] [CACHE_BUDGET]
set -eu
cd "$(dirname "$0")/.."
duration="${1:-10m}" freq="${2:-99}" interval="${3:-10s}" budget="${4:-256M}"
for tool in go python3 jq; do
	command -v "$tool" >/dev/null || { echo "soak-agent: $tool is needed" >&2; exit 2; }
done
tmp="$(mktemp -d /tmp/soak-agent.XXXXXX)"
echo "soak-agent: building ustack and otelcol-ustack into $tmp"
GODEBUG= go build -o "$tmp/ustack" ./cmd/ustack
(cd examples/otelcol && GODEBUG= go build -o "$tmp/otelcol-ustack" .)

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
gp="$(port)" hp="$(port)"
# start_collector OUT starts the Collector on the ports, writing to OUT.
start_collector() {
	cat >"$tmp/collector.yaml" <<YAML
receivers:
  otlp:
    protocols:
      grpc: {endpoint: 127.0.0.1:$gp}
      http: {endpoint: 127.0.0.1:$hp}
exporters:
  file: {path: $tmp/$1, format: json, flush_interval: 1s}
service:
  pipelines:
    profiles: {receivers: [otlp], exporters: [file]}
YAML
	"$tmp/otelcol-ustack" --config "$tmp/collector.yaml" --feature-gates service.profilesSupport >>"$tmp/collector.log" 2>&1 &
	cpid=$!
	i=0
	until python3 -c "import socket; socket.create_connection(('127.0.0.1',$hp),1)" 2>/dev/null; do
		i=$((i + 1))
		if [ "$i" -gt 300 ] || ! kill -0 "$cpid" 2>/dev/null; then
			echo "soak-agent: the Collector did not listen on 127.0.0.1:$hp" >&2
			cat "$tmp/collector.log" >&2
			exit 1
		fi
		sleep 1
	done
}
received() { cat "$tmp"/profiles*.jsonl 2>/dev/null | wc -l; }
start_collector profiles.jsonl
trap 'kill "$cpid" 2>/dev/null || true' EXIT

echo "soak-agent: ustack record -a -F $freq --unwind --cache-budget $budget --otlp-endpoint http://127.0.0.1:$hp --otlp-interval $interval -d $duration"
"$tmp/ustack" record -a -F "$freq" --unwind --no-archive --cache-budget "$budget" -o "$tmp/agent.data" \
	--otlp-endpoint "http://127.0.0.1:$hp" --otlp-interval "$interval" -d "$duration" 2>"$tmp/agent.log" &
apid=$!
kb() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$apid/status" 2>/dev/null; }
start=$(date +%s)
printf '%6s %10s %10s %10s %9s\n' secs VmRSS_kB RssAnon_kB VmHWM_kB intervals | tee "$tmp/rss.txt"
while kill -0 "$apid" 2>/dev/null; do
	rss="$(kb VmRSS)" anon="$(kb RssAnon)" hwm="$(kb VmHWM)"
	[ -n "$rss" ] || break
	secs=$(($(date +%s) - start))
	printf '%6d %10s %10s %10s %9s\n' "$secs" "$rss" "$anon" "$hwm" "$(received)" | tee -a "$tmp/rss.txt"
	if [ -n "${RESTART:-}" ] && [ "$secs" -ge "$RESTART" ]; then
		echo "soak-agent: stopping the Collector; a new one on the same ports in 5 s"
		kill "$cpid"
		wait "$cpid" || true
		sleep 5
		start_collector profiles2.jsonl
		echo "soak-agent: the new Collector listens"
		RESTART=
	fi
	sleep 10
done
wait "$apid" || echo "soak-agent: ustack record exited with status $?"
sleep 3 # the file exporter's flush
kill "$cpid" 2>/dev/null || true
wait "$cpid" 2>/dev/null || true

echo "soak-agent: the agent's summary"
grep '^\[ ustack record' "$tmp/agent.log" || true
grep -c 'warning' "$tmp/agent.log" | sed 's/^/soak-agent: agent warnings: /'
awk 'NR > 1 && $2 != "" {n++; if (n == 1) {first = $3; rfirst = $2}; if ($3 > peak) peak = $3; last = $3; rlast = $2; if ($2 > rpeak) rpeak = $2; hwm = $4}
	END {printf "soak-agent: RssAnon start %.0f MiB, peak %.0f MiB, end %.0f MiB; VmRSS start %.0f MiB, peak %.0f MiB, end %.0f MiB; VmHWM %.0f MiB (%d samples)\n",
		first/1024, peak/1024, last/1024, rfirst/1024, rpeak/1024, rlast/1024, hwm/1024, n}' "$tmp/rss.txt"
intervals=$(received)
samples=$(cat "$tmp"/profiles*.jsonl | jq '[.resourceProfiles[].scopeProfiles[].profiles[].samples[]? | (.timestampsUnixNano | length)] | add // 0' | awk '{s += $1} END {print s + 0}')
dropped=$(cat "$tmp"/profiles*.jsonl | grep -c 'ustack.dropped_intervals' || true)
echo "soak-agent: the Collector received $intervals intervals ($samples samples); $dropped of them carried ustack.dropped_intervals"
echo "soak-agent: files in $tmp (rss.txt, agent.log, collector.log, profiles*.jsonl)"
