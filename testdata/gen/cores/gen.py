#!/usr/bin/env python3
"""Regenerates testdata/cores/<arch>/: real core dumps of the programs in
src/, trimmed and zstd-compressed, the exact binaries they map, and for each
core a truth file from gdb, eu-stack, eu-unstrip and eu-readelf (never from
ustack). See testdata/cores/README.md.

    sudo python3 gen.py [NAME...]                 x86_64 (root: coredump_filter)
    python3 gen.py --arch aarch64 [NAME...]       aarch64 under qemu-user

Needs gcc, g++, gdb, elfutils (eu-stack, eu-unstrip, eu-readelf), zstd; for
aarch64 gcc-aarch64-linux-gnu, g++-aarch64-linux-gnu, qemu-user (7.2) and
gdb-multiarch.
Kernel cores are written with core_pattern "core" into a per-program
directory under /tmp/ustack-cores (so recorded paths do not depend on the
checkout); if core_pattern is something else it is set for the run and
written back afterwards. coredump_filter 0x11 (anonymous private memory and
ELF header pages) keeps the cores small: program text and read-only data are
left to the mapped files, as a reader must handle.

aarch64 cores are qemu-aarch64's guest cores. qemu 7.2 writes no NT_FILE, no
NT_SIGINFO and no ELF header pages. The program runs under qemu's gdbstub;
at the fatal signal the generator reads the guest's mappings (the qemu
process's host mappings below 2^40: guest_base is 0) and lets the signal
kill it; then it adds to the core what the kernel would have written with
coredump_filter 0x11: an NT_FILE note built from those mappings and the first
page of each mapped ELF file. NT_SIGINFO stays absent (gdb has no siginfo from
qemu's gdbstub), so the signal is known only from NT_PRSTATUS.
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
if len(sys.argv) > 2 and sys.argv[1] == "--arch":
    ARCH = sys.argv[2]
    del sys.argv[1:3]
A64 = ARCH == "aarch64"
CROSS = "aarch64-linux-gnu-" if A64 else ""
SYSROOT = "/usr/aarch64-linux-gnu" if A64 else ""
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
    "pause_tail": ("cc", ["pause_tail.c", "-O2", "-pthread"],
                   "a thread blocked in pause(), reached by waiter_leaf's tail call (jmp pause@plt) into libc, "
                   "while the main thread crashes",
                   ["crash_leaf", "main"]),
    "overflow": ("cc", ["overflow.c", "-O1"],
                 "unbounded recursion into the stack guard gap (256 KiB stack limit), no sigaltstack",
                 ["recurse", "recurse"]),
    "cxx_terminate": ("cxx", ["cxx_terminate.cpp", "-O2", "-static-libstdc++", "-static-libgcc"],
                      "uncaught C++ exception: std::terminate -> abort from __cxa_throw",
                      ["thrower", "run", "main"]),
    "plt_crash": ("plt", ["plt_main.c", "-O2"],
                  "SIGSEGV in libcorecrash.so's lib_crash <- lib_entry, called through the PLT from call_lib <- main",
                  ["lib_crash", "lib_entry", "call_lib", "main"]),
    "go_abort": ("go", [],
                 "the Go program of testdata/gen/src/goprog (the committed objects/x86_64/goprog), run with "
                 "GOTRACEBACK=crash and sent SIGABRT at main.c: the runtime prints every goroutine, "
                 "SIGQUITs the other threads and dies of SIGABRT; a kernel core",
                 ["runtime.raise", "main.c", "main.b", "main.a", "main.main"]),
    "gcore_threads": ("gcore", ["threads.c", "-O2", "-pthread"],
                      "the threads program stopped by gdb at the crash and dumped with gdb's gcore "
                      "(gdb's note layout: NT_PRPSINFO first, NT_SIGINFO per thread)",
                      ["crash_leaf", "crash_mid", "crasher"]),
}


def sh(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    return subprocess.run(cmd, check=True, **kw)


def sha(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def build(name, kind, args, d):
    exe = os.path.join(d, name)
    if kind == "go":
        # The committed binary itself, so the core maps exactly it.
        exe = os.path.join(d, "goprog")
        shutil.copyfile(os.path.join(TESTDATA, "objects", ARCH, "goprog"), exe)
        os.chmod(exe, 0o755)
        return exe
    src = [os.path.join(SRC, a) if not a.startswith("-") else a for a in args]
    if kind == "cxx":
        sh([CROSS + "g++", "-g"] + src + ["-o", exe])
        sh([CROSS + "strip", "--strip-debug", exe])  # keep .symtab, .eh_frame; drop libstdc++'s DWARF
    elif kind == "plt":
        lib = os.path.join(d, "libcorecrash.so")
        sh([CROSS + "gcc", "-g", "-O2", "-shared", "-fPIC", os.path.join(SRC, "plt_lib.c"), "-o", lib])
        sh([CROSS + "gcc", "-g"] + src + ["-o", exe, "-L" + d, "-lcorecrash", "-Wl,-rpath,$ORIGIN"])
    else:
        sh([CROSS + "gcc", "-g"] + src + ["-o", exe])
    if name == "crash_stripped":
        sh([CROSS + "objcopy", "--only-keep-debug", exe, exe + ".debug"])
        sh([CROSS + "strip", "--strip-all", exe])
        subprocess.run([CROSS + "objcopy", "--add-gnu-debuglink=" + name + ".debug", exe], check=True, cwd=d)
    return exe


def run_gcore(exe, d):
    """Runs exe under gdb until its fatal signal and dumps it with gcore
    (gdb honours the coredump_filter it inherits)."""
    core = os.path.join(d, "core")
    script = ("echo 0x11 > /proc/self/coredump_filter; exec gdb -batch -nx -iex 'set auto-load no' "
              "-ex run -ex 'gcore %s' ./%s" % (core, os.path.basename(exe)))
    sh(["env", "-i", "PATH=/usr/bin:/bin", "sh", "-c", script], cwd=d, stdout=subprocess.DEVNULL)
    if not os.path.exists(core):
        raise SystemExit("%s: gcore wrote no core" % exe)
    return core


def run_go_abort(exe, d):
    """Stops the Go program at main.c under gdb and sends it SIGABRT with
    GOTRACEBACK=crash; the kernel writes the core (gdb only passes signals)."""
    for old in glob.glob(os.path.join(d, "core*")):
        os.remove(old)
    script = ("ulimit -c unlimited; echo 0x11 > /proc/self/coredump_filter; exec gdb -batch -nx "
              "-iex 'set auto-load no' -ex 'handle SIGURG nostop noprint pass' "
              "-ex 'handle SIGQUIT nostop noprint pass' -ex 'handle SIGABRT nostop noprint pass' "
              "-ex 'break main.c' -ex run -ex 'signal SIGABRT' ./goprog")
    sh(["env", "-i", "PATH=/usr/bin:/bin", "GOTRACEBACK=crash", "sh", "-c", script], cwd=d,
       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    core = os.path.join(d, "core")
    if not os.path.exists(core):
        raise SystemExit("%s: no core" % exe)
    return core


def run_for_core(exe, d):
    for old in glob.glob(os.path.join(d, "core*")):
        os.remove(old)
    script = "ulimit -c unlimited; echo 0x11 > /proc/self/coredump_filter; exec ./" + os.path.basename(exe)
    p = subprocess.run(["env", "-i", "PATH=/usr/bin:/bin", "sh", "-c", script], cwd=d)
    cores = glob.glob(os.path.join(d, "core*"))
    if p.returncode >= 0 and p.returncode < 128 or not cores:
        raise SystemExit("%s: no core (exit %d, cores %s)" % (exe, p.returncode, cores))
    return cores[0]


QEMU_STACK = {"overflow": 256 << 10}
# Signals the program handles itself: gdb passes them on without stopping,
# so that it stops at the fatal one.
HANDLE = {"sig_handler": ["-ex", "handle SIGSEGV nostop noprint pass"]}


def run_qemu_for_core(exe, d):
    """Runs exe under qemu-aarch64's gdbstub, records the guest's mappings
    at the fatal signal, lets the signal kill it, and returns the core with
    NT_FILE and ELF header pages added."""
    for old in glob.glob(os.path.join(d, "qemu_*.core")):
        os.remove(old)
    os.makedirs(os.path.join(d, "core"), exist_ok=True)  # qemu would dump itself there
    port = 24000 + (os.getpid() + len(exe)) % 1000
    stack = str(QEMU_STACK.get(os.path.basename(exe), 1 << 20))
    q = subprocess.Popen(["sh", "-c", "ulimit -c unlimited; exec env -i qemu-aarch64 -cpu max -L %s -s %s -g %d ./%s"
                          % (SYSROOT, stack, port, os.path.basename(exe))], cwd=d)
    maps_file = os.path.join(d, "maps.txt")
    import time
    time.sleep(0.5)
    sh(["gdb-multiarch", "-batch", "-nx", "-iex", "set auto-load no", "-iex", "set sysroot " + SYSROOT,
        "-ex", "file " + exe, "-ex", "target remote :%d" % port,
        "-ex", "handle SIGUSR1 nostop noprint pass"] + HANDLE.get(os.path.basename(exe), []) + ["-ex", "continue",
        "-ex", "shell cat /proc/%d/maps > %s" % (q.pid, maps_file), "-ex", "continue"],
       stdout=subprocess.DEVNULL, cwd=d)
    q.wait()
    cores = glob.glob(os.path.join(d, "qemu_*.core"))
    if not cores:
        raise SystemExit("%s: qemu wrote no core (exit %d)" % (exe, q.returncode))
    maps = []
    with open(maps_file) as f:
        for line in f:
            m = re.match(r"([0-9a-f]+)-([0-9a-f]+) (\S+) ([0-9a-f]+) \S+ (\d+)\s*(.*)$", line)
            if m and int(m.group(2), 16) <= 1 << 40 and m.group(5) != "0" and m.group(6).startswith("/"):
                maps.append((int(m.group(1), 16), int(m.group(2), 16), int(m.group(4), 16), m.group(6)))
    out = os.path.join(d, "core")
    shutil.rmtree(out)
    augment(cores[0], maps, out)
    return out


def augment(src, maps, dst):
    """Writes src laid out as the kernel lays out a core (ELF header, program
    headers, notes, then the segments' bytes page-aligned), with an NT_FILE
    note for maps appended to the notes and the first page of each mapped
    ELF file dumped, as the kernel does with coredump_filter bit 4."""
    import struct
    data = open(src, "rb").read()
    phoff, = struct.unpack_from("<Q", data, 32)
    phnum, = struct.unpack_from("<H", data, 56)
    phdrs = [list(struct.unpack_from("<IIQQQQQQ", data, phoff + 56 * i)) for i in range(phnum)]
    desc = struct.pack("<QQ", len(maps), 4096)
    desc += b"".join(struct.pack("<QQQ", s, e, off // 4096) for s, e, off, _ in maps)
    desc += b"".join(p.encode() + b"\0" for _, _, _, p in maps)
    note = struct.pack("<III", 5, len(desc), 0x46494C45) + b"CORE\0\0\0\0" + desc
    note += b"\0" * (-len(note) % 4)
    contents = []  # per phdr: its new bytes
    for ph in phdrs:
        contents.append(data[ph[2]:ph[2] + ph[5]])
    for s, e, off, path in maps:
        if off != 0:
            continue
        with open(path, "rb") as f:
            page = f.read(4096)
        if not page.startswith(b"\x7fELF"):
            continue
        for i, ph in enumerate(phdrs):
            if ph[0] == 1 and ph[3] == s and ph[5] == 0:
                contents[i] = page
    for i, ph in enumerate(phdrs):
        if ph[0] == 4:
            contents[i] = contents[i] + note
            break
    out = bytearray(data[:64])
    struct.pack_into("<Q", out, 32, 64)
    out += b"\0" * (56 * phnum)
    for i, ph in enumerate(phdrs):  # notes first, right after the headers
        if ph[0] == 4:
            ph[2], ph[5] = len(out), len(contents[i])
            out += contents[i]
    for i, ph in enumerate(phdrs):
        if ph[0] == 1:
            out += b"\0" * (-len(out) % 4096)
            ph[2], ph[5] = len(out), len(contents[i])
            out += contents[i]
    for i, ph in enumerate(phdrs):
        struct.pack_into("<IIQQQQQQ", out, 64 + 56 * i, *ph)
    with open(dst, "wb") as f:
        f.write(out)


def gdb_truth(exe, core, d):
    out = os.path.join(d, "gdb.json")
    env = dict(os.environ, USTACK_TRUTH_OUT=out, USTACK_ARCH=ARCH)
    sysroot = ["-iex", "set sysroot " + SYSROOT] if A64 else []
    sh(["timeout", "300", "gdb-multiarch" if A64 else "gdb", "-batch", "-nx", "-iex", "set auto-load no",
        "-iex", "set width 0", "-iex", "set libthread-db-search-path /nonexistent"] + sysroot + ["-iex", "set solib-search-path " + d,
        "-ex", "set backtrace past-main on", "-ex", "set backtrace past-entry on",
        "-ex", "set backtrace limit 5000", "-ex", "file " + exe, "-ex", "core-file " + core,
        "-x", os.path.join(HERE, "gdb_truth.py")], env=env, stdout=subprocess.DEVNULL, cwd=d)
    with open(out) as f:
        return json.load(f)


def eu_stack(exe, core, d):
    sysroot = ["--sysroot=" + SYSROOT] if False else []
    p = subprocess.run(["eu-stack", "-n", "0", "-m", "--core=" + core, "-e", exe] + sysroot,
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
            fn, mod = m.group(3) or "", m.group(4) or ""
            if fn.startswith("- "):  # no symbol: "#4  0x... - /lib/libc.so.6"
                fn, mod = "", fn[2:]
            cur["frames"].append({"pc": hex(int(m.group(2), 16)), "function": fn, "module": mod})
    return {"exit": p.returncode, "threads": threads, "stderr": p.stderr.strip().splitlines()[:20]}


def eu_unstrip(exe, core, d):
    # -e: elfutils does not find the executable of a qemu core by itself.
    p = subprocess.run(["eu-unstrip", "-n", "--core=" + core, "-e", exe], capture_output=True, text=True, cwd=d, check=True)
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
            if section == "SIGINFO":
                out.pop("_siginfo_open", None)
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
            # The first NT_SIGINFO is the signalled thread's (the kernel
            # writes one; gdb one per thread, after its NT_PRSTATUS).
            if "siginfo" not in out or out.get("_siginfo_open"):
                out["_siginfo_open"] = True
                si = out.setdefault("siginfo", {})
                for k, v in re.findall(r"(si_signo|si_errno|si_code):\s+(-?\d+)", line):
                    si[k] = int(v)
                m = re.search(r"fault address: (0x[0-9a-f]+|\d+)", line)
                if m:
                    si["addr"] = hex(int(m.group(1), 0))
            if t is not None:
                ts = t.setdefault("siginfo", {})
                for k, v in re.findall(r"(si_signo|si_errno|si_code):\s+(-?\d+)", line):
                    ts[k] = int(v)
        elif section == "AUXV":
            m = re.match(r"\s+(\w+): (0x[0-9a-f]+|\d+)", line)
            if m:
                out["auxv"].append({"name": m.group(1), "value": hex(int(m.group(2), 0))})
        elif section == "FILE":
            m = re.match(r"\s+([0-9a-f]+)-([0-9a-f]+) ([0-9a-f]+) \d+\s+(.*)$", line)
            if m:
                out["files"].append({"start": "0x" + m.group(1), "end": "0x" + m.group(2),
                                     "offset": "0x" + m.group(3), "path": m.group(4)})
    out.pop("_siginfo_open", None)
    return out


def committed(path, d):
    """Where the test finds the file recorded at path, relative to testdata."""
    objs = os.path.join(TESTDATA, "objects", ARCH, os.path.basename(path))
    if path.startswith(d + "/") and os.path.exists(objs) and sha(objs) == sha(path):
        return os.path.relpath(objs, TESTDATA)
    if path.startswith(d + "/"):
        dst = os.path.join(BIN, os.path.basename(path))
        shutil.copyfile(path, dst)
        return os.path.relpath(dst, TESTDATA)
    objs = os.path.join(TESTDATA, "objects", ARCH, os.path.basename(path))
    if A64 and not os.path.exists(path):
        path = SYSROOT + path
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
    if kind == "gcore":
        core = run_gcore(exe, d)
    elif kind == "go":
        core = run_go_abort(exe, d)
    elif A64:
        core = run_qemu_for_core(exe, d)
    else:
        core = run_for_core(exe, d)
    gdb = gdb_truth(exe, core, d)
    truth = {
        "name": name, "arch": ARCH, "description": desc,
        "core": os.path.join("cores", ARCH, name + ".core.zst"),
        "exe": exe,
        "gdb": gdb, "eu_stack": eu_stack(exe, core, d),
        "eu_unstrip": eu_unstrip(exe, core, d), "eu_readelf": eu_readelf(core),
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


# gdb-multiarch 13.1 never returns from unwinding past the handler in a
# qemu guest core (already at frame 3 of "bt 5"; qemu's trampoline page is
# dumped), so the aarch64 set has no abort_handler. gcore and Go are x86_64
# only.
SKIP = {"aarch64": {"abort_handler", "gcore_threads", "go_abort", "pause_tail"}}


def main():
    os.makedirs(BIN, exist_ok=True)
    # The large committed objects are packed (NAME.xz, testdata/FORMAT.md):
    # unpacked for committed() to compare, packed again at the end.
    sh([sys.executable, os.path.join(HERE, "..", "pack.py"), "unpack"])
    pattern_file = "/proc/sys/kernel/core_pattern"
    with open(pattern_file) as f:
        saved = f.read().rstrip("\n")
    if A64:
        saved = "core"  # qemu writes its guests' cores itself
    if saved != "core":
        with open(pattern_file, "w") as f:
            f.write("core")
    try:
        for name in sys.argv[1:] or [n for n in FIXTURES if n not in SKIP.get(ARCH, ())]:
            fixture(name)
    finally:
        if saved != "core":
            with open(pattern_file, "w") as f:
                f.write(saved)
    sh([sys.executable, os.path.join(HERE, "..", "pack.py"), "pack"])


if __name__ == "__main__":
    main()
