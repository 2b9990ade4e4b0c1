#!/bin/sh
# The long-lived resolver's soak (issue 22): one tracer.Tracer with a
# 12 MiB object budget serves 200 short-lived processes spread over
# DURATION (default 10m), each dlopening 6 of 36 libraries built for the
# run; every stack is checked against the chain the process was built to
# have, and the objects held after each process is forgotten against the
# budget. The figures (evictions, re-opens, bytes held, live heap, VmRSS)
# are in the test's log. Needs gcc and ptrace over child processes.
#   scripts/soak-budget.sh [DURATION] [PROCESSES]
set -eu
cd "$(dirname "$0")/.."
USTACK_SOAK="${1:-10m}" USTACK_SOAK_PROCS="${2:-200}" \
	exec go test ./tracer -run '^TestSoakBudget$' -count=1 -v -timeout 60m
