#!/usr/bin/env python3
"""Synthesizes the arm64 vdso fixtures from a real arm64 kernel's vdso.

usage: vdso_fixtures.py VDSO   (testdata/objects/aarch64/vdso-<kver>.so, from vdso.sh)

qemu-aarch64 gives its guest no vdso, so no run under qemu can stop inside
one. These two fixtures instead place the real vdso image (extracted from
Debian's arm64 kernel package by vdso.sh) into the address space of the
a64_syscall_O2_fp fixture, at a free address, and build the registers and
stack an arm64 kernel would have captured. How each expected frame is derived
is in the fixture's description and in docs/ARM64.md:

a64_vdso_clock_gettime
    PC inside __kernel_clock_gettime, after its `paciasp` (the function's
    only prologue: it is a leaf that never touches sp, x29 or the stack).
    The vdso has no .eh_frame/.debug_frame (readelf --debug-dump=frames
    prints nothing), so the caller is found by the link-register rule: the
    caller's pc is x30 with its PAC stripped, sp and x29 unchanged. The
    caller is a64_syscall_O2_fp's frame 1 (leaf, which called close there):
    x30 = leaf's return address signed with a PAC (as paciasp leaves it),
    sp = gdb's sp of frame 1 (close's CFA: the sp at the bl), x29 = leaf's
    x29 (the value close saved at its CFA-32, read from the snapshot). The
    expected frames are the vdso function, then gdb's frames 1..n of
    a64_syscall_O2_fp.

a64_vdso_sigreturn
    A signal handler (a64_signal's `handler`, its object mapped at a free
    address) interrupted just after its call to hmid returned, whose saved
    x30 is the real vdso's __kernel_rt_sigreturn (mov x8, #139; svc #0, no
    CFI). Below a64_syscall_O2_fp's stop SP the kernel's layout is built as
    arch/arm64/kernel/signal.c lays it out: the frame record {x29, x30} at
    (sp - 16) & ~15, and below it struct rt_sigframe (siginfo, ucontext with
    uc_mcontext at +176 holding a64_syscall_O2_fp's x0..x30, sp, pc, pstate;
    __reserved holding an fpsimd_context and the terminator). The expected
    frames are handler (CFI), the trampoline (signal frame; sp = handler's
    CFA as gdb reports it), then gdb's frames 0..n of a64_syscall_O2_fp.
"""
import json
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.normpath(os.path.join(HERE, "..", ".."))
FX = os.path.join(TESTDATA, "fixtures", "aarch64")

VDSO_BASE = 0x5502868000  # free: between qemu's [sigpage] and libc's bss
VVAR_BASE = VDSO_BASE - 0x2000  # arm64 6.1: two vvar pages below the text
HANDLER_DELTA = 0x100000000  # a64_signal's image at 0x5600000000

CLOCK_GETTIME_PC_OFF = 0x310  # after `mrs x2, cntvct_el0`: mid-function
HANDLER_PC_OFF = 0x924        # handler: after `bl hmid` returned


def h(v):
    return "0x%x" % v


def load(name):
    with open(os.path.join(FX, name + ".json")) as f:
        d = json.load(f)
    with open(os.path.join(FX, d["stack"]["file"]), "rb") as f:
        stack = f.read()
    return d, stack


def regs_of(d):
    return {r["dwarf"]: int(r["value"], 16) for r in d["regs"]}


def reg_list(regs):
    names = ["x%d" % i for i in range(31)] + ["sp", "pc"]
    return [{"dwarf": n, "name": names[n], "value": h(regs[n])} for n in sorted(regs)]


def dynsym(vdso, name):
    """Value of a dynamic symbol of the vdso (ELF64 LE)."""
    shoff, = struct.unpack_from("<Q", vdso, 0x28)
    shnum, = struct.unpack_from("<H", vdso, 0x3c)
    secs = [struct.unpack_from("<IIQQQQIIQQ", vdso, shoff + 64 * i) for i in range(shnum)]
    for s in secs:
        if s[1] != 11:  # SHT_DYNSYM
            continue
        strtab = secs[s[6]]
        for i in range(0, s[5], 24):
            st_name, _, _, _, st_value, _ = struct.unpack_from("<IBBHQQ", vdso, s[4] + i)
            n = vdso[strtab[4] + st_name:].split(b"\0")[0].decode()
            if n == name:
                return st_value
    raise SystemExit("no symbol " + name)


