#!/usr/bin/env python3
"""Regenerates testdata/cores/<arch>/: real core dumps of the programs in
src/, trimmed and zstd-compressed, the exact binaries they map, and for each
core a truth file from gdb, eu-stack, eu-unstrip and eu-readelf (never from
ustack). See testdata/cores/README.md.

    sudo python3 gen.py [NAME...]        (x86_64; root for coredump_filter)

Needs gcc, g++, gdb, elfutils (eu-stack, eu-unstrip, eu-readelf), zstd.
Kernel cores are written with core_pattern "core" into a per-program
directory under /tmp/ustack-cores (so recorded paths do not depend on the
checkout); if core_pattern is something else it is set for the run and
written back afterwards. coredump_filter 0x11 (anonymous private memory and
ELF header pages) keeps the cores small: program text and read-only data are
left to the mapped files, as a reader must handle.
"""
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.abspath(os.path.join(HERE, "..", ".."))
SRC = os.path.join(HERE, "src")
ARCH = "x86_64"
OUT = os.path.join(TESTDATA, "cores", ARCH)
BIN = os.path.join(OUT, "bin")
RUN = "/tmp/ustack-cores/" + ARCH


# name: (sources and flags, description, expected functions on the
# signalled thread, innermost first, that gdb must show)
FIXTURES = {
    "crash_O2": ("cc", ["crash_chain.c", "-O2", "-fomit-frame-pointer"],
                 "SIGSEGV in leaf <- mid <- top <- main, -O2 -fomit-frame-pointer",
                 ["leaf", "mid", "top", "main"]),
    "crash_O0": ("cc", ["crash_chain.c", "-O0"],
                 "SIGSEGV in leaf <- mid <- top <- main, -O0 (frame pointers)",
                 ["leaf", "mid", "top", "main"]),
    "crash_stripped": ("cc", ["crash_chain.c", "-O2"],
                       "SIGSEGV in leaf <- mid <- top <- main, stripped; symbols and DWARF in a debuglink file",
                       ["leaf", "mid", "top", "main"]),
    "abort_handler": ("cc", ["abort_handler.c", "-O2"],
                      "abort() from a SIGUSR1 handler: SIGABRT through the signal frame",
                      ["handler_leaf", "on_usr1", "<signal>", "trigger", "main"]),
    "threads": ("cc", ["threads.c", "-O2", "-pthread"],
                "threads blocked in nanosleep, read, futex (condvar), poll and pthread_join while crash_leaf crashes",
                ["crash_leaf", "crash_mid", "crasher"]),
    "overflow": ("cc", ["overflow.c", "-O1"],
                 "unbounded recursion into the stack guard gap (256 KiB stack limit), no sigaltstack",
                 ["recurse", "recurse"]),
    "cxx_terminate": ("cxx", ["cxx_terminate.cpp", "-O2", "-static-libstdc++", "-static-libgcc"],
                      "uncaught C++ exception: std::terminate -> abort from __cxa_throw",
                      ["thrower", "run", "main"]),
    "plt_crash": ("plt", ["plt_main.c", "-O2"],
                  "SIGSEGV in libcorecrash.so's lib_crash <- lib_entry, called through the PLT from call_lib <- main",
                  ["lib_crash", "lib_entry", "call_lib", "main"]),
}


def sh(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def build(name, kind, args, d):
    exe = os.path.join(d, name)
    src = [os.path.join(SRC, a) if not a.startswith("-") else a for a in args]
    if kind == "cxx":
        sh(["g++", "-g"] + src + ["-o", exe])
        sh(["strip", "--strip-debug", exe])  # keep .symtab, .eh_frame; drop libstdc++'s DWARF
    elif kind == "plt":
        lib = os.path.join(d, "libcorecrash.so")
        sh(["gcc", "-g", "-O2", "-shared", "-fPIC", os.path.join(SRC, "plt_lib.c"), "-o", lib])
        sh(["gcc", "-g"] + src + ["-o", exe, "-L" + d, "-lcorecrash", "-Wl,-rpath,$ORIGIN"])
    else:
        sh(["gcc", "-g"] + src + ["-o", exe])
    if name == "crash_stripped":
        sh(["objcopy", "--only-keep-debug", exe, exe + ".debug"])
        sh(["strip", "--strip-all", exe])
        subprocess.run(["objcopy", "--add-gnu-debuglink=" + name + ".debug", exe], check=True, cwd=d)
    return exe


def run_for_core(exe, d):
    for old in glob.glob(os.path.join(d, "core*")):
        os.remove(old)
    script = "ulimit -c unlimited; echo 0x11 > /proc/self/coredump_filter; exec ./" + os.path.basename(exe)
    p = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "sh", "-c", script], cwd=d)
    cores = glob.glob(os.path.join(d, "core*"))
    if p.returncode >= 0 and p.returncode < 128 or not cores:
        raise SystemExit("%s: no core (exit %d, cores %s)" % (exe, p.returncode, cores))
    return cores[0]


