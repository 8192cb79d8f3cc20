package store

import (
	"errors"
	"fmt"
	"io"
	"sync"
)

// Read-ahead for scans. A scan reads values in key order, and the values
// of one queue's messages, keyed by increasing IDs, lie in increasing log
// order: a recovery scan of a million pending messages read them with a
// million preads, most of its time. Once two values in a row lie close
// together and in order in one segment, the scan reads windows of the
// file instead, from 64 KiB doubling to 1 MiB, and serves the values
// that fall within a window from it: a thousand reads for a gigabyte.
// Values the index refers to never change in the file (segments are
// append-only and a scan holds a reference on each), so a window read
// earlier in the scan is as good as a fresh read. A scan whose values
// jump about (random IDs, interleaved queues far apart) keeps reading
// each value alone, through the cache of recent log bytes.
const (
	minWindow = 64 << 10
	maxWindow = 1 << 20
	// nearGap is how far past the end of the previous value the next
	// one may start and still count as read in order.
	nearGap = 64 << 10
)

// windows recycles read-ahead buffers (of maxWindow bytes) across scans:
// recovery scans each queue in turn, and many queues hold few messages.
var windows = sync.Pool{New: func() any { b := make([]byte, maxWindow); return &b }}

// readAhead is one scan's read-ahead state.
type readAhead struct {
	d    *Disk
	buf  *[]byte  // the pooled window buffer, nil until the first window
	win  []byte   // the window: bytes of seg from off on
	seg  *segment // the window's segment
	off  uint32   // file offset of win[0]
	size int      // size of the next window; 0 while reading values alone
	// prevSeg and prevEnd locate the end of the value read before.
	prevSeg *segment
	prevEnd uint32
}

// value returns the value of vlen bytes at offset off of s, read into dst
// (len(dst) == vlen) or aliasing the window; it is valid until the next
// call. The caller holds a reference on s.
func (r *readAhead) value(dst []byte, s *segment, off, vlen uint32) ([]byte, error) {
	if s == r.seg && off >= r.off && uint64(off)+uint64(vlen) <= uint64(r.off)+uint64(len(r.win)) {
		return r.win[off-r.off : off-r.off+vlen], nil
	}
	near := s == r.prevSeg && off >= r.prevEnd && off-r.prevEnd <= nearGap
	r.prevSeg, r.prevEnd = s, off+vlen
	if !near || vlen > maxWindow/2 {
		r.size = 0
		return dst, r.d.readValue(dst, s, off)
	}
	r.size = min(max(2*r.size, minWindow), maxWindow)
	if r.buf == nil {
		r.buf = windows.Get().(*[]byte)
	}
	w := (*r.buf)[:r.size]
	n, err := s.f.ReadAt(w, int64(off))
	if err != nil && !(errors.Is(err, io.EOF) && n >= int(vlen)) {
		return nil, fmt.Errorf("read segment %s offset %d: %w", s.name(), off, err)
	}
	r.d.stats.cacheMisses.Add(1)
	r.win, r.seg, r.off = w[:n], s, off
	return r.win[:vlen], nil
}

// release gives the window buffer back.
func (r *readAhead) release() {
	if r.buf != nil {
		windows.Put(r.buf)
		r.buf, r.win, r.seg = nil, nil, nil
	}
}
