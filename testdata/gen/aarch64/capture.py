# gdb-multiarch Python script: attach to a qemu-aarch64 gdbstub, stop at the
# configured point and write one fixture (testdata/FORMAT.md).
#
# Configured through the environment (gen.sh sets these):
#   FX_NAME       fixture name
#   FX_DESC       description
#   FX_BIN        host path of the program
#   FX_PORT       gdbstub port
#   QPID          host pid of the qemu-aarch64 process (for /proc/QPID/maps)
#   FX_BREAK      function to break in first (the program's "leaf")
#   FX_SVCFN      libc function whose svc to stop after ("" = stop at FX_BREAK)
#   FX_STEPS      number of stepi after the FX_BREAK breakpoint (no FX_SVCFN)
#   FX_CAP        stack snapshot cap in bytes
#   FX_STOP       expected stop reason
#   FX_TRUNC      "1": count expect.frames from the snapshot end
#   FX_TESTDATA   path of testdata/
import gdb
import json
import os
import re
import shutil
import struct
import sys

E = os.environ
NAME = E["FX_NAME"]
TESTDATA = E["FX_TESTDATA"]
OBJDIR = "objects/aarch64"
FIXDIR = "fixtures/aarch64"
CAP = int(E.get("FX_CAP", "65536"))
PAGE = 4096
PAC_VA_BITS = 48  # see FORMAT.md "aarch64 notes"


def run(cmd):
    return gdb.execute(cmd, to_string=True)


def hx(v):
    return "0x%x" % v


def u64(v):
    return int(v) & 0xFFFFFFFFFFFFFFFF


run("set pagination off")
run("set confirm off")
run("set backtrace past-main on")
run("set backtrace past-entry on")
run("set backtrace limit 400")
run("set sysroot /usr/aarch64-linux-gnu")
run("target remote :%s" % E["FX_PORT"])

# ---------------------------------------------------------------- stop point
run("break %s" % E["FX_BREAK"])
run("continue")
stop_point = "break %s" % E["FX_BREAK"]
svcfn = E.get("FX_SVCFN", "")
if svcfn:
    run("delete")
    dis = run("disassemble %s" % svcfn)
    svcs = [int(m.group(1), 16) for m in
            re.finditer(r"^\s*(?:=>\s*)?(0x[0-9a-f]+)\s*<[^>]*>:\s*svc\s", dis, re.M)]
    if not svcs:
        raise gdb.GdbError("no svc in %s" % svcfn)
    for a in svcs:
        run("break *0x%x" % a)
    run("continue")
    pc = u64(gdb.parse_and_eval("$pc"))
    if pc not in svcs:
        raise gdb.GdbError("stopped at 0x%x, not at an svc of %s" % (pc, svcfn))
    run("delete")
    # stepi over svc under qemu 7.2's gdbstub executes one instruction too
    # many, so break on the instruction after the svc instead.
    run("break *0x%x" % (pc + 4))
    run("continue")
    npc = u64(gdb.parse_and_eval("$pc"))
    if npc != pc + 4:
        raise gdb.GdbError("did not stop after the svc: 0x%x" % npc)
    run("delete")
    stop_point = ("break %s; break on the svc in %s (0x%x), then on the next "
                  "instruction: pc is just after the svc, the syscall has "
                  "completed (x0 = its result), as a syscall-exit event sees it "
                  "(qemu 7.2's gdbstub has no catch syscall)" % (E["FX_BREAK"], svcfn, pc))
else:
    run("delete")
    steps = int(E.get("FX_STEPS", "0"))
    for _ in range(steps):
        run("stepi")
    if steps:
        stop_point += "; stepi x%d" % steps

def gdb_frames():
    """gdb's backtrace, innermost first, in the fixture's form."""
    frames = []
    f = gdb.newest_frame()
    while f is not None and len(frames) < 400:
        fr = {"pc": hx(u64(f.pc())), "function": f.name() or "",
              "signal": f.type() == gdb.SIGTRAMP_FRAME}
        try:
            fr["sp"] = hx(u64(f.read_register("sp")))
        except gdb.error:
            pass
        frames.append(fr)
        try:
            f = f.older()
        except gdb.error as e:
            print("older() failed: %s" % e)
            break
    return frames


