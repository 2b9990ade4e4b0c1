#!/usr/bin/env python3
"""Regenerates testdata/cores/aarch64/sigtramp/: a qemu-aarch64 core of
src/sig_handler.c (static, frame pointers), whose signal handler aborts: the
stack runs through qemu's sigreturn trampoline, an anonymous page with no
symbol and no CFI, back to inner, the function that faulted.

    python3 sigtramp.py

The core is made as gen.py makes its aarch64 cores (qemu's gdbstub, NT_FILE
added). Its truth (sig_handler.json) is not ustack's: gdb-multiarch 13.1
hangs unwinding past the handler in this core (at the frame after
handler_leaf; see testdata/cores/README.md), so the frames up to
handler_leaf are gdb's (its Python frame walk, stopped there) and the rest
is the chain the program recorded in its chain[] array (return addresses
into on_segv and the trampoline, the interrupted pc and link register from
the signal's ucontext, the frame records' return addresses from the
interrupted x29), read from the core and named by gdb's `info symbol`.
"""
import json
import os
import shutil
import subprocess
import sys

sys.argv[1:] = ["--arch", "aarch64"]
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import gen  # noqa: E402  (reads --arch from sys.argv)

NAME = "sig_handler"
OUT = os.path.join(gen.OUT, "sigtramp")

WALK = r'''
import gdb, json, os
out = {"gdb_version": gdb.VERSION, "frames": [], "chain": []}
f = gdb.newest_frame()
while f is not None:
    out["frames"].append({"pc": "0x%x" % f.pc(), "function": f.name() or "",
                          "sp": "0x%x" % (int(f.read_register("sp")) & 0xFFFFFFFFFFFFFFFF)})
    if f.name() == "handler_leaf":
        break  # gdb hangs computing the next frame
    f = f.older()
n = int(gdb.parse_and_eval("nchain"))
for i in range(n):
    pc = int(gdb.parse_and_eval("chain[%d]" % i)) & 0xFFFFFFFFFFFFFFFF
    sym = gdb.execute("info symbol 0x%x" % pc, to_string=True).strip()
    name = sym.split(" ")[0] if " in section " in sym else ""
    out["chain"].append({"pc": "0x%x" % pc, "function": name, "info_symbol": sym})
with open(os.environ["USTACK_TRUTH_OUT"], "w") as fh:
    json.dump(out, fh, indent=1)
'''


def main():
    d = os.path.join(gen.RUN, "sigtramp")
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    exe = os.path.join(d, NAME)
    gen.sh([gen.CROSS + "gcc", "-g", "-O2", "-static", "-fno-omit-frame-pointer",
            os.path.join(gen.SRC, NAME + ".c"), "-o", exe])
    core = gen.run_qemu_for_core(exe, d)
    script = os.path.join(d, "walk.py")
    with open(script, "w") as f:
        f.write(WALK)
    truth_out = os.path.join(d, "truth.json")
    gen.sh(["timeout", "300", "gdb-multiarch", "-batch", "-nx", "-iex", "set auto-load no",
            "-iex", "set sysroot " + gen.SYSROOT, "-ex", "file " + exe, "-ex", "core-file " + core,
            "-x", script], env=dict(os.environ, USTACK_TRUTH_OUT=truth_out), stdout=subprocess.DEVNULL, cwd=d)
    with open(truth_out) as f:
        walk = json.load(f)
    names = [x["function"] for x in walk["chain"]]
    if walk["frames"][-1]["function"] != "handler_leaf" or names[:1] != ["on_segv"] or "inner" not in names:
        raise SystemExit("unexpected stack: gdb %s, chain %s" % (walk["frames"], names))
    os.makedirs(OUT, exist_ok=True)
    gen.sh([gen.CROSS + "strip", "--strip-debug", "-o", os.path.join(gen.BIN, NAME), exe])
    truth = {
        "name": NAME, "arch": "aarch64",
        "description": "abort() from a SIGSEGV handler under qemu-aarch64 (static): the stack runs through "
                       "qemu's sigreturn trampoline, an anonymous page of the core with no symbol and no CFI, "
                       "back to inner, which faulted",
        "core": os.path.join("cores", "aarch64", "sigtramp", NAME + ".core.zst"),
        "exe": exe, "object": os.path.join("cores", "aarch64", "bin", NAME),
        "gdb": walk,
    }
    gen.sh(["zstd", "-q", "-19", "-f", core, "-o", os.path.join(OUT, NAME + ".core.zst")])
    with open(os.path.join(OUT, NAME + ".json"), "w") as f:
        json.dump(truth, f, indent=1)
        f.write("\n")
    gen.sh([sys.executable, os.path.join(HERE, "..", "pack.py"), "pack"])


if __name__ == "__main__":
    main()
