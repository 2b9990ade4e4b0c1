#!/bin/sh
# Regenerates tp.data (perf record of tracepoints) and tp.script, perf
# script's own output for it: the independent truth TestTestdata compares
# the formatted fields with. Needs root (or perf_event_paranoid <= 1),
# Linux perf and tracefs.
set -eu
cd "$(dirname "$0")"
mountpoint -q /sys/kernel/tracing 2>/dev/null || mount -t tracefs nodev /sys/kernel/tracing 2>/dev/null || true
perf record -q -e syscalls:sys_enter_openat -e syscalls:sys_exit_read -e sched:sched_switch \
	-e sched:sched_process_exec -e sched:sched_process_fork -e sched:sched_wakeup -o tp.data -- \
	sh -c 'cat /etc/hostname >/dev/null; sleep 0.01; head -c 100 /etc/passwd >/dev/null; kill -0 $$'
chmod 644 tp.data
rm -f tp.data.old
perf script -i tp.data > tp.script
ls -l
