#!/usr/bin/env python3
"""Packs and unpacks the large committed objects of testdata/ (FORMAT.md,
"Compressed objects").

    python3 pack.py unpack   NAME.xz -> NAME for every packed object (before a
                             generator compares or reuses committed objects)
    python3 pack.py pack     every ELF file over LIMIT bytes in objects/<arch>/
                             and cores/<arch>/bin/ -> NAME.xz (xz -9e, LZMA2,
                             CRC64) where NAME.xz is missing or holds other
                             bytes; rewrites testdata/.gitignore. A newly
                             packed NAME is removed (commit its deletion);
                             the plain copy of one packed before is kept
                             (git ignores it)

Tests read the plain NAME: internal/testfiles.Unpack writes it from NAME.xz.
goprog and goprog_stripped stay plain (elfcache's gopclntab tests and
tools read them by path).
"""
import glob
import lzma
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTDATA = os.path.abspath(os.path.join(HERE, ".."))
DIRS = ["objects/*", "cores/*/bin", "minidumps/*/bin"]
LIMIT = 64 * 1024
KEEP_PLAIN = {"objects/x86_64/goprog", "objects/x86_64/goprog_stripped"}
IGNORE = os.path.join(TESTDATA, ".gitignore")
HEADER = ("# Unpacked copies of the NAME.xz objects (testdata/gen/pack.py writes this\n"
          "# list; internal/testfiles.Unpack writes the files).\n")


def files(pattern):
    out = []
    for d in DIRS:
        out += glob.glob(os.path.join(TESTDATA, d, pattern))
    return sorted(p for p in out if os.path.isfile(p))


def read_plain(path):
    """The bytes of the committed object path, packed or not."""
    if os.path.exists(path + ".xz"):
        with lzma.open(path + ".xz") as f:
            return f.read()
    with open(path, "rb") as f:
        return f.read()


def unpack():
    for p in files("*.xz"):
        plain = p[:-3]
        data = read_plain(plain)
        if os.path.exists(plain):
            with open(plain, "rb") as f:
                if f.read() == data:
                    continue
        with open(plain, "wb") as f:
            f.write(data)


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def pack():
    for p in files("*"):
        rel = os.path.relpath(p, TESTDATA)
        if p.endswith(".xz") or rel in KEEP_PLAIN or os.path.getsize(p) <= LIMIT or not is_elf(p):
            continue
        with open(p, "rb") as f:
            data = f.read()
        new = not os.path.exists(p + ".xz")
        if not new and read_plain(p) == data:
            continue
        packed = lzma.compress(data, preset=9 | lzma.PRESET_EXTREME)
        with open(p + ".xz", "wb") as f:
            f.write(packed)
        if new:
            os.remove(p)
        print("pack: %s %d -> %d bytes" % (rel, len(data), len(packed)), file=sys.stderr)
    names = ["/" + os.path.relpath(p[:-3], TESTDATA) for p in files("*.xz")]
    with open(IGNORE, "w") as f:
        f.write(HEADER + "".join(n + "\n" for n in names))


if __name__ == "__main__":
    if sys.argv[1:] == ["pack"]:
        pack()
    elif sys.argv[1:] == ["unpack"]:
        unpack()
    else:
        sys.exit(__doc__)
