# gdb Python script: run one fixture program to its stop point and save what a
# kernel-event capture would hold (registers, maps, stack snapshot) plus gdb's
# own backtrace, in the format of testdata/FORMAT.md.
#
# Used by testdata/gen/Makefile as
#   gdb -nx -batch -x capture.py -ex 'python run_fixture("NAME")'
# with USTACK_TESTDATA (absolute testdata/ path), USTACK_BUILD (where the
# programs were built) and USTACK_RUNDIR (fixed directory the programs are run
# from, so map names do not depend on the checkout) in the environment. The
# fixture specs live in fixtures_x86_64.py beside this file.

import gdb
import hashlib
import json
import os
import shutil
import sys

GEN = os.path.dirname(os.path.abspath(__file__)) if "__file__" in globals() else os.environ["USTACK_GEN"]
sys.path.insert(0, GEN)

TESTDATA = os.environ["USTACK_TESTDATA"]
BUILD = os.environ["USTACK_BUILD"]
RUNDIR = os.environ["USTACK_RUNDIR"]
ARCH = os.environ.get("USTACK_ARCH", "x86_64")

REGS = {
    "x86_64": [(0, "rax"), (1, "rdx"), (2, "rcx"), (3, "rbx"), (4, "rsi"), (5, "rdi"),
               (6, "rbp"), (7, "rsp")] + [(i, "r%d" % i) for i in range(8, 16)] + [(16, "rip")],
}
SP = {"x86_64": "rsp"}
PC = {"x86_64": "rip"}
OUTERMOST = ("_start", "clone3", "__clone3", "__GI___clone3", "clone", "__clone")
MASK = (1 << 64) - 1
DEFAULT_CAP = 64 * 1024


def h(v):
    return "0x%x" % v


def u64(v):
    return int(v) & MASK


def log(msg):
    sys.stderr.write("capture: %s\n" % msg)


def objdir():
    return os.path.join(TESTDATA, "objects", ARCH)


def sha(data):
    return hashlib.sha256(data).hexdigest()


def read_maps(pid):
    maps = []
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            parts = line.split(None, 5)
            start, end = [int(x, 16) for x in parts[0].split("-")]
            name = parts[5].strip() if len(parts) > 5 else ""
            maps.append({"start": start, "end": end, "offset": int(parts[2], 16),
                         "perms": parts[1], "name": name, "object": ""})
    return maps


def find_map(maps, addr):
    for m in maps:
        if m["start"] <= addr < m["end"]:
            return m
    return None


def store_object(src_path, data=None, name=None):
    """Copies a mapped file into objects/<arch>/ (deduplicated by content) and
    returns its path relative to testdata/."""
    if data is None:
        with open(src_path, "rb") as f:
            data = f.read()
    if name is None:
        name = os.path.basename(src_path)
    digest = sha(data)
    os.makedirs(objdir(), exist_ok=True)
    ours = src_path is not None and os.path.dirname(src_path) == RUNDIR
    dst = os.path.join(objdir(), name)
    if os.path.exists(dst) and not ours:
        with open(dst, "rb") as f:
            if sha(f.read()) != digest:
                root, ext = os.path.splitext(name)
                dst = os.path.join(objdir(), "%s-%s%s" % (root, digest[:12], ext))
    if not os.path.exists(dst) or ours:
        with open(dst, "wb") as f:
            f.write(data)
    return os.path.relpath(dst, TESTDATA)


def attach_objects(maps):
    inf = gdb.selected_inferior()
    done = {}
    for m in maps:
        name = m["name"]
        if name == "[vdso]":
            if "[vdso]" not in done:
                data = bytes(inf.read_memory(m["start"], m["end"] - m["start"]))
                done["[vdso]"] = store_object(None, data, "vdso-%s.so" % sha(data)[:12])
            m["object"] = done["[vdso]"]
        elif name.startswith("/") and os.path.isfile(name):
            if name not in done:
                with open(name, "rb") as f:
                    data = f.read()
                done[name] = store_object(name, data) if data[:4] == b"\x7fELF" else ""
            m["object"] = done[name]


