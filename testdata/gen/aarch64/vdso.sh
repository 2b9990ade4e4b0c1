#!/bin/sh
# Extracts the vdso of a real arm64 Linux kernel from Debian's arm64 kernel
# image package and commits it as testdata/objects/aarch64/vdso-<version>.so
# (see docs/ARM64.md for what its unwind information looks like).
#
#   sh vdso.sh                 the kernel that linux-image-arm64 depends on
#   sh vdso.sh PACKAGE         a given package, e.g. linux-image-6.1.0-31-arm64
#
# Needs apt with the arm64 architecture enabled (the script adds it: root),
# python3 (vdso_extract.py) and, for the report, readelf.
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
TESTDATA=$(cd "$HERE/../.." && pwd)
B=$HERE/build/vdso
mkdir -p "$B" "$TESTDATA/objects/aarch64"

if ! dpkg --print-foreign-architectures | grep -qx arm64; then
	dpkg --add-architecture arm64
	apt-get update -qq
fi
if ! apt-cache show linux-image-arm64:arm64 >/dev/null 2>&1; then
	apt-get update -qq
fi

pkg=${1:-}
if [ -z "$pkg" ]; then
	# The metapackage depends on the current signed image package.
	pkg=$(apt-cache depends linux-image-arm64:arm64 |
		sed -n 's/^ *Depends: \(linux-image-[0-9][^ :]*-arm64\)\(:arm64\)\{0,1\}$/\1/p' | head -1)
	[ -n "$pkg" ] || { echo "vdso.sh: cannot resolve linux-image-arm64" >&2; exit 1; }
fi
echo "vdso.sh: $pkg" >&2

cd "$B"
rm -f ./*.deb
apt-get download "$pkg:arm64"
deb=$(ls ./*.deb | head -1)
rm -rf root && mkdir root
dpkg-deb -x "$deb" root
vmlinuz=$(ls root/boot/vmlinuz-* | head -1)
kver=${vmlinuz##*/vmlinuz-}

out=$TESTDATA/objects/aarch64/vdso-$kver.so
python3 "$HERE/vdso_extract.py" "$vmlinuz" "$out"
echo "vdso.sh: wrote $out (from $deb)" >&2
{
	echo "# $pkg ($deb): vdso of vmlinuz-$kver"
	readelf -W --file-header --sections --dyn-syms --notes "$out"
	readelf -W --debug-dump=frames "$out"
} >"$B/vdso-$kver.readelf.txt"
echo "vdso.sh: readelf output in $B/vdso-$kver.readelf.txt" >&2
