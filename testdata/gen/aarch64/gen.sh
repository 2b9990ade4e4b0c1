#!/bin/sh
# Regenerates testdata/{objects,fixtures}/aarch64 (see testdata/FORMAT.md,
# "aarch64 notes").  Needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross,
# qemu-user (qemu-aarch64 7.2) and gdb-multiarch.
#   sh gen.sh            all fixtures
#   sh gen.sh NAME...    only these
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TESTDATA=$(cd "$HERE/../.." && pwd)
B=$HERE/build
SYSROOT=/usr/aarch64-linux-gnu
CC=aarch64-linux-gnu-gcc
mkdir -p "$B" "$TESTDATA/objects/aarch64" "$TESTDATA/fixtures/aarch64"
# The large committed objects are packed (NAME.xz, testdata/FORMAT.md):
# unpacked before capture.py compares mapped files with them, packed at exit.
python3 "$HERE/../pack.py" unpack
trap 'python3 "$HERE/../pack.py" pack' EXIT

# ------------------------------------------------------------------ programs
cc() { out=$1; shift; $CC -g "$@" -o "$B/$out"; }
S=$HERE/src
cc a64_chain_O2_nofp  -O2 -fomit-frame-pointer    "$S/chain.c"
cc a64_chain_O2_fp    -O2 -fno-omit-frame-pointer "$S/chain.c"
cc a64_chain_O0       -O0                         "$S/chain.c"
cc a64_chain_pac      -O2 -mbranch-protection=pac-ret "$S/chain.c"
cc a64_chain_dbgframe -O2 -fno-asynchronous-unwind-tables -fno-unwind-tables "$S/chain.c"
cc a64_leaflr         -O2                         "$S/leaflr.c"
cc a64_signal         -O2                         "$S/signal.c"
cc a64_recurse        -O2                         "$S/recurse.c"
cc a64_thread         -O2 -pthread                "$S/thread.c"
# Lazy binding (the x86_64 generator's plt.c): close@plt -> PLT0 -> ld.so's
# _dl_runtime_resolve on the first call (qemu runs it with env -i: no
# LD_BIND_NOW). 4 KiB segment alignment keeps the committed copy small.
cc a64_plt_lazy       -O2 -Wl,-z,lazy -Wl,-z,max-page-size=4096 "$HERE/../src/plt.c"
# C++ (the x86_64 generator's program): libstdc++ and libgcc (the unwinder,
# personality routine) linked in, so only glibc is shared; debug info stripped,
# .symtab and .eh_frame kept.
aarch64-linux-gnu-g++ -O2 -static-libstdc++ -static-libgcc \
	-o "$B/a64_cxx_exception" "$HERE/../src/cxx_exception.cpp"
aarch64-linux-gnu-strip --strip-debug "$B/a64_cxx_exception"

# ------------------------------------------------------------------ fixtures
PORT=23451
fixture() {
	# fixture NAME BIN BREAK SVCFN STEPS CAP STOP TRUNC DESC
	# (environment: CPU = qemu -cpu value, ARGS = program arguments,
	# SWEEP=plt: one fixture NAME_NN per instruction through lazy binding)
	if [ -n "$ONLY" ] && ! echo " $ONLY " | grep -q " $1 "; then return; fi
	PORT=$((PORT + 1))
	bin=$B/$2
	env -i qemu-aarch64 -cpu ${CPU:-max} -g $PORT -L $SYSROOT "$bin" ${ARGS:-} &
	qpid=$!
	sleep 0.3
	FX_NAME=$1 FX_BIN=$bin FX_BREAK=$3 FX_SVCFN=$4 FX_STEPS=$5 FX_CAP=$6 \
	FX_STOP=$7 FX_TRUNC=$8 FX_DESC=$9 FX_PORT=$PORT QPID=$qpid FX_SWEEP=${SWEEP:-} \
	FX_TESTDATA=$TESTDATA FX_REF=${REF:-} FX_REFONLY=${REFONLY:-} \
		timeout 120 gdb-multiarch -nx -batch -x "$HERE/capture.py" "$bin" \
		>"$B/$1.log" 2>&1 || { cat "$B/$1.log"; kill $qpid 2>/dev/null; exit 1; }
	wait $qpid || true
	grep -A200 -e '^FIXTURE' -e '^REF' "$B/$1.log" || true
	grep -q -e '^FIXTURE' -e '^REF' "$B/$1.log" || { cat "$B/$1.log"; exit 1; }
}
ONLY="$*"

