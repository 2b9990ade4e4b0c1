package main

// The BPF object and its Go loader (tracer_x86_bpfel.go, .o) are committed,
// so that `go build` needs no clang. To rebuild them (clang with the BPF
// target, bpftool and Debian's libbpf-dev for <bpf/bpf_helpers.h>):
//
//	go generate
//
// vmlinux.h is dumped from the running kernel's BTF and not committed; the
// program reads only struct pt_regs (x86_64's user register frame, fixed by
// the ABI) and hands task_struct pointers to helpers, so the object loads
// on any x86_64 kernel with BTF (5.15 or newer, for bpf_task_pt_regs).

//go:generate sh -c "bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h"
//go:generate go tool bpf2go -target amd64 tracer bpf/tracer.c -- -I./bpf -O2 -g -Wall
