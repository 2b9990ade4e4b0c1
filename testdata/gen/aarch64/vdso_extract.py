#!/usr/bin/env python3
"""Extract the arm64 vdso image (linux-vdso.so.1) from an arm64 vmlinuz.

usage: vdso_extract.py VMLINUZ OUT

The kernel embeds the stripped vdso.so between vdso_start and vdso_end in
.rodata (arch/arm64/kernel/vdso-wrap.S). vmlinuz is either a gzip-compressed
Image (Debian's linux-image-*-arm64 up to 6.x) or an EFI zboot image ("MZ",
"zimg" at offset 4, payload offset/size at 8/12, compression name at 24) whose
payload is a gzip/zstd/xz/lzma-compressed Image. After decompressing, the
script scans for ELF headers of class 64 and machine EM_AARCH64 whose dynamic
SONAME is linux-vdso.so.1 and writes the whole file (up to the end of its
section header table, which in the vdso's link layout is the last thing in
the file) to OUT.
"""
import gzip
import lzma
import shutil
import struct
import subprocess
import sys


def decompress(data):
    if data[:2] == b"\x1f\x8b":
        return gzip.decompress(data)
    if data[:2] == b"MZ" and data[4:8] == b"zimg":
        off, size = struct.unpack_from("<II", data, 8)
        comp = data[24:56].split(b"\0")[0].decode()
        payload = data[off:off + size]
        if comp == "gzip":
            return gzip.decompress(payload)
        if comp in ("xz", "lzma"):
            return lzma.decompress(payload)
        if comp == "zstd" or comp == "zstd22":
            zstd = shutil.which("zstd")
            if not zstd:
                sys.exit("vdso_extract: zstd payload needs the zstd tool")
            return subprocess.run([zstd, "-dc"], input=payload, check=True,
                                  stdout=subprocess.PIPE).stdout
        sys.exit("vdso_extract: unknown zboot compression %r" % comp)
    return data  # an uncompressed Image


def elf_candidate(img, pos):
    """Return the bytes of the vdso ELF at pos, or None."""
    h = img[pos:pos + 64]
    if len(h) < 64 or h[4] != 2 or h[5] != 1:  # ELFCLASS64, little-endian
        return None
    (e_type, e_machine, _, _, _, e_shoff, _, _, _, _, e_shentsize, e_shnum,
     e_shstrndx) = struct.unpack_from("<HHIQQQIHHHHHH", h, 16)
    if e_type != 3 or e_machine != 183 or e_shentsize != 64 or not 0 < e_shnum < 64:
        return None
    end = e_shoff + e_shnum * e_shentsize
    if end > 1 << 20:
        return None
    elf = img[pos:pos + end]
    secs = [struct.unpack_from("<IIQQQQIIQQ", elf, e_shoff + i * 64) for i in range(e_shnum)]
    # .dynamic -> DT_SONAME in .dynstr
    for (name, typ, flags, addr, off, size, link, info, align, entsize) in secs:
        if typ != 6:  # SHT_DYNAMIC
            continue
        strtab = secs[link]
        soname = None
        for i in range(0, size, 16):
            tag, val = struct.unpack_from("<qQ", elf, off + i)
            if tag == 0:
                break
            if tag == 14:  # DT_SONAME
                s = elf[strtab[4] + val:strtab[4] + val + 64].split(b"\0")[0]
                soname = s.decode(errors="replace")
        if soname == "linux-vdso.so.1":
            return elf
    return None


def main():
    src, out = sys.argv[1], sys.argv[2]
    img = decompress(open(src, "rb").read())
    found = []
    pos = img.find(b"\x7fELF")
    while pos >= 0:
        elf = elf_candidate(img, pos)
        if elf is not None:
            found.append((pos, elf))
        pos = img.find(b"\x7fELF", pos + 1)
    if len(found) != 1:
        sys.exit("vdso_extract: found %d arm64 linux-vdso.so.1 images" % len(found))
    pos, elf = found[0]
    with open(out, "wb") as f:
        f.write(elf)
    print("vdso_extract: %d bytes at Image offset %#x" % (len(elf), pos), file=sys.stderr)


if __name__ == "__main__":
    main()
