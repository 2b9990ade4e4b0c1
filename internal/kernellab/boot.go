package kernellab

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Guest is what one boot runs.
type Guest struct {
	// Files are put in the initramfs beside busybox and the modules.
	Files []File
	// Script is the shell script (busybox sh) the guest runs from /lab,
	// with the host's share mounted on /share. What it prints goes to
	// /share/run.log; its exit status to /share/rc.
	Script string
	// Share is the host directory mounted on /share (virtio 9p).
	Share string
	// Timeout bounds the whole boot (default 6 minutes).
	Timeout time.Duration
	// Stall, when set, ends the boot early when nothing in Share
	// changed for that long (Result.Stalled): a guest hung under TCG
	// (seen once: the arm64 6.12 guest stopped between two commands of
	// its script, before opening a file on the share, for 20 minutes).
	Stall time.Duration
	// CPUs and MemoryMB size the guest (default 2 and 1024).
	CPUs, MemoryMB int
}

// Result is what came back from a boot.
type Result struct {
	Console string        // everything the guest's console printed
	Log     string        // the script's output (/share/run.log)
	Status  int           // the script's exit status
	Elapsed time.Duration // boot to power-off
	// Stalled says the boot was ended because nothing in the share
	// changed for Guest.Stall.
	Stalled bool
}

// initScript mounts what ustack needs (proc, sys, tracefs, debugfs, the
// share), loads the modules in order, runs the script and powers off.
const initScript = `#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /share /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tracefs nodev /sys/kernel/tracing
mount -t debugfs nodev /sys/kernel/debug
for m in $(cat /lab/modules); do insmod /lab/modules.d/$m || echo "kernellab: insmod $m failed"; done
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 share /share || echo "kernellab: cannot mount the share"
echo "KERNELLAB-START $(uname -r) $(uname -m)"
cd /lab
sh /lab/run.sh > /share/run.log 2>&1
echo $? > /share/rc
sync
echo "KERNELLAB-DONE rc=$(cat /share/rc)"
poweroff -f
`

// qemuCommand returns qemu's command line for k.
func qemuCommand(k *Kernel, initrd, share string, cpus, mem int) (string, []string, error) {
	common := []string{"-accel", "tcg", "-m", strconv.Itoa(mem), "-smp", strconv.Itoa(cpus),
		"-nographic", "-monitor", "none", "-no-reboot", "-nic", "none",
		"-kernel", k.Image, "-initrd", initrd,
		"-virtfs", "local,path=" + share + ",mount_tag=share,security_model=none,id=share"}
	switch k.Arch {
	case "amd64":
		return "qemu-system-x86_64", append([]string{"-cpu", "max"}, append(common,
			"-append", "console=ttyS0 panic=-1 loglevel=4")...), nil
	case "arm64":
		// -cpu max has pointer authentication; pauth-impdef keeps it but
		// with QEMU's cheap algorithm instead of QARMA, several times
		// faster under TCG.
		return "qemu-system-aarch64", append([]string{"-M", "virt", "-cpu", "max,pauth-impdef=on"}, append(common,
			"-append", "console=ttyAMA0 panic=-1 loglevel=4")...), nil
	}
	return "", nil, fmt.Errorf("no qemu for architecture %q", k.Arch)
}

// QemuFor returns the qemu-system binary that boots arch and whether it is
// installed.
func QemuFor(arch string) (string, bool) {
	name := map[string]string{"amd64": "qemu-system-x86_64", "arm64": "qemu-system-aarch64"}[arch]
	if name == "" {
		return "", false
	}
	_, err := exec.LookPath(name)
	return name, err == nil
}

// Boot boots k with g's files and script and waits for it to power off.
func Boot(ctx context.Context, k *Kernel, g Guest) (*Result, error) {
	if g.Timeout == 0 {
		g.Timeout = 6 * time.Minute
	}
	if g.CPUs == 0 {
		g.CPUs = 2
	}
	if g.MemoryMB == 0 {
		g.MemoryMB = 1024
	}
	if g.Share == "" {
		return nil, errors.New("kernellab: Guest.Share is empty")
	}
	work, err := os.MkdirTemp("", "ustack-kernellab-*")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	files := append([]File(nil), g.Files...)
	files = append(files,
		File{Path: "/init", Data: []byte(initScript), Mode: 0o755},
		File{Path: "/bin/busybox", Host: k.Busybox, Mode: 0o755},
		File{Path: "/lab/run.sh", Data: []byte(g.Script), Mode: 0o755})
	var names []string
	for _, m := range k.Modules {
		names = append(names, filepath.Base(m))
		files = append(files, File{Path: "/lab/modules.d/" + filepath.Base(m), Host: m})
	}
	files = append(files, File{Path: "/lab/modules", Data: []byte(strings.Join(names, "\n") + "\n")})
	initrd := filepath.Join(work, "initramfs.cpio")
	if err := writeInitramfs(initrd, files); err != nil {
		return nil, fmt.Errorf("kernellab: initramfs: %w", err)
	}
	os.Remove(filepath.Join(g.Share, "rc"))
	qemu, args, err := qemuCommand(k, initrd, g.Share, g.CPUs, g.MemoryMB)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, g.Timeout)
	defer cancel()
	var stalled atomic.Bool
	if g.Stall > 0 {
		stop := make(chan struct{})
		defer close(stop)
		go watchStall(g.Share, g.Stall, stop, func() { stalled.Store(true); cancel() })
	}
	cmd := exec.CommandContext(ctx, qemu, args...)
	var console lockedBuffer
	cmd.Stdout, cmd.Stderr = &console, &console
	cmd.Stdin = nil
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	runErr := cmd.Run()
	res := &Result{Console: console.String(), Elapsed: time.Since(start), Status: -1}
	if b, err := os.ReadFile(filepath.Join(g.Share, "run.log")); err == nil {
		res.Log = string(b)
	}
	rc, rcErr := os.ReadFile(filepath.Join(g.Share, "rc"))
	if rcErr == nil {
		res.Status, _ = strconv.Atoi(strings.TrimSpace(string(rc)))
	}
	if res.Stalled = stalled.Load(); res.Stalled {
		return res, fmt.Errorf("kernellab: %s: nothing in the share changed for %v; console ends:\n%s", k, g.Stall, tail(res.Console, 3000))
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("kernellab: %s did not power off within %v; console ends:\n%s", k, g.Timeout, tail(res.Console, 3000))
	}
	if rcErr != nil {
		return res, fmt.Errorf("kernellab: %s: the guest script did not finish (qemu: %v); console ends:\n%s", k, runErr, tail(res.Console, 3000))
	}
	return res, nil
}

// watchStall calls stalled when nothing under dir (its files' names,
// sizes and times) changed for d, checking every few seconds until stop.
func watchStall(dir string, d time.Duration, stop <-chan struct{}, stalled func()) {
	tick := time.NewTicker(min(d/4, 10*time.Second))
	defer tick.Stop()
	last, since := shareState(dir), time.Now()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if now := shareState(dir); now != last {
			last, since = now, time.Now()
		} else if time.Since(since) >= d {
			stalled()
			return
		}
	}
}

// shareState sums what changes in dir as a guest works in it.
func shareState(dir string) string {
	var n, size int64
	var latest time.Time
	filepath.WalkDir(dir, func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := e.Info(); err == nil {
			n++
			size += fi.Size()
			if fi.ModTime().After(latest) {
				latest = fi.ModTime()
			}
		}
		return nil
	})
	return fmt.Sprint(n, size, latest.UnixNano())
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 8<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