def capture(NAME, desc, stop_point, expect_frames=None):
    """Writes fixture NAME for the current stop. expect_frames, when given,
    maps gdb's frames at this stop to (the frames a correct unwinder must
    report, the corrections saying why they differ from gdb's)."""
    # ----------------------------------------------------------------- registers
    regs = []
    for i in range(31):
        regs.append({"dwarf": i, "name": "x%d" % i,
                     "value": hx(u64(gdb.parse_and_eval("$x%d" % i)))})
    SP = u64(gdb.parse_and_eval("$sp"))
    PC = u64(gdb.parse_and_eval("$pc"))
    regs.append({"dwarf": 31, "name": "sp", "value": hx(SP)})
    regs.append({"dwarf": 32, "name": "pc", "value": hx(PC)})

    # ------------------------------------------------------------------ backtrace
    frames = gdb_frames()
    inf = gdb.selected_inferior()
    try:
        print(run("bt"))
        for lvl in range(min(len(frames) + 1, 4)):
            print(run("frame %d" % lvl))
            print(run("info frame"))
    except gdb.error as e:
        print("bt: %s" % e)
    run("frame 0")

    # ---------------------------------------------------------------------- maps
    # qemu-user 7.2 runs aarch64 guests with guest_base 0 on this x86_64 host, so
    # the guest's mappings are the host mappings of the qemu process below 2^40
    # (qemu itself and its libraries live near 2^46/2^47).  qemu never executes
    # guest code natively, so it maps guest text without PROT_EXEC on the host:
    # the x bit comes from the ELF PT_LOAD p_flags of file mappings, and from the
    # trampoline's contents for qemu's anonymous signal trampoline page.
    GUEST_LIMIT = 1 << 40


    def read_phdrs(path):
        with open(path, "rb") as fh:
            data = fh.read(1 << 16)
        (e_type,) = struct.unpack_from("<H", data, 16)
        e_phoff, = struct.unpack_from("<Q", data, 32)
        e_phentsize, e_phnum = struct.unpack_from("<HH", data, 54)
        loads = []
        for i in range(e_phnum):
            p_type, p_flags, p_offset, p_vaddr, _pa, p_filesz, p_memsz, _al = \
                struct.unpack_from("<IIQQQQQQ", data, e_phoff + i * e_phentsize)
            if p_type == 1:
                loads.append((p_flags, p_offset, p_vaddr, p_filesz, p_memsz))
        return e_type, loads


    auxv = run("info auxv")
    m = re.search(r"AT_EXECFN\s.*?(0x[0-9a-f]+)", auxv)
    execfn_addr = int(m.group(1), 16)

    maps = []
    host_lines = open("/proc/%s/maps" % E["QPID"]).read().splitlines()
    objects = {}
    for line in host_lines:
        parts = line.split(None, 5)
        lo, hi = (int(x, 16) for x in parts[0].split("-"))
        if lo >= GUEST_LIMIT:
            continue
        hperm, off = parts[1], int(parts[2], 16)
        path = parts[5].strip() if len(parts) > 5 else ""
        ent = {"start": hx(lo), "end": hx(hi), "offset": hx(off), "perms": hperm,
               "name": path, "object": ""}
        if path.startswith("/"):
            if not (path.startswith("/usr/aarch64-linux-gnu/") or path == E["FX_BIN"]):
                raise gdb.GdbError("unexpected guest mapping %s" % line)
            # base: the lowest mapping of this file with offset 0
            if path not in objects:
                e_type, loads = read_phdrs(path)
                bias = lo - (loads[0][2] & ~(PAGE - 1)) if e_type == 3 else 0
                objects[path] = (bias, loads)
            bias, loads = objects[path]
            x = False
            if hperm[0] == "r":
                for (fl, _po, va, _fs, ms) in loads:
                    s = (bias + va) & ~(PAGE - 1)
                    e = (bias + va + ms + PAGE - 1) & ~(PAGE - 1)
                    if s <= lo < e:
                        x = bool(fl & 1)
            ent["perms"] = hperm[0] + hperm[1] + ("x" if x else "-") + hperm[3]
            dst = os.path.join(OBJDIR, os.path.basename(path))
            full = os.path.join(TESTDATA, dst)
            if not os.path.exists(full) or open(full, "rb").read() != open(path, "rb").read():
                shutil.copyfile(path, full)
            ent["object"] = dst
        else:
            if lo <= execfn_addr < hi:
                ent["name"] = "[stack]"
            if hperm == "r--p" and hi - lo == PAGE:
                try:
                    page = bytes(inf.read_memory(lo, PAGE))
                except gdb.MemoryError:
                    page = b""
                if struct.pack("<II", 0xD2801168, 0xD4000001) in page:
                    ent["perms"] = "r-xp"
                    ent["name"] = "[sigpage]"
                    dst = os.path.join(OBJDIR, "qemu-sigtramp.bin")
                    with open(os.path.join(TESTDATA, dst), "wb") as fh:
                        fh.write(page)
                    ent["code"] = dst
        maps.append(ent)

    stackmap = None
    for ent in maps:
        if int(ent["start"], 16) <= SP < int(ent["end"], 16):
            stackmap = ent
    if stackmap is None:
        raise gdb.GdbError("sp 0x%x is in no mapping" % SP)

    # --------------------------------------------------------------------- stack
    end = min(int(stackmap["end"], 16), SP + CAP)
    buf = bytearray()
    a = SP
    while a < end:
        n = min(PAGE - (a % PAGE), end - a)
        try:
            buf += bytes(inf.read_memory(a, n))
        except gdb.MemoryError:
            break
        a += n
    with open(os.path.join(TESTDATA, FIXDIR, NAME + ".stack"), "wb") as fh:
        fh.write(buf)
    snap_end = SP + len(buf)

    # -------------------------------------------------------------------- expect
    corrections = []
    mask = ((1 << 64) - 1) ^ ((1 << PAC_VA_BITS) - 1)
    for i, fr in enumerate(frames):
        raw = int(fr["pc"], 16)
        if raw & mask:
            fr["gdb_pc"] = fr["pc"]
            fr["pc"] = hx(raw & ~mask)
            blk = None
            try:
                blk = gdb.block_for_pc(raw & ~mask)
            except RuntimeError:
                pass
            fn = ""
            if blk is not None and blk.function is not None:
                fn = blk.function.name
            corrections.append({"frame": i, "why": (
                "gdb reports the PAC-signed return address %s: qemu 7.2's gdbstub "
                "has no org.gnu.gdb.aarch64.pauth feature, so gdb cannot strip the "
                "pointer authentication code; a correct unwinder strips it "
                "(bits %d..63) and reports %s%s" % (
                    hx(raw), PAC_VA_BITS, hx(raw & ~mask),
                    (" (%s)" % fn) if fn else ""))})
            if fn and not fr["function"]:
                fr["function"] = fn

    # PAC fixture: gdb stops at the first frame whose return address is signed
    # ("previous frame identical to this frame").  The generator first captures the
    # same binary at the same stop with -cpu max,pauth=off (paciasp/autiasp are
    # hints, so they become nops and the same return addresses are saved
    # unsigned; qemu-user does not randomise the layout, so all addresses and the
    # stack layout are the same), and completes gdb's list from that reference
    # after checking the two agree.
    ref_path = E.get("FX_REF", "")
    if ref_path and E.get("FX_REFONLY") != "1":
        ref = json.load(open(ref_path))
        rframes = ref["frames"]
        # qemu builds a slightly different initial stack with pauth=off (auxv),
        # so the reference stack sits at a constant offset from this one.
        delta = int(rframes[0]["sp"], 16) - SP
        rsp0 = int(rframes[0]["sp"], 16)
        for i, fr in enumerate(frames):
            if i >= len(rframes) or fr["pc"] != rframes[i]["pc"] or \
                    int(fr["sp"], 16) + delta != int(rframes[i]["sp"], 16):
                raise gdb.GdbError("frame %d differs from the pauth=off reference" % i)
        rbuf = bytes.fromhex(ref["stack"])
        for k in range(len(frames), len(rframes)):
            rf = rframes[k]
            # the slot holding frame k's return address in the pauth=off stack
            # must hold the same address, PAC-signed, in this stack
            lo_ = int(rframes[k - 1]["sp"], 16) - rsp0
            hi_ = int(rf["sp"], 16) - rsp0
            want = int(rf["pc"], 16)
            slot = None
            for o in range(lo_, hi_ - 7, 8):
                if struct.unpack_from("<Q", rbuf, o)[0] == want:
                    slot = o
            if slot is None:
                raise gdb.GdbError("no slot for frame %d in the reference" % k)
            got = struct.unpack_from("<Q", buf, slot)[0]
            if got & ~mask != want:
                raise gdb.GdbError("slot of frame %d holds 0x%x" % (k, got))
            nf = dict(rf)
            nf["sp"] = hx(int(rf["sp"], 16) - delta)
            frames.append(nf)
            corrections.append({"frame": k, "why": (
                "gdb stopped before this frame (\"previous frame identical to this "
                "frame\") because it could not strip the PAC from a return "
                "address; this frame is gdb's frame %d of the same binary at the "
                "same stop under qemu -cpu max,pauth=off (paciasp/autiasp are "
                "nops there; all code addresses%s are the same); its return "
                "address slot is at %s and holds 0x%x here" % (
                    k, " and stack addresses" if delta == 0 else
                    " are the same, the stack is shifted by %d bytes," % delta,
                    hx(SP + slot), got))})
    if E.get("FX_REFONLY") == "1":
        with open(ref_path, "w") as fh:
            json.dump({"frames": frames, "stack": bytes(buf).hex()}, fh)
        print("REF written")
        run("kill")
        sys.stdout.flush()
        os._exit(0)

    if expect_frames is not None:
        frames, more = expect_frames(frames)
        corrections += more
    nframes = len(frames)
    if E.get("FX_TRUNC") == "1":
        # Frame k (k >= 1) is recoverable iff the slot holding its return address
        # lies in the snapshot.  That slot is in frame k-1, i.e. in
        # [sp(k-1), sp(k)); so count the frames whose sp <= snapshot end, and
        # check that the return address is really found in that range.
        n = 0
        for k, fr in enumerate(frames):
            if k == 0:
                n = 1
                continue
            spk = int(fr["sp"], 16)
            if spk > snap_end:
                break
            lo_ = int(frames[k - 1]["sp"], 16) - SP
            hi_ = spk - SP
            want = struct.pack("<Q", int(fr.get("gdb_pc", fr["pc"]), 16))
            found = any(buf[o:o + 8] == want for o in range(lo_, hi_ - 7, 8))
            if not found:
                break
            n = k + 1
        nframes = n

    fixture = {
        "name": NAME,
        "arch": "aarch64",
        "description": desc,
        "stop_point": stop_point,
        "regs": regs,
        "stack": {"addr": hx(SP), "file": NAME + ".stack"},
        "maps": maps,
        "debug_dirs": [],
        "gdb": frames,
        "expect": {"stop": E["FX_STOP"], "frames": nframes,
                   "corrections": corrections},
    }
    with open(os.path.join(TESTDATA, FIXDIR, NAME + ".json"), "w") as fh:
        # Sweeps write many fixtures: one line each, to keep them small.
        json.dump(fixture, fh, indent=None if E.get("FX_SWEEP") else 1)
        fh.write("\n")
    print("FIXTURE %s: %d gdb frames, expect %d, stack %d bytes" %
          (NAME, len(frames), nframes, len(buf)))
    for i, fr in enumerate(frames):
        print("  #%d %s %s sp=%s%s" % (i, fr["pc"], fr["function"], fr.get("sp"),
                                       " [signal]" if fr["signal"] else ""))