fixture a64_syscall_O2_nofp a64_chain_O2_nofp leaf close 0 65536 outermost 0 \
"aarch64 gcc -O2 -fomit-frame-pointer, PIE, glibc 2.36 under qemu-aarch64 7.2: main -> top -> mid -> leaf -> close(-997), stopped just after the svc in libc's close (which has its own x29/x30 frame record). Chain continues through __libc_start_call_main and __libc_start_main to _start, whose CFI marks x30 undefined."

fixture a64_syscall_O2_fp a64_chain_O2_fp leaf close 0 65536 outermost 0 \
"aarch64 gcc -O2 -fno-omit-frame-pointer, PIE, glibc 2.36 under qemu-aarch64 7.2: main -> top -> mid -> leaf -> close(-997), stopped just after the svc in libc's close. Ends at _start (x30 undefined in its CFI)."

fixture a64_syscall_O0 a64_chain_O0 leaf close 0 65536 outermost 0 \
"aarch64 gcc -O0, PIE, glibc 2.36 under qemu-aarch64 7.2: main -> top -> mid -> leaf -> close(-997), stopped just after the svc in libc's close. Ends at _start (x30 undefined in its CFI)."

CPU=max,pauth=off REF=$B/a64_pac.ref.json REFONLY=1 \
fixture a64_pac a64_chain_pac leaf close 0 65536 outermost 0 reference
REF=$B/a64_pac.ref.json \
fixture a64_pac a64_chain_pac leaf close 0 65536 outermost 0 \
"aarch64 gcc -O2 -mbranch-protection=pac-ret, run as qemu-aarch64 -cpu max (FEAT_PAuth emulated, keys set): main -> top -> mid -> leaf -> close(-997), stopped just after the svc in libc's close. leaf/mid/top/main sign x30 with paciasp before saving it, so their saved return addresses on the stack carry a PAC in bits 48..54 and their FDEs use DW_CFA_AARCH64_negate_ra_state (opcode 0x2d, the same as DW_CFA_GNU_window_save; readelf 2.40 prints the AArch64 name); glibc itself is built without pac-ret. A correct unwinder strips the PAC from every return address recovered while RA_SIGN_STATE is 1. See expect.corrections for where gdb (which cannot strip PACs under qemu) is wrong. Ends at _start."

fixture a64_leaf_lr a64_leaflr leaf "" 3 65536 outermost 0 \
"aarch64 gcc -O2, PIE, under qemu-aarch64 7.2: main -> top -> mid -> leaf, stopped three instructions into leaf, a frameless leaf function (no calls, no stack adjustment): the return address to mid is only in x30 and CFA = sp. Ends at _start."

CPU=max,sve-default-vector-length=256 \
fixture a64_signal a64_signal hleaf getppid 0 65536 outermost 0 \
"aarch64 gcc -O2, PIE, under qemu-aarch64 7.2: main -> top -> mid -> leaf spins until SIGALRM (setitimer) interrupts it; handler -> hmid -> hleaf -> getppid, stopped just after the svc in getppid (frameless libc leaf: RA in x30, CFA = sp). handler returns to qemu's own rt_sigreturn trampoline (mov x8,#139; svc #0) on an anonymous page (map [sigpage], its bytes in the map's code file; there is no vdso under qemu 7.2); the signal frame (struct rt_sigframe: siginfo 128 bytes, then ucontext whose uc_mcontext is at +176: fault_address, x0..x30, sp, pc, pstate, i.e. x0 at sp+312 of the trampoline frame) restores all registers of the interrupted frameless leaf, whose return address is only in the saved x30. Ends at _start."

