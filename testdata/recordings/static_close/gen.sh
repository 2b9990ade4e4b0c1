#!/bin/sh
# Remakes the recording of resolve's Example (x86_64, as root, with gcc,
# perf and gdb). The program must run from /tmp/ustack-example, the path the
# recording names; symfs/ holds it under that path so that a report finds
# it with --symfs.
set -e
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p /tmp/ustack-example
cd /tmp/ustack-example
cp "$here/prog.c" .
gcc -static -O2 -g -o prog prog.c
perf record -q -e syscalls:sys_enter_close --call-graph dwarf,2048 -o perf.data ./prog
# The truth the Example's output is checked against, frame for frame.
gdb -q -batch -ex 'set backtrace past-main on' -ex 'break close' -ex run -ex bt ./prog 2>&1 | grep '^#' >"$here/gdb-bt.txt"
perf script -i perf.data -F comm,tid,time,event,ip,sym,symoff,dso >"$here/perf-script.txt"
mkdir -p "$here/symfs/tmp/ustack-example"
cp prog "$here/symfs/tmp/ustack-example/prog"
cp perf.data "$here/perf.data"
chmod 644 "$here/perf.data"
