#!/usr/bin/env bash
# Checks that two ustack binaries print byte-identical reports: a baseline
# (built from the commit an optimization starts from) and the new one, over
# the recordings scripts/bench-report.sh makes (small.data, medium.data,
# large.data in BENCHDIR, when given) and every recording, core dump,
# minidump and gdb fixture under testdata/, in every output format of
# `ustack report` (text in three field sets, json, folded, pprof,
# flamegraph, speedscope, otlp, otlp-json) and both of `ustack unwind`.
#
# Usage: scripts/check-identical.sh BASE-BINARY NEW-BINARY [BENCHDIR]
#   e.g. git worktree add /tmp/base main && (cd /tmp/base && CGO_ENABLED=0 go build -o /tmp/ustack-base ./cmd/ustack)
#        CGO_ENABLED=0 go build -o /tmp/ustack-new ./cmd/ustack
#        scripts/check-identical.sh /tmp/ustack-base /tmp/ustack-new /tmp/ustack-bench.XXXX
# Prints one line per difference and "identical: N inputs x M formats" (exit
# 0) or "DIFFERENT: K of N outputs" (exit 1). Both binaries run with the same
# warm section cache and environment, -j 2, so only the code differs. The
# testdata tree is copied to a scratch directory (its xz-packed objects are
# unpacked there, as internal/testfiles does) and left untouched. The
# baseline's outputs are kept in /tmp/ustack-identical.base-* for the next
# check against the same baseline.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
base=$(realpath "$1")
new=$(realpath "$2")
bench="${3:-}"
# A fixed scratch directory: paths in warnings are the same from run to
# run, so the baseline's outputs are kept (by the binary's checksum) and
# reused while the new binary changes.
work=/tmp/ustack-identical.work
# The kept outputs are keyed by the baseline binary and by the bench
# directory's files (a program rebuilt there since changes the reports).
benchkey=$( (printf '%s\n' "$bench"; [ -z "$bench" ] || ls -l --time-style=+%s "$bench") | sha256sum | cut -c1-8)
basedir=/tmp/ustack-identical.base-$(sha256sum "$base" | cut -c1-16)-$benchkey
rm -rf "$work"
mkdir -p "$work" "$basedir"
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/testdata" && cp -a "$here/testdata/." "$work/testdata/"
find "$work/testdata" -name '*.xz' | while read -r f; do
	[ -e "${f%.xz}" ] || xz -dc "$f" > "${f%.xz}"
done
export XDG_CACHE_HOME="$work/cache"
td="$work/testdata"

# Each input: a name and the flags that select it (one line, tab-separated).
inputs="$work/inputs"
: > "$inputs"
add() { printf '%s\t%s\n' "$1" "$2" >> "$inputs"; }
if [ -n "$bench" ]; then
	for r in small medium large; do
		[ -s "$bench/$r.data" ] && add "bench-$r" "-i $bench/$r.data"
	done
