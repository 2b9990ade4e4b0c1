package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// stoppedCommand is a command started stopped right after its exec, so
// that probes attached to its pid see it from its first instruction.
type stoppedCommand struct {
	cmd *exec.Cmd
}

// startStopped starts args[0] with args under ptrace: the kernel stops it
// at its exec. The calling goroutine stays locked to its thread until
// resume, the only thread that may detach.
func startStopped(args []string) (*stoppedCommand, error) {
	runtime.LockOSThread()
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Ptrace: true}
	if err := cmd.Start(); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("can't start %s: %w", args[0], err)
	}
	var ws syscall.WaitStatus
	if _, err := syscall.Wait4(cmd.Process.Pid, &ws, 0, nil); err != nil || !ws.Stopped() {
		cmd.Process.Kill()
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("%s did not stop at its exec (wait status %#x, %v)", args[0], uint32(ws), err)
	}
	return &stoppedCommand{cmd: cmd}, nil
}

// Pid returns the command's process id.
func (c *stoppedCommand) Pid() int { return c.cmd.Process.Pid }

// resume lets the command run.
func (c *stoppedCommand) resume() error {
	defer runtime.UnlockOSThread()
	if err := syscall.PtraceDetach(c.cmd.Process.Pid); err != nil {
		return fmt.Errorf("can't resume %s: %w", c.cmd.Path, err)
	}
	return nil
}

// kill ends a command that never ran.
func (c *stoppedCommand) kill() {
	c.cmd.Process.Kill()
	c.cmd.Wait()
	runtime.UnlockOSThread()
}
