#!/usr/bin/env python3
"""Regenerates testdata/minidumps/x86_64/: minidumps that lldb 15 wrote of
live C and C++ processes, each with gdb's reading of a core of the same
process at the same stop and lldb's own reading of the minidump (never
ustack's). See testdata/minidumps/README.md.

    python3 gen.py [NAME...]             rewrite the committed fixtures
    python3 gen.py --live DIR [NAME...]  write dumps and truth into DIR only
                                         (report's TestLLDBMinidump, live)

Needs gcc, g++, gdb, lldb-15, and ptrace rights over the programs (root, or
kernel.yama.ptrace_scope 0).

For each program: it runs until every thread blocks in its system call (the
generator waits until /proc/PID/task/*/syscall shows the expected set);
lldb attaches (stopping every thread), writes the minidump
(`process save-core --plugin-name=minidump --style stack`: lldb 15 writes
minidumps of that style only), queues a SIGSTOP (`platform shell kill -STOP`)
and detaches: the pending SIGSTOP stops each thread as it leaves
lldb's ptrace stop, before it runs an instruction (lldb 15 cannot detach
keeping a process stopped, nor attach to a stopped one). gdb then attaches to
the stopped process and writes a core with gcore; the generator checks every
thread is still stopped and still in the same system call, and kills the
process. gdb's backtrace of that core and lldb's bt all of the minidump are
the truth.

The committed minidump is lldb's byte for byte except where its memory holds
bytes of a file the fixture commits (lldb 15 saves the whole mapping around
each thread's pc: here glibc's text, 1.4 MB): those ranges are zeroed and
listed in the truth file (`elided`: file offset, size, the file and the
offset in it), and the test puts the file's bytes back and checks the
result's SHA-256 against lldb's (`sha256`).
"""
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.abspath(os.path.join(HERE, "..", ".."))
SRC = os.path.join(HERE, "src")
GDB_TRUTH = os.path.join(HERE, "..", "cores", "gdb_truth.py")
ARCH = "x86_64"
OUT = os.path.join(TESTDATA, "minidumps", ARCH)
BIN = os.path.join(OUT, "bin")
RUN = "/tmp/ustack-minidumps/" + ARCH
LIVE = False

# Linux x86_64 system call numbers the threads block in.
READ, POLL, FUTEX, NANOSLEEP = 0, 7, 202, 230

# name: (compiler and flags, source, description, the system calls the
# threads block in, the functions gdb must show on the thread in the
# signal handler, innermost first)
FIXTURES = {
    "c_threads": (["gcc", "-g", "-O2", "-fomit-frame-pointer", "-pthread"], "md_threads.c",
                  "C threads blocked in nanosleep, read, a condition variable, poll, main in pthread_join, "
                  "and one in a SIGUSR1 handler blocked in read; -O2 -g -fomit-frame-pointer",
                  [READ, READ, POLL, FUTEX, FUTEX, NANOSLEEP],
                  ["handler_leaf", "on_usr1", "<signal>", "wait_for_signal"]),
    "cxx_threads": (["g++", "-g", "-O2", "-fomit-frame-pointer", "-pthread", "-static-libstdc++", "-static-libgcc"],
                    "md_threads.cpp",
                    "C++ std::threads blocked in sleep_for, condition_variable::wait, a read in a class "
                    "template's member, poll in a lambda, main in join, and one in a SIGUSR1 handler blocked "
                    "in read; -O2 -g -fomit-frame-pointer, libstdc++ linked in",
                    [READ, READ, POLL, FUTEX, FUTEX, NANOSLEEP],
                    ["blocking::handler_leaf", "blocking::on_usr1", "<signal>", "blocking::wait_for_signal"]),
    "threads64": (["gcc", "-g", "-O2", "-fomit-frame-pointer", "-pthread"], "md_threads64.c",
                  "64 C threads each blocked at the end of 8 calls of its own in nanosleep, read, a condition "
                  "variable or poll by turns, main in pthread_join; -O2 -g -fomit-frame-pointer (the benchmark's)",
                  [NANOSLEEP] * 16 + [READ] * 16 + [FUTEX] * 17 + [POLL] * 16,
                  ["f1", "f2", "f3", "f4", "f5", "f6", "f7", "f8", "worker"]),
}

