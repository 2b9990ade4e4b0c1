package capture

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ring is one mmap'd perf ring buffer: the metadata page followed by a
// power-of-two data area that the kernel fills (data_head) and we drain
// (data_tail).
type ring struct {
	fd   int
	cpu  int
	mem  []byte
	meta *unix.PerfEventMmapPage
	data []byte
	mask uint64
	// scratch holds a record that wraps around the end of the data area.
	scratch []byte
	// pendingTail is the tail to publish after the last consume.
	pendingTail uint64
}

// newRing maps pages data pages (a power of two) plus the metadata page of fd.
func newRing(fd, cpu, pages int) (*ring, error) {
	ps := unix.Getpagesize()
	mem, err := unix.Mmap(fd, 0, (pages+1)*ps, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap of the perf ring buffer (%d KiB) on cpu %d: %w (lower -m, or raise /proc/sys/kernel/perf_event_mlock_kb)", pages*ps/1024, cpu, err)
	}
	r := &ring{fd: fd, cpu: cpu, mem: mem}
	r.meta = (*unix.PerfEventMmapPage)(unsafe.Pointer(&mem[0]))
	off, size := r.meta.Data_offset, r.meta.Data_size
	if off == 0 || size == 0 {
		// Kernels before 4.1 do not fill data_offset/data_size.
		off, size = uint64(ps), uint64(pages*ps)
	}
	if off+size > uint64(len(mem)) || size&(size-1) != 0 {
		unix.Munmap(mem)
		return nil, fmt.Errorf("perf ring buffer on cpu %d: bad data area %d+%d", cpu, off, size)
	}
	r.data = mem[off : off+size]
	r.mask = size - 1
	r.scratch = make([]byte, 1<<16)
	return r, nil
}

// drainSpans is drain for recorders that copy the ring to the file as it
// is: fn sees each whole record (for bookkeeping), then span receives the
// ring's bytes of every whole record, in at most two contiguous pieces (the
// ring wraps), and only then is the tail published.
func (r *ring) drainSpans(fn func(rec []byte), span func(b []byte)) int {
	tail0 := atomic.LoadUint64(&r.meta.Data_tail)
	good := tail0
	n := r.consume(func(rec []byte, end uint64) {
		fn(rec)
		good = end
	})
	if good > tail0 {
		size := uint64(len(r.data))
		from, to := tail0&r.mask, good-tail0
		if from+to <= size {
			span(r.data[from : from+to])
		} else {
			span(r.data[from:])
			span(r.data[:to-(size-from)])
		}
	}
	// Publish the new tail after the bytes are written out: the kernel may
	// overwrite them afterwards.
	atomic.StoreUint64(&r.meta.Data_tail, r.pendingTail)
	return n
}

// drain calls fn for every complete record between data_tail and
// data_head, then releases them to the kernel. rec is the whole record
// (header included); it is valid only during the call. It returns the
// number of records read.
func (r *ring) drain(fn func(rec []byte)) int {
	n := r.consume(func(rec []byte, _ uint64) { fn(rec) })
	atomic.StoreUint64(&r.meta.Data_tail, r.pendingTail)
	return n
}

// consume walks the records between tail and head, calling fn with each
// whole record and the ring offset just past it, and leaves in pendingTail
// the tail to publish.
func (r *ring) consume(fn func(rec []byte, end uint64)) int {
	// data_head is written by the kernel; the atomic load orders the
	// reads of the records after it (smp_rmb in perf's tools).
	head := atomic.LoadUint64(&r.meta.Data_head)
	tail := atomic.LoadUint64(&r.meta.Data_tail)
	n := 0
	size := uint64(len(r.data))
	for tail < head {
		off := tail & r.mask
		var hdr [8]byte
		if off+8 <= size {
			copy(hdr[:], r.data[off:off+8])
		} else {
			k := copy(hdr[:], r.data[off:])
			copy(hdr[k:], r.data)
		}
		rsize := uint64(binary.LittleEndian.Uint16(hdr[6:]))
		if rsize < 8 || tail+rsize > head {
			// Corrupt or partial: drop everything up to head.
			tail = head
			break
		}
		var rec []byte
		if off+rsize <= size {
			rec = r.data[off : off+rsize]
		} else {
			k := copy(r.scratch, r.data[off:])
			copy(r.scratch[k:rsize], r.data)
			rec = r.scratch[:rsize]
		}
		fn(rec, tail+rsize)
		tail += rsize
		n++
	}
	// The caller publishes the new tail once the records are consumed
	// (smp_mb then store in perf's tools).
	r.pendingTail = tail
	return n
}

func (r *ring) close() {
	if r.mem != nil {
		unix.Munmap(r.mem)
		r.mem = nil
	}
}