fixture a64_recursion_truncated a64_recurse leaf close 0 4096 truncated 1 \
"aarch64 gcc -O2, PIE, under qemu-aarch64 7.2: main -> top -> recurse x40 -> leaf -> close(-993), stopped just after the svc in close, with the stack snapshot capped at 4096 bytes. expect.frames counts gdb's frames k whose return address slot lies inside the snapshot: frame 0, and every frame k >= 1 with sp(k) (= CFA of frame k-1) <= snapshot end whose raw return address the generator found as a word in [sp(k-1), sp(k)) of the snapshot; the first frame beyond that needs a read past the snapshot, inside the [stack] mapping, so the unwinder must stop with truncated."

fixture a64_thread a64_thread leaf clock_nanosleep 0 65536 outermost 0 \
"aarch64 gcc -O2 -pthread, PIE, glibc 2.36 under qemu-aarch64 7.2: second thread: worker -> top -> mid -> leaf -> usleep -> nanosleep -> clock_nanosleep, stopped just after the svc in clock_nanosleep; the main thread waits in pthread_join. The thread stack is an anonymous mmap (not [stack]). The chain ends in start_thread (static, gdb has no name for it) and the thread_start code of glibc's __clone (__clone+0x50..0x64, gdb has no name for it either), whose FDE marks x30 undefined (outermost)."

fixture a64_debug_frame_only a64_chain_dbgframe leaf close 0 65536 outermost 0 \
"aarch64 gcc -O2 -fno-asynchronous-unwind-tables -fno-unwind-tables -g, PIE: the program's own functions (leaf, mid, top, main) have CFI only in .debug_frame (no .eh_frame FDEs; crt files and glibc keep .eh_frame). main -> top -> mid -> leaf -> close(-997), stopped just after the svc in libc's close. Ends at _start."

ARGS=terminate \
fixture a64_cxx_exception a64_cxx_exception term_leaf close 0 65536 outermost 0 \
"aarch64 g++ -O2 -static-libstdc++ -static-libgcc (debug info stripped; .symtab and .eh_frame kept), PIE, glibc 2.36 under qemu-aarch64 7.2, program argument terminate: main -> nothrow_caller (noexcept) -> middle -> thrower throws std::runtime_error; the Guard cleanup in thrower runs and resumes unwinding with _Unwind_Resume, whose phase 2 calls the personality routine, which finds the noexcept barrier in nothrow_caller and calls __cxa_call_terminate -> std::terminate's __terminate -> the handler on_terminate -> term_leaf -> close(-3), stopped just after the svc in libc's close. The stack holds the frames of libgcc's unwinder (_Unwind_RaiseException_Phase2 with its large context structures, _Unwind_Resume) and of __gxx_personality_v0 between the handler and the throwing code. Ends at _start."

SWEEP=plt \
fixture a64_plt_lazy a64_plt_lazy caller "" 0 65536 outermost 0 \
"aarch64 gcc -O2 -Wl,-z,lazy, PIE, glibc 2.36 under qemu-aarch64 7.2 (LD_BIND_NOW unset): main -> caller -> close@plt on the first call, so the PLT entry (adrp x16; ldr x17; add x16; br x17) jumps to PLT0 (stp x16, x30, [sp, #-16]!; adrp; ldr x17; add x16; br x17) and PLT0 to ld.so's _dl_runtime_resolve, which saves the argument registers, calls _dl_fixup and jumps to close. One fixture per instruction from the PLT entry to the resolver's br x16 (and one at _dl_fixup's entry). The 16 bytes PLT0 pushes belong to neither frame: the caller's SP is above them. Ends at _start."
