package unwinder

import (
	"encoding/binary"
	"unsafe"

	"github.com/ustack/ustack/arch"
)

// walkState is where an unwind stands between two frames: the PC and SP of
// the next frame to write, how many frames are written, and how the next
// frame was recovered.
type walkState struct {
	pc, sp uint64
	n      int
	method Method
	flags  FrameFlags
	// guess is, once the general loop has stepped out of a frame by a
	// frame pointer the frame is not shown to have set up, or by a
	// return address whose call is not shown to be to its function,
	// that frame's index plus one (the first such frame); 0 otherwise.
	// guessCall says which.
	guess     int
	guessCall bool
	guessScan bool // the step was a stack scan's (MethodScan)
	// zeroRA is set when walkSimple's walk ended at a return address of
	// zero, which proves the end only in a function that begins a
	// stack (zeroReturn).
	zeroRA bool
}

// walkSimple is the unwind loop's fast path. From st on it writes frames and
// steps to their callers for as long as each frame lies in one of the two
// mappings found last (c.last), has a row of the common shape (fastSimple)
// or the outermost frame's (fastOutermost) in the hot cache, compiled for
// u's architecture, and keeps every save slot inside w's block at or above
// its SP, updating r in place; then it leaves st at the first frame it did
// not write, for the general loop to take. It returns true and the number
// of frames when the walk ended at the outermost frame (the caller's PC is
// undefined) or at a zero return address (st.zeroRA): scalars, not a
// Result, which at 40 bytes the compiler passes through memory, with a
// store-forwarding stall at every return.
//
// For those frames it does exactly what the general loop and applyFast do,
// and nothing else, in a function of its own so that its few variables stay
// in registers from one frame to the next: the caller's PC and SP stay in
// locals and reach r when the walk leaves, and every frame but the first
// is a return address recovered by CFI. It leaves the frame at the depth
// limit to the general loop, which reports StopDepth.
func (u *Unwinder) walkSimple(c *Cache, space *AddressSpace, r *arch.Regs, w *window, frames []Frame, pacMask uint64, st *walkState) (int, bool) {
	a := u.arch
	mi := c.last[0]
	data := w.data
	pc, sp := st.pc, st.sp
	n0 := st.n
	waddr := w.addr
	if uint(mi) >= uint(len(space.maps)) || len(data) < 8 || uint(n0)+1 >= uint(len(frames)) || sp < waddr || c.arch != a {
		return 0, false
	}
	m := &space.maps[mi]
	vals := r.Values()
	known := r.KnownMask()
	wend := uint64(len(data)) - 8
	p := unsafe.Pointer(unsafe.SliceData(data))
	// fp walks frames[n0:len(frames)-1]; the first frame's lookup is at
	// PC-1 only if its PC is a return address (FrameReturnAddress is 1).
	fp := &frames[n0]
	last := unsafe.Pointer(&frames[len(frames)-1])
	adj := uint64(st.flags & FrameReturnAddress)
	outermost := false
	for unsafe.Pointer(fp) != last {
		if pc-m.Start >= m.End-m.Start {
			// The other mapping found last, as the general loop
			// tries it.
			j := c.last[1]
			if uint(j) >= uint(len(space.maps)) {
				break
			}
			m2 := &space.maps[j]
			if pc-m2.Start >= m2.End-m2.Start {
				break
			}
			c.last[0], c.last[1] = j, c.last[0]
			m = m2
		}
		// c.row, inlined. A mapping without an Object matches only
		// an empty entry, whose flags send the frame to the general
		// loop.
		obj := (*iface)(unsafe.Pointer(&m.Object))
		addr := pc - adj - m.Bias
		set := cacheSet(addr)
		e := (*cacheEntry)(unsafe.Add(unsafe.Pointer(&c.entries), set*(cacheWays*cacheEntrySize)))
		if eo := (*iface)(unsafe.Pointer(&e.obj)); e.addr == addr && eo.data == obj.data && eo.tab == obj.tab {
			c.victim[set] = 1
		} else {
			e = (*cacheEntry)(unsafe.Add(unsafe.Pointer(e), cacheEntrySize))
			if eo := (*iface)(unsafe.Pointer(&e.obj)); e.addr != addr || eo.data != obj.data || eo.tab != obj.tab {
				break // a miss: the general loop fills the cache
			}
			c.victim[set] = 0
		}
		f := &e.fastRow // compiled for a (c.arch)
		cfa := sp
		if fl := f.flags; fl&(fastSimple|fastCFASP) != fastSimple|fastCFASP {
			// Not the commonest shape, CFA = SP + offset.
			if fl&(fastSimple|fastOutermost) == 0 {
				break
			}
			if fl&fastCFASP == 0 {
				// Not the PC either (fastSimple,
				// fastOutermost): vals holds it.
				cr := uint(f.cfaReg)
				if cr >= arch.MaxRegs || known>>cr&1 == 0 {
					break
				}
				cfa = vals[cr]
			}
		}
		cfa += uint64(f.cfaOff)
		if f.flags&fastOutermost != 0 {
			if a == arch.ARM64 {
				// A signal handler whose CFI ends the stack (Go's
				// runtime.sigtramp) with the kernel's signal frame
				// at its CFA: the general loop goes on through it
				// (sigFrameAbove).
				if off := cfa + arm64ReservedOff - waddr; off < uint64(len(data)) && off+8 <= uint64(len(data)) &&
					binary.LittleEndian.Uint64(data[off:]) == arm64FPSIMDHeader {
					break
				}
			}
			fp.PC, fp.SP, fp.CFA, fp.Mapping = pc, sp, cfa, int32(c.last[0])
			fp.Method, fp.Flags = MethodCFI, FrameReturnAddress
			fp = (*Frame)(unsafe.Add(unsafe.Pointer(fp), unsafe.Sizeof(Frame{})))
			outermost = true
			break
		}
		// Every save slot lies at offsets [lo, hi+8) of the block and
		// at or above the SP (applyFast's one check; sp >= waddr
		// throughout), and the caller's SP (the CFA) is above this
		// frame's (callerSane, the return address coming from
		// memory).
		off := cfa - waddr
		lo := off + uint64(int64(f.minOff))
		hi := off + uint64(int64(f.maxOff))
		if cfa <= sp || lo < sp-waddr || lo > hi || hi > wend {
			break
		}
		fp.PC, fp.SP, fp.CFA, fp.Mapping = pc, sp, cfa, int32(c.last[0])
		fp.Method, fp.Flags = MethodCFI, FrameReturnAddress // the first frame's are set below
		fp = (*Frame)(unsafe.Add(unsafe.Pointer(fp), unsafe.Sizeof(Frame{})))
		pc = binary.LittleEndian.Uint64((*[8]byte)(unsafe.Add(p, uintptr(off)+uintptr(f.raOff)))[:]) &^ pacMask
		known |= f.offMask
		sp = cfa
		adj = 1
		loadSaved(vals, p, uintptr(off), f, int(f.nwalk))
		if pc == 0 {
			outermost, st.zeroRA = true, true
			break
		}
	}
	n := n0 + int((uintptr(unsafe.Pointer(fp))-uintptr(unsafe.Pointer(&frames[n0])))/unsafe.Sizeof(Frame{}))
	if n == n0 {
		return 0, false
	}
	frames[n0].Method, frames[n0].Flags = st.method, st.flags
	if outermost {
		return n, true
	}
	pcReg, spReg := a.PC(), a.SP()
	vals[pcReg], vals[spReg] = pc, sp
	r.SetKnownMask(known | 1<<uint(pcReg) | 1<<uint(spReg))
	st.pc, st.sp, st.n, st.method, st.flags = pc, sp, n, MethodCFI, FrameReturnAddress
	return 0, false
}