def gdb_truth(exe, core, d):
    out = os.path.join(d, "gdb.json")
    env = dict(os.environ, USTACK_TRUTH_OUT=out, USTACK_ARCH=ARCH)
    sh(["gdb", "-batch", "-nx", "-iex", "set auto-load no", "-iex", "set width 0",
        "-ex", "set backtrace past-main on", "-ex", "set backtrace past-entry on",
        "-ex", "set backtrace limit 5000", "-ex", "file " + exe, "-ex", "core-file " + core,
        "-x", os.path.join(HERE, "gdb_truth.py")], env=env, stdout=subprocess.DEVNULL, cwd=d)
    with open(out) as f:
        return json.load(f)


def eu_stack(exe, core, d):
    p = subprocess.run(["eu-stack", "-n", "0", "-m", "--core=" + core, "-e", exe],
                       capture_output=True, text=True, cwd=d)
    threads, cur = [], None
    for line in p.stdout.splitlines():
        m = re.match(r"TID (\d+):", line)
        if m:
            cur = {"tid": int(m.group(1)), "frames": []}
            threads.append(cur)
            continue
        m = re.match(r"#(\d+)\s+(0x[0-9a-f]+)(?:\s+(.*?))?(?:\s+-\s+(\S+))?$", line)
        if m and cur is not None:
            cur["frames"].append({"pc": hex(int(m.group(2), 16)), "function": m.group(3) or "",
                                  "module": m.group(4) or ""})
    return {"exit": p.returncode, "threads": threads, "stderr": p.stderr.strip().splitlines()[:20]}


def eu_unstrip(core, d):
    p = subprocess.run(["eu-unstrip", "-n", "--core=" + core], capture_output=True, text=True, cwd=d, check=True)
    mods = []
    for line in p.stdout.splitlines():
        m = re.match(r"(0x[0-9a-f]+)\+(0x[0-9a-f]+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$", line)
        if not m:
            continue
        bid, addr = (m.group(3).split("@") + [""])[:2]
        mods.append({"start": m.group(1), "size": m.group(2), "build_id": "" if bid == "-" else bid,
                     "note": addr, "file": m.group(4), "name": m.group(6)})
    return mods


def eu_readelf(core):
    txt = subprocess.run(["eu-readelf", "-n", core], capture_output=True, text=True, check=True).stdout
    out = {"threads": [], "auxv": [], "files": []}
    section = None
    for line in txt.splitlines():
        m = re.match(r"\s+(CORE|LINUX)\s+\d+\s+(\S+)", line)
        if m:
            section = m.group(2)
            if section == "PRSTATUS":
                out["threads"].append({"regs": {}})
            continue
        t = out["threads"][-1] if out["threads"] else None
        if section == "PRSTATUS" and t is not None:
            for k, v in re.findall(r"([a-z_.0-9]+):\s+(-?0x[0-9a-f]+|-?\d+)", line):
                if k in ("pid", "ppid", "cursig", "info.si_signo"):
                    t[k] = int(v, 0)
                elif k not in ("utime", "stime", "cutime", "cstime"):
                    t["regs"][k] = hex(int(v, 0) & 0xFFFFFFFFFFFFFFFF)
        elif section == "PRPSINFO":
            for k, v in re.findall(r"(pid|ppid|fname|psargs):\s+(.*?)(?:,|$)", line):
                out.setdefault("prpsinfo", {})[k] = int(v) if k in ("pid", "ppid") else v.strip()
        elif section == "SIGINFO":
            for k, v in re.findall(r"(si_signo|si_errno|si_code):\s+(-?\d+)", line):
                out.setdefault("siginfo", {})[k] = int(v)
            m = re.search(r"fault address: (0x[0-9a-f]+|\d+)", line)
            if m:
                out.setdefault("siginfo", {})["addr"] = hex(int(m.group(1), 0))
        elif section == "AUXV":
            m = re.match(r"\s+(\w+): (0x[0-9a-f]+|\d+)", line)
            if m:
                out["auxv"].append({"name": m.group(1), "value": hex(int(m.group(2), 0))})
        elif section == "FILE":
            m = re.match(r"\s+([0-9a-f]+)-([0-9a-f]+) ([0-9a-f]+) \d+\s+(.*)$", line)
            if m:
                out["files"].append({"start": "0x" + m.group(1), "end": "0x" + m.group(2),
                                     "offset": "0x" + m.group(3), "path": m.group(4)})
    return out


