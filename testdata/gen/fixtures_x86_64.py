# x86_64 fixture specs, used by capture.py.
#
# binary     program in the build directory (run from USTACK_RUNDIR)
# args       program arguments
# setup      gdb commands before `run`
# want       function names that must all be in the backtrace; gdb continues until they are
# post       gdb commands after that (e.g. a breakpoint further on, stepi)
# post_py    a Python callable run after post
# want_after names that must be in the backtrace at the final stop
# cap        stack snapshot cap in bytes (64 KiB default)
# stop       expect.stop (default: "outermost" when the chain ends at _start/clone3)
# sweep      {"function", "after"}: capture <name>_00, <name>_01, ... at every instruction of
#            function from the one after the last that mentions "after" through its ret
# corrections extra expect.corrections

import gdb

CLOSE = "catch syscall close"


def chain(binary, desc):
    return {
        "binary": binary,
        "description": desc + "; main -> top -> mid -> leaf -> close(-1), stopped at the close syscall",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["leaf", "mid", "top", "main"],
    }


def _insn(pc):
    return gdb.selected_frame().architecture().disassemble(pc)[0]["asm"]


def _objfile_of(pc):
    s = gdb.solib_name(pc)
    return s or ""


def lazy_resolver():
    """From close@plt, step into ld.so's lazy resolver and stop a few
    instructions after it realigned the stack (and $-64,%rsp), while the CFA
    is defined by rbx."""
    for _ in range(200):
        pc = gdb.selected_frame().pc()
        asm = _insn(pc)
        if "ld-linux" in _objfile_of(pc) and asm.startswith("and") and asm.endswith(",%rsp"):
            gdb.execute("stepi 3")
            return
        gdb.execute("stepi")
    raise gdb.GdbError("did not reach the resolver's stack realignment")


def ibt_lazy_entry(extra):
    """From close@plt in .plt.sec (endbr64; jmp *GOT), step into the IBT lazy
    .plt entry (endbr64; push $n; jmp PLT0) the unresolved GOT slot points to,
    and stop at its push (extra=0) or at the jmp after the push (extra=1)."""
    start = gdb.selected_frame().pc()
    if not _insn(start).startswith("endbr64"):
        raise gdb.GdbError("close@plt does not start with endbr64")
    gdb.execute("stepi 2")
    pc = gdb.selected_frame().pc()
    if pc == start + 4 or not _insn(pc).startswith("endbr64"):
        raise gdb.GdbError("did not reach the .plt entry's endbr64 (0x%x)" % pc)
    gdb.execute("stepi")
    if not _insn(gdb.selected_frame().pc()).startswith("push   $0x"):
        raise gdb.GdbError("no push in the .plt entry")
    if extra:
        gdb.execute("stepi")
        if not _insn(gdb.selected_frame().pc()).startswith("jmp"):
            raise gdb.GdbError("no jmp after the push in the .plt entry")


def ibt_lazy(push):
    where = ("at its push $0 (pc & 15 == 4: the CFA expression gives rsp+8)" if push else
             "at its jmp to PLT0, after the push (pc & 15 == 9: the CFA expression gives rsp+16; "
             "the non-IBT variant's lit11 test would give rsp+8)")
    return {
        "binary": "plt_ibt",
        "description": "gcc -O2 -fcf-protection=full -Wl,-z,ibtplt -Wl,-z,lazy (binutils 2.40); main -> caller -> "
                       "close@plt (.plt.sec: endbr64; jmp *GOT) -> the IBT lazy .plt entry (endbr64; push $0x0; "
                       "jmp PLT0, no bnd prefix with binutils 2.40), stopped " + where + ". The .plt FDE gives the "
                       "entries' CFA as DW_CFA_def_cfa_expression (DW_OP_breg7 (rsp): 8; DW_OP_breg16 (rip): 0; "
                       "DW_OP_lit15; DW_OP_and; DW_OP_lit9; DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus)",
        "stop_point": "break *'close@plt', stepi into the .plt entry" + ("" if push else ", stepi over its push"),
        "setup": ["break caller", "run", "delete", "break *'close@plt'"],
        "want": ["close@plt", "caller", "main"],
        "post_py": (lambda: ibt_lazy_entry(0)) if push else (lambda: ibt_lazy_entry(1)),
        "want_after": ["caller", "main"],
    }


