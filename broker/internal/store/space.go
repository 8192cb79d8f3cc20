package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/tidwall/wal"
)

// Disk full.
//
// A write that fails for lack of space (ENOSPC, EDQUOT or EFBIG from a
// write or a file creation) does not stop the store; a failed fsync does,
// whatever its errno, since after one the state of the page cache is
// unknown. On a space failure the committer:
//
//  1. Restores the log exactly as it was before the failed commit
//     (restore): tidwall/wal appends a commit to its in-memory copy of the
//     tail segment before writing the file, so a failed write leaves the
//     memory ahead of the file and the file holding part of the commit.
//     The tail file is cut back to its durable size, the segment files the
//     commit started are removed, and the wal.Log is reopened, which
//     reloads the tail from the file.
//  2. Marks the store full (Health().Full) and, on the first failure of an
//     episode, logs one ERROR line with the free bytes.
//  3. Deletes the reserve file (Options.ReserveSize), which frees space
//     for the groups that must get through, and retries the commit.
//  4. If the commit fails again with no reserve left, fails its growth
//     groups (Batch.RefuseWhenFull) and compaction copies with ErrNoSpace,
//     and retries the rest once free space shows up, checking once per
//     interval: later groups wait behind it, in order. Close ends the wait
//     and fails the waiting groups with ErrNoSpace.
//
// While the store is full, a group marked RefuseWhenFull fails at once
// with ErrNoSpace and nothing of it is written. Every other group (an
// ack's delete, a nack's or an expired lease's state) is written from the
// space the reserve freed, and compaction goes on reclaiming: acks turn
// records into garbage, compaction copies the few live ones forward and
// deletes whole segments. The shard refuses enqueues itself while
// Health().Full, before they reach the scheduler.
//
// A goroutine checks the file system's free space (statfs) once per
// interval while the store is full. When there is room for the reserve
// plus one segment, it recreates the reserve and the store accepts growth
// again, with one INFO line.

// ErrNoSpace is returned for a group that the store did not write because
// the data disk is full: a group marked RefuseWhenFull while the store is
// full, or any group still waiting for space at Close. Nothing of the
// group was written. It wraps fault.ErrResourceExhausted.
var ErrNoSpace = fmt.Errorf("no space left on the data disk: %w", fault.ErrResourceExhausted)

// Health describes whether the store takes writes. Reading it costs two
// atomic loads.
type Health struct {
	// Full is true while the data disk is out of space: groups marked
	// RefuseWhenFull fail with ErrNoSpace, the others are written from the
	// reserve. It clears by itself once free space returns.
	Full bool
	// Err is the error that stopped every write for good (an fsync or an
	// I/O error other than a lack of space), or nil. Reads go on; a restart
	// recovers from the durable log.
	Err error
}

// Health returns the store's write condition.
func (d *Disk) Health() Health {
	return Health{Full: d.full.Load(), Err: d.sticky()}
}

// Failed returns a channel that is closed when a write or fsync fails for
// good; Health().Err is then the cause. The store logs nothing about it:
// its owner decides (fila-server exits with one ERROR line).
func (d *Disk) Failed() <-chan struct{} { return d.failedc }

const (
	reserveName = "RESERVE"
	// defaultCheckEvery is how often a full store checks for free space.
	defaultCheckEvery = time.Second
	// waitMargin is the free space beyond a waiting commit's bytes at
	// which the committer retries it.
	waitMargin = 64 << 10
)

// isNoSpace reports whether err is a write or file creation that failed
// for lack of space. An fsync error never is.
func isNoSpace(err error) bool {
	var pe *fs.PathError
	if errors.As(err, &pe) && pe.Op == "sync" {
		return false
	}
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EFBIG)
}

