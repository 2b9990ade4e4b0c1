package coredump

import "strconv"

// Linux signal numbers, the same on x86_64 and aarch64.
const (
	SIGHUP    = 1
	SIGINT    = 2
	SIGQUIT   = 3
	SIGILL    = 4
	SIGTRAP   = 5
	SIGABRT   = 6
	SIGBUS    = 7
	SIGFPE    = 8
	SIGKILL   = 9
	SIGUSR1   = 10
	SIGSEGV   = 11
	SIGUSR2   = 12
	SIGPIPE   = 13
	SIGALRM   = 14
	SIGTERM   = 15
	SIGSTKFLT = 16
	SIGCHLD   = 17
	SIGCONT   = 18
	SIGSTOP   = 19
	SIGTSTP   = 20
	SIGTTIN   = 21
	SIGTTOU   = 22
	SIGURG    = 23
	SIGXCPU   = 24
	SIGXFSZ   = 25
	SIGVTALRM = 26
	SIGPROF   = 27
	SIGWINCH  = 28
	SIGIO     = 29
	SIGPWR    = 30
	SIGSYS    = 31
)

const siKernel = 0x80 // SI_KERNEL: raised by the kernel without a fault address

var signalNames = [...]string{"", "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGBUS",
	"SIGFPE", "SIGKILL", "SIGUSR1", "SIGSEGV", "SIGUSR2", "SIGPIPE", "SIGALRM", "SIGTERM", "SIGSTKFLT",
	"SIGCHLD", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGURG", "SIGXCPU", "SIGXFSZ",
	"SIGVTALRM", "SIGPROF", "SIGWINCH", "SIGIO", "SIGPWR", "SIGSYS"}

// SignalName returns the name of Linux signal signo ("SIGSEGV"), "SIGRTMIN+n"
// for real-time signals and "signal n" for anything else.
func SignalName(signo int) string {
	switch {
	case signo > 0 && signo < len(signalNames):
		return signalNames[signo]
	case signo >= 32 && signo <= 64:
		return "SIGRTMIN+" + strconv.Itoa(signo-32)
	}
	return "signal " + strconv.Itoa(signo)
}

// CodeName returns the conventional name of si_code for signal signo, such
// as "SEGV_MAPERR" or "SI_TKILL", or the number when it has none.
func CodeName(signo, code int) string {
	switch code {
	case 0:
		return "SI_USER"
	case siKernel:
		return "SI_KERNEL"
	case -1:
		return "SI_QUEUE"
	case -2:
		return "SI_TIMER"
	case -3:
		return "SI_MESGQ"
	case -4:
		return "SI_ASYNCIO"
	case -5:
		return "SI_SIGIO"
	case -6:
		return "SI_TKILL"
	}
	var names []string
	switch signo {
	case SIGSEGV:
		names = []string{"SEGV_MAPERR", "SEGV_ACCERR", "SEGV_BNDERR", "SEGV_PKUERR", "SEGV_ACCADI",
			"SEGV_ADIDERR", "SEGV_ADIPERR", "SEGV_MTEAERR", "SEGV_MTESERR", "SEGV_CPERR"}
	case SIGBUS:
		names = []string{"BUS_ADRALN", "BUS_ADRERR", "BUS_OBJERR", "BUS_MCEERR_AR", "BUS_MCEERR_AO"}
	case SIGILL:
		names = []string{"ILL_ILLOPC", "ILL_ILLOPN", "ILL_ILLADR", "ILL_ILLTRP", "ILL_PRVOPC",
			"ILL_PRVREG", "ILL_COPROC", "ILL_BADSTK", "ILL_BADIADDR"}
	case SIGFPE:
		names = []string{"FPE_INTDIV", "FPE_INTOVF", "FPE_FLTDIV", "FPE_FLTOVF", "FPE_FLTUND",
			"FPE_FLTRES", "FPE_FLTINV", "FPE_FLTSUB"}
	case SIGTRAP:
		names = []string{"TRAP_BRKPT", "TRAP_TRACE", "TRAP_BRANCH", "TRAP_HWBKPT", "TRAP_UNK", "TRAP_PERF"}
	}
	if code >= 1 && code <= len(names) {
		return names[code-1]
	}
	return strconv.Itoa(code)
}

// HasFaultAddress reports whether a siginfo's si_addr is the address of a
// fault: a fault signal (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGTRAP) the
// kernel raised (si_code > 0, not SI_KERNEL).
func HasFaultAddress(signo, code int) bool {
	return code > 0 && code != siKernel && faultSignal(signo)
}
