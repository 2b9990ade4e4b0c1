#!/bin/sh
# Remakes testdata/recordings/hello, the recording the README's first command
# reports: `ustack record` of src/hello.c at syscalls:sys_enter_write (4
# samples), with its .ustack archive slimmed of the kallsyms (the samples have
# no kernel address; slimarchive checks), and gdb's backtrace at each write,
# the truth cmd/ustack's tests compare the report with.
# Needs root (a tracepoint), gcc, gdb and go; x86_64.
# Run: sh testdata/gen/recording_hello.sh  (or make -C testdata/gen recordings)
set -e
gen=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$gen/../.." && pwd)
out=$root/testdata/recordings/hello
# The program runs from a fixed directory, the path the recording names.
run=/tmp/ustack-hello
rm -rf "$run"
mkdir -p "$run" "$out"
cp "$gen/src/hello.c" "$run/"
cd "$run"
gcc -O2 -g -static -nostdlib -fno-stack-protector -fcf-protection=none -o hello hello.c
(cd "$root" && go build -o "$run/ustack" ./cmd/ustack)
# An empty environment: the stack snapshots reach the environment strings.
# 2 KiB of stack per sample is ample for five frames.
env -i ./ustack record -q -e syscalls:sys_enter_write --stack-size 2048 -o perf.data -- ./hello >/dev/null
(cd "$root" && go run ./testdata/gen/slimarchive "$run/perf.data")
# gdb stops at each write's entry and return; the backtraces at the entries
# are the truth, innermost first, one blank line between writes.
env -i gdb -nx -q -batch -ex 'set backtrace past-main on' -ex 'set backtrace past-entry on' \
	-ex 'catch syscall write' -ex run -ex bt \
	-ex continue -ex continue -ex bt -ex continue -ex continue -ex bt \
	-ex continue -ex continue -ex bt -ex continue ./hello 2>&1 |
	awk '/^Catchpoint 1 \(call to/ { if (n++) print "" } /^#/ { print }' >"$out/gdb-bt.txt"
cp perf.data perf.data.ustack "$out/"
chmod 644 "$out/perf.data" "$out/perf.data.ustack"
ls -l "$out"
