#!/usr/bin/env bash
# Benchmark ustack report on a core dump against eu-stack and gdb (issue 15).
#
# Builds a C program that starts 64 threads, each blocked in a chain of
# calls (nanosleep, read, futex or poll at the end of 8 frames of its own),
# and crashes on the main thread; the kernel writes its core (ulimit -c
# unlimited; /proc/sys/kernel/core_pattern is set to "core" for the run when
# it is a pipe to systemd-coredump, and restored on exit). Then it runs,
# RUNS times each, and prints the median wall time, its peak RSS and CPU
# time (user+sys: steadier than wall time on a busy machine) of:
#   harness       env true, measured the same way: what measuring adds to
#                 every wall time (the ratios are of times net of it)
#   ustack-cold   ustack report -i core with an empty cache directory
#   ustack-warm   the same again (ustack's section cache is filled)
#   ustack-json   ustack report --format json (warm)
#   base-warm     with BASE=BINARY: that ustack binary, warm (a build of
#                 the commit before a change, with CGO_ENABLED=0 as this
#                 script builds ustack: before and after in one run, their
#                 runs alternated),
#                 and whether its output is ustack-warm's byte for byte
#   eu-stack      eu-stack -m -i --core core -e PROG (modules, inline frames)
#   gdb           gdb -batch -ex 'thread apply all bt' PROG core
# each with glibc's separate debug file (libc6-dbg, when installed) and
# without it (an empty debug directory for all three), and the ratios, and
# checks that every thread's frames are in ustack's
# output (the 64 workers' chains).
#
# Needs root for core_pattern when it is a pipe; gcc, gdb, elfutils
# (eu-stack), GNU time. Usage: scripts/bench-core.sh [WORKDIR]; RUNS=5;
# BASE=BINARY also measures another ustack binary (see base-warm).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d /tmp/ustack-bench-core.XXXXXX)}"
mkdir -p "$work"
cd "$work"
runs="${RUNS:-5}"

echo "== building ustack (static, as the README installs it)"
(cd "$here" && CGO_ENABLED=0 go build -o "$work/ustack" ./cmd/ustack)

cat > threads64.c <<'EOF'
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>
#define N 64
static pthread_barrier_t started;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int pipefd[2];
static volatile int sink;
__attribute__((noinline)) static void block(int kind) {
	switch (kind % 4) {
	case 0: { struct timespec ts = {1000, 0}; nanosleep(&ts, 0); break; }
	case 1: { char c; read(pipefd[0], &c, 1); break; }
	case 2: pthread_mutex_lock(&mu); pthread_cond_wait(&cv, &mu); pthread_mutex_unlock(&mu); break;
	case 3: { struct pollfd p = {pipefd[0], POLLIN, 0}; poll(&p, 1, -1); break; }
	}
}
#define LEVEL(n, next) __attribute__((noinline)) static void n(int k) { next(k); sink++; }
LEVEL(f1, block) LEVEL(f2, f1) LEVEL(f3, f2) LEVEL(f4, f3) LEVEL(f5, f4) LEVEL(f6, f5) LEVEL(f7, f6) LEVEL(f8, f7)
static void *worker(void *arg) {
	pthread_barrier_wait(&started);
	f8((int)(long)arg);
	return 0;
}
static int *volatile nullp;
__attribute__((noinline)) void crash(void) { *nullp = 1; }
int main(void) {
	pthread_t t[N];
	pthread_attr_t a;
	pipe(pipefd);
	pthread_attr_init(&a);
	pthread_attr_setstacksize(&a, 256 << 10);
	pthread_barrier_init(&started, 0, N + 1);
	for (long i = 0; i < N; i++) pthread_create(&t[i], &a, worker, (void *)i);
	pthread_barrier_wait(&started);
	usleep(200000); /* let every worker block */
	crash();
	return 0;
}
EOF
gcc -O2 -g -fno-omit-frame-pointer -pthread -o threads64 threads64.c

pattern_file=/proc/sys/kernel/core_pattern
old_pattern=$(cat "$pattern_file")
restore() { if [ "$(cat "$pattern_file")" != "$old_pattern" ]; then echo "$old_pattern" > "$pattern_file"; fi; }
trap restore EXIT
case "$old_pattern" in
'|'*) echo core > "$pattern_file" ;;
esac
echo "== core (core_pattern: $(cat "$pattern_file"))"
rm -f core core.*
(ulimit -c unlimited; ./threads64 || true)
core=$(ls -t core core.* 2>/dev/null | head -1 || true)
restore
if [ -z "$core" ]; then
	echo "no core written (core_pattern $(cat "$pattern_file"), ulimit -c $(ulimit -c))" >&2
	exit 1
fi
[ "$core" = core ] || mv "$core" core
ls -la core

. "$here/scripts/benchlib.sh"