def frames():
    out = []
    f = gdb.newest_frame()
    while f is not None and len(out) < 2000:
        fr = {"pc": f.pc(), "function": f.name() or "", "signal": f.type() == gdb.SIGTRAMP_FRAME}
        try:
            fr["sp"] = u64(f.read_register(SP[ARCH]))
        except gdb.error:
            pass
        out.append(fr)
        try:
            f = f.older()
        except gdb.error as e:
            log("older(): %s" % e)
            break
    return out


def bt_names():
    return [fr["function"] for fr in frames()]


def wanted(spec):
    names = bt_names()
    for w in spec.get("want", []):
        if not any(n == w or n.startswith(w + "(") for n in names):
            return False
    return True


def dump_stack(path, addr, size):
    data = bytes(gdb.selected_inferior().read_memory(addr, size))
    with open(path, "wb") as f:
        f.write(data)
    return data


def run_fixture(name):
    import fixtures_x86_64 as specs
    spec = specs.SPECS[name]
    for cmd in ["set pagination off", "set backtrace past-main on", "set backtrace past-entry on",
                "set confirm off", "set width 0",
                "set startup-with-shell off", "set disable-randomization on",
                "set debuginfod enabled off", "set auto-load python-scripts off",
                "set debug-file-directory %s" % os.path.join(objdir(), "debug"),
                "unset environment",
                "handle SIGALRM nostop noprint pass", "handle SIGURG nostop noprint pass"]:
        gdb.execute(cmd)
    os.makedirs(RUNDIR, exist_ok=True)
    exe = os.path.join(RUNDIR, spec["binary"])
    shutil.copyfile(os.path.join(BUILD, spec["binary"]), exe)
    os.chmod(exe, 0o755)
    for extra in spec.get("rundir_files", []):
        shutil.copyfile(os.path.join(BUILD, extra), os.path.join(RUNDIR, extra))
    gdb.execute("file %s" % exe)
    gdb.execute("set args %s" % " ".join(spec.get("args", [])))
    for cmd in spec.get("setup", []):
        gdb.execute(cmd)
    if "run" not in spec.get("setup", []):
        gdb.execute("run")
    if "callers" in spec:
        # gdb's frames at an earlier stop on the same call chain (the
        # entry of a function without CFI, where its prologue analysis is
        # right): the callers the fixture's frames go on with.
        c = spec["callers"]
        gdb.execute("break *%s" % c["at"])
        gdb.execute("continue")
        if gdb.newest_frame().name() != c["at"]:
            raise gdb.GdbError("%s: the callers' stop is in %r, not %s" % (name, gdb.newest_frame().name(), c["at"]))
        gdb.execute("bt")
        spec = dict(spec, callers_frames=frames())
        gdb.execute("delete")
        for cmd in c.get("then", []):
            gdb.execute(cmd)
    for _ in range(200):
        if wanted(spec):
            break
        gdb.execute("continue")
    else:
        raise gdb.GdbError("%s: never reached %s" % (name, spec.get("want")))
    for cmd in spec.get("post", []):
        gdb.execute(cmd)
    if "post_py" in spec:
        spec["post_py"]()
    if not all(w in bt_names() or any(n.startswith(w + "(") for n in bt_names()) for w in spec.get("want_after", [])):
        raise gdb.GdbError("%s: after post, backtrace lacks %s" % (name, spec.get("want_after")))
    if "sweep" in spec:
        sweep(name, spec)
    else:
        gdb.execute("bt")
        capture(name, spec)
    gdb.execute("kill")


