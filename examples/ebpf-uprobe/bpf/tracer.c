// SPDX-License-Identifier: GPL-2.0
//
// The kernel half of the ebpf-uprobe example: at a uprobe or a syscall
// tracepoint it copies the user registers and a snapshot of the user stack
// from SP upward, with pid, tid, comm and a timestamp, into one ring buffer
// record. Go unwinds the record with ustack's library; nothing is walked
// here.
//
// Regenerate tracer_x86_bpfel.{go,o} with `go generate` (gen.go).

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#define PAGE_SIZE 4096
// MAX_STACK_PAGES bounds the stack copy: perf's largest, 64 KiB, starts
// inside a page and so may touch 17 pages.
#define MAX_STACK_PAGES 17
#define NUM_REGS 21 // struct pt_regs on x86_64, r15 .. ss

// struct event is one ring buffer record; event.go decodes it.
// stack holds the stack from stack_addr (SP rounded down to its page) up
// to stack_len bytes; the record itself always has room for stack_pages
// pages.
struct event {
	__u32 pid;
	__u32 tid;
	__u64 time_ns; // bpf_ktime_get_ns: CLOCK_MONOTONIC
	__u32 cookie;  // the index of the -e event that fired
	__u32 cpu;
	__u64 stack_addr;
	__u32 stack_len;
	__u32 pad;
	__u8 comm[16];
	__u64 regs[NUM_REGS];
	__u8 stack[];
};

_Static_assert(sizeof(struct event) == 224, "struct event does not match eventHeaderSize in event.go");
_Static_assert(sizeof(struct pt_regs) == NUM_REGS * 8, "struct pt_regs is not x86_64's");

// Set by the Go side before loading (they are constants to the verifier).
const volatile __u32 target_tgid = 0; // 0: every process
const volatile __u32 stack_pages = 5; // pages the record has room for, at most MAX_STACK_PAGES

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 8 << 20);
} events SEC(".maps");

// counters[0] counts events lost because the ring buffer was full.
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count_lost(void)
{
	__u32 key = 0;
	__u64 *n = bpf_map_lookup_elem(&counters, &key);
	if (n)
		__sync_fetch_and_add(n, 1);
}

// capture writes one record for the current task whose user registers are
// regs (copied by the caller into a local array).
static __always_inline int capture(void *ctx, const __u64 *regs)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (target_tgid != 0 && tgid != target_tgid)
		return 0;
	__u32 pages = stack_pages;
	if (pages > MAX_STACK_PAGES)
		pages = MAX_STACK_PAGES;
	if (pages == 0)
		pages = 1;
	struct event *e = bpf_ringbuf_reserve(&events, sizeof(struct event) + pages * PAGE_SIZE, 0);
	if (!e) {
		count_lost();
		return 0;
	}
	e->pid = tgid;
	e->tid = (__u32)id;
	e->time_ns = bpf_ktime_get_ns();
	e->cookie = (__u32)bpf_get_attach_cookie(ctx);
	e->cpu = bpf_get_smp_processor_id();
	e->pad = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
#pragma unroll
	for (int i = 0; i < NUM_REGS; i++)
		e->regs[i] = regs[i];

	// The stack page by page from SP's page up, until the copy is full
	// or a page cannot be read (the top of the stack).
	__u64 sp = regs[19];
	__u64 base = sp & ~(__u64)(PAGE_SIZE - 1);
	__u32 len = 0;
	for (__u32 k = 0; k < MAX_STACK_PAGES; k++) {
		if (k >= pages)
			break;
		if (bpf_probe_read_user(e->stack + k * PAGE_SIZE, PAGE_SIZE, (void *)(base + k * PAGE_SIZE)))
			break;
		len += PAGE_SIZE;
	}
	e->stack_addr = base;
	e->stack_len = len;
	bpf_ringbuf_submit(e, 0);
	return 0;
}

SEC("uprobe")
int on_uprobe(struct pt_regs *ctx)
{
	// A uprobe's context is the user registers themselves.
	__u64 regs[NUM_REGS];
	const __u64 *p = (const __u64 *)ctx;
#pragma unroll
	for (int i = 0; i < NUM_REGS; i++)
		regs[i] = p[i];
	return capture(ctx, regs);
}

SEC("tracepoint")
int on_tracepoint(void *ctx)
{
	// A tracepoint's context is its fields; the user registers are the
	// ones the task saved on entering the kernel.
	struct task_struct *task = bpf_get_current_task_btf();
	struct pt_regs *uregs = (struct pt_regs *)bpf_task_pt_regs(task);
	__u64 regs[NUM_REGS];
	if (bpf_probe_read_kernel(regs, sizeof(regs), uregs))
		return 0;
	return capture(ctx, regs);
}

char LICENSE[] SEC("license") = "GPL";
