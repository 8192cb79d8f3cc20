package store

import (
	"errors"
	"fmt"
	"io"
)

// Space reclamation.
//
// The log only loses segments at its front (tidwall/wal's TruncateFront),
// so reclamation works on a prefix of the oldest segments. A pass:
//
//  1. Plans: the shortest prefix, excluding the tail segment, whose live
//     bytes are at most CompactionThreshold of its size and which holds at
//     least SegmentSize bytes of garbage besides its last record (which
//     stays, step 3), extended over the segments with no live record that
//     follow it. Each pass thus takes at least SegmentSize bytes of
//     garbage off the log and adds only its copy groups' record headers
//     (a few bytes per MiB copied: copies are live), so a Compact that no
//     writer feeds ends. A prefix with no live record
//     qualifies at any threshold. Taking the shortest prefix copies least:
//     the records of younger segments are the likeliest to be deleted
//     soon (a queue consumes from its front), so they are left to die.
//  2. Copies the prefix's live records forward as ordinary groups through
//     the committer, reading the old files with the compactor's own preads
//     while writers keep appending. The committer re-checks each copied
//     key against the index just before writing the copy and drops any key
//     that a later group overwrote or deleted, so a copy never revives an
//     old value. Copies are durable before step 3, and on replay a later
//     copy of a key simply wins over the original.
//  3. Truncates: TruncateFront at the last record of the prefix. The log
//     writes that one record to a NAME.START file, deletes the prefix and
//     renames the START file; a crash at any point leaves either the old
//     files or the new ones, and Open finishes the job. The remnant holds
//     one dead record and goes with the next truncation.
//
// Deletes are never copied: a delete only matters while an older put of
// its key exists, and every older record lies in the prefix removed with
// it (or in the remnant, which the same truncation that removes the delete
// also removes). Writers stall only during TruncateFront, which reads the
// last prefix segment (at most SegmentSize bytes) and writes one record.
//
// Range deletes are dropped the same way, for the same reason: a range
// tombstone only matters while the log holds an older put of a key in its
// range, and every older record lies before it in the log, so in the same
// truncated prefix. That holds whatever keys the range covers: it rests on
// log order only. A live put copied forward lands after every record
// written before the copy, tombstones included, so on replay no earlier
// tombstone removes it (none did: it was live), while a range delete
// written after the copy removes it on replay as it did live; and the
// committer drops a copy whose key a range delete removed between the
// compactor's read and the copy's write (filterCopies finds the key gone
// from the index). A remnant that is a range delete replays as the log's
// first record, over an empty index: it removes nothing. A range delete
// adds no live bytes and takes off those of every put it removes
// (applyRecord), so the live ratio that plans a pass counts it as garbage,
// as it does a delete.

// maybeCompact wakes the compactor when enough garbage accumulated since
// the last pass. Runs on the committer goroutine.
func (d *Disk) maybeCompact() {
	if !d.autoCompact {
		return
	}
	if d.garbage() >= d.nextCompact.Load() {
		select {
		case d.compactc <- struct{}{}:
		default:
		}
	}
}

// garbage returns the bytes of the non-tail segments that no key refers to.
func (d *Disk) garbage() int64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	var g int64
	for _, s := range d.segs[:len(d.segs)-1] {
		g += s.size - s.live
	}
	return g
}

// compactLoop is the compactor goroutine: one pass per wake-up.
func (d *Disk) compactLoop() {
	defer close(d.compactDone)
	for {
		select {
		case <-d.stopc:
			return
		case <-d.compactc:
		}
		// After the store failed for good, its owner reports the failure.
		if err := d.Compact(); err != nil && !errors.Is(err, ErrClosed) && d.sticky() == nil {
			d.logger.Error("store: compaction failed", "err", err)
		}
	}
}

// Compact reclaims space now: it runs passes until no prefix of the log
// qualifies, and returns when done. The store also runs them by itself as
// garbage accumulates, so calling Compact is never required. Afterwards
// the log's older segments hold at most max(live/CompactionThreshold,
// live+SegmentSize+one record) bytes. Errors: ErrClosed, the sticky write
// error, or a read or truncation error naming the segment.
func (d *Disk) Compact() error {
	d.compactMu.Lock()
	defer d.compactMu.Unlock()
	defer func() { d.nextCompact.Store(d.garbage() + d.opts.SegmentSize) }()
	for {
		did, err := d.compactPass()
		if err != nil || !did {
			return err
		}
	}
}