: > results.txt
# scenario NAME DEBUGDIR: every tool, with glibc's separate debug file
# (DEBUGDIR "", where libc6-dbg puts it) or without (a directory with none:
# what most machines have).
scenario() {
	local name=$1 dbg=$2 uflags=() eflags=() gflags=()
	if [ -n "$dbg" ]; then
		uflags=(--debug-dir "$dbg")
		eflags=(--debuginfo-path="$dbg")
		gflags=(-iex "set debug-file-directory $dbg")
	fi
	echo "== $name"
	local cache
	cache=$(mktemp -d "$work/cache.XXXXXX")
	before_each="rm -rf '$work/cold' && mkdir '$work/cold'" \
		measure "$name/ustack-cold" "$runs" env XDG_CACHE_HOME="$work/cold" ./ustack report "${uflags[@]}" -i core
	fill_cache env XDG_CACHE_HOME="$cache" ./ustack report "${uflags[@]}" -i core
	if [ -n "${BASE:-}" ]; then
		# The base's runs alternate with ustack's (the tables an older
		# binary keeps are written by its first run, untimed).
		XDG_CACHE_HOME="$cache" "$BASE" report "${uflags[@]}" -i core > /dev/null 2>&1 || true
		measure_pair "$name/ustack-warm" "$name/base-warm" "$runs" \
			env XDG_CACHE_HOME="$cache" ./ustack report "${uflags[@]}" -i core -- \
			env XDG_CACHE_HOME="$cache" "$BASE" report "${uflags[@]}" -i core
	else
		measure "$name/ustack-warm" "$runs" env XDG_CACHE_HOME="$cache" ./ustack report "${uflags[@]}" -i core
	fi
	cp "$name/ustack-warm.txt" "ustack-$name.txt" 2>/dev/null || true
	measure "$name/ustack-json" "$runs" env XDG_CACHE_HOME="$cache" ./ustack report "${uflags[@]}" --format json -i core
	if [ -n "${BASE:-}" ]; then
		if cmp -s "$name/base-warm.txt" "$name/ustack-warm.txt"; then
			echo "  base-warm's output is ustack-warm's, byte for byte"
		else
			echo "  base-warm's output DIFFERS from ustack-warm's"
		fi
	fi
	measure "$name/eu-stack" "$runs" eu-stack -m -i "${eflags[@]}" --core core -e ./threads64
	measure "$name/gdb" "$runs" gdb -nx -batch "${gflags[@]}" -ex 'thread apply all bt' ./threads64 core
	awk -v n="$name" 'function r(a, b, x) { x = b > 0 ? a / b : 0; return x } {t[$1]=$2; c[$1]=$3} END {
		# Wall times net of the harness (what the measurement adds to
		# every run: starting GNU time and env), so that short runs
		# compare as they would under perf stat.
		h = t["harness/harness"]
		for (k in t) if (k != "harness/harness") t[k] -= h
		printf "  ratios (wall net of the harness, %.4f s; cpu):\n", h
		printf "    gdb / ustack-warm      %6.1fx %6.1fx\n", r(t[n "/gdb"], t[n "/ustack-warm"]), r(c[n "/gdb"], c[n "/ustack-warm"])
		printf "    gdb / ustack-cold      %6.1fx %6.1fx\n", r(t[n "/gdb"], t[n "/ustack-cold"]), r(c[n "/gdb"], c[n "/ustack-cold"])
		printf "    eu-stack / ustack-warm %6.1fx %6.1fx\n", r(t[n "/eu-stack"], t[n "/ustack-warm"]), r(c[n "/eu-stack"], c[n "/ustack-warm"])
		printf "    eu-stack / ustack-cold %6.1fx %6.1fx\n", r(t[n "/eu-stack"], t[n "/ustack-cold"]), r(c[n "/eu-stack"], c[n "/ustack-cold"])
		if ((n "/base-warm") in t)
			printf "    base-warm / ustack-warm %5.2fx %6.2fx\n", r(t[n "/base-warm"], t[n "/ustack-warm"]), r(c[n "/base-warm"], c[n "/ustack-warm"])
	}' results.txt
}
mkdir -p with-debug no-debug empty-debug-dir
echo "== harness (env true, measured as every run below is)"
harness "$runs"
scenario with-debug ""
scenario no-debug "$work/empty-debug-dir"

echo "== checks"
threads=$(awk '/^[^\t ]/ && / core(: |$)/' with-debug/ustack-warm.txt | wc -l)
chains=$(grep -c 'f8+' with-debug/ustack-warm.txt || true)
gdb_chains=$(grep -c ' f8 ' with-debug/gdb.txt || true)
echo "  ustack: $threads threads, $chains worker chains through f8; gdb: $gdb_chains"
if [ "$threads" -ne 65 ] || [ "$chains" -ne 64 ]; then
	echo "ustack's report is not the 65 threads with 64 worker chains" >&2
	exit 1
fi
