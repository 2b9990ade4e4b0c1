#!/bin/sh
# Regenerates the committed perf.data samples and perf's own view of them
# (the independent truth the tests compare against). Needs root (or
# perf_event_paranoid <= 1), Linux perf and, for the tracepoint, tracefs.
#
#   dwarf.data         file mode, cpu-clock, --call-graph dwarf (user regs + stack)
#   pipe.data          pipe mode (perf record -o -), a tracepoint plus cpu-clock
#   zstd.data          file mode, perf record -z (COMPRESSED records), dwarf
#   zstdpipe.data      pipe mode, perf record -z
#   *.dump.gz          gzip of `perf script -D -i X.data`
#   *.header           `perf report --header-only -i X.data`
set -eu
cd "$(dirname "$0")"
mountpoint -q /sys/kernel/tracing 2>/dev/null || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
busy='i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done'

perf record -q -e cpu-clock -c 250000 --call-graph dwarf,1024 -o dwarf.data -- sh -c "$busy"
perf record -q -e syscalls:sys_enter_close -e cpu-clock -c 500000 --call-graph dwarf,512 -o - -- \
	sh -c "$busy; cat /etc/hostname >/dev/null" > pipe.data
# A ring of 2 pages (-m 2) wraps often: records are split
# across COMPRESSED records where the ring wraps.
perf record -q -z -e cpu-clock -c 250000 -m 2 --call-graph dwarf,1024 -o zstd.data -- sh -c "$busy; $busy; $busy"
perf record -q -z -e cpu-clock -c 250000 -m 2 --call-graph dwarf,1024 -o - -- sh -c "$busy; $busy; $busy" > zstdpipe.data

for f in dwarf pipe zstd zstdpipe; do
	chmod 644 $f.data
	perf script -D -i $f.data 2>/dev/null | gzip -9n > $f.dump.gz
	perf report --header-only -i $f.data > $f.header 2>/dev/null
done
ls -l
