# gdb -batch -x gdb_truth.py, with the executable and the core loaded and
# USTACK_TRUTH_OUT naming the JSON file to write. Records what gdb reads from
# the core: threads (gdb's order, the selected one), registers, every frame
# (pc, function, sp, kind), $_siginfo, NT_FILE mappings (info proc
# mappings), shared libraries, the auxiliary vector and a sample of memory
# words. Nothing here comes from ustack.
import json
import os
import re

import gdb

ARCH = os.environ["USTACK_ARCH"]
if ARCH == "x86_64":
    REGS = ["rax", "rdx", "rcx", "rbx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11",
            "r12", "r13", "r14", "r15", "rip", "eflags", "fs_base"]
    SP, PC = "rsp", "rip"
else:
    REGS = ["x%d" % i for i in range(31)] + ["sp", "pc", "cpsr"]
    SP, PC = "sp", "pc"

def hx(v):
    return "0x%x" % (int(v) & 0xFFFFFFFFFFFFFFFF)

def reg(frame, name):
    try:
        return int(frame.read_register(name)) & 0xFFFFFFFFFFFFFFFF
    except gdb.error:
        return None

def read_word(addr):
    try:
        b = gdb.selected_inferior().read_memory(addr, 8).tobytes()
        return hx(int.from_bytes(b, "little"))
    except (gdb.MemoryError, gdb.error, OverflowError, ValueError):
        return None

KINDS = {gdb.NORMAL_FRAME: "normal", gdb.INLINE_FRAME: "inline", gdb.SIGTRAMP_FRAME: "signal",
         gdb.DUMMY_FRAME: "dummy", gdb.TAILCALL_FRAME: "tailcall", gdb.ARCH_FRAME: "arch"}

def frames():
    out = []
    f = gdb.newest_frame()
    while f is not None and len(out) < 5000:
        fr = {"pc": hx(f.pc()), "function": f.name() or "", "kind": KINDS.get(f.type(), str(f.type()))}
        sp = reg(f, SP)
        if sp is not None:
            fr["sp"] = hx(sp)
        out.append(fr)
        try:
            f = f.older()
        except gdb.error as e:
            out.append({"error": str(e)})
            break
    return out

out = {"gdb_version": gdb.VERSION}
inf = gdb.selected_inferior()
sel = gdb.selected_thread()
out["selected_lwp"] = sel.ptid[1]
try:
    si = gdb.parse_and_eval("$_siginfo")
    info = {"signo": int(si["si_signo"]), "code": int(si["si_code"]), "errno": int(si["si_errno"])}
    if info["code"] > 0 and info["signo"] in (4, 5, 7, 8, 11):
        info["addr"] = hx(si["_sifields"]["_sigfault"]["si_addr"])
    out["siginfo"] = info
except gdb.error as e:
    out["siginfo"] = None
    out["siginfo_error"] = str(e)

threads = []
words = set()
for th in sorted(inf.threads(), key=lambda t: t.num):
    th.switch()
    f0 = gdb.newest_frame()
    regs = {}
    for r in REGS:
        v = reg(f0, r)
        if v is not None:
            regs[r] = hx(v)
    fr = frames()
    sp = reg(f0, SP)
    for k in range(16):
        words.add(sp + 8 * k)
    for x in fr:
        if "pc" in x:
            words.add(int(x["pc"], 16))
    threads.append({"num": th.num, "lwp": th.ptid[1], "name": th.name or "", "regs": regs, "frames": fr})
out["threads"] = threads
sel.switch()

maps = []
txt = gdb.execute("info proc mappings", to_string=True)
for line in txt.splitlines():
    m = re.match(r"\s*(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+(\S.*)?$", line)
    if m:
        maps.append({"start": m.group(1), "end": m.group(2), "offset": m.group(4), "path": (m.group(5) or "").strip()})
        words.add(int(m.group(1), 16))
out["mappings"] = maps

libs = []
txt = gdb.execute("info sharedlibrary", to_string=True)
for line in txt.splitlines():
    m = re.match(r"(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+\S+\s+(?:\(\*\)\s+)?(/\S+)", line)
    if m:
        libs.append({"from": m.group(1), "to": m.group(2), "path": m.group(3)})
out["sharedlibrary"] = libs

auxv = []
txt = gdb.execute("info auxv", to_string=True)
for line in txt.splitlines():
    # number, name, description, value (then a quoted string for pointers
    # to strings such as AT_EXECFN)
    m = re.match(r"(\d+)\s+(\S+)\s+.*?\s(0x[0-9a-f]+|\d+)(?:\s+\".*\")?\s*$", line)
    if m:
        v = m.group(3)
        auxv.append({"type": int(m.group(1)), "name": m.group(2), "value": hx(int(v, 0))})
out["auxv"] = auxv

words.add(0)
words.add(0x1000)
out["memory"] = [{"addr": hx(a), "value": read_word(a)} for a in sorted(words)]

with open(os.environ["USTACK_TRUTH_OUT"], "w") as fh:
    json.dump(out, fh, indent=1)
