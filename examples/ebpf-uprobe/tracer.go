package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/cilium/ebpf/rlimit"
	"github.com/ustack/ustack/capture"
	"golang.org/x/sys/unix"
)

// maxStackSize is the largest --stack-size: perf's limit, and what the
// BPF program's page loop covers (MAX_STACK_PAGES).
const maxStackSize = 65528

// tracer is the loaded BPF program with its probes attached.
type tracer struct {
	objs  tracerObjects
	links []link.Link
	rd    *ringbuf.Reader
}

// probe is one parsed -e event.
type probe struct {
	ev *capture.Event
}

// parseProbes parses the -e events with ustack record's parser, keeping
// the kinds this tracer attaches: uprobes (u:, ur:) and tracepoints.
func parseProbes(specs []string) ([]probe, error) {
	var out []probe
	for _, s := range specs {
		ev, err := capture.ParseEvent(s)
		if err != nil {
			return nil, err
		}
		if ev.Kind != capture.KindUprobe && ev.Kind != capture.KindTracepoint {
			return nil, fmt.Errorf("event %q: a %s event; this tracer attaches uprobes (u:/path:symbol) and tracepoints (SYSTEM:NAME) only", s, ev.Kind)
		}
		out = append(out, probe{ev})
	}
	return out, nil
}

// bpfError explains why loading or attaching failed when the cause is one
// a user can fix.
func bpfError(what string, err error) error {
	switch {
	case errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES):
		if os.Geteuid() != 0 {
			return fmt.Errorf("%s: %w: BPF tracing needs root (or CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE); run it with sudo", what, err)
		}
		return fmt.Errorf("%s: %w: the kernel refused BPF to root (kernel.unprivileged_bpf_disabled does not apply to root: look for lockdown or a seccomp filter)", what, err)
	case errors.Is(err, ebpf.ErrNotSupported):
		return fmt.Errorf("%s: %w: this kernel lacks a BPF feature the tracer needs (ring buffers, bpf_task_pt_regs and attach cookies need Linux 5.15 with CONFIG_BPF_SYSCALL, CONFIG_UPROBE_EVENTS and BTF)", what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// newTracer loads the BPF program for a target process (0: every process)
// and a stack copy of stackSize bytes, and attaches it to the probes; the
// event of probe i carries cookie i.
func newTracer(probes []probe, pid int, stackSize int) (*tracer, error) {
	if _, err := os.Stat("/sys/kernel/btf/vmlinux"); err != nil {
		return nil, fmt.Errorf("BPF unavailable: this kernel has no BTF (/sys/kernel/btf/vmlinux: %v); it needs CONFIG_DEBUG_INFO_BTF", err)
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return nil, bpfError("can't lift the locked-memory limit", err)
	}
	spec, err := loadTracer()
	if err != nil {
		return nil, err
	}
	// The record has room for the pages from SP's page up to SP+stackSize.
	pages := uint32((stackSize+4095)/4096 + 1)
	if err := spec.Variables[tracerVarStackPages].Set(pages); err != nil {
		return nil, fmt.Errorf("can't set stack_pages: %w", err)
	}
	if err := spec.Variables[tracerVarTargetTgid].Set(uint32(pid)); err != nil {
		return nil, fmt.Errorf("can't set target_tgid: %w", err)
	}
	t := &tracer{}
	if err := spec.LoadAndAssign(&t.objs, nil); err != nil {
		var ve *ebpf.VerifierError
		if errors.As(err, &ve) {
			return nil, fmt.Errorf("the kernel's verifier rejected the BPF program: %+v", ve)
		}
		return nil, bpfError("can't load the BPF program", err)
	}
	for i, p := range probes {
		l, err := t.attach(p.ev, uint64(i))
		if err != nil {
			t.Close()
			return nil, bpfError(fmt.Sprintf("can't attach %q", p.ev.Spec), err)
		}
		t.links = append(t.links, l)
	}
	if t.rd, err = ringbuf.NewReader(t.objs.Events); err != nil {
		t.Close()
		return nil, bpfError("can't open the ring buffer", err)
	}
	return t, nil
}

func (t *tracer) attach(ev *capture.Event, cookie uint64) (link.Link, error) {
	if ev.Kind == capture.KindTracepoint {
		group, name, _ := strings.Cut(ev.Name, ":")
		return link.Tracepoint(group, name, t.objs.OnTracepoint, &link.TracepointOptions{Cookie: cookie})
	}
	ex, err := link.OpenExecutable(ev.Path)
	if err != nil {
		return nil, err
	}
	// capture.ParseEvent resolved the symbol to a file offset already,
	// as ustack record does. The probe is on the file for every process
	// and the program keeps the target's events by tgid: a perf event
	// opened for a pid would see that one thread only.
	opts := &link.UprobeOptions{Address: ev.Offset, Cookie: cookie}
	if strings.HasPrefix(ev.Name, "uretprobe:") {
		return ex.Uretprobe("", t.objs.OnUprobe, opts)
	}
	return ex.Uprobe("", t.objs.OnUprobe, opts)
}

// detach removes the probes: no event fires after it returns.
func (t *tracer) detach() {
	for _, l := range t.links {
		l.Close()
	}
	t.links = nil
}

// lost returns the events the BPF program could not write because the
// ring buffer was full.
func (t *tracer) lost() uint64 {
	var n uint64
	if err := t.objs.Counters.Lookup(uint32(0), &n); err != nil {
		return 0
	}
	return n
}

// Close detaches the probes and unloads the program.
func (t *tracer) Close() error {
	t.detach()
	if t.rd != nil {
		t.rd.Close()
	}
	return t.objs.Close()
}
