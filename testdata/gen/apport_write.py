#!/usr/bin/env python3
"""Write a core dump into an apport crash report (Ubuntu's /var/crash/*.crash)
the way apport's problem_report.ProblemReport.write lays out a binary value,
for ustack's tests: "CoreDump: base64", then one base64 line per block, the
first a gzip header named CoreDump, then raw deflate data in the blocks
zlib's compressobj returns for each 1 MiB of input, the last line the
compressor's flush followed by the gzip trailer (CRC-32 and size, each
little-endian 32 bits). With --legacy, the older layout: one zlib stream,
no gzip header.

usage: apport_write.py CORE REPORT [--legacy]
"""
import base64
import struct
import sys
import zlib


def main():
    core_path, report_path = sys.argv[1], sys.argv[2]
    legacy = "--legacy" in sys.argv[3:]
    with open(core_path, "rb") as f:
        core = f.read()
    with open(report_path, "wb") as out:
        out.write(b"ProblemType: Crash\n")
        out.write(b"Architecture: amd64\n")
        out.write(b"Date: Sun Dec  6 09:00:00 2026\n")
        out.write(b"ExecutablePath: /usr/bin/prog\n")
        out.write(b"ProcMaps:\n 55d1f0a00000-55d1f0a01000 r--p 00000000 fe:01 1234 /usr/bin/prog\n")
        out.write(b"Signal: 11\n")
        out.write(b"CoreDump: base64\n")
        if legacy:
            data = zlib.compress(core)
            for i in range(0, len(data), 57):
                out.write(b" " + base64.b64encode(data[i:i + 57]) + b"\n")
        else:
            out.write(b" " + base64.b64encode(b"\x1f\x8b\x08\x08\x00\x00\x00\x00\x02\xffCoreDump\x00") + b"\n")
            comp = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS, zlib.DEF_MEM_LEVEL, 0)
            crc = 0
            for i in range(0, len(core), 1 << 20):
                block = core[i:i + (1 << 20)]
                crc = zlib.crc32(block, crc)
                chunk = comp.compress(block)
                if chunk:
                    out.write(b" " + base64.b64encode(chunk) + b"\n")
            last = comp.flush() + struct.pack("<L", crc & 0xFFFFFFFF) + struct.pack("<L", len(core) & 0xFFFFFFFF)
            out.write(b" " + base64.b64encode(last) + b"\n")
        out.write(b"UserGroups: N/A\n")


if __name__ == "__main__":
    main()
