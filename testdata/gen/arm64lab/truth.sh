#!/bin/sh
# gdb-multiarch's frame chains for the arm64 lab recordings
# (testdata/recordings/arm64-lab), the truth TestArm64LabRecordings
# compares ustack's reports of them with: the same binaries
# (testdata/objects/aarch64/lab-static, lab-dyn, liblab.so, the Debian
# libc.so.6 and ld.so beside them) under qemu-aarch64, stopped where each
# recording's event fired:
#   open.frames     lab-static open 2:   at each __libc_open64 (kprobe,
#                   kretprobe and tracepoint recordings: frames 1.. equal)
#   watch.frames    lab-static watch 2:  at write_leaf, the function whose
#                   store the hardware watchpoint on counter catches
#                   (qemu-user's gdb stub does not stop at watchpoints)
#   signal.frames   lab-static signal 2: at __libc_open64 in the handler
#   dynopen.frames  lab-dyn open 2:      at open_leaf (the uprobe) and at
#                   libc's open (the tracepoint through the PLT)
#   libwatch.frames lab-dyn libwatch 2:  at lib_bump, which stores to
#                   liblab.so's lib_counter
# A CPU without pointer authentication: the PAC instructions are hints
# that do nothing there, so the return addresses are the same.
# Needs qemu-user and gdb-multiarch (Debian: qemu-user gdb-multiarch).
# Run: sh testdata/gen/arm64lab/truth.sh
set -e
gen=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$gen/../../.." && pwd)
obj=$root/testdata/objects/aarch64
out=$root/testdata/recordings/arm64-lab
sysroot=$(mktemp -d)
trap 'rm -rf "$sysroot"' EXIT
mkdir -p "$sysroot/lab" "$sysroot/lib/aarch64-linux-gnu"
for f in lab-static lab-dyn liblab.so; do xz -dc "$obj/$f.xz" >"$sysroot/lab/$f"; done
xz -dc "$obj/libc.so.6.xz" >"$sysroot/lib/aarch64-linux-gnu/libc.so.6"
xz -dc "$obj/ld-linux-aarch64.so.1.xz" >"$sysroot/lib/ld-linux-aarch64.so.1"
chmod +x "$sysroot"/lab/* "$sysroot"/lib/*.so* "$sysroot"/lib/*/*
echo "the file the lab's programs open" > "$sysroot/lab/target"
port=$((20000 + $$ % 20000))
run() { # NAME PROGRAM ARGS... -- GDB-COMMANDS...
	name=$1 prog=$2; shift 2
	args=""
	while [ "$1" != "--" ]; do args="$args $1"; shift; done
	shift
	rm -f "$out/$name.log.frames"
	QEMU_LD_PREFIX=$sysroot qemu-aarch64 -cpu cortex-a57 -L "$sysroot" -g $port "$sysroot/lab/$prog" $args >/dev/null &
	qpid=$!
	sleep 1
	set -- -nx -q -batch -ex "set sysroot $sysroot" -ex "set logging file $out/$name.log" \
		-ex "source $gen/frames.py" -ex "file $sysroot/lab/$prog" -ex "target remote :$port" "$@"
	gdb-multiarch -ex "set backtrace past-main on" "$@" >"$out/$name.gdb.log" 2>&1 || true
	kill $qpid 2>/dev/null || true
	wait $qpid 2>/dev/null || true
	mv "$out/$name.log.frames" "$out/$name.frames"
	rm -f "$out/$name.gdb.log"
	echo "$name: $(wc -l <"$out/$name.frames") stops"
}
c="-ex continue"
run open lab-static open 2 -- -ex "break __libc_open64" $c $c $c
run watch lab-static watch 2 -- -ex "break write_leaf" $c $c $c
run signal lab-static signal 2 -- -ex "break sig_handler" $c -ex "break __libc_open64" $c $c $c
run dynopen lab-dyn open 2 -- -ex "break main" $c -ex "break open_leaf" -ex "break open64" $c $c $c $c $c
run libwatch lab-dyn libwatch 2 -- -ex "break main" $c -ex "break lib_bump" $c $c $c
