package coredump

import (
	"bytes"
	"encoding/binary"

	"github.com/ustack/ustack/arch"
)

// Note types of Linux cores (include/uapi/linux/elf.h).
const (
	ntPRStatus    = 1
	ntPRFPReg     = 2
	ntPRPSInfo    = 3
	ntAuxv        = 6
	ntARMTLS      = 0x401
	ntARMPACMask  = 0x406
	ntSigInfo     = 0x53494749 // "SIGI"
	ntFile        = 0x46494c45 // "FILE"
	prstatusRegs  = 112        // offset of pr_reg in struct elf_prstatus
	prpsinfoSize  = 136
	siginfoSize   = 128
	maxNoteBytes  = 1 << 30 // a PT_NOTE larger than this is not a real core's
	amd64NumGRegs = 27      // user_regs_struct
	arm64NumGRegs = 34      // user_pt_regs: x0..x30, sp, pc, pstate
)

// parseNotes decodes one PT_NOTE segment. A note that cannot be decoded is
// skipped with a warning; the walk stops where the segment's framing is
// broken, keeping everything decoded before.
func (c *Core) parseNotes(data []byte, ns noteSeg) {
	le := binary.LittleEndian
	buf := fileBytes(data, ns.off, ns.size)
	if uint64(len(buf)) < ns.size {
		c.warnf(int64(ns.off), "PT_NOTE of %#x bytes at file offset %#x is truncated to %#x bytes", ns.size, ns.off, len(buf))
	}
	if len(buf) > maxNoteBytes {
		c.warnf(int64(ns.off), "PT_NOTE of %#x bytes is too large; reading the first %#x", len(buf), maxNoteBytes)
		buf = buf[:maxNoteBytes]
	}
	curIdx := -1 // the thread whose NT_PRSTATUS came last
	for pos := 0; pos < len(buf); {
		off := int64(ns.off) + int64(pos)
		if len(buf)-pos < 12 {
			c.warnf(off, "note header truncated (%d bytes left in PT_NOTE)", len(buf)-pos)
			return
		}
		namesz := uint64(le.Uint32(buf[pos:]))
		descsz := uint64(le.Uint32(buf[pos+4:]))
		typ := le.Uint32(buf[pos+8:])
		nameStart := uint64(pos) + 12
		descStart := nameStart + align4(namesz)
		end := descStart + align4(descsz)
		if descStart+descsz > uint64(len(buf)) {
			c.warnf(off, "note type %#x: name (%d bytes) and descriptor (%d bytes) run past the end of PT_NOTE", typ, namesz, descsz)
			return
		}
		name := string(bytes.TrimRight(buf[nameStart:nameStart+namesz], "\x00"))
		desc := buf[descStart : descStart+descsz]
		descOff := int64(ns.off) + int64(descStart)
		if name == "CORE" || name == "LINUX" {
			c.applyNote(name, typ, desc, descOff, off, &curIdx)
		}
		if end > uint64(len(buf)) {
			return
		}
		pos = int(end)
	}
}

