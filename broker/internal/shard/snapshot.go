package shard

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// A replica's state at an entry boundary is its scheduler's image
// (sched.AppendImage) at that entry's index: the image is stored under
// Replication.ImageKey, as the index (8 bytes big-endian) followed by the
// image, in a storage group submitted right after the entry's effects.
// The store then holds that entry's state or a later one, and the image
// plus the entries after its index rebuild the replica exactly: an entry
// replayed over a store that already holds its effects writes the same
// records again. So the group's Raft log is needed only from the image's
// index on, and the cluster compacts it there (Replication.Imaged).
//
// A snapshot sent to a replica that lags behind the compacted log is the
// image and a scan of the queue's records (sched.QueueRanges) made at any
// moment after the image was stored (SnapshotData). The scan may hold
// effects of entries after the image's index; the replica that installs
// it replays those entries, which write their records again, so it ends
// with the same state as every other replica.

// ErrBadSnapshot is wrapped by the errors of a snapshot's data that does
// not decode, or that holds a record outside its queue's key ranges.
var ErrBadSnapshot = errors.New("bad queue snapshot")

// snapshotVersion is the first byte of a snapshot's data:
//
//	version 1 | index uvarint | image length uvarint | image | records
//	record: key length uvarint | key | value length uvarint | value
//
// The records are the queue's key ranges, in key order.
const snapshotVersion = 1

// defaultImageEvery is Replication.ImageEvery's default, in bytes of
// applied entries.
const defaultImageEvery = 64 << 20

// maxImageSize is the largest image stored: its record, with the index,
// must fit in a store value. Tests lower it.
var maxImageSize atomic.Int64

func init() { maxImageSize.Store(store.MaxValueSize - 8) }

// LoadImage reads the image stored under key: its index, and the image;
// found is false when there is none. The error is the store's, or wraps
// ErrBadSnapshot for a record too short to hold an index.
func LoadImage(st Storage, key []byte) (index uint64, image []byte, found bool, err error) {
	v, err := st.Get(key)
	if err != nil {
		if isNotFound(err) {
			return 0, nil, false, nil
		}
		return 0, nil, false, err
	}
	if len(v) < 8 {
		return 0, nil, false, fmt.Errorf("%w: image record of %d bytes", ErrBadSnapshot, len(v))
	}
	return binary.BigEndian.Uint64(v), v[8:], true, nil
}

// WriteSnapshot writes to w the snapshot of queue's replica held in st
// at index: image, the scheduler's image stored at index (LoadImage), and
// every record of the queue's key ranges as they are now, read in one
// moment of the store (one Scan per range, so a record written between
// two ranges may be missing or stale: the entries after index, which the
// receiver replays, write it again). It reads and writes as it goes, so
// a snapshot of any size costs a bounded amount of memory. It fails with
// w's errors or the store's.
func WriteSnapshot(w io.Writer, st Storage, queue string, index uint64, image []byte) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	var hdr []byte
	hdr = append(hdr, snapshotVersion)
	hdr = binary.AppendUvarint(hdr, index)
	hdr = binary.AppendUvarint(hdr, uint64(len(image)))
	if _, err := bw.Write(hdr); err != nil {
		return err
	}
	if _, err := bw.Write(image); err != nil {
		return err
	}
	for _, r := range sched.QueueRanges(queue) {
		err := st.Scan(r.Start, r.End, func(k, v []byte) error {
			hdr = binary.AppendUvarint(hdr[:0], uint64(len(k)))
			bw.Write(hdr)
			bw.Write(k)
			hdr = binary.AppendUvarint(hdr[:0], uint64(len(v)))
			bw.Write(hdr)
			_, err := bw.Write(v)
			return err
		})
		if err != nil {
			return err
		}
	}
	return bw.Flush()
}

// A snapshotReader decodes a snapshot's data as it reads it: the header
// (readSnapshot), then one record at a time (next).
type snapshotReader struct {
	r      *bufio.Reader
	src    *readErr
	queue  string
	ranges []sched.KeyRange
	index  uint64
	image  []byte
	n      int    // records read
	k, v   []byte // the last record's, reused
}

// readSnapshot reads the header of a snapshot of queue from r: its
// version, index and image. It fails with an error wrapping
// ErrBadSnapshot for data that is not a snapshot's, or with r's error.
func readSnapshot(queue string, r io.Reader) (*snapshotReader, error) {
	src := &readErr{r: r}
	s := &snapshotReader{r: bufio.NewReaderSize(src, 256<<10), src: src, queue: queue, ranges: sched.QueueRanges(queue)}
	v, err := s.r.ReadByte()
	if err != nil || v != snapshotVersion {
		return nil, s.bad(err, "version")
	}
	if s.index, err = binary.ReadUvarint(s.r); err != nil {
		return nil, s.bad(err, "index")
	}
	if s.image, err = s.take(nil, maxImageSize.Load()); err != nil {
		return nil, s.bad(err, "image")
	}
	return s, nil
}