def epilogue(function, shape):
    return {
        "binary": "epilogue",
        "description": "gcc -O0; main -> outer -> with_leave -> leaf_pop; the instructions of %s's epilogue "
                       "(%s), one fixture each, from the one after its store to sink through the ret. At the ret "
                       "gcc's CFI still has rbp saved at CFA-16, below the SP and outside the snapshot: rbp was "
                       "restored already" % (function, shape),
        "stop_point": "break *%s's first epilogue instruction" % function,
        "setup": ["break %s" % function, "run"],
        "want": [function, "outer", "main"],
        "sweep": {"function": function, "after": "<sink>"},
    }


MUSL_START = {"frame": {"pc": 0x4010d0, "function": "_start", "signal": False, "sp": 0x7fffffffee00},
              "why": "hand-checked: libc_start_main_stage2 (no CFI) pushes r13, r12, rbp and rbx and allocates 8 "
                     "bytes before its call of main, so its return address lies 40 bytes above its SP; it is "
                     "0x4010d0, after _start's call of _start_c (0x4010cb), which jumps to __libc_start_main, "
                     "which jumps through a register to libc_start_main_stage2: no call names the frame's "
                     "function, so the step is a guess (fp_guess), and _start ends the stack"}

SPECS = {
    "syscall_gcc_O2": chain("chain_gcc_O2", "gcc -O2 -fomit-frame-pointer"),
    "syscall_clang_O2": chain("chain_clang_O2", "clang -O2 -fomit-frame-pointer"),
    "syscall_gcc_O0": chain("chain_gcc_O0", "gcc -O0 (frame pointers)"),
    "signal_handler": {
        "binary": "signal",
        "args": ["timer"],
        "description": "gcc -O2; setitimer(ITIMER_REAL) SIGALRM interrupts busy() mid-loop "
                       "(main -> spinner -> busy); handler -> handler_leaf -> close(-1) on the normal stack, "
                       "stopped at the close syscall",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["handler_leaf", "handler", "busy", "spinner", "main"],
    },
    "signal_raise": {
        "binary": "signal",
        "args": ["raise"],
        "description": "gcc -O2; main -> raiser -> raise(SIGALRM): the signal is delivered on return from "
                       "the tgkill syscall in libc; handler -> handler_leaf -> close(-1), stopped at the close syscall",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["handler_leaf", "handler", "raiser", "main"],
    },
    "sigaltstack_handler": {
        "binary": "signal",
        "args": ["altstack"],
        "description": "gcc -O2; SIGALRM with SA_ONSTACK on an mmap'd 64 KiB sigaltstack interrupts busy() "
                       "on the main stack; handler -> handler_leaf -> close(-1). stack = the sigaltstack, "
                       "extra_stacks[0] = the main stack from the interrupted SP",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["handler_leaf", "handler", "busy", "spinner", "main"],
    },
    "recursion_truncated": {
        "binary": "recursion",
        "description": "gcc -O2; main -> recurse x201 (64-byte locals each) -> close(-1); the snapshot is "
                       "capped at 4096 bytes, so only the innermost frames can be recovered",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["recurse", "main"],
        "cap": 4096,
        "stop": "truncated",
    },
    "thread": {
        "binary": "thread",
        "description": "gcc -O2 -pthread; second thread: clone3 -> start_thread -> worker -> t_top -> t_leaf "
                       "-> close(-1), stopped at the close syscall on the thread's stack",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["t_leaf", "t_top", "worker"],
        # gdb names neither start_thread nor clone3 (not in libc's .dynsym); the
        # last frame is in __clone3's child path, whose FDE marks rip undefined.
        "stop": "outermost",
    },
    "go_program": {
        "binary": "goprog",
        "description": "GOEXPERIMENT=norandomizedheapbase64 go build -trimpath (heap base fixed so goroutine stack addresses repeat; Go 1.26: frame pointers, compressed .debug_frame, no .eh_frame); "
                       "main.main -> main.a -> main.b -> main.c -> syscall.Syscall(SYS_GETPID), stopped at the "
                       "getpid syscall on the main goroutine's stack",
        "stop_point": "catch syscall getpid",
        "setup": ["catch syscall getpid"],
        "want": ["main.c", "main.b", "main.a", "main.main"],
    },
    "plt_now": {
        "binary": "plt_now",
        "description": "gcc -O2 -Wl,-z,now; main -> caller -> close@plt, stopped at the first instruction "
                       "of the PLT stub (the return address is on top of the stack)",
        "stop_point": "break *'close@plt'",
        "setup": ["break caller", "run", "delete", "break *'close@plt'"],
        "want": ["close@plt", "caller", "main"],
    },
    "plt_lazy": {
        "binary": "plt_lazy",
        "description": "gcc -O2 -Wl,-z,lazy; main -> caller -> close@plt -> (PLT0) -> ld.so's lazy resolver "
                       "_dl_runtime_resolve_xsavec, stopped 3 instructions after it realigned the stack with "
                       "and $-64,%rsp (the CFA is rbx-based there)",
        "stop_point": "break *'close@plt', then stepi into the resolver",
        "setup": ["break caller", "run", "delete", "break *'close@plt'"],
        "want": ["close@plt", "caller", "main"],
        "post_py": lazy_resolver,
        "want_after": ["caller", "main"],
    },
    "plt_ibt": {
        "binary": "plt_ibt",
        "description": "gcc -O2 -fcf-protection=full -Wl,-z,ibtplt -Wl,-z,lazy (binutils 2.40); main -> caller -> "
                       "close@plt, stopped at the first instruction (endbr64) of the stub in .plt.sec, whose FDE "
                       "has no instructions (CFA = rsp+8 from the CIE; the return address is on top of the stack)",
        "stop_point": "break *'close@plt'",
        "setup": ["break caller", "run", "delete", "break *'close@plt'"],
        "want": ["close@plt", "caller", "main"],
    },
    "plt_ibt_lazy_push": ibt_lazy(True),
    "plt_ibt_lazy_jmp": ibt_lazy(False),
    "debug_frame_only": dict(chain("chain_debug_frame", "gcc -O2 -g -fno-asynchronous-unwind-tables "
                                   "-fno-exceptions: the program's own functions have CFI only in .debug_frame")),
    "stripped_debuglink": dict(chain("chain_stripped", "gcc -O2 -g, then objcopy --only-keep-debug into "
                                     "objects/x86_64/debug/.build-id/xx/yyyy.debug, strip --strip-all, "
                                     "--add-gnu-debuglink; .eh_frame stays in the binary; names only in the debug file")),
    "stripped_debuglink_nocfi": dict(chain("chain_stripped_nocfi", "gcc -O2 -g -fno-asynchronous-unwind-tables "
                                           "-Wl,--build-id=none, objcopy --only-keep-debug into "
                                           "objects/x86_64/debug/chain_stripped_nocfi.debug, strip --strip-all, "
                                           "--add-gnu-debuglink: the program's CFI is only in the debug file's "
                                           ".debug_frame, found by debuglink name (no build-id)"),
                                     rundir_files=["chain_stripped_nocfi.debug"]),
    "realign_drap": {
        "binary": "drap",
        "description": "gcc -O2; realign() has a 64-byte aligned array plus alloca, so gcc realigns the stack "
                       "through a DRAP register (r10) and gives the CFA as DW_CFA_def_cfa_expression; "
                       "main -> outer -> realign -> inner -> close(-1)",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["inner", "realign", "outer", "main"],
    },
    "alloca_vla": {
        "binary": "alloca",
        "description": "gcc -O2; vla_alloca() uses a VLA and alloca (rbp-based CFA); "
                       "main -> vla_alloca -> use_buf -> close(-1)",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["use_buf", "vla_alloca", "main"],
    },
    "noreturn_tail": {
        "binary": "noreturn",
        "description": "gcc -O2 -falign-functions=1; fail() ends with a call to the noreturn die(), so its "
                       "return address is the first byte of after_fail(); main -> check -> fail -> die -> "
                       "close(-1)",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["die", "fail", "check", "main"],
    },
    "vdso": {
        "binary": "vdso",
        "description": "gcc -O2; main -> top -> mid -> leaf -> clock_gettime(CLOCK_MONOTONIC) in the vdso; "
                       "stopped 4 instructions into the vdso's clock_gettime (as a sampling interrupt could)",
        "stop_point": "break *__vdso_clock_gettime, stepi 4",
        "setup": ["break leaf", "run", "delete", "break *__vdso_clock_gettime"],
        "want": ["leaf", "mid", "top", "main"],
        "post": ["continue", "stepi 4"],
        "want_after": ["leaf", "mid", "top", "main"],
    },
    "cxx_exception": {
        "binary": "cxx_exception",
        "description": "g++ -O2 -static-libstdc++ -static-libgcc; main -> middle -> thrower throws; Guard::~Guard "
                       "runs in thrower's landing pad during unwinding and calls close(-1)",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["Guard::~Guard", "thrower", "middle", "main"],
    },
    "cxx_terminate": {
        "binary": "cxx_exception",
        "args": ["terminate"],
        "description": "g++ -O2 -static-libstdc++ -static-libgcc; main -> nothrow_caller (noexcept) -> middle -> "
                       "thrower throws; the personality routine finds the noexcept barrier and calls "
                       "std::terminate from inside _Unwind_RaiseException; on_terminate -> term_leaf -> close(-3)",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["term_leaf", "on_terminate", "main"],
    },
    # epilogue_leave_00 .. and epilogue_pop_00 ..: one fixture per instruction.
    "epilogue_leave": epilogue("with_leave", "leave; ret"),
    "epilogue_pop": epilogue("leaf_pop", "pop %rbp; ret"),
    "musl_signal": {
        "binary": "musl_signal",
        "description": "musl-gcc -O2 -static; SIGALRM interrupts busy(); handler -> handler_leaf -> raw close "
                       "syscall (inline asm). musl's __restore_rt has no CFI (gdb knows it by its code)",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete", CLOSE],
        "want": ["handler_leaf", "handler"],
        "stop": "fp_guess",
        "corrections": [{"frame": 6, "why": "libc_start_main_stage2 (frame 5) has no CFI; gdb's prologue "
                                            "analysis past it yields pc 0"}],
        "hand": MUSL_START,
    },
    "musl_no_cfi": {
        "binary": "musl_signal",
        "description": "musl-gcc -O2 -static; main -> libc_close -> close -> __syscall_cp_c (musl's C functions "
                       "have no CFI), stopped at the close syscall",
        "stop_point": CLOSE,
        "setup": ["break main", "run", "delete"],
        # gdb's frames at close's entry (break *close) on the same call: the
        # fixture's frames above close.
        "callers": {"at": "close", "until": "libc_start_main_stage2", "then": [CLOSE],
                    "why": "musl is built without unwind tables: no CFI covers __syscall_cp_c, close or "
                           "libc_start_main_stage2. At this stop gdb's frames from here are %(gdb)s; these are "
                           "gdb's at close's entry on the same call (break *close), where its prologue analysis "
                           "is right. A walk without CFI proves close's return address (called through "
                           "__syscall_cp, a jmp to __syscall_cp_c) and libc_close's (close's pushes)"},
        "want": ["__syscall_cp_c"],
        "stop": "fp_guess",
        "hand": MUSL_START,
    },
}
