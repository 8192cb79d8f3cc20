package store

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
)

// GetMany reads the values of keys, as Get does each, with fewer reads.
// It looks every key up under one lock, then reads the values in log
// order, with one read for each run of values that lie close together
// in a segment: a delivery of a few hundred messages enqueued one after
// another costs one read of the file, not a few hundred.
//
// It calls fn(i, value) for each key i that is present, in log order
// rather than the order of keys; a key that is absent is skipped. value
// is valid only during the call and must not be modified. GetMany
// returns ErrClosed, a read error, or the first error fn returns, which
// stops it.
func (d *Disk) GetMany(keys [][]byte, fn func(i int, value []byte) error) error {
	ws := wantsPool.Get().(*[]want)
	defer func() {
		clear(*ws)
		*ws = (*ws)[:0]
		wantsPool.Put(ws)
	}()
	d.mu.RLock()
	if d.closed {
		d.mu.RUnlock()
		return ErrClosed
	}
	for i, k := range keys {
		e, ok := d.index.get(k)
		if !ok {
			continue
		}
		s := d.seg(e.seg)
		s.acquire()
		*ws = append(*ws, want{i: i, loc: e, s: s})
	}
	d.mu.RUnlock()
	defer func() {
		for _, w := range *ws {
			w.s.release()
		}
	}()
	vs := *ws
	slices.SortFunc(vs, func(a, b want) int {
		if c := cmp.Compare(a.seg, b.seg); c != 0 {
			return c
		}
		return cmp.Compare(a.off, b.off)
	})
	var buf *[]byte // a pooled window, taken at the first run
	defer func() {
		if buf != nil {
			windows.Put(buf)
		}
	}()
	for j := 0; j < len(vs); {
		// The run: the values after vs[j] in the same segment, each
		// starting at most nearGap past the end of the one before, all
		// within one window.
		first := vs[j]
		end := uint64(first.off) + uint64(first.vlen)
		k := j + 1
		for ; k < len(vs); k++ {
			w := vs[k]
			wend := uint64(w.off) + uint64(w.vlen)
			if w.seg != first.seg || uint64(w.off) > end+nearGap || wend-uint64(first.off) > maxWindow {
				break
			}
			end = max(end, wend)
		}
		span := int(end - uint64(first.off))
		var win []byte
		switch {
		case span > maxWindow:
			// One value larger than a window: read it alone.
			win = make([]byte, span)
			if err := d.readValue(win, first.s, first.off); err != nil {
				return err
			}
		default:
			if buf == nil {
				buf = windows.Get().(*[]byte)
			}
			win = (*buf)[:span]
			if err := d.readSpan(win, first.s, first.off); err != nil {
				return err
			}
		}
		for _, w := range vs[j:k] {
			o := w.off - first.off
			if err := fn(w.i, win[o:o+w.vlen:o+w.vlen]); err != nil {
				return err
			}
		}
		j = k
	}
	return nil
}

// want is a value GetMany reads: the index of its key, where it lies, and
// the segment it lies in (referenced until GetMany returns).
type want struct {
	i int
	loc
	s *segment
}

// wantsPool recycles GetMany's lists of values to read.
var wantsPool = sync.Pool{New: func() any { return new([]want) }}

// readSpan fills win with the bytes of s from offset off, from the cache
// of recent log bytes if it holds them all, else with one read of the
// file. The caller holds a reference on s.
func (d *Disk) readSpan(win []byte, s *segment, off uint32) error {
	if d.cache.read(win, s.base+uint64(off)) {
		d.stats.cacheHits.Add(1)
		return nil
	}
	d.stats.cacheMisses.Add(1)
	n, err := s.f.ReadAt(win, int64(off))
	if err != nil && !(errors.Is(err, io.EOF) && n == len(win)) {
		return fmt.Errorf("read segment %s offset %d: %w", s.name(), off, err)
	}
	return nil
}
