#!/usr/bin/env python3
"""Compare two perf-script-style outputs sample by sample.

Usage: compare-stacks.py PERF_SCRIPT_OUTPUT USTACK_OUTPUT [--show N]

Samples are blocks separated by blank lines: a header line, then one line per
frame. Two samples agree when their headers and frame lines are equal. Prints
the share of samples that agree, the share whose stacks are the same
addresses frame for frame (the unwinds agree; only the names differ: ustack
names a function as gdb does, from DWARF, where perf takes a symbol table's
alias), and the most common kinds of difference.
"""
import collections
import sys


def samples(path):
    out, cur = [], []
    with open(path, errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                if cur:
                    out.append(cur)
                    cur = []
                continue
            cur.append(line)
    if cur:
        out.append(cur)
    return out


def kind(a, b):
    """A short description of how sample a (perf) and b (ustack) differ."""
    fa, fb = a[1:], b[1:]
    if a[0] != b[0]:
        return "header"
    if len(fb) > len(fa) and fb[: len(fa)] == fa:
        return "ustack has more frames (perf stopped early)"
    if len(fa) > len(fb) and fa[: len(fb)] == fb:
        return "perf has more frames"
    for x, y in zip(fa, fb):
        if x != y:
            xs, ys = x.split(), y.split()
            if xs[:1] != ys[:1]:
                return "different address"
            return "same address, different name: %s vs %s" % (" ".join(xs[1:2]), " ".join(ys[1:2]))
    return "other"


JUNK = "ffffffffffffffff [unknown] ([unknown])"


def address(line):
    f = line.split()
    return f[0] if f else line


def names_from(a, b):
    """b with each frame line replaced by a's at the same depth where the two
    have the same address: b as it would read with perf's names."""
    return [b[0]] + [
        a[i] if i < len(a) and address(a[i]) == address(b[i]) else b[i] for i in range(1, len(b))
    ]


# The sigreturn trampolines a signal handler returns into.
TRAMPOLINES = ("__restore_rt", "__kernel_rt_sigreturn", "__sigreturn", "__restore")


def trampoline_at_its_address(a, b):
    """a with each frame line where perf printed a sigreturn trampoline at its
    address minus one (a return address' call site, in the function before
    it) replaced by ustack's, at the trampoline itself, as gdb's <signal
    handler called>."""
    out = list(a)
    for i in range(1, min(len(a), len(b))):
        fb = b[i].split()
        try:
            pa, pb = int(address(a[i]), 16), int(address(b[i]), 16)
        except ValueError:
            continue
        if pb == pa + 1 and len(fb) > 1 and fb[1].split("+")[0] in TRAMPOLINES:
            out[i] = b[i]
    return out


def normalize(a, b):
    """Applies the named perf 6.1 defects to perf's sample a so that it can
    be compared with ustack's b. Returns (a', names of the rules applied).
    Each rule is a known perf defect that a ustack test shows against gdb."""
    rules = []
    t = trampoline_at_its_address(a, b)
    if t != a:
        # perf prints the trampoline's return address minus one.
        a = t
        rules.append("perf signal trampoline at its address minus one")
    if len(a) > 1 and a[-1].strip() == JUNK:
        # perf ends a failed unwind with a junk all-ones frame.
        a = a[:-1]
        rules.append("perf junk ffffffffffffffff frame")
    if len(a) == 128 and len(b) > 128 and b[:128] == a:
        # perf cuts stacks at 127 frames (its default max-stack).
        rules.append("perf cut at 127 frames")
        return b, rules
    if len(b) > len(a) and b[: len(a)] == a:
        rules.append("perf stopped early (ustack continues)")
        return b, rules
    if len(a) > len(b) and a[: len(b)] == b and all(
        "([heap])" in x or "([stack])" in x or "[unknown] ([unknown])" in x or "//anon" in x for x in a[len(b):]
    ):
        # perf printed frames in non-code memory after the real ones.
        rules.append("perf frames in non-code memory")
        return b, rules
    return a, rules


def main():
    show = 0
    args = sys.argv[1:]
    if "--show" in args:
        i = args.index("--show")
        show = int(args[i + 1])
        del args[i : i + 2]
    pa, ua = samples(args[0]), samples(args[1])
    if len(pa) != len(ua):
        print("sample counts differ: perf %d, ustack %d" % (len(pa), len(ua)))
    n = min(len(pa), len(ua))
    same = 0
    normsame = 0
    sameaddr = 0
    kinds = collections.Counter()
    applied = collections.Counter()
    shown = 0
    tailcalls = 0
    for a, b in zip(pa, ua):
        if any(x.endswith(" (tailcall)") for x in b[1:]):
            # ustack adds the callers that tail-called, from DWARF call
            # sites (docs/PERF_DIFFERENCES.md); perf has no such frames:
            # they are set aside before comparing.
            tailcalls += 1
            b = [b[0]] + [x for x in b[1:] if not x.endswith(" (tailcall)")]
        if a == b:
            same += 1
            normsame += 1
            continue
        na, rules = normalize(a, b)
        if na == b:
            normsame += 1
            for r in rules:
                applied[r] += 1
            continue
        bn = names_from(a, b)
        if normalize(a, bn)[0] == bn:
            sameaddr += 1
        k = kind(na, b)
        kinds[k] += 1
        if shown < show:
            shown += 1
            print("--- perf\n" + "\n".join(a) + "\n--- ustack\n" + "\n".join(b) + "\n")
    if tailcalls:
        print("%d ustack samples have tail-call frames (perf has none), set aside before comparing" % tailcalls)
    print("%d of %d samples identical (%.2f%%)" % (same, n, 100.0 * same / max(n, 1)))
    print("%d of %d identical once known perf defects are set aside (%.2f%%)" % (normsame, n, 100.0 * normsame / max(n, 1)))
    print("%d of %d have the same addresses frame for frame, names aside (%.2f%%)" % (normsame + sameaddr, n, 100.0 * (normsame + sameaddr) / max(n, 1)))
    for k, c in applied.most_common():
        print("  %6d  known: %s" % (c, k))
    print("remaining differences:")
    for k, c in kinds.most_common(20):
        print("  %6d  %s" % (c, k))
    return 0 if n == len(pa) == len(ua) else 1


if __name__ == "__main__":
    sys.exit(main())
