package testprog

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// StartPaused runs bin with args, waits for its first line of output to
// be want and then for it to be in the x86_64 system call nr (34 pause,
// 230 clock_nanosleep: /proc/PID/syscall), bounded; the process is killed
// at the end of the test.
func StartPaused(t testing.TB, want string, nr int, bin string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	if line, err := bufio.NewReader(out).ReadString('\n'); err != nil || line != want+"\n" {
		t.Fatalf("%s said %q (%v), want %q", bin, line, err, want)
	}
	WaitSyscall(t, cmd.Process.Pid, nr)
	return cmd
}

// WaitSyscall waits, bounded, until process pid is in system call nr.
func WaitSyscall(t testing.TB, pid, nr int) {
	t.Helper()
	path := "/proc/" + strconv.Itoa(pid) + "/syscall"
	for i := 0; ; i++ {
		b, _ := os.ReadFile(path)
		if strings.HasPrefix(string(b), strconv.Itoa(nr)+" ") {
			return
		}
		if i > 6000 {
			t.Fatalf("process %d is not in system call %d: %s says %q", pid, nr, path, b)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// GDBFunctions runs gdb in batch mode with args (such as "-p", PID, or a
// program and its core) and returns the function of each frame of its
// backtrace, inline frames included, past main.
func GDBFunctions(t testing.TB, args ...string) []string {
	t.Helper()
	args = append([]string{"-nx", "-batch"}, args...)
	out := Tool(t, "", "gdb", append(args, "-ex", "set debuginfod enabled off", "-ex", "set backtrace past-main on", "-ex", "echo ==bt==\\n", "-ex", "bt")...)
	// A core's or an attached process's current frame is printed when
	// gdb loads it, in bt's format: only what follows the marker counts.
	if _, after, ok := strings.Cut(out, "==bt==\n"); ok {
		out = after
	}
	re := regexp.MustCompile(`^#\d+\s+(?:0x[0-9a-f]+ in )?(\S+) \(`)
	var fns []string
	for _, l := range strings.Split(out, "\n") {
		if m := re.FindStringSubmatch(l); m != nil {
			fns = append(fns, m[1])
		}
	}
	if len(fns) == 0 {
		t.Fatalf("gdb printed no frames:\n%s", out)
	}
	return fns
}