TIMEOUT = 300


def sh(cmd, **kw):
    print("+", " ".join(cmd), file=sys.stderr)
    kw.setdefault("timeout", TIMEOUT)
    return subprocess.run(cmd, check=True, **kw)


def sha(data):
    return hashlib.sha256(data).hexdigest()


def syscalls(pid):
    out = []
    for tid in sorted(os.listdir("/proc/%d/task" % pid), key=int):
        try:
            with open("/proc/%d/task/%s/syscall" % (pid, tid)) as f:
                first = f.read().split()[0]
        except (OSError, IndexError):
            first = "gone"
        out.append(int(first) if first.lstrip("-").isdigit() else first)
    return out


def states(pid):
    out = []
    for tid in os.listdir("/proc/%d/task" % pid):
        with open("/proc/%d/task/%s/status" % (pid, tid)) as f:
            out.append(re.search(r"State:\s+(\S)", f.read()).group(1))
    return out


def all_stopped(pid):
    """Waits (10 s at most) until every thread is in group-stop: the
    threads lldb or gdb resumed take the pending SIGSTOP when next
    scheduled."""
    deadline = time.time() + 10
    while set(states(pid)) != {"T"}:
        if time.time() > deadline:
            return False
        time.sleep(0.05)
    return True


def lldb(args, **kw):
    # lldb 15's Python is broken on Debian 12 (it prints a traceback at
    # start); its commands work.
    return sh(["lldb-15", "--batch", "-o", "settings set use-color false"] + args,
              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **kw).stdout