# ------------------------------------------------------------ PLT sweep
def plt_sweep():
    """FX_SWEEP=plt: lazy binding. From FX_BREAK (the caller), step to its bl
    into the PLT and take gdb's frames there (the caller and its callers, gdb
    is right about them); then stepi through the PLT entry, PLT0 and ld.so's
    _dl_runtime_resolve up to its br x16 into the resolved function, writing
    fixture NAME_NN at every instruction (and one at the entry of the
    function the resolver calls, _dl_fixup, stepping over the rest of it).
    Each fixture's frames are gdb's frames at the stop up to the caller, then
    the caller's frames from the bl: gdb itself gets the caller's SP wrong
    from PLT0's push on (see the corrections)."""
    arch = gdb.selected_frame().architecture()

    def here():
        pc = u64(gdb.parse_and_eval("$pc"))
        return pc, arch.disassemble(pc)[0]["asm"]

    for _ in range(64):
        pc, asm = here()
        if asm.startswith("bl") and "@plt>" in asm:
            break
        run("stepi")
    else:
        raise gdb.GdbError("no bl into the PLT in %s" % E["FX_BREAK"])
    bl, target = pc, asm.split("<")[1].rstrip(">")
    ref = gdb_frames()
    if ref[0]["function"] != E["FX_BREAK"]:
        raise gdb.GdbError("at the bl, frame 0 is %r" % ref[0]["function"])
    callers = [dict(ref[0], pc=hx(bl + 4))] + ref[1:]
    caller_sp = int(ref[0]["sp"], 16)

    def expect(frames):
        k = next((i for i, fr in enumerate(frames) if fr["function"] == E["FX_BREAK"]), None)
        if k is None:
            raise gdb.GdbError("gdb has no frame for %s" % E["FX_BREAK"])
        got = frames[k:]
        out = frames[:k] + [dict(c) for c in callers]
        more = []
        if [(g["pc"], g["sp"]) for g in got] != [(c["pc"], c["sp"]) for c in callers]:
            more.append({"frame": k, "why": (
                "gdb's own frames from here at this stop: %s. After PLT0's stp x16, x30, [sp, #-16]! it takes "
                "the caller's SP to be the CFA, 16 bytes below the caller's SP %s. Frames %d.. are gdb's "
                "frames for the same caller at its bl %s (0x%x), before the call into the PLT, with the "
                "bl's return address as pc" % (
                    " ".join("%s(sp %s)" % (g["function"] or g["pc"], g["sp"]) for g in got),
                    hx(caller_sp), k, target, bl))})
        return out, more

    base = {}
    n = 0
    fixup = False
    for _ in range(200):
        run("stepi")
        pc, asm = here()
        fn = gdb.selected_frame().name() or ""
        if (gdb.solib_name(pc) or "").endswith("libc.so.6"):
            break  # the resolver jumped to the resolved function
        if fn == target:
            region = target
        elif gdb.solib_name(pc) is None:
            region = "PLT0"
        elif not fixup:
            region = "_dl_runtime_resolve"
        else:
            region = "_dl_fixup"
        if base.get(region) is None:
            base[region] = pc
        name = "%s_%02d" % (NAME, n)
        capture(name, "%s; stopped at %s+%d: %s" % (E["FX_DESC"], region, pc - base[region], asm),
                "break %s; stepi to its bl %s, then stepi x%d" % (E["FX_BREAK"], target, n + 1), expect)
        n += 1
        if region == "_dl_fixup":
            # Step over the rest of _dl_fixup back into the resolver.
            run("break *0x%x" % fixup_ret)
            run("continue")
            run("delete")
            pc, asm = here()
            if pc != fixup_ret:
                raise gdb.GdbError("did not return from _dl_fixup to 0x%x" % fixup_ret)
            fixup = False
            name = "%s_%02d" % (NAME, n)
            capture(name, "%s; stopped at %s+%d: %s" % (E["FX_DESC"], "_dl_runtime_resolve",
                                                        pc - base["_dl_runtime_resolve"], asm),
                    "break %s; stepi to its bl %s, stepi x%d, then break after _dl_fixup's return" % (
                        E["FX_BREAK"], target, n), expect)
            n += 1
        elif region == "_dl_runtime_resolve" and asm.startswith("bl"):
            fixup = True
            fixup_ret = pc + 4
    else:
        raise gdb.GdbError("the resolver never jumped to %s" % target)
    print("SWEEP %s: %d fixtures" % (NAME, n))


if E.get("FX_SWEEP") == "plt":
    plt_sweep()
else:
    capture(NAME, E["FX_DESC"], stop_point)
run("kill")
