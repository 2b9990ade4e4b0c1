// Package kernellab boots Debian's packaged kernels under qemu's TCG
// emulation so that tests can ask a real kernel what this machine's cannot
// do: kprobes, kretprobes and hardware watchpoints, and arm64 recordings
// made on arm64.
//
// The flow, for one kernel:
//
//  1. FindKernel reads Debian's package index for a suite and architecture
//     (bookworm, bookworm-backports; amd64, arm64), follows the
//     linux-image-ARCH metapackage to the kernel package it depends on (no
//     ABI number is written down anywhere) and downloads it, checked
//     against the index's SHA-256, into a cache directory. Only the kernel
//     image and the modules the lab needs (virtio 9p and what they depend
//     on, from modules.dep) are unpacked.
//  2. Boot writes an initramfs (busybox from Debian's busybox-static of
//     the same architecture, the modules, an /init script and the files a
//     test asks for), starts qemu-system-x86_64 or qemu-system-aarch64
//     with a virtio 9p share of a host directory, and waits, bounded in
//     time, for the guest to run the test's script and power off. The
//     script's output and every file it writes under /share come back
//     in the share.
//
// Tests call Require, which skips with a message saying what is missing
// (qemu, the network to Debian's mirror) unless USTACK_KERNELLAB=require,
// which .ci/run sets so that CI never skips. Boot each kernel once per
// test binary run and batch the guest work: a TCG boot costs seconds, the
// work inside it tens of seconds.
package kernellab