// restore puts the log back as it was before the commit whose write just
// failed: the files, and the wal.Log's memory. Runs on the committer
// goroutine, with d.writes describing the failed commit.
func (d *Disk) restore() error {
	d.logMu.Lock()
	defer d.logMu.Unlock()
	tail := d.writes[0].s
	// Closing the log fsyncs its tail file, which is cut below anyway. A
	// log whose new segment could not be created has no tail file open:
	// Close reports os.ErrInvalid and holds nothing.
	if err := d.log.Close(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("close log: %w", err)
	}
	for _, w := range d.writes[1:] {
		if w.s.f != nil {
			w.s.f.Close()
			w.s.f = nil
		}
		if err := os.Remove(w.s.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	if err := os.Truncate(tail.path, tail.size); err != nil {
		return err
	}
	log, err := wal.Open(d.dir, d.walOptions())
	if err != nil {
		return fmt.Errorf("reopen log: %w", err)
	}
	// The first index may have moved (the compactor truncates the front
	// under logMu and updates the segment table after); the last must not.
	if last, err := log.LastIndex(); err != nil || last != d.lastIndex {
		log.Close()
		return fmt.Errorf("reopened log ends at record %d, want %d: %v", last, d.lastIndex, err)
	}
	d.log = log
	d.tailSized = false
	return nil
}

// enterFull marks the store full after a space failure and deletes the
// reserve; it reports whether that freed space. The first failure of an
// episode logs one ERROR line and wakes the space checker and the
// compactor.
func (d *Disk) enterFull(cause error) (freed bool) {
	d.spaceMu.Lock()
	defer d.spaceMu.Unlock()
	if d.reserved {
		err := os.Remove(filepath.Join(d.dir, reserveName))
		if err == nil || errors.Is(err, fs.ErrNotExist) {
			d.reserved = false
			freed = err == nil
		}
	}
	if d.full.Swap(true) {
		return freed
	}
	free, _ := d.freeSpace()
	d.logger.Error("store: the data disk is full: new messages are refused until space is freed; acks and other settlements go on",
		"free_bytes", free, "reserve_released", freed, "cause", cause)
	select {
	case d.fullc <- struct{}{}:
	default:
	}
	if d.autoCompact {
		select {
		case d.compactc <- struct{}{}:
		default:
		}
	}
	return freed
}

// waitSpace waits until the file system has room for need bytes, checking
// once per interval. It returns false if the store is closing. Runs on the
// committer goroutine.
func (d *Disk) waitSpace(need int64, cause error) bool {
	if !d.stalled {
		d.stalled = true
		free, _ := d.freeSpace()
		d.logger.Warn("store: no space left even for settlements; writes wait for free space",
			"free_bytes", free, "waiting_bytes", need, "cause", cause)
	}
	t := time.NewTimer(d.checkEvery)
	defer t.Stop()
	for {
		select {
		case <-d.stopc:
			return false
		case <-t.C:
		}
		free, err := d.freeSpace()
		if err != nil || free >= need+waitMargin {
			return true
		}
		t.Reset(d.checkEvery)
	}
}

// spaceLoop is the space checker goroutine: while the store is full, it
// checks the free space once per interval.
func (d *Disk) spaceLoop() {
	defer close(d.spaceDone)
	for {
		select {
		case <-d.stopc:
			return
		case <-d.fullc:
		}
		t := time.NewTicker(d.checkEvery)
		for d.full.Load() {
			select {
			case <-d.stopc:
				t.Stop()
				return
			case <-t.C:
			}
			d.checkSpace()
		}
		t.Stop()
	}
}

// checkSpace ends a full episode if the file system has room for the
// reserve plus one segment: it recreates the reserve and accepts growth
// again.
func (d *Disk) checkSpace() {
	free, err := d.freeSpace()
	if err == nil && free < d.opts.ReserveSize+d.opts.SegmentSize {
		return
	}
	d.spaceMu.Lock()
	defer d.spaceMu.Unlock()
	if !d.full.Load() {
		return
	}
	if err := d.makeReserve(); err != nil {
		return // still full; the next check tries again
	}
	free, _ = d.freeSpace()
	d.logger.Info("store: free space is back: new messages are accepted again", "free_bytes", free)
	d.full.Store(false)
}

// makeReserve makes the reserve file hold Options.ReserveSize allocated
// bytes, or removes it if the size is zero. On failure it removes the
// partial file, so that it holds no space. Hold spaceMu.
func (d *Disk) makeReserve() error {
	path := filepath.Join(d.dir, reserveName)
	if d.opts.ReserveSize <= 0 {
		d.reserved = false
		if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		return nil
	}
	if d.reserved {
		return nil
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o640)
	if err != nil {
		return err
	}
	err = preallocate(f, d.opts.ReserveSize)
	if err == nil {
		err = f.Truncate(d.opts.ReserveSize)
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(path)
		return fmt.Errorf("reserve %s: %w", path, err)
	}
	d.reserved = true
	return nil
}

// writeZeros extends f with zero bytes to size, for file systems without
// fallocate.
func writeZeros(f *os.File, size int64) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	zeros := make([]byte, 1<<20)
	for off := fi.Size(); off < size; {
		n := int64(len(zeros))
		if size-off < n {
			n = size - off
		}
		if _, err := f.WriteAt(zeros[:n], off); err != nil {
			return err
		}
		off += n
	}
	return nil
}

// freeSpace returns the bytes available on the data directory's file
// system.
func (d *Disk) freeSpace() (int64, error) {
	if d.hooks.freeSpace != nil {
		return d.hooks.freeSpace()
	}
	return freeSpace(d.dir)
}