// applyNote decodes one CORE or LINUX note at file offset noteOff (its
// descriptor at descOff). *curIdx is the thread whose NT_PRSTATUS came last
// in this PT_NOTE (-1 for none): the notes after it describe that thread.
func (c *Core) applyNote(name string, typ uint32, desc []byte, descOff, noteOff int64, curIdx *int) {
	le := binary.LittleEndian
	switch {
	case typ == ntPRStatus && name == "CORE":
		if t, ok := c.parsePRStatus(desc, descOff); ok {
			t.NoteOffset = noteOff
			if len(c.Threads) < 1<<20 {
				c.Threads = append(c.Threads, t)
				*curIdx = len(c.Threads) - 1
			}
		} else {
			*curIdx = -1
		}
	case typ == ntPRPSInfo && name == "CORE":
		c.parsePRPSInfo(desc, descOff)
	case typ == ntSigInfo && name == "CORE":
		// gdb writes NT_SIGINFO per thread, after that thread's
		// registers; the kernel writes one, after the first
		// thread's: the first thread's signal either way.
		if si, ok := c.parseSiginfo(desc, descOff); ok {
			if *curIdx >= 0 {
				c.Threads[*curIdx].Siginfo = si
			} else if c.Signal == nil {
				c.Signal = si
			}
		}
	case typ == ntAuxv && name == "CORE":
		c.parseAuxv(desc, descOff)
	case typ == ntFile && name == "CORE":
		c.parseFile(desc, descOff)
	case typ == ntARMTLS && name == "LINUX" && c.Arch == arch.ARM64:
		if *curIdx >= 0 && len(desc) >= 8 {
			c.Threads[*curIdx].TLS = le.Uint64(desc)
		}
	case typ == ntARMPACMask && name == "LINUX":
		if *curIdx >= 0 {
			cur := &c.Threads[*curIdx]
			if len(desc) < 16 {
				c.warnf(descOff, "NT_ARM_PAC_MASK has %d bytes, want 16", len(desc))
			} else {
				cur.PAC = PACMask{Data: le.Uint64(desc), Insn: le.Uint64(desc[8:]), Known: true}
			}
		}
	}
}

func align4(n uint64) uint64 { return (n + 3) &^ 3 }

func (c *Core) parsePRStatus(desc []byte, off int64) (Thread, bool) {
	le := binary.LittleEndian
	var t Thread
	nregs := amd64NumGRegs
	if c.Arch == arch.ARM64 {
		nregs = arm64NumGRegs
	}
	if need := prstatusRegs + nregs*8; len(desc) < need {
		c.warnf(off, "NT_PRSTATUS has %d bytes, want at least %d for %s: thread skipped", len(desc), need, c.Arch)
		return t, false
	}
	t.Signal = int(int16(le.Uint16(desc[12:])))
	t.TID = int(int32(le.Uint32(desc[32:])))
	t.PPID = int(int32(le.Uint32(desc[36:])))
	// pr_pid is the thread id; the process id is pr_pgrp only for a group
	// leader, so PID is filled from NT_PRPSINFO where the core has one.
	t.PID = t.TID
	reg := func(i int) uint64 { return le.Uint64(desc[prstatusRegs+8*i:]) }
	switch c.Arch {
	case arch.AMD64:
		// user_regs_struct: r15 r14 r13 r12 rbp rbx r11 r10 r9 r8 rax rcx
		// rdx rsi rdi orig_rax rip cs eflags rsp ss fs_base gs_base ...
		dwarf := [17]int{10, 12, 11, 5, 13, 14, 4, 19, 9, 8, 7, 6, 3, 2, 1, 0, 16}
		for n, i := range dwarf {
			t.Regs.Set(n, reg(i))
		}
		t.PState = reg(18)
		t.TLS = reg(21)
	case arch.ARM64:
		for n := 0; n < 33; n++ { // x0..x30, sp, pc are DWARF 0..32
			t.Regs.Set(n, reg(n))
		}
		t.PState = reg(33)
	}
	return t, true
}

func (c *Core) parsePRPSInfo(desc []byte, off int64) {
	le := binary.LittleEndian
	if len(desc) < prpsinfoSize {
		c.warnf(off, "NT_PRPSINFO has %d bytes, want %d: process name unknown", len(desc), prpsinfoSize)
		return
	}
	c.Process = Process{
		State: desc[1],
		UID:   le.Uint32(desc[16:]),
		GID:   le.Uint32(desc[20:]),
		PID:   int(int32(le.Uint32(desc[24:]))),
		PPID:  int(int32(le.Uint32(desc[28:]))),
		PGRP:  int(int32(le.Uint32(desc[32:]))),
		SID:   int(int32(le.Uint32(desc[36:]))),
		Comm:  cString(desc[40:56]),
		Args:  string(bytes.TrimRight([]byte(cString(desc[56:136])), " ")),
		Known: true,
	}
}

