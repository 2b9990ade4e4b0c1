// Command livestack PID unwinds a thread of a live x86_64 process stopped with ptrace, as a tracer would: "function inlined path build-id offset" per frame.
package main

import (
	"fmt"
	"github.com/ustack/ustack/arch"
	"github.com/ustack/ustack/tracer"
	"golang.org/x/sys/unix"
	"os"
	"runtime"
)

func main() {
	var pid int
	fmt.Sscan(os.Args[1], &pid)
	runtime.LockOSThread()
	if err := unix.PtraceSeize(pid); err != nil || unix.PtraceInterrupt(pid) != nil {
		panic(fmt.Sprint("cannot stop process ", pid, ": ", err))
	}
	r, regs := unix.PtraceRegs{}, new(arch.Regs)
	unix.Wait4(pid, nil, unix.WALL, nil)
	unix.PtraceGetRegs(pid, &r)
	stack, mem := make([]byte, 64<<10), fmt.Sprintf("/proc/%d/mem", pid)
	f, _ := os.Open(mem)
	n, _ := f.ReadAt(stack, int64(r.Rsp))
	unix.PtraceDetach(pid)
	for name, v := range map[string]uint64{"rip": r.Rip, "rsp": r.Rsp, "rbp": r.Rbp, "rbx": r.Rbx} {
		reg, _ := arch.AMD64.RegByName(name)
		regs.Set(reg, v)
	}
	t := tracer.New(tracer.Options{})
	p, err := t.Process(pid)
	if err != nil {
		panic(err)
	}
	for _, f := range t.NewWalker().Unwind(p, regs, stack[:n]).Frames {
		a := p.Normalize(nil, f.Addr)[0]
		fmt.Printf("%s %v %s %x %#x\n", f.Symbol, f.Inlined, a.Path, a.BuildID, a.FileOffset)
	}
}