def sweep(name, spec):
    """Captures one fixture per instruction, <name>_00, <name>_01, ..., from
    the instruction after the last one that names spec["sweep"]["after"] in
    spec["sweep"]["function"] through its ret, stepping with stepi."""
    sw = spec["sweep"]
    fn = sw["function"]
    start_fn = int(gdb.parse_and_eval("(long)&%s" % fn))
    arch = gdb.selected_frame().architecture()
    insns = []
    pc = start_fn
    while len(insns) < 200 and not (insns and insns[-1]["asm"].startswith("ret")):
        ins = arch.disassemble(pc)[0]
        insns.append(ins)
        pc += ins["length"]
    marks = [i for i, ins in enumerate(insns) if sw["after"] in ins["asm"]]
    if not marks or not insns[-1]["asm"].startswith("ret"):
        raise gdb.GdbError("%s: %s has no %r before a final ret" % (name, fn, sw["after"]))
    todo = insns[marks[-1] + 1:]
    gdb.execute("break *0x%x" % todo[0]["addr"])
    for _ in range(20):
        if gdb.selected_frame().pc() == todo[0]["addr"]:
            break
        gdb.execute("continue")
    else:
        raise gdb.GdbError("%s: never reached 0x%x" % (name, todo[0]["addr"]))
    gdb.execute("delete")
    for i, ins in enumerate(todo):
        pc = gdb.selected_frame().pc()
        if pc != ins["addr"]:
            raise gdb.GdbError("%s: stepi reached 0x%x, not 0x%x" % (name, pc, ins["addr"]))
        off = pc - start_fn
        one = dict(spec)
        one["description"] = "%s; stopped at %s+%d: %s" % (spec["description"], fn, off, ins["asm"])
        one["stop_point"] = "%s, stepi %d" % (spec["stop_point"], i)
        gdb.execute("bt")
        capture("%s_%02d" % (name, i), one)
        if i + 1 < len(todo):
            gdb.execute("stepi")


def capture(name, spec):
    inf = gdb.selected_inferior()
    frame0 = gdb.newest_frame()
    regs = []
    vals = {}
    for num, rname in REGS[ARCH]:
        v = u64(frame0.read_register(rname))
        vals[rname] = v
        regs.append({"dwarf": num, "name": rname, "value": v})
    sp = vals[SP[ARCH]]
    maps = read_maps(inf.pid)
    attach_objects(maps)
    cap = spec.get("cap", DEFAULT_CAP)
    fixdir = os.path.join(TESTDATA, "fixtures", ARCH)
    os.makedirs(fixdir, exist_ok=True)

    m = find_map(maps, sp)
    end = min(m["end"], sp + cap)
    dump_stack(os.path.join(fixdir, name + ".stack"), sp, end - sp)
    stack = {"addr": sp, "file": name + ".stack"}

    gframes = frames()
    # Frames whose stack pointer is in another mapping (sigaltstack handlers
    # interrupting code on the main stack) get a snapshot of their own.
    extra = []
    lows = {}
    for fr in gframes:
        s = fr.get("sp")
        if s is None:
            continue
        fm = find_map(maps, s)
        if fm is None or fm is m:
            continue
        key = fm["start"]
        lows[key] = min(lows.get(key, s), s)
    for i, (start, low) in enumerate(sorted(lows.items())):
        fm = find_map(maps, low)
        e = min(fm["end"], low + cap)
        fname = "%s.stack%d" % (name, i + 1)
        dump_stack(os.path.join(fixdir, fname), low, e - low)
        extra.append({"addr": low, "file": fname})

    # Expectations.
    corrections = list(spec.get("corrections", []))
    if "callers_frames" in spec:
        # From the frame of spec["callers"]["at"] on, gdb's frames at its
        # entry, up to spec["callers"]["until"].
        c, cf = spec["callers"], spec["callers_frames"]
        k = next((i for i, fr in enumerate(gframes) if fr["function"] == c["at"]), None)
        u = next((i for i, fr in enumerate(cf) if fr["function"] == c["until"]), None)
        if k is None or u is None:
            raise gdb.GdbError("%s: no %s frame at the stop, or no %s among the callers" % (name, c["at"], c["until"]))
        corrections.append({"frame": k + 1, "why": c["why"] % {"gdb": " ".join(
            "%s(0x%x)" % (fr["function"] or "??", fr["pc"]) for fr in gframes[k + 1:])}})
        gframes = gframes[:k + 1] + cf[1:u + 1]
    nframes = len(gframes)
    for i, fr in enumerate(gframes):
        if fr["function"] in OUTERMOST and i + 1 < len(gframes) and not fr["signal"]:
            corrections.append({"frame": i + 1, "why": "gdb walks past %s, whose CFI marks the return address undefined" % fr["function"]})
            break
    if len(gframes) > 1 and gframes[-1]["pc"] == 0 and not any(c["frame"] <= len(gframes) - 1 for c in corrections):
        corrections.append({"frame": len(gframes) - 1, "why": "return address 0 above %s marks the end of the stack; gdb shows it as a frame" % gframes[-2]["function"]})
    for c in corrections:
        if "callers_frames" not in spec:
            nframes = min(nframes, c["frame"])
    if "hand" in spec:
        # A frame past where gdb's analysis ends, checked by hand from the
        # code (the spec says how).
        gframes = gframes[:nframes] + [spec["hand"]["frame"]]
        corrections = [c for c in corrections if c["frame"] < nframes]
        corrections.append({"frame": nframes, "why": spec["hand"]["why"]})
        nframes += 1
    stop = spec.get("stop")
    if stop is None:
        last = gframes[nframes - 1]["function"]
        stop = "outermost" if last in OUTERMOST or (nframes < len(gframes) and gframes[nframes]["pc"] == 0) else "?"
    if stop == "truncated":
        # Frame i is recoverable when the slot holding its return address, just
        # below its SP (the CFA of frame i-1), lies inside the snapshot.
        n = 0
        for fr in gframes[:nframes]:
            if fr.get("sp") is None or fr["sp"] > end:
                break
            n += 1
        nframes = n
    if stop == "?":
        raise gdb.GdbError("%s: cannot tell how the chain ends (last frame %r); set stop in the spec" % (name, gframes[-1]["function"]))

    doc = {
        "name": name,
        "arch": ARCH,
        "description": spec["description"],
        "stop_point": spec["stop_point"],
        "regs": [{"dwarf": r["dwarf"], "name": r["name"], "value": h(r["value"])} for r in regs],
        "stack": {"addr": h(stack["addr"]), "file": stack["file"]},
    }
    if extra:
        doc["extra_stacks"] = [{"addr": h(x["addr"]), "file": x["file"]} for x in extra]
    doc["maps"] = [{"start": h(x["start"]), "end": h(x["end"]), "offset": h(x["offset"]),
                    "perms": x["perms"], "name": x["name"], "object": x["object"]} for x in maps]
    doc["debug_dirs"] = spec.get("debug_dirs", [os.path.join("objects", ARCH, "debug")])
    gl = []
    for fr in gframes:
        g = {"pc": h(fr["pc"]), "function": fr["function"], "signal": fr["signal"]}
        if "sp" in fr:
            g["sp"] = h(fr["sp"])
        gl.append(g)
    doc["gdb"] = gl
    doc["expect"] = {"stop": stop, "frames": nframes, "corrections": corrections}
    with open(os.path.join(fixdir, name + ".json"), "w") as f:
        f.write(render(doc))
    log("%s: %d gdb frames, expect %d %s, stack %d bytes, %d extra" % (name, len(gframes), nframes, stop, end - sp, len(extra)))


