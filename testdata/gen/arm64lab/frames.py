# gdb-multiarch script: at each stop of the breakpoint or watchpoint the
# caller set, print the frame chain as one JSON line, innermost first:
# each frame's pc, the symbol and offset `info symbol` gives for it
# (for a caller, its return address), and whether gdb took it for a
# signal trampoline. Walks with gdb's Python frame API
# (gdb.newest_frame().older()), not `bt`.
import gdb
import json
import re

out = open(gdb.parameter("logging file") + ".frames", "w")

def sym(pc):
    s = gdb.execute("info symbol %#x" % pc, to_string=True).strip()
    m = re.match(r"^(\S+)(?: \+ (\d+))? in section", s)
    if not m:
        return None, None
    return m.group(1), int(m.group(2) or 0)

def on_stop(ev):
    # Only the breakpoints' and watchpoints' stops, not the attach.
    if not isinstance(ev, gdb.BreakpointEvent):
        return
    bp = ev.breakpoints[0]
    where = bp.location or bp.expression
    frames = []
    f = gdb.newest_frame()
    while f is not None and len(frames) < 64:
        pc = f.pc()
        name, off = sym(pc)
        frames.append({"pc": "%#x" % pc, "symbol": name, "offset": off,
                       "function": f.name(),
                       "signal_trampoline": f.type() == gdb.SIGTRAMP_FRAME})
        try:
            f = f.older()
        except gdb.error:
            break
    out.write(json.dumps({"stop": where, "frames": frames}) + "\n")
    out.flush()

gdb.events.stop.connect(on_stop)