// readErr remembers the error of the reader under a snapshotReader, other
// than io.EOF: a failure to read, as opposed to bad data.
type readErr struct {
	r   io.Reader
	err error
}

func (e *readErr) Read(p []byte) (int, error) {
	n, err := e.r.Read(p)
	if err != nil && err != io.EOF && e.err == nil {
		e.err = err
	}
	return n, err
}

// bad wraps a failure to decode what: the reader's error if it failed,
// else ErrBadSnapshot (data that ends early or holds a bad value).
func (s *snapshotReader) bad(err error, what string) error {
	if s.src.err != nil {
		return fmt.Errorf("snapshot %s: %w", what, s.src.err)
	}
	if err == nil {
		return fmt.Errorf("%w: %s", ErrBadSnapshot, what)
	}
	return fmt.Errorf("%w: %s: %v", ErrBadSnapshot, what, err)
}

var errTooLong = errors.New("length over the limit")

// take reads a length (uvarint, at most limit) and that many bytes into
// buf's storage.
func (s *snapshotReader) take(buf []byte, limit int64) ([]byte, error) {
	n, err := binary.ReadUvarint(s.r)
	if err != nil {
		return nil, err
	}
	if n > uint64(limit) {
		return nil, errTooLong
	}
	if uint64(cap(buf)) < n {
		buf = make([]byte, n)
	}
	buf = buf[:n]
	if _, err := io.ReadFull(s.r, buf); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, err
	}
	return buf, nil
}

// next returns the next record, valid until the following call, or
// io.EOF after the last. A record that does not decode, or lies outside
// the queue's key ranges, fails with an error wrapping ErrBadSnapshot.
func (s *snapshotReader) next() (k, v []byte, err error) {
	if _, err := s.r.Peek(1); err != nil {
		if s.src.err != nil {
			return nil, nil, fmt.Errorf("snapshot record %d: %w", s.n, s.src.err)
		}
		return nil, nil, io.EOF
	}
	if s.k, err = s.take(s.k, store.MaxKeySize); err != nil {
		return nil, nil, s.bad(err, fmt.Sprintf("record %d", s.n))
	}
	if s.v, err = s.take(s.v, store.MaxValueSize); err != nil {
		return nil, nil, s.bad(err, fmt.Sprintf("record %d", s.n))
	}
	in := false
	for _, r := range s.ranges {
		if bytes.Compare(s.k, r.Start) >= 0 && bytes.Compare(s.k, r.End) < 0 {
			in = true
			break
		}
	}
	if !in {
		return nil, nil, fmt.Errorf("%w: record %q is not queue %s's", ErrBadSnapshot, s.k, s.queue)
	}
	s.n++
	return s.k, s.v, nil
}

// CheckSnapshot reads a snapshot of queue from r to its end and returns
// its index, without storing anything: a receiver checks a snapshot as
// it arrives, so that data that does not decode is refused rather than
// installed. It checks the layout and every record's key, not the image,
// which only Install loads (loading it here would cost the memory of the
// queue's whole state once more). It fails with an error wrapping
// ErrBadSnapshot, or with r's error.
func CheckSnapshot(queue string, r io.Reader) (index uint64, err error) {
	s, err := readSnapshot(queue, r)
	if err != nil {
		return 0, err
	}
	for {
		if _, _, err := s.next(); err == io.EOF {
			return s.index, nil
		} else if err != nil {
			return 0, err
		}
	}
}

// Install replaces the replica's state with a snapshot of its group at
// index (WriteSnapshot's data, read from data), received from the
// leader: the queue's records, its image and the applied index are
// written in storage groups as data is read, the image and the applied
// index last, and the replica goes on from the entries after index. It
// is queued behind the entries handed to Commit before it, and ignored if
// the replica has applied index already. The shard closes data once done
// with it, or when it closes first. A snapshot that does not decode
// stops the replica, as a committed entry that does not would.
func (sh *Shard) Install(index uint64, data io.ReadCloser) {
	sh.Commit([]Entry{{Index: index, Snapshot: data}})
}

// install applies a snapshot entry on the loop goroutine.
func (sh *Shard) install(e Entry) {
	defer e.Snapshot.Close()
	r := sh.rep
	if e.Index <= r.applied {
		return
	}
	if err := sh.installSnapshot(e); err != nil {
		err = fmt.Errorf("snapshot %d of queue %s: %w", e.Index, r.cfg.Queue, err)
		sh.storageFailed(err)
		sh.log.Error("cannot install a snapshot; the replica stops", "err", err)
	}
}

