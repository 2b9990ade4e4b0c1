#!/usr/bin/env bash
# Measures how far ustack unwinds real programs built without CFI, against
# the same recordings unwound with their CFI. For each program (or library)
# below it makes a copy with its .eh_frame and .eh_frame_hdr removed and
# all but its dynamic symbols stripped (objcopy: the code byte for byte the
# same, the build-id too), records a workload running that copy with perf
# record --call-graph dwarf, reports the recording (B), puts the original
# file in the copy's place, reports the same recording again (A, whose
# unwinding with CFI is checked against gdb and perf by the tests), and
# compares the stacks frame for frame:
#   identical  B's pcs are A's
#   shorter    B's are a prefix of A's: the walk stopped where nothing
#              proved the next frame
#   WRONG      B has a frame A does not have: must stay 0
# (python3.11 runs a copy outside /usr/bin: PYTHONHOME=/usr.)
#
# Usage: scripts/check-nocfi.sh [USTACK] [WORKDIR]
#   USTACK: the binary to measure (default: built from this tree)
# Needs root (or perf_event_paranoid <= 1), perf, objcopy, python3; the
# Debian packages python3.11, perl, git, sqlite3, xz-utils, gzip.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="${2:-$(mktemp -d /tmp/ustack-nocfi.XXXXXX)}"
mkdir -p "$work"
if [ -n "${1:-}" ]; then
	ustack=$(realpath "$1")
else
	ustack="$work/ustack"
	(cd "$here" && CGO_ENABLED=0 go build -o "$ustack" ./cmd/ustack)
fi

cat > "$work/compare.py" <<'EOF'
import json, sys
def load(p):
    out = []
    for line in open(p):
        s = json.loads(line)
        if "frames" in s:
            out.append([int(f["pc"], 16) for f in s["frames"] if not f.get("inlined") and f.get("how") != "kernel"])
    return out
a, b = load(sys.argv[1]), load(sys.argv[2])
assert len(a) == len(b), "the two reports differ in samples"
same = short = wrong = 0
for x, y in zip(a, b):
    if x == y:
        same += 1
    elif len(y) < len(x) and x[:len(y)] == y:
        short += 1
    else:
        wrong += 1
print(f"{sys.argv[3]:12s} {len(a):6d} samples: {same:6d} identical ({100 * same / max(len(a), 1):5.1f}%), {short:5d} shorter, {wrong:3d} WRONG")
EOF

# measure NAME FILE CMD...: CMD runs FILE's copy (PROG in CMD stands for a
# program's copy; a library's copy, named as FILE is (its soname), is
# found first on LD_LIBRARY_PATH).
measure() {
	local name=$1 file=$2
	shift 2
	local d="$work/$name"
	rm -rf "$d"
	mkdir -p "$d/x"
	local base copy
	base=$(basename "$file")
	copy="$d/x/$base"
	objcopy --remove-section=.eh_frame --remove-section=.eh_frame_hdr --strip-all "$file" "$copy"
	local args=("$@")
	[ "${args[0]}" = PROG ] && args[0]=$copy
	(cd "$d" && LD_LIBRARY_PATH="$d/x" PYTHONHOME=/usr perf record -q -F 1999 --call-graph dwarf,16384 -o p.data \
		"${args[@]}" > /dev/null 2>&1) || true
	"$ustack" report --format json -i "$d/p.data" > "$d/B.json" 2> "$d/B.err"
	cp "$copy" "$copy.stripped"
	cp "$file" "$copy"
	"$ustack" report --format json -i "$d/p.data" > "$d/A.json" 2> "$d/A.err"
	cp "$copy.stripped" "$copy"
	python3 "$work/compare.py" "$d/A.json" "$d/B.json" "$name"
}

measure python3.11 /usr/bin/python3.11 PROG -c '
import json, random
random.seed(1)
for it in range(150):
    data = [{"k": i, "v": [random.random() for _ in range(8)], "s": "x%d" % i} for i in range(2000)]
    back = json.loads(json.dumps(data))
    back.sort(key=lambda d: (d["v"][3], d["s"]))'
measure git /usr/bin/git PROG -C "$here" log -p --stat -n 400
measure liblzma /lib/x86_64-linux-gnu/liblzma.so.5 sh -c 'head -c 8000000 /dev/urandom | base64 | xz -6 > /dev/null'
measure perl /usr/bin/perl PROG -e 'my %h; for my $i (1..300000) { $h{"k$i"} = join(",", map { $_ * 2 } 1..5); } my @s = sort { $h{$a} cmp $h{$b} } keys %h;'
measure libsqlite3 /lib/x86_64-linux-gnu/libsqlite3.so.0 sqlite3 :memory: \
	"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x+1 FROM c WHERE x<400000) SELECT count(*), sum(length(printf('%d-%x', x, x*7))) FROM c;"
measure gzip /usr/bin/gzip sh -c "head -c 30000000 /dev/urandom | base64 | $work/gzip/x/gzip -6 > /dev/null"
echo "workdir: $work"