def vdso_maps(base_maps, vdso_rel):
    maps = list(base_maps)
    maps.append({"start": h(VVAR_BASE), "end": h(VDSO_BASE), "offset": "0x0", "perms": "r--p",
                 "name": "[vvar]", "object": ""})
    maps.append({"start": h(VDSO_BASE), "end": h(VDSO_BASE + 0x1000), "offset": "0x0", "perms": "r-xp",
                 "name": "[vdso]", "object": vdso_rel})
    return sorted(maps, key=lambda m: int(m["start"], 16))


def write(name, d, stack):
    d["stack"]["file"] = name + ".stack"
    with open(os.path.join(FX, name + ".stack"), "wb") as f:
        f.write(stack)
    with open(os.path.join(FX, name + ".json"), "w") as f:
        json.dump(d, f, indent=2)
        f.write("\n")
    print("wrote", name, file=sys.stderr)


def clock_gettime(vdso, vdso_rel, kver):
    base, stack = load("a64_syscall_O2_fp")
    r0 = regs_of(base)
    g = base["gdb"]
    sp0 = int(g[0]["sp"], 16)
    sp1 = int(g[1]["sp"], 16)
    ra1 = int(g[1]["pc"], 16)
    # close's frame: stp x29, x30, [sp, #-32]! -- leaf's x29 is at close's sp.
    leaf_x29, = struct.unpack_from("<Q", stack, sp0 - sp0)
    fn = dynsym(vdso, "__kernel_clock_gettime")
    pc = VDSO_BASE + fn + (CLOCK_GETTIME_PC_OFF - fn)
    regs = dict(r0)
    regs.update({0: 1, 1: sp1 + 0x10, 2: 0x3b9aca00, 29: leaf_x29,
                 30: ra1 | (0x3b << 48),  # signed by paciasp: PAC in bits 48..54
                 31: sp1, 32: pc})
    snap = stack[sp1 - sp0:]
    d = {
        "name": "a64_vdso_clock_gettime",
        "arch": "aarch64",
        "description": (
            "Synthetic (testdata/gen/aarch64/vdso_fixtures.py): the real vdso of Debian's arm64 kernel "
            "%s (%s) mapped at %s in a64_syscall_O2_fp's address space; pc inside __kernel_clock_gettime "
            "(+%#x, after paciasp, before its autiasp/ret), called from leaf in place of close. The vdso has "
            "no .eh_frame or .debug_frame, so frame 0's caller comes from the link register: x30 holds leaf's "
            "return address %#x PAC-signed (bits 48..54, as paciasp leaves it); sp (%#x) and x29 are leaf's "
            "at its call (gdb's frame-1 sp of a64_syscall_O2_fp; x29 as close saved it). Frames 1.. are "
            "gdb's frames 1.. of a64_syscall_O2_fp." % (kver, vdso_rel, h(VDSO_BASE), CLOCK_GETTIME_PC_OFF - fn, ra1, sp1)),
        "stop_point": "synthetic: sample inside the vdso's __kernel_clock_gettime",
        "regs": reg_list(regs),
        "stack": {"addr": h(sp1), "file": ""},
        "maps": vdso_maps(base["maps"], vdso_rel),
        "debug_dirs": [],
        "gdb": [{"pc": h(pc), "function": "__kernel_clock_gettime", "signal": False, "sp": h(sp1)}] + g[1:],
        "expect": {"stop": base["expect"]["stop"], "frames": len(g), "corrections": []},
    }
    write(d["name"], d, snap)