def committed(path, d):
    """Where the test finds the file recorded at path, relative to testdata."""
    if path.startswith(d + "/"):
        dst = os.path.join(BIN, os.path.basename(path))
        shutil.copyfile(path, dst)
        return os.path.relpath(dst, TESTDATA)
    objs = os.path.join(TESTDATA, "objects", ARCH, os.path.basename(path))
    if os.path.exists(objs) and sha(objs) == sha(path):
        return os.path.relpath(objs, TESTDATA)
    dst = os.path.join(BIN, os.path.basename(path))
    shutil.copyfile(path, dst)
    return os.path.relpath(dst, TESTDATA)


def fixture(name):
    kind, args, desc, expect = FIXTURES[name]
    d = os.path.join(RUN, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    exe = build(name, kind, args, d)
    core = run_for_core(exe, d)
    gdb = gdb_truth(exe, core, d)
    truth = {
        "name": name, "arch": ARCH, "description": desc,
        "core": os.path.join("cores", ARCH, name + ".core.zst"),
        "exe": d + "/" + name,
        "gdb": gdb, "eu_stack": eu_stack(exe, core, d),
        "eu_unstrip": eu_unstrip(core, d), "eu_readelf": eu_readelf(core),
    }
    # The generator checks its own premise: gdb sees the intended chain.
    sel = [t for t in gdb["threads"] if t["lwp"] == gdb["selected_lwp"]][0]
    names = [f.get("function") if f.get("kind") != "signal" else "<signal>" for f in sel["frames"]]
    pos = 0
    for want in expect:
        while pos < len(names) and not (names[pos] == want or names[pos].startswith(want + "(")):
            pos += 1
        if pos == len(names):
            raise SystemExit("%s: gdb's stack %s lacks %s" % (name, names[:12], expect))
    files = {}
    for m in truth["eu_readelf"]["files"]:
        files.setdefault(m["path"], committed(m["path"], d))
    for f in os.listdir(d):
        if f.endswith(".debug"):
            shutil.copyfile(os.path.join(d, f), os.path.join(BIN, f))
    truth["files"] = files
    truth["debug_dirs"] = [os.path.relpath(BIN, TESTDATA)]
    sh(["zstd", "-q", "-19", "-f", core, "-o", os.path.join(OUT, name + ".core.zst")])
    with open(os.path.join(OUT, name + ".json"), "w") as f:
        json.dump(truth, f, indent=1)
        f.write("\n")
    print("%s: %d threads, core %d bytes, zst %d bytes" % (name, len(gdb["threads"]), os.path.getsize(core),
          os.path.getsize(os.path.join(OUT, name + ".core.zst"))), file=sys.stderr)


def main():
    os.makedirs(BIN, exist_ok=True)
    pattern_file = "/proc/sys/kernel/core_pattern"
    with open(pattern_file) as f:
        saved = f.read().rstrip("\n")
    if saved != "core":
        with open(pattern_file, "w") as f:
            f.write("core")
    try:
        for name in sys.argv[1:] or FIXTURES:
            fixture(name)
    finally:
        if saved != "core":
            with open(pattern_file, "w") as f:
                f.write(saved)


if __name__ == "__main__":
    main()
