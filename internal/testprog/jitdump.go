package testprog

// JITDumpSrc is a C program for the jitdump tests. It JITs a function
// without a frame pointer (sub $8,%rsp; call *%rdi; add $8,%rsp; ret) and
// describes it in its own jitdump, as the specification asks: the marker
// mapping of jit-PID.dump, then for the
// function a DEBUG_INFO (lines 100-102 of jit.src), an UNWINDING_INFO (an
// .eh_frame and .eh_frame_hdr written here by hand for that code) and a
// CODE_LOAD. It calls the function ten times (each time cb closes -1), loads
// other code, jit_hop_b, at the same address and calls it ten times, then
// moves jit_hop_b (CODE_MOVE) and calls it ten times at its new address.
// It writes jit-PID.dump in $JIT_DIR.
const JITDumpSrc = `
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static volatile int sink;
__attribute__((noinline)) void cb(void) { close(-1); sink++; }

static FILE *dump;

static uint64_t now(void) {
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}
static void put(const void *p, size_t n) { fwrite(p, 1, n, dump); }
static void u32(uint32_t v) { put(&v, 4); }
static void u64(uint64_t v) { put(&v, 8); }
static void rec(uint32_t id, uint32_t size) { u32(id); u32(size); u64(now()); }

static const unsigned char code[] = {
	0x48, 0x83, 0xec, 0x08, /* 0: sub $8,%rsp */
	0xff, 0xd7,             /* 4: call *%rdi */
	0x48, 0x83, 0xc4, 0x08, /* 6: add $8,%rsp */
	0xc3,                   /* 10: ret */
};
#define CODE_SIZE sizeof code
#define ALIGN8(x) (((x) + 7) & ~(uint64_t)7)

static void put32(unsigned char *b, int32_t v) { memcpy(b, &v, 4); }

/* The CFI of code at addr: .eh_frame (a CIE, one FDE, a terminator) laid
   at addr+ALIGN8(CODE_SIZE), then .eh_frame_hdr. */
static void unwinding(uint64_t addr) {
	unsigned char eh[52] = {
		/* CIE */ 20, 0, 0, 0, 0, 0, 0, 0, 1, 'z', 'R', 0, 1, 0x78, 16, 1, 0x1b,
		0x0c, 7, 8,   /* DW_CFA_def_cfa rsp+8 */
		0x90, 1,      /* DW_CFA_offset rip, cfa-8 */
		0, 0,         /* nops */
		/* FDE at 24 */ 20, 0, 0, 0, 28, 0, 0, 0, 0, 0, 0, 0, CODE_SIZE, 0, 0, 0, 0,
		0x44, 0x0e, 16, /* advance 4: cfa rsp+16 */
		0x46, 0x0e, 8,  /* advance 6: cfa rsp+8 */
		0,              /* nop */
		/* terminator */ 0, 0, 0, 0,
	};
	uint64_t ehAddr = addr + ALIGN8(CODE_SIZE), hdrAddr = ehAddr + sizeof eh;
	put32(eh + 32, (int32_t)(addr - (ehAddr + 32))); /* pc_begin, pcrel */
	unsigned char hdr[20] = {1, 0x1b, 0x03, 0x3b};
	put32(hdr + 4, (int32_t)(ehAddr - (hdrAddr + 4)));
	put32(hdr + 8, 1);
	put32(hdr + 12, (int32_t)(addr - hdrAddr));
	put32(hdr + 16, (int32_t)(ehAddr + 24 - hdrAddr));
	rec(4, 16 + 24 + sizeof eh + sizeof hdr);
	u64(sizeof eh + sizeof hdr);
	u64(sizeof hdr);
	u64(0);
	put(eh, sizeof eh);
	put(hdr, sizeof hdr);
}

static void debuginfo(uint64_t addr) {
	static const char file[] = "jit.src";
	uint32_t size = 16 + 16 + 3 * 16 + sizeof file + 2 + sizeof file;
	rec(2, size);
	u64(addr);
	u64(3);
	u64(addr); u32(100); u32(0); put(file, sizeof file);
	u64(addr + 4); u32(101); u32(0); put("\xff", 2); /* the same file */
	u64(addr + 6); u32(102); u32(0); put(file, sizeof file);
}

static void load(uint64_t addr, const char *name, uint64_t index) {
	debuginfo(addr);
	unwinding(addr);
	rec(0, 16 + 40 + strlen(name) + 1 + CODE_SIZE);
	u32(getpid()); u32(getpid());
	u64(addr); u64(addr); u64(CODE_SIZE); u64(index);
	put(name, strlen(name) + 1);
	put(code, CODE_SIZE);
	fflush(dump);
}

static void move(uint64_t from, uint64_t to, uint64_t index) {
	rec(1, 16 + 48);
	u32(getpid()); u32(getpid());
	u64(to); u64(from); u64(to); u64(CODE_SIZE); u64(index);
	fflush(dump);
}

int main(void) {
	char path[4096];
	snprintf(path, sizeof path, "%s/jit-%d.dump", getenv("JIT_DIR"), getpid());
	dump = fopen(path, "w+");
	if (!dump) return 1;
	u32(0x4A695444); u32(1); u32(40); u32(62); u32(0); u32(getpid()); u64(now()); u64(0);
	fflush(dump);
	/* The marker: perf records this mapping; it tells where the dump is. */
	void *marker = mmap(0, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fileno(dump), 0);
	if (marker == MAP_FAILED) return 2;

	unsigned char *p = mmap(0, 4096, PROT_READ | PROT_WRITE | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	memcpy(p, code, CODE_SIZE);
	load((uint64_t)p, "jit_hop_a", 1);
	for (int i = 0; i < 10; i++) ((void (*)(void (*)(void)))p)(cb);
	load((uint64_t)p, "jit_hop_b", 2);
	for (int i = 0; i < 10; i++) ((void (*)(void (*)(void)))p)(cb);
	unsigned char *q = p + 0x100;
	memcpy(q, code, CODE_SIZE);
	move((uint64_t)p, (uint64_t)q, 2);
	for (int i = 0; i < 10; i++) ((void (*)(void (*)(void)))q)(cb);
	printf("%lx\n", (unsigned long)p);
	return 0;
}
`