// compactPass runs one pass and reports whether it reclaimed anything.
// The caller holds compactMu.
func (d *Disk) compactPass() (bool, error) {
	prefix, err := d.plan()
	if err != nil || prefix == nil {
		return false, err
	}
	defer func() {
		for _, s := range prefix {
			s.release()
		}
	}()
	for _, s := range prefix {
		if err := d.copyLive(s); err != nil {
			return false, err
		}
	}
	if d.hooks.beforeTruncate != nil {
		if err := d.hooks.beforeTruncate(); err != nil {
			return false, err
		}
	}
	last := prefix[len(prefix)-1]
	d.mu.RLock()
	for _, s := range prefix {
		if s.live != 0 {
			d.mu.RUnlock()
			return false, fmt.Errorf("compact: segment %s still holds %d live bytes after copying", s.name(), s.live)
		}
	}
	d.mu.RUnlock()
	d.logMu.RLock()
	err = d.log.TruncateFront(last.lastIndex())
	d.logMu.RUnlock()
	if err != nil {
		return false, fmt.Errorf("compact: truncate log before %d: %w", last.lastIndex(), err)
	}
	if !d.opts.UnsafeNoSync {
		if err := syncDir(d.dir); err != nil {
			return false, fmt.Errorf("compact: sync directory: %w", err)
		}
		d.stats.syncs.Add(1)
	}
	remnant := &segment{
		id:    last.id,
		index: last.lastIndex(),
		path:  d.path(last.lastIndex()),
		size:  last.size - last.lastOff,
		n:     1,
		base:  last.base + uint64(last.lastOff),
	}
	remnant.synced = remnant.size
	remnant.refs.Store(1)
	var freed int64
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return false, ErrClosed
	}
	removed := d.segs[:len(prefix)]
	segs := make([]*segment, 0, len(d.segs)-len(prefix)+1)
	segs = append(segs, remnant)
	d.segs = append(segs, d.segs[len(prefix):]...)
	d.mu.Unlock()
	for _, s := range removed {
		freed += s.size
		s.release()
	}
	d.stats.compactions.Add(1)
	d.stats.reclaimed.Add(uint64(freed - remnant.size))
	d.logger.Debug("store: compacted", "segments", len(prefix), "reclaimed", freed-remnant.size)
	return true, nil
}

// plan returns the prefix of segments to reclaim, each with a reference
// taken, or nil.
func (d *Disk) plan() ([]*segment, error) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return nil, ErrClosed
	}
	if err := d.sticky(); err != nil {
		return nil, err
	}
	var size, live int64
	best := -1
	old := d.segs[:len(d.segs)-1]
	for i, s := range old {
		size += s.size
		live += s.live
		// Truncating at the log's first record would reclaim nothing: a
		// lone remnant waits for the segments after it.
		progress := s.n > 0 && s.lastIndex() > old[0].index
		// The prefix's last record stays, as the remnant: its bytes are
		// garbage that the pass does not reclaim. Counting them let a
		// large remnant (a copy group, which holds a segment's live
		// records) pay for copying the next segment's live records,
		// whose copy group became the next remnant, pass after pass
		// without end.
		reclaimed := size - live - (s.size - s.lastOff)
		if progress && float64(live) <= d.opts.CompactionThreshold*float64(size) && reclaimed >= d.opts.SegmentSize {
			best = i
			break
		}
	}
	if best < 0 {
		return nil, nil
	}
	// Segments with no live record that follow cost nothing to take along.
	for best+1 < len(old) && old[best+1].live == 0 && old[best+1].n > 0 {
		best++
	}
	prefix := make([]*segment, best+1)
	copy(prefix, d.segs)
	for _, s := range prefix {
		s.acquire()
	}
	return prefix, nil
}

// copyBatchSize is the size at which the compactor submits a copy group.
const copyBatchSize = 1 << 20

// copyLive copies the live records of s forward. Runs on the compacting
// goroutine, which holds a reference on s.
func (d *Disk) copyLive(s *segment) error {
	d.mu.RLock()
	live := s.live
	d.mu.RUnlock()
	if live == 0 {
		return nil
	}
	var b Batch
	var locs []location
	flush := func() error {
		if b.Len() == 0 {
			return nil
		}
		done := make(chan error, 1)
		if err := d.submit(request{b: &b, copies: locs, done: func(err error) { done <- err }}); err != nil {
			return err
		}
		if err := <-done; err != nil {
			return err
		}
		b.Reset()
		locs = locs[:0]
		return nil
	}
	r := &entryReader{f: s.f, size: s.size}
	for {
		off, hdr, rec, err := r.next()
		if err == io.EOF {
			break
		}
		var body int
		if err == nil {
			_, body, err = verifyRecord(rec)
		}
		if err != nil {
			return fmt.Errorf("compact: segment %s offset %d: %w", s.name(), off, err)
		}
		recOff := off + int64(hdr)
		d.mu.RLock()
		for pos := body; pos < len(rec); {
			m, next, _ := nextMutation(rec, pos)
			pos = next
			if m.kind != kindPut {
				continue
			}
			loc := location{seg: s.id, off: uint32(recOff + int64(m.valueOff))}
			if e, ok := d.index.get(m.key); ok && e.seg == loc.seg && e.off == loc.off {
				b.Put(m.key, m.value)
				locs = append(locs, loc)
			}
		}
		d.mu.RUnlock()
		if b.Size() >= copyBatchSize {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	return flush()
}
