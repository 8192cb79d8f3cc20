package shard

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
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
var ErrBadSnapshot = errors.New("shard: bad snapshot")

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

// SnapshotData returns the snapshot of queue's replica held in st: the
// image stored under imageKey with its index, and every record of the
// queue's key ranges as they are now. It fails with the store's errors,
// or one wrapping ErrBadSnapshot when no image is stored.
func SnapshotData(st Storage, queue string, imageKey []byte) (index uint64, data []byte, err error) {
	index, image, found, err := LoadImage(st, imageKey)
	if err != nil {
		return 0, nil, err
	}
	if !found {
		return 0, nil, fmt.Errorf("%w: no image of queue %s", ErrBadSnapshot, queue)
	}
	data = append(data, snapshotVersion)
	data = binary.AppendUvarint(data, index)
	data = binary.AppendUvarint(data, uint64(len(image)))
	data = append(data, image...)
	for _, r := range sched.QueueRanges(queue) {
		err := st.Scan(r.Start, r.End, func(k, v []byte) error {
			data = binary.AppendUvarint(data, uint64(len(k)))
			data = append(data, k...)
			data = binary.AppendUvarint(data, uint64(len(v)))
			data = append(data, v...)
			return nil
		})
		if err != nil {
			return 0, nil, err
		}
	}
	return index, data, nil
}

// snapshot is a decoded snapshot's data; its slices point into the data.
type snapshot struct {
	index   uint64
	image   []byte
	records [][2][]byte
}

// decodeSnapshot decodes a snapshot of queue. It fails with an error
// wrapping ErrBadSnapshot when data does not decode or holds a record
// outside the queue's key ranges.
func decodeSnapshot(queue string, data []byte) (*snapshot, error) {
	if len(data) == 0 || data[0] != snapshotVersion {
		return nil, fmt.Errorf("%w: version", ErrBadSnapshot)
	}
	b := data[1:]
	next := func() (uint64, bool) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return 0, false
		}
		b = b[n:]
		return v, true
	}
	take := func() ([]byte, bool) {
		n, ok := next()
		if !ok || n > uint64(len(b)) {
			return nil, false
		}
		v := b[:n:n]
		b = b[n:]
		return v, true
	}
	s := &snapshot{}
	var ok bool
	if s.index, ok = next(); !ok {
		return nil, fmt.Errorf("%w: index", ErrBadSnapshot)
	}
	if s.image, ok = take(); !ok {
		return nil, fmt.Errorf("%w: image", ErrBadSnapshot)
	}
	ranges := sched.QueueRanges(queue)
	for len(b) > 0 {
		k, ok1 := take()
		v, ok2 := take()
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%w: record %d", ErrBadSnapshot, len(s.records))
		}
		in := false
		for _, r := range ranges {
			if bytes.Compare(k, r.Start) >= 0 && bytes.Compare(k, r.End) < 0 {
				in = true
				break
			}
		}
		if !in {
			return nil, fmt.Errorf("%w: record %q is not queue %s's", ErrBadSnapshot, k, queue)
		}
		s.records = append(s.records, [2][]byte{k, v})
	}
	return s, nil
}

// Install replaces the replica's state with a snapshot of its group at
// index (SnapshotData's data), received from the leader: the queue's
// records, its image and the applied index are written in one storage
// group, and the replica goes on from the entries after index. It is
// queued behind the entries handed to Commit before it, and ignored if
// the replica has applied index already. A snapshot that does not decode
// stops the replica, as a committed entry that does not would.
func (sh *Shard) Install(index uint64, data []byte) {
	sh.Commit([]Entry{{Index: index, Data: data, Snapshot: true}})
}

// install applies a snapshot entry on the loop goroutine.
func (sh *Shard) install(e Entry) {
	r := sh.rep
	if e.Index <= r.applied {
		return
	}
	if err := sh.installSnapshot(e); err != nil {
		err = fmt.Errorf("shard: snapshot %d of %s: %w", e.Index, r.cfg.Queue, err)
		sh.storageFailed(err)
		sh.log.Error("cannot install a snapshot; the replica stops", "err", err)
	}
}

func (sh *Shard) installSnapshot(e Entry) error {
	r := sh.rep
	snap, err := decodeSnapshot(r.cfg.Queue, e.Data)
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
				sh.storageFailed(fmt.Errorf("shard: snapshot %d of %s: %w", snap.index, r.cfg.Queue, err))
			}
		})
		b = &store.Batch{}
	}
	var old [][]byte // the replica's records, deleted after the scan
	for _, rg := range sched.QueueRanges(r.cfg.Queue) {
		err := sh.st.Scan(rg.Start, rg.End, func(k, _ []byte) error {
			old = append(old, bytes.Clone(k))
			return nil
		})
		if err != nil {
			return err
		}
	}
	for _, k := range old {
		b.Delete(k)
		next()
	}
	for _, kv := range snap.records {
		b.Put(kv[0], kv[1])
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
	sh.log.Info("installed a snapshot", "index", snap.index, "records", len(snap.records), "bytes", len(e.Data))
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
			sh.storageFailed(fmt.Errorf("shard: image %d of %s: %w", index, r.cfg.Queue, err))
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