def sigreturn(vdso, vdso_rel, kver):
    base, stack = load("a64_syscall_O2_fp")
    sig, _ = load("a64_signal")
    r0 = regs_of(base)
    isp = r0[31]
    tramp = VDSO_BASE + dynsym(vdso, "__kernel_rt_sigreturn")
    # arch/arm64/kernel/signal.c get_sigframe: frame record, then the sigframe.
    record = (isp - 16) & ~15
    SIGFRAME = 128 + 176 + 288 + 4096  # siginfo, ucontext up to uc_mcontext, sigcontext
    frame = (record - SIGFRAME) & ~15
    hsp = frame - 16  # handler: stp x29, x30, [sp, #-16]!; mov x29, sp
    buf = bytearray(isp - hsp)

    def put(addr, fmt, *v):
        struct.pack_into(fmt, buf, addr - hsp, *v)

    put(hsp, "<QQ", record, tramp)  # handler's saved x29 (= &frame record at entry), x30
    # siginfo: si_signo SIGALRM(14), si_errno 0, si_code SI_KERNEL(0x80)
    put(frame, "<iii", 14, 0, 0x80)
    uc = frame + 128
    put(uc + 16, "<QiiQ", 0, 2, 0, 0)  # uc_stack: ss_sp, ss_flags SS_DISABLE, pad, ss_size
    mc = uc + 176
    put(mc, "<Q", 0)  # fault_address
    for i in range(31):
        put(mc + 8 + 8 * i, "<Q", r0[i])
    put(mc + 256, "<QQQ", r0[31], r0[32], 0x60000000)  # sp, pc, pstate (EL0t, Z|C)
    res = mc + 288
    put(res, "<II", 0x46508001, 528)  # fpsimd_context: magic, size (registers zero)
    put(res + 528, "<II", 0, 0)       # terminator
    put(record, "<QQ", r0[29], r0[30])
    snap = bytes(buf) + stack

    sig_obj = "objects/aarch64/a64_signal"
    maps = [m for m in base["maps"]]
    for m in sig["maps"]:
        if m["object"] == sig_obj:
            m = dict(m)
            m["start"] = h(int(m["start"], 16) + HANDLER_DELTA)
            m["end"] = h(int(m["end"], 16) + HANDLER_DELTA)
            maps.append(m)
    maps = vdso_maps(maps, vdso_rel)
    sig_base = 0x5500000000 + HANDLER_DELTA
    regs = dict(r0)
    regs.update({0: 0x2a, 29: hsp, 30: sig_base + HANDLER_PC_OFF, 31: hsp, 32: sig_base + HANDLER_PC_OFF})
    g = base["gdb"]
    d = {
        "name": "a64_vdso_sigreturn",
        "arch": "aarch64",
        "description": (
            "Synthetic (testdata/gen/aarch64/vdso_fixtures.py): a64_syscall_O2_fp's stop interrupted by a "
            "signal whose handler (a64_signal's handler, its image mapped at %s) returns to the real vdso's "
            "__kernel_rt_sigreturn (Debian arm64 kernel %s, %s, mapped at %s; no CFI). Below the interrupted "
            "sp the stack holds the kernel's frame record (%#x) and struct rt_sigframe (%#x) with "
            "a64_syscall_O2_fp's registers in uc_mcontext; the sample is in handler just after bl hmid "
            "returned (sp %#x). Expected: handler (CFI), the trampoline (recognised by mov x8, #139; svc #0; "
            "sp = the handler's CFA), then gdb's frames of a64_syscall_O2_fp."
            % (h(sig_base), kver, vdso_rel, h(VDSO_BASE), record, frame, hsp)),
        "stop_point": "synthetic: sample in a signal handler that returns to the vdso's __kernel_rt_sigreturn",
        "regs": reg_list(regs),
        "stack": {"addr": h(hsp), "file": ""},
        "maps": maps,
        "debug_dirs": [],
        "gdb": [{"pc": h(sig_base + HANDLER_PC_OFF), "function": "handler", "signal": False, "sp": h(hsp)},
                {"pc": h(tramp), "function": "__kernel_rt_sigreturn", "signal": True, "sp": h(frame)}] + g,
        "expect": {"stop": base["expect"]["stop"], "frames": len(g) + 2, "corrections": []},
    }
    write(d["name"], d, snap)


def main():
    vdso_path = os.path.abspath(sys.argv[1])
    with open(vdso_path, "rb") as f:
        vdso = f.read()
    vdso_rel = os.path.relpath(vdso_path, TESTDATA)
    kver = os.path.basename(vdso_path)[len("vdso-"):-len(".so")]
    clock_gettime(vdso, vdso_rel, kver)
    sigreturn(vdso, vdso_rel, kver)


if __name__ == "__main__":
    main()