def render(doc):
    """JSON with one line per register, map and frame, for readable diffs."""
    lines = ["{"]
    keys = list(doc.keys())
    for i, k in enumerate(keys):
        v = doc[k]
        comma = "," if i + 1 < len(keys) else ""
        if isinstance(v, list) and v and isinstance(v[0], dict):
            lines.append("  %s: [" % json.dumps(k))
            for j, item in enumerate(v):
                lines.append("    %s%s" % (json.dumps(item), "," if j + 1 < len(v) else ""))
            lines.append("  ]%s" % comma)
        elif k == "expect":
            lines.append("  %s: {" % json.dumps(k))
            ek = list(v.keys())
            for j, kk in enumerate(ek):
                vv = v[kk]
                c2 = "," if j + 1 < len(ek) else ""
                if isinstance(vv, list) and vv:
                    lines.append("    %s: [" % json.dumps(kk))
                    for n, item in enumerate(vv):
                        lines.append("      %s%s" % (json.dumps(item), "," if n + 1 < len(vv) else ""))
                    lines.append("    ]%s" % c2)
                else:
                    lines.append("    %s: %s%s" % (json.dumps(kk), json.dumps(vv), c2))
            lines.append("  }%s" % comma)
        else:
            lines.append("  %s: %s%s" % (json.dumps(k), json.dumps(v), comma))
    lines.append("}")
    return "\n".join(lines) + "\n"