func cString(b []byte) string {
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	return string(b)
}

// Signals whose si_addr is the faulting address when the kernel raised them.
func faultSignal(signo int) bool {
	switch signo {
	case SIGILL, SIGTRAP, SIGBUS, SIGFPE, SIGSEGV:
		return true
	}
	return false
}

func (c *Core) parseSiginfo(desc []byte, off int64) (*Siginfo, bool) {
	le := binary.LittleEndian
	if len(desc) < 24 {
		c.warnf(off, "NT_SIGINFO has %d bytes, want %d", len(desc), siginfoSize)
		return nil, false
	}
	si := &Siginfo{
		Signo: int(int32(le.Uint32(desc[0:]))),
		Errno: int(int32(le.Uint32(desc[4:]))),
		Code:  int(int32(le.Uint32(desc[8:]))),
	}
	switch {
	case si.Code > 0 && si.Code != siKernel && faultSignal(si.Signo):
		si.Addr, si.HasAddr = le.Uint64(desc[16:]), true
	case si.Code <= 0: // SI_USER, SI_TKILL, SI_QUEUE...: sent by a process
		si.SenderPID = int(int32(le.Uint32(desc[16:])))
		si.SenderUID = int(le.Uint32(desc[20:]))
		si.HasSender = true
	}
	return si, true
}

func (c *Core) parseAuxv(desc []byte, off int64) {
	le := binary.LittleEndian
	if len(desc)%16 != 0 {
		c.warnf(off, "NT_AUXV has %d bytes, not a whole number of 16-byte entries", len(desc))
	}
	c.Auxv = c.Auxv[:0]
	for i := 0; i+16 <= len(desc); i += 16 {
		typ := le.Uint64(desc[i:])
		if typ == AT_NULL {
			return
		}
		c.Auxv = append(c.Auxv, AuxvEntry{Type: typ, Value: le.Uint64(desc[i+8:])})
	}
}

// parseFile decodes NT_FILE: count, page_size, count × {start, end,
// file_ofs in pages}, then count NUL-terminated paths.
func (c *Core) parseFile(desc []byte, off int64) {
	c.fileNote = true
	le := binary.LittleEndian
	if len(desc) < 16 {
		c.warnf(off, "NT_FILE has %d bytes, want at least 16", len(desc))
		return
	}
	count := le.Uint64(desc)
	page := le.Uint64(desc[8:])
	if page == 0 || page&(page-1) != 0 || page > 1<<30 {
		c.warnf(off+8, "NT_FILE page size %#x is not a power of two; assuming 4096", page)
		page = 4096
	}
	c.PageSize = page
	damaged := false
	if max := uint64(len(desc)-16) / 24; count > max {
		c.warnf(off, "NT_FILE claims %d mappings but has room for %d; reading those", count, max)
		count = max
		damaged = true
	}
	names := desc[16+count*24:]
	c.Mappings = make([]Mapping, 0, count)
	for i := uint64(0); i < count; i++ {
		e := desc[16+i*24:]
		m := Mapping{Start: le.Uint64(e), End: le.Uint64(e[8:]), FileOffset: le.Uint64(e[16:]) * page}
		j := bytes.IndexByte(names, 0)
		if j < 0 {
			c.warnf(off+int64(len(desc)-len(names)), "NT_FILE path %d of %d is missing or unterminated; later mappings dropped", i+1, count)
			return
		}
		m.Path = string(names[:j])
		names = names[j+1:]
		if m.End < m.Start {
			c.warnf(off+16+int64(i)*24, "NT_FILE mapping of %s ends (%#x) before it starts (%#x); ignored", m.Path, m.End, m.Start)
			damaged = true
			continue
		}
		c.Mappings = append(c.Mappings, m)
	}
	c.MappingsComplete = !damaged
}