def capture(exe, want, d):
    """Runs exe until its threads block in want, writes lldb's minidump and
    gdb's core of that stop; returns their paths."""
    dmp, core = os.path.join(d, "lldb.dmp"), os.path.join(d, "gdb.core")
    p = subprocess.Popen(["env", "-i", "PATH=/usr/bin:/bin", "./" + os.path.basename(exe)], cwd=d)
    try:
        deadline = time.time() + 60
        while sorted(map(str, syscalls(p.pid))) != sorted(map(str, want)):
            if time.time() > deadline or p.poll() is not None:
                raise SystemExit("%s: threads never blocked in %s (now %s)" % (exe, want, syscalls(p.pid)))
            time.sleep(0.1)
        before = syscalls(p.pid)
        lldb(["-o", "process attach -p %d" % p.pid,
              "-o", "process save-core --plugin-name=minidump --style stack " + dmp,
              "-o", "platform shell kill -STOP %d" % p.pid, "-o", "process detach"])
        if not all_stopped(p.pid):
            raise SystemExit("%s: not stopped after lldb detached: %s" % (exe, states(p.pid)))
        sh(["gdb", "-p", str(p.pid), "-batch", "-nx", "-iex", "set auto-load no", "-ex", "gcore " + core],
           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if not all_stopped(p.pid) or syscalls(p.pid) != before:
            raise SystemExit("%s: threads moved between lldb and gdb: %s %s -> %s" %
                             (exe, states(p.pid), before, syscalls(p.pid)))
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    for f in (dmp, core):
        if not os.path.exists(f):
            raise SystemExit("%s: %s was not written" % (exe, f))
    return dmp, core


def gdb_truth(exe, core, d):
    out = os.path.join(d, "gdb.json")
    env = dict(os.environ, USTACK_TRUTH_OUT=out, USTACK_ARCH=ARCH)
    sh(["gdb", "-batch", "-nx", "-iex", "set auto-load no", "-iex", "set width 0",
        "-iex", "set libthread-db-search-path /nonexistent",
        "-ex", "set backtrace past-main on", "-ex", "set backtrace past-entry on",
        "-ex", "set backtrace limit 5000", "-ex", "file " + exe, "-ex", "core-file " + core,
        "-x", GDB_TRUTH], env=env, stdout=subprocess.DEVNULL, cwd=d)
    with open(out) as f:
        return json.load(f)


FRAME = re.compile(r"^\s*\*?\s*frame #(\d+): (0x[0-9a-f]+)(?: (\S+?)`(.*))?$")
THREAD = re.compile(r"^\s*\*?\s*thread #(\d+): tid = (\d+), .*?(?:, stop reason = (.*))?$")


def frame_name(rest):
    """lldb's function name in a frame line's rest: after [inlined] for an
    inlined frame, without the pc offset, the line and the arguments lldb
    shows with their values."""
    name = rest.split(" [inlined] ")[-1]
    name = re.sub(r" at [^ ]+:\d+(:\d+)?$", "", name)
    name = re.sub(r" \+ \d+$", "", name)
    return name


def lldb_truth(dmp, d):
    version = subprocess.run(["lldb-15", "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    txt = lldb(["-o", "target create --core " + dmp, "-o", "thread list", "-o", "bt all", "-o", "image list"], cwd=d)
    threads, cur, section = [], None, None
    for line in txt.splitlines():
        if line.startswith("(lldb) "):
            section = line[7:].strip()
            continue
        if section == "thread list":
            m = THREAD.match(line)
            if m:
                threads.append({"num": int(m.group(1)), "tid": int(m.group(2)), "stop": m.group(3) or "", "frames": []})
        elif section == "bt all":
            m = re.match(r"^\s*\*?\s*thread #(\d+)", line)
            if m:
                cur = [t for t in threads if t["num"] == int(m.group(1))][0]
                continue
            m = FRAME.match(line)
            if m and cur is not None:
                rest = m.group(4) or ""
                cur["frames"].append({"pc": m.group(2), "module": m.group(3) or "", "function": frame_name(rest),
                                      "inlined": " [inlined] " in rest, "line": line.strip()})
    images = [l.strip() for l in txt.split("(lldb) image list", 1)[-1].splitlines() if l.strip()]
    return {"version": version, "threads": threads, "images": images}


def streams(data):
    n, rva = struct.unpack_from("<II", data, 8)
    return {t: (o, s) for t, s, o in (struct.unpack_from("<III", data, rva + 12 * i) for i in range(n))}


def maps(data):
    off, size = streams(data)[0x47670009]
    out = []
    for line in data[off:off + size].decode().splitlines():
        f = line.split(None, 5)
        if len(f) == 6 and f[5].startswith("/"):
            lo, hi = (int(x, 16) for x in f[0].split("-"))
            out.append((lo, hi, int(f[2], 16), f[5]))
    return out


def modules(data):
    off, _ = streams(data)[4]
    n, = struct.unpack_from("<I", data, off)
    out = []
    for i in range(n):
        rva, = struct.unpack_from("<I", data, off + 4 + 108 * i + 20)
        ln, = struct.unpack_from("<I", data, rva)
        out.append(data[rva + 4:rva + 4 + ln].decode("utf-16-le"))
    return out


def elide(data, files):
    """Zeroes the memory list's ranges that are bytes of a committed file
    at the mapping's offset; returns the new bytes and the list."""
    off, _ = streams(data)[5]
    n, = struct.unpack_from("<I", data, off)
    out, elided = bytearray(data), []
    for i in range(n):
        addr, size, rva = struct.unpack_from("<QII", data, off + 4 + 16 * i)
        for lo, hi, foff, path in maps(data):
            if not lo <= addr < hi or addr + size > hi or path not in files:
                continue
            with open(os.path.join(TESTDATA, files[path]), "rb") as f:
                f.seek(foff + addr - lo)
                if f.read(size) != data[rva:rva + size]:
                    continue
            out[rva:rva + size] = bytes(size)
            elided.append({"offset": rva, "size": size, "path": path, "file_offset": foff + addr - lo})
    return bytes(out), elided


def committed(path, d):
    """Where the test finds the file recorded at path, relative to testdata."""
    objs = os.path.join(TESTDATA, "objects", ARCH, os.path.basename(path))
    real = os.path.realpath(path)
    with open(real, "rb") as f:
        h = sha(f.read())
    if os.path.exists(objs):
        with open(objs, "rb") as f:
            if sha(f.read()) == h:
                return os.path.relpath(objs, TESTDATA)
    dst = os.path.join(BIN, os.path.basename(path))
    shutil.copyfile(real, dst)
    return os.path.relpath(dst, TESTDATA)


def fixture(name):
    cc, src, desc, want, expect = FIXTURES[name]
    d = os.path.join(RUN, name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    exe = os.path.join(d, name)
    sh(cc + [os.path.join(SRC, src), "-o", exe])
    dmp, core = capture(exe, want, d)
    gdb = gdb_truth(exe, core, d)
    ll = lldb_truth(dmp, d)
    # The generator checks its premise: gdb sees the handler's chain.
    ok = False
    for t in gdb["threads"]:
        names = [f.get("function") if f.get("kind") != "signal" else "<signal>" for f in t["frames"]]
        pos = 0
        for w in expect:
            while pos < len(names) and not (names[pos] == w or names[pos].startswith(w + "(")):
                pos += 1
        ok = ok or pos < len(names)
    if not ok:
        raise SystemExit("%s: no thread of gdb's has %s" % (name, expect))
    with open(dmp, "rb") as f:
        data = f.read()
    truth = {"name": name, "arch": ARCH, "description": desc, "exe": exe, "sha256": sha(data),
             "gdb": gdb, "lldb": ll}
    if LIVE:
        truth["dump"] = dmp
        truth["elided"] = []
    else:
        files = {}
        for path in [m[3] for m in maps(data)] + [m for m in modules(data) if m.startswith("/")]:
            files.setdefault(path, committed(path, d))
        data, elided = elide(data, files)
        truth["files"] = files
        truth["elided"] = elided
        truth["dump"] = os.path.join("minidumps", ARCH, name + ".dmp.zst")
        plain = os.path.join(d, name + ".dmp")
        with open(plain, "wb") as f:
            f.write(data)
        sh(["zstd", "-q", "-19", "-f", plain, "-o", os.path.join(OUT, name + ".dmp.zst")])
    js = os.path.join(OUT, name + ".json")
    with open(js, "w") as f:
        json.dump(truth, f, indent=1)
        f.write("\n")
    if not LIVE and os.path.getsize(js) > 100 << 10:
        # threads64's truth: 460 KB of JSON, 30 KB compressed.
        sh(["zstd", "-q", "-19", "--rm", "-f", js, "-o", js + ".zst"])
    print("%s: %d threads, minidump %d bytes" % (name, len(gdb["threads"]), os.path.getsize(dmp)), file=sys.stderr)


def main():
    global LIVE, OUT, RUN
    args = sys.argv[1:]
    if args[:1] == ["--live"]:
        LIVE, OUT = True, os.path.abspath(args[1])
        RUN = os.path.join(OUT, "run")
        args = args[2:]
    os.makedirs(OUT, exist_ok=True)
    if not LIVE:
        os.makedirs(BIN, exist_ok=True)
        sh([sys.executable, os.path.join(HERE, "..", "pack.py"), "unpack"])
    for name in args or list(FIXTURES):
        fixture(name)
    if not LIVE:
        sh([sys.executable, os.path.join(HERE, "..", "pack.py"), "pack"])


if __name__ == "__main__":
    main()
