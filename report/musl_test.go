package report

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/ustack/ustack/internal/testprog"
)

// muslThreadsSrc starts three threads, each blocked in another system call,
// and joins the last.
const muslThreadsSrc = `#include <pthread.h>
#include <poll.h>
#include <stdio.h>
#include <unistd.h>
static int pfd[2];
__attribute__((noinline)) static void *t_sleep(void *a) { for (;;) sleep(100); return a; }
__attribute__((noinline)) static void *t_poll(void *a) { struct pollfd p = {pfd[0], POLLIN, 0}; for (;;) poll(&p, 1, -1); return a; }
__attribute__((noinline)) static void *t_read(void *a) { char b; for (;;) read(pfd[0], &b, 1); return a; }
int main(void) {
	pipe(pfd);
	pthread_t th;
	pthread_create(&th, 0, t_sleep, 0);
	pthread_create(&th, 0, t_poll, 0);
	pthread_create(&th, 0, t_read, 0);
	puts("ready");
	fflush(stdout);
	pthread_join(th, 0);
	return 0;
}
`

// waitThreadsSleeping waits until process pid has n threads, all asleep
// (state S in /proc/PID/task/TID/stat): on a busy machine a thread may
// not have reached its system call yet when main is done. A minute at
// most.
func waitThreadsSleeping(t *testing.T, pid, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
		asleep := 0
		for _, task := range tasks {
			if ok, _ := statAsleep(task); ok {
				asleep++
			}
		}
		if len(tasks) == n && asleep == n {
			return
		}
	}
	t.Fatalf("process %d: its %d threads never all slept", pid, n)
}

// TestMuslThreadsEndAtClone: the threads of a musl program (musl-gcc,
// Debian's libc.so: no CFI, its hidden functions unnamed) begin in musl's
// __clone, which its dynamic symbols leave out. Each thread's stack, in a
// core gcore wrote, holds its thread function and ends at the return
// address after __clone's call of the thread's start, known by its
// instructions (elfcache's cloneChild): outermost, or reached through a
// guess (fp_guess: the call there goes through a register), never
// no_unwind_info, as every one did before.
func TestMuslThreadsEndAtClone(t *testing.T) {
	if _, err := exec.LookPath("musl-gcc"); err != nil {
		t.Skip("musl-gcc is not installed (Debian package musl-tools)")
	}
	if _, err := exec.LookPath("gcore"); err != nil {
		t.Skip("gcore is not installed (Debian package gdb)")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "threads.c")
	require.NoError(t, os.WriteFile(src, []byte(muslThreadsSrc), 0o644))
	bin := filepath.Join(dir, "threads")
	testprog.Tool(t, dir, "musl-gcc", "-O2", "-g", "-pthread", "-o", bin, src)
	cmd := exec.Command(bin)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	line, _ := bufio.NewReader(out).ReadString('\n')
	require.Equal(t, "ready\n", line)
	waitThreadsSleeping(t, cmd.Process.Pid, 4)
	core := gcoreOf(t, dir, cmd)

	opts := CoreOptions{Options: Options{Kallsyms: "-", BuildIDDir: t.TempDir(), Warn: func(string) {}}, Exe: bin}
	cc, err := OpenCore(core, opts)
	require.NoError(t, err)
	defer cc.Close()
	seen := map[string]bool{}
	_, err = RunCore(cc, opts, func(s *Sample) error {
		var names []string
		for _, f := range s.Frames {
			if !f.Inlined {
				names = append(names, f.Symbol)
			}
		}
		fn := ""
		for _, n := range []string{"t_sleep", "t_poll", "t_read"} {
			if slices.Contains(names, n) {
				fn = n
			}
		}
		if fn == "" {
			return nil // the main thread
		}
		seen[fn] = true
		assert.Contains(t, []string{"outermost", "fp_guess"}, s.Stop, "thread %d in %s: %v (%s)", s.Tid, fn, names, s.StopErr)
		last := s.Frames[len(s.Frames)-1]
		assert.True(t, strings.Contains(last.Module, "musl"), "thread %d ends in %s, not musl's __clone", s.Tid, last.Module)
		return nil
	})
	require.NoError(t, err)
	assert.Len(t, seen, 3, "threads found: %v", seen)
}