fi
add hello "-i $td/recordings/hello/perf.data"
add static_close "-i $td/recordings/static_close/perf.data --symfs $td/recordings/static_close/symfs"
for f in "$td"/recordings/arm64-lab/*.data; do
	add "arm64-lab-$(basename "$f" .data)" "-i $f --archive $td/recordings/arm64-lab/lab.ustack --kallsyms -"
done
for f in "$here"/perfdata/testdata/*.data; do
	[ -e "$f" ] && add "perfdata-$(basename "$f" .data)" "-i $f --kallsyms -"
done
# Cores and minidumps: their objects laid out as a --symfs tree from the
# truth file's "files" (recorded path -> testdata path), as
# internal/coretruth does, with the fixture's debug files beside the program.
for j in "$td"/cores/*/*.json "$td"/cores/*/*/*.json "$td"/minidumps/*/*.json; do
	[ -e "$j" ] || continue
	name=$(basename "$(dirname "$j")")-$(basename "$j" .json)
	dump=$(python3 - "$j" "$td" "$work/symfs/$name" <<'PY'
import json, os, shutil, sys
j, td, symfs = sys.argv[1:]
d = json.load(open(j))
for rec, rel in (d.get("files") or {}).items():
    dst = symfs + rec
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    if os.path.exists(os.path.join(td, rel)) and not os.path.exists(dst):
        shutil.copy(os.path.join(td, rel), dst)
for dd in d.get("debug_dirs") or []:
    for f in os.listdir(os.path.join(td, dd)):
        if f.endswith(".debug") and d.get("exe"):
            dst = symfs + os.path.join(os.path.dirname(d["exe"]), f)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy(os.path.join(td, dd, f), dst)
dump = d.get("core") or d.get("dump") or ""
if isinstance(dump, dict):
    dump = dump.get("path") or dump.get("file") or ""
if not dump:
    base = j[:-len(".json")]
    for ext in (".core.zst", ".dmp.zst", ".dmp"):
        if os.path.exists(base + ext):
            dump = os.path.relpath(base + ext, td)
print(os.path.join(td, dump) if dump else "")
PY
)
	[ -n "$dump" ] && [ -e "$dump" ] && add "core-$name" "-i $dump --symfs $work/symfs/$name --kallsyms -"
done

formats=(
	"text|"
	"text-fields|-F comm,tid,time,event,ip,sym,symoff,dso"
	"text-srcline|-F +srcline"
	"text-noinline|--no-inline --no-tailcall"
	"json|--format json --verbose"
	"folded|--format folded"
	"pprof|--format pprof"
	"flamegraph|--format flamegraph --fp-audit"
	"speedscope|--format speedscope"
	"otlp|--format otlp"
	"otlp-json|--format otlp-json"
)

n=0 bad=0 ninputs=0
# same FORMAT A B: whether A and B are the same report. An OpenTelemetry
# profile carries a random 16-byte profile id: in OTLP/JSON it is taken
# out; in protobuf the files must be the same length and differ only in
# the 16 bytes after a profile_id field's key and length.
same() {
	case $1 in
	otlp-json) cmp -s <(sed -E 's/"profileId":"[0-9a-f]*"//g' "$2") <(sed -E 's/"profileId":"[0-9a-f]*"//g' "$3") ;;
	otlp) python3 - "$2" "$3" <<'PY'
import sys
a, b = (open(f, "rb").read() for f in sys.argv[1:])
def in_id(i):  # within the 16 bytes after a profile_id's key and length (0x3a 0x10)
    return any(p >= 2 and a[p - 2:p] == b[p - 2:p] == b"\x3a\x10" for p in range(max(i - 15, 0), i + 1))
sys.exit(0 if len(a) == len(b) and all(in_id(i) for i in range(len(a)) if a[i] != b[i]) else 1)
PY
	;;
	*) cmp -s "$2" "$3" ;;
	esac
}
run() { # BIN OUT flags...
	local bin=$1 out=$2; shift 2
	"$bin" report -j 2 "$@" > "$out" 2> "$out.err" && echo 0 > "$out.rc" || echo $? > "$out.rc"
	# The summary's timing is no output of the code.
	sed -i -E 's/ in [0-9.]+(m?s|µs)\b/ in TIME/g' "$out.err"
}
while IFS=$'\t' read -r name flags; do
	ninputs=$((ninputs + 1))
	# A first run of each to fill the section cache (cold and warm print the same).
	# shellcheck disable=SC2086
	"$new" report $flags > /dev/null 2>&1 || true
	for f in "${formats[@]}"; do
		fname=${f%%|*} fflags=${f#*|}
		o="$work/out/$name.$fname"
		mkdir -p "$work/out"
		if [ -e "$basedir/$name.$fname.rc" ]; then
			cp "$basedir/$name.$fname" "$o.base"
			cp "$basedir/$name.$fname.err" "$o.base.err"
			cp "$basedir/$name.$fname.rc" "$o.base.rc"
		else
			# shellcheck disable=SC2086
			run "$base" "$o.base" $flags $fflags
			cp "$o.base" "$basedir/$name.$fname"
			cp "$o.base.err" "$basedir/$name.$fname.err"
			cp "$o.base.rc" "$basedir/$name.$fname.rc" # last: the mark of a complete copy
		fi
		# shellcheck disable=SC2086
		run "$new" "$o.new" $flags $fflags
		n=$((n + 1))
		for ext in "" .err .rc; do
			k=$fname
			[ -z "$ext" ] || k=plain
			if ! same "$k" "$o.base$ext" "$o.new$ext"; then
				echo "differs: $name $fname ${ext:-stdout} (flags: $flags $fflags)"
				diff <(head -c 100000 "$o.base$ext" | cat -v) <(head -c 100000 "$o.new$ext" | cat -v) | head -4 | cut -c1-300 | sed 's/^/    /' || true
				bad=$((bad + 1))
				break
			fi
		done
	done
done < "$inputs"
# The gdb fixtures through ustack unwind, text and JSON.
fx=("$td"/fixtures/*/*.json)
"$base" unwind "${fx[@]}" > "$work/unwind.base" 2>&1 || true
"$new" unwind "${fx[@]}" > "$work/unwind.new" 2>&1 || true
"$base" unwind --json "${fx[@]}" > "$work/unwind-json.base" 2>&1 || true
"$new" unwind --json "${fx[@]}" > "$work/unwind-json.new" 2>&1 || true
for u in unwind unwind-json; do
	n=$((n + 1))
	if ! cmp -s "$work/$u.base" "$work/$u.new"; then
		echo "differs: $u over ${#fx[@]} fixtures"
		bad=$((bad + 1))
	fi
done
if [ "$bad" -ne 0 ]; then
	echo "DIFFERENT: $bad of $n outputs"
	exit 1
fi
echo "identical: $ninputs inputs x ${#formats[@]} report formats, and ${#fx[@]} gdb fixtures x 2 unwind formats ($n outputs)"