func (sh *Shard) installSnapshot(e Entry) error {
	r := sh.rep
	snap, err := readSnapshot(r.cfg.Queue, e.Snapshot)
	if err != nil {
		return err
	}
	if snap.index != e.Index {
		return fmt.Errorf("%w: data of index %d", ErrBadSnapshot, snap.index)
	}
	s, err := sched.LoadImage(sh.cfg.Sched, snap.image)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrBadSnapshot, err)
	}
	// The records go in storage groups of up to installGroup bytes, the
	// image and the applied index in the last: a node that stops before
	// that installs the snapshot again from its log (recoverReplica).
	b := &store.Batch{}
	next := func() {
		if b.Size() < installGroup {
			return
		}
		b.NoSync()
		size := int64(b.Size())
		sh.inflight.acquire(size)
		sh.st.ApplyAsync(b, func(err error) {
			sh.inflight.release(size)
			if err != nil {
				sh.storageFailed(fmt.Errorf("snapshot %d of queue %s: %w", snap.index, r.cfg.Queue, err))
			}
		})
		b = &store.Batch{}
	}
	// The replica's records go first: the scan sees the store of one
	// moment, so the deletions submitted meanwhile do not disturb it.
	for _, rg := range sched.QueueRanges(r.cfg.Queue) {
		err := sh.st.Scan(rg.Start, rg.End, func(k, _ []byte) error {
			b.Delete(k)
			next()
			return nil
		})
		if err != nil {
			return err
		}
	}
	var size int64
	for {
		k, v, err := snap.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		b.Put(k, v)
		size += int64(len(k) + len(v))
		next()
	}
	sh.putImage(b, snap.index, snap.image)
	// The replica's commands and callbacks were the old state's; a
	// follower has none but its subscriptions' sinks, which end.
	for sub, sink := range sh.sinks {
		sink.Ended(sub, r.cfg.NotLeader())
		delete(sh.sinks, sub)
	}
	sh.s = s
	r.applied = snap.index
	r.sinceImage = 0
	r.imageSize = len(snap.image)
	sh.log.Info("installed a snapshot", "index", snap.index, "records", snap.n, "bytes", size+int64(len(snap.image)))
	sh.applyImage(b, snap.index)
	return nil
}

// installGroup is the size from which an installed snapshot's records
// go on in another storage group (a group holds at most
// store.MaxGroupSize).
var installGroup = 64 << 20

// putImage puts the image record and the applied index into b.
func (sh *Shard) putImage(b *store.Batch, index uint64, image []byte) {
	r := sh.rep
	v := make([]byte, 8, 8+len(image))
	binary.BigEndian.PutUint64(v, index)
	b.Grow(len(r.cfg.ImageKey) + len(v) + len(r.cfg.AppliedKey) + 8 + 2*21 + len(image))
	b.Put(r.cfg.ImageKey, append(v, image...))
	var a [8]byte
	binary.BigEndian.PutUint64(a[:], index)
	b.Put(r.cfg.AppliedKey, a[:])
	b.NoSync()
}

// applyImage submits b, which holds the image at index, behind the
// groups already submitted, and tells the cluster once it is visible.
func (sh *Shard) applyImage(b *store.Batch, index uint64) {
	r := sh.rep
	size := int64(b.Size())
	sh.inflight.acquire(size)
	sh.st.ApplyAsync(b, func(err error) {
		sh.inflight.release(size)
		if err != nil {
			sh.storageFailed(fmt.Errorf("image %d of queue %s: %w", index, r.cfg.Queue, err))
			return
		}
		if r.cfg.Imaged != nil {
			r.cfg.Imaged(index)
		}
	})
}

// maybeImage stores the scheduler's image after entry index when enough
// of the log has been applied since the last one: at least
// Replication.ImageEvery bytes, and at least twice the last image's size,
// so that images cost at most half as much to write as the log.
func (sh *Shard) maybeImage(index uint64) {
	r := sh.rep
	every := r.cfg.ImageEvery
	if every == 0 {
		every = defaultImageEvery
	}
	if every < 0 || r.sinceImage < every || r.sinceImage < 2*int64(r.imageSize) || sh.s.HasReady() {
		return
	}
	// Sized from the last image, so that a large image is not copied
	// over and over as it grows.
	image := sh.s.AppendImage(make([]byte, 0, r.imageSize+r.imageSize/4+4096))
	if int64(len(image)) > maxImageSize.Load() {
		// Too large for one record (some 11 million pending messages):
		// no image, so the log is not compacted; try again after the
		// next interval.
		r.sinceImage = 0
		sh.log.Warn("the queue's state is too large for an image; its log is not compacted", "bytes", len(image), "max", maxImageSize.Load())
		return
	}
	b := &store.Batch{}
	sh.putImage(b, index, image)
	r.sinceImage = 0
	r.imageSize = len(image)
	sh.applyImage(b, index)
}
