/* Shared helpers for the x86_64 fixture programs. */
#ifndef USTACK_COMMON_H
#define USTACK_COMMON_H
#if defined(__clang__)
#define NOINLINE __attribute__((noinline))
#else
#define NOINLINE __attribute__((noinline, noclone))
#endif
extern volatile long sink;
#endif
