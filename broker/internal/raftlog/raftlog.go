// Package raftlog keeps the Raft log, hard state and latest snapshot of
// one replication group in the node's store, and serves them to
// go.etcd.io/raft/v3 through its Storage interface.
//
// Every group of a node shares the node's store, and so its log
// (tidwall/wal underneath), its checksums, its group commit and its
// recovery from a torn tail: the driver puts the entries and hard states
// of every group that has any in one storage group, made durable by one
// fsync, before it sends a message or acknowledges anything. The keys of
// one group, g its ID as 8 bytes big-endian:
//
//	r/<g>/e/<index:8>   entry: type 1B, term uvarint, data
//	r/<g>/hs            hard state: term, vote, commit as uvarints
//	r/<g>/snap          latest snapshot: metadata length uvarint, metadata (protobuf), data
//	r/<g>/sc            a received snapshot's data stored in chunks: count uvarint, total bytes uvarint
//	r/<g>/sd/<index:8><n:4>  chunk n of the data of the snapshot at index
//	r/<g>/cs            configuration applied since the snapshot (protobuf), if any
//
// A received snapshot whose data is larger than 64 MiB is stored in
// chunks, each written in a storage group of its own before the group
// that records the snapshot (ApplySnapshot), so that a snapshot may be
// larger than a store value or a storage group. A snapshot streamed from
// the leader is stored in chunks as it arrives (Stage, PutChunk), before
// raft sees it, and recorded with ApplyStaged. Chunked data is never held
// whole in memory: OpenData reads it back.
//
// Writes go into a store.Batch the caller commits (Append, SetHardState,
// ApplySnapshot, Compact); the Log's view changes at once, and reads of
// entries not yet durable are served from memory. A Log is safe for
// concurrent use.
package raftlog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fila-mq/fila/broker/internal/store"
)

// KV is what a Log reads of the store: Get returns an error wrapping
// store.ErrNotFound for a missing key; Scan calls fn for the keys in
// [start, end) in order, with their values, as the store was at one
// moment (store.Disk.Scan); ScanKeys does the same without the values.
type KV interface {
	Get(key []byte) ([]byte, error)
	Scan(start, end []byte, fn func(key, value []byte) error) error
	ScanKeys(start, end []byte, fn func(key []byte) error) error
}

// ErrCorrupt is wrapped by the errors of a group whose stored log does not
// hold together: an entry that does not decode, or a gap in the indexes.
var ErrCorrupt = errors.New("corrupt group log")

// Log is one group's Raft storage. It implements raft.Storage.
type Log struct {
	kv     KV
	prefix []byte // r/<g>/

	mu    sync.Mutex
	hs    *pb.HardState
	cs    *pb.ConfState // applied since the snapshot; nil: the snapshot's
	snap  *pb.Snapshot  // metadata always set
	terms []uint64      // terms of the entries first()..last
	// recent holds entries appended since Open, by index, until Compact
	// drops them: reads of entries not yet durable come from here.
	recent map[uint64]*pb.Entry
	// source makes the snapshots Snapshot returns (SetSource).
	source func() (*pb.Snapshot, error)
	// scratch encodes an entry before the batch copies it.
	scratch []byte
	// chunks is how many chunk records hold the stored snapshot's data
	// (0: none, the data is in the snap record), and size their bytes;
	// stale holds chunk keys found at Open that belong to no stored
	// snapshot (a node that stopped while it wrote one), deleted with the
	// next snapshot or stage.
	chunks int
	size   int64
	stale  [][]byte
}

// chunkSize is the size of the chunks a received snapshot's data is
// stored in when it is larger (64 MiB; tests lower it).
var chunkSize = 64 << 20

// Open reads group g's log from kv. A group with nothing stored starts
// empty: no entries, no hard state, an empty snapshot. It fails with
// ErrCorrupt when the stored entries do not hold together.
func Open(kv KV, g uint64) (*Log, error) {
	l := &Log{kv: kv, prefix: groupPrefix(g), recent: map[uint64]*pb.Entry{}}
	l.hs = &pb.HardState{}
	l.snap = &pb.Snapshot{Metadata: &pb.SnapshotMetadata{ConfState: &pb.ConfState{}, Index: new(uint64), Term: new(uint64)}}
	if v, err := kv.Get(l.key("hs")); err == nil {
		hs, err := decodeHardState(v)
		if err != nil {
			return nil, err
		}
		l.hs = hs
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if v, err := kv.Get(l.key("snap")); err == nil {
		snap, err := decodeSnapshot(v)
		if err != nil {
			return nil, err
		}
		l.snap = snap
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	if err := l.loadChunks(); err != nil {
		return nil, err
	}
	if v, err := kv.Get(l.key("cs")); err == nil {
		cs := &pb.ConfState{}
		if err := proto.Unmarshal(v, cs); err != nil {
			return nil, fmt.Errorf("%w: configuration: %v", ErrCorrupt, err)
		}
		l.cs = cs
	} else if !errors.Is(err, store.ErrNotFound) {
		return nil, err
	}
	next := l.snap.Metadata.GetIndex() + 1
	start, end := l.entryKey(0), l.entryKey(^uint64(0))
	err := kv.Scan(start, end, func(k, v []byte) error {
		i := binary.BigEndian.Uint64(k[len(k)-8:])
		if i < next {
			return nil // compacted into the snapshot, not yet deleted
		}
		if i != next {
			return fmt.Errorf("%w: entry %d follows %d", ErrCorrupt, i, next-1)
		}
		_, term, _, err := decodeEntryValue(v)
		if err != nil {
			return fmt.Errorf("%w: entry %d: %v", ErrCorrupt, i, err)
		}
		l.terms = append(l.terms, term)
		next++
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// loadChunks checks that the chunk records of the stored snapshot's
// data, if it is stored in chunks, are all there, without reading them,
// and notes the chunk records of no stored snapshot.
func (l *Log) loadChunks() error {
	count, size := 0, int64(0)
	if v, err := l.kv.Get(l.key("sc")); err == nil {
		c, k := binary.Uvarint(v)
		n, k2 := binary.Uvarint(v[max(k, 0):])
		if k <= 0 || k2 <= 0 || c == 0 || c > maxChunks || n > c*uint64(chunkSize) {
			return fmt.Errorf("%w: snapshot chunk count", ErrCorrupt)
		}
		count, size = int(c), int64(n)
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	si, next := l.snap.Metadata.GetIndex(), 0
	start := l.chunkKey(0, 0)
	end := append(l.key("sd"), '0') // after "sd/"
	err := l.kv.ScanKeys(start, end, func(k []byte) error {
		if len(k) != len(start) {
			l.stale = append(l.stale, bytes.Clone(k))
			return nil
		}
		index := binary.BigEndian.Uint64(k[len(k)-12:])
		n := int(binary.BigEndian.Uint32(k[len(k)-4:]))
		if index != si || n >= count {
			l.stale = append(l.stale, bytes.Clone(k))
			return nil
		}
		if n != next {
			return fmt.Errorf("%w: snapshot %d: chunk %d follows %d", ErrCorrupt, si, n, next-1)
		}
		next++
		return nil
	})
	if err != nil {
		return err
	}
	if next != count {
		return fmt.Errorf("%w: snapshot %d: %d of %d chunks", ErrCorrupt, si, next, count)
	}
	l.chunks, l.size = count, size
	return nil
}

// maxChunks bounds a snapshot's chunk records.
const maxChunks = 1 << 24

func groupPrefix(g uint64) []byte {
	p := append([]byte("r/"), make([]byte, 8)...)
	binary.BigEndian.PutUint64(p[2:], g)
	return append(p, '/')
}

func (l *Log) key(name string) []byte {
	return append(append([]byte(nil), l.prefix...), name...)
}

func (l *Log) entryKey(i uint64) []byte {
	k := append(append(make([]byte, 0, len(l.prefix)+10), l.prefix...), 'e', '/')
	return binary.BigEndian.AppendUint64(k, i)
}

func (l *Log) chunkKey(index uint64, n int) []byte {
	k := append(l.key("sd"), '/')
	k = binary.BigEndian.AppendUint64(k, index)
	return binary.BigEndian.AppendUint32(k, uint32(n))
}

// dropChunks deletes the stored snapshot's chunks and the stale ones in b.
// Called with l.mu held, before l.snap changes.
func (l *Log) dropChunks(b *store.Batch) {
	for n := range l.chunks {
		b.Delete(l.chunkKey(l.snap.Metadata.GetIndex(), n))
	}
	if l.chunks > 0 {
		b.Delete(l.key("sc"))
	}
	for _, k := range l.stale {
		b.Delete(k)
	}
	l.chunks, l.size, l.stale = 0, 0, nil
}

// first is the index of the first entry held; last the last one's.
func (l *Log) first() uint64 { return l.snap.Metadata.GetIndex() + 1 }
func (l *Log) last() uint64  { return l.snap.Metadata.GetIndex() + uint64(len(l.terms)) }

// InitialState returns the stored hard state and configuration: the last
// one SetConfState stored, else the snapshot's. Raft starts from it and
// applies only the configuration changes after the applied index.
func (l *Log) InitialState() (*pb.HardState, *pb.ConfState, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cs != nil {
		return proto.CloneOf(l.hs), proto.CloneOf(l.cs), nil
	}
	return proto.CloneOf(l.hs), proto.CloneOf(l.snap.Metadata.ConfState), nil
}

// CommitAtLeast raises the stored hard state's commit index to i, in
// memory only, when it is lower and i is at most LastIndex. A hard state
// whose only change is its commit index is written without an fsync
// (raft's Ready.MustSync), so after a crash it may lag behind what the
// application durably applied; every applied entry was committed, and
// raft refuses an applied index above the commit index it starts from.
func (l *Log) CommitAtLeast(i uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if i > l.hs.GetCommit() && i <= l.last() {
		l.hs.Commit = proto.Uint64(i)
	}
}

// SetConfState puts cs into b: the configuration the application has
// applied (the result of RawNode.ApplyConfChange). A group that restarts
// with an applied index above its configuration changes needs it.
func (l *Log) SetConfState(b *store.Batch, cs *pb.ConfState) error {
	v, err := proto.Marshal(cs)
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cs = proto.CloneOf(cs)
	b.Put(l.key("cs"), v)
	return nil
}

// Entries returns the entries [lo, hi), at most maxSize bytes of them but
// at least one. It fails with raft.ErrCompacted below FirstIndex and
// raft.ErrUnavailable above LastIndex.
func (l *Log) Entries(lo, hi, maxSize uint64) ([]*pb.Entry, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if lo < l.first() {
		return nil, raft.ErrCompacted
	}
	if hi > l.last()+1 || lo > hi {
		return nil, raft.ErrUnavailable
	}
	var out []*pb.Entry
	var size uint64
	for i := lo; i < hi; i++ {
		e := l.recent[i]
		if e == nil {
			v, err := l.kv.Get(l.entryKey(i))
			if err != nil {
				return nil, fmt.Errorf("group log entry %d: %w", i, err)
			}
			typ, term, data, err := decodeEntryValue(v)
			if err != nil {
				return nil, fmt.Errorf("%w: entry %d: %v", ErrCorrupt, i, err)
			}
			e = &pb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(term), Type: typ.Enum(), Data: data}
		}
		size += uint64(len(e.Data)) + 16
		if len(out) > 0 && size > maxSize {
			break
		}
		out = append(out, e)
	}
	return out, nil
}

// Term returns entry i's term, for i from FirstIndex()-1 to LastIndex().
func (l *Log) Term(i uint64) (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	si := l.snap.Metadata.GetIndex()
	switch {
	case i < si:
		return 0, raft.ErrCompacted
	case i == si:
		return l.snap.Metadata.GetTerm(), nil
	case i > l.last():
		return 0, raft.ErrUnavailable
	}
	return l.terms[i-si-1], nil
}

// LastIndex returns the last entry's index (the snapshot's when there is
// no entry).
func (l *Log) LastIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.last(), nil
}

// FirstIndex returns the first entry's index: the snapshot's plus one.
func (l *Log) FirstIndex() (uint64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.first(), nil
}

// Snapshot returns the snapshot to send to a follower that needs entries
// compacted away: what the source set by SetSource returns, else the
// stored snapshot (Stored).
func (l *Log) Snapshot() (*pb.Snapshot, error) {
	l.mu.Lock()
	src := l.source
	snap := l.snap
	l.mu.Unlock()
	if src != nil {
		return src()
	}
	return snap, nil
}

// SetSource makes Snapshot return what src returns: a snapshot at an
// index from the stored snapshot's on (the application's latest image,
// made after the log was compacted to an earlier index), or
// raft.ErrSnapshotTemporarilyUnavailable while it is being made; raft
// asks again later. src must return no other error (raft panics on
// one), and is called on the goroutine that steps the group's RawNode.
func (l *Log) SetSource(src func() (*pb.Snapshot, error)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.source = src
}

// Stored returns the stored snapshot: the one the log was last compacted
// to (Compact), with the data it was given, or the last one received
// (ApplySnapshot, ApplyStaged), with its data unless that is stored in
// chunks (OpenData reads it), until the next Compact.
func (l *Log) Stored() *pb.Snapshot {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.snap
}

// Append puts ents into b, replacing the entries from ents[0]'s index on
// (a leader's log overrides a follower's diverging tail). Entries already
// in the snapshot are skipped. It fails, changing nothing, when ents do
// not follow the log (a gap) or are not consecutive.
func (l *Log) Append(b *store.Batch, ents []*pb.Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(ents) > 0 && ents[0].GetIndex() < l.first() {
		ents = ents[1:]
	}
	if len(ents) == 0 {
		return nil
	}
	from := ents[0].GetIndex()
	if from > l.last()+1 {
		return fmt.Errorf("group log: append at %d after last %d: a gap", from, l.last())
	}
	for i, e := range ents {
		if e.GetIndex() != from+uint64(i) {
			return fmt.Errorf("group log: append: entry %d at position %d of a run from %d", e.GetIndex(), i, from)
		}
	}
	// Drop the replaced tail.
	for i := from; i <= l.last(); i++ {
		if i >= from+uint64(len(ents)) {
			b.Delete(l.entryKey(i))
		}
		delete(l.recent, i)
	}
	l.terms = l.terms[:from-l.first()]
	size := 0
	for _, e := range ents {
		// key, type and term, data, and Put's own overhead
		size += len(l.prefix) + 10 + 1 + binary.MaxVarintLen64 + len(e.GetData()) + 21
	}
	b.Grow(size)
	for _, e := range ents {
		l.scratch = appendEntryValue(l.scratch[:0], e)
		b.Put(l.entryKey(e.GetIndex()), l.scratch)
		l.terms = append(l.terms, e.GetTerm())
		l.recent[e.GetIndex()] = e
	}
	return nil
}

// SetHardState puts hs into b.
func (l *Log) SetHardState(b *store.Batch, hs *pb.HardState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.hs = proto.CloneOf(hs)
	b.Put(l.key("hs"), appendHardState(nil, hs))
}

// ApplySnapshot puts snap into b as the group's state, received from the
// leader, and drops every entry: raft sends a snapshot only to a log that
// does not hold its last entry, and from then on the log starts after it
// (as raft's MemoryStorage does). Data larger than 64 MiB is
// stored in chunks, one per batch in pre, which the caller commits, in
// order, before b; until b is committed they belong to no snapshot, and a
// later ApplySnapshot or Compact deletes them if the node stops before.
// The Log keeps snap's Data (not a copy) until the next Compact, unless it
// is stored in chunks. It fails with raft.ErrSnapOutOfDate for a snapshot
// older than the current one.
func (l *Log) ApplySnapshot(b *store.Batch, snap *pb.Snapshot) (pre []*store.Batch, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	si := snap.GetMetadata().GetIndex()
	if si <= l.snap.Metadata.GetIndex() {
		return nil, raft.ErrSnapOutOfDate
	}
	l.dropThrough(b, si, false)
	l.dropChunks(b)
	data := snap.GetData()
	l.snap = &pb.Snapshot{Metadata: proto.CloneOf(snap.GetMetadata()), Data: data}
	if len(data) <= chunkSize {
		b.Put(l.key("snap"), appendSnapshot(nil, l.snap))
	} else {
		for n := 0; len(data) > 0; n++ {
			c := data[:min(len(data), chunkSize)]
			data = data[len(c):]
			var p store.Batch
			p.Put(l.chunkKey(si, n), c)
			pre = append(pre, &p)
			l.chunks++
		}
		l.snap.Data = nil
		l.putChunked(b, l.chunks, int64(len(snap.GetData())))
	}
	l.cs = nil
	b.Delete(l.key("cs"))
	return pre, nil
}

// putChunked puts into b the records of a snapshot whose data is in count
// chunks of size bytes in all. Called with l.mu held.
func (l *Log) putChunked(b *store.Batch, count int, size int64) {
	l.chunks, l.size = count, size
	b.Put(l.key("snap"), appendSnapshot(nil, &pb.Snapshot{Metadata: l.snap.Metadata}))
	sc := binary.AppendUvarint(nil, uint64(count))
	b.Put(l.key("sc"), binary.AppendUvarint(sc, uint64(size)))
}

// Stage puts into b what starts storing the data of a snapshot at index
// as it is received, before raft sees the snapshot: the deletion of the
// stale chunk records found at Open. The data then goes in chunks of at
// most 64 MiB (PutChunk), and ApplyStaged records the snapshot; a stage
// that ends otherwise deletes its chunks (DropStaged). The caller runs
// one stage at a time per group, and none while an ApplySnapshot or
// ApplyStaged of the group is not yet committed. It fails with
// raft.ErrSnapOutOfDate for an index at or before the stored snapshot's.
func (l *Log) Stage(b *store.Batch, index uint64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if index <= l.snap.Metadata.GetIndex() {
		return raft.ErrSnapOutOfDate
	}
	for _, k := range l.stale {
		b.Delete(k)
	}
	l.stale = nil
	return nil
}

// PutChunk puts chunk n of the staged data of the snapshot at index into
// b; chunks go in order from 0, each at most 64 MiB.
func (l *Log) PutChunk(b *store.Batch, index uint64, n int, chunk []byte) {
	b.Put(l.chunkKey(index, n), chunk)
}

// DropStaged puts into b the deletion of the count chunks staged for the
// snapshot at index.
func (l *Log) DropStaged(b *store.Batch, index uint64, count int) {
	for n := range count {
		b.Delete(l.chunkKey(index, n))
	}
}

// ApplyStaged is ApplySnapshot for a snapshot whose data was staged:
// count chunks (PutChunk) of size bytes in all, already committed. snap's
// Data is ignored. It fails with raft.ErrSnapOutOfDate for a snapshot
// older than the current one, and with an error for count 0 or over the
// chunk limit.
func (l *Log) ApplyStaged(b *store.Batch, snap *pb.Snapshot, count int, size int64) error {
	if count <= 0 || count > maxChunks {
		return fmt.Errorf("group log: a staged snapshot of %d chunks", count)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	si := snap.GetMetadata().GetIndex()
	if si <= l.snap.Metadata.GetIndex() {
		return raft.ErrSnapOutOfDate
	}
	l.dropThrough(b, si, false)
	l.dropChunks(b)
	l.snap = &pb.Snapshot{Metadata: proto.CloneOf(snap.GetMetadata())}
	l.putChunked(b, count, size)
	l.cs = nil
	b.Delete(l.key("cs"))
	return nil
}

// HasData reports whether the stored snapshot has data: in its record or
// in chunks.
func (l *Log) HasData() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.chunks > 0 || len(l.snap.Data) > 0
}

// OpenData returns a reader of the stored snapshot's data, as the store
// holds it now: what a later Compact or snapshot deletes stays readable
// until the reader is closed. Chunked data is read a chunk at a time, by
// a goroutine that ends when the reader reaches the end or is closed; the
// caller must close it. A chunk missing or of the wrong size fails the
// read with an error wrapping ErrCorrupt.
func (l *Log) OpenData() io.ReadCloser {
	l.mu.Lock()
	si, count, size, data := l.snap.Metadata.GetIndex(), l.chunks, l.size, l.snap.Data
	l.mu.Unlock()
	if count == 0 {
		return io.NopCloser(bytes.NewReader(data))
	}
	pr, pw := io.Pipe()
	pinned := make(chan struct{})
	go func() {
		var once sync.Once
		pin := func() { once.Do(func() { close(pinned) }) }
		defer pin()
		n, got := 0, int64(0)
		err := l.kv.Scan(l.chunkKey(si, 0), l.chunkKey(si+1, 0), func(k, v []byte) error {
			pin()
			if len(k) != len(l.chunkKey(0, 0)) || int(binary.BigEndian.Uint32(k[len(k)-4:])) != n {
				return fmt.Errorf("%w: snapshot %d: chunk %d missing", ErrCorrupt, si, n)
			}
			n++
			got += int64(len(v))
			_, err := pw.Write(v)
			return err
		})
		if err == nil && (n != count || got != size) {
			err = fmt.Errorf("%w: snapshot %d: %d of %d chunks, %d of %d bytes", ErrCorrupt, si, n, count, got, size)
		}
		pw.CloseWithError(err) // nil: io.EOF
	}()
	<-pinned
	return pr
}

// Compact makes a snapshot at applied index i, with the configuration cs
// and the state machine's data (nil when the application keeps its state
// elsewhere and sends snapshots through SetSource), puts it into b, and
// drops the entries up to i. i must be at most LastIndex; a snapshot at
// or below the stored one's index fails with raft.ErrSnapOutOfDate.
func (l *Log) Compact(b *store.Batch, i uint64, cs *pb.ConfState, data []byte) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	si := l.snap.Metadata.GetIndex()
	if i <= si {
		return raft.ErrSnapOutOfDate
	}
	if i > l.last() {
		return fmt.Errorf("group log: compact at %d beyond last %d", i, l.last())
	}
	snap := &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
		ConfState: proto.CloneOf(cs), Index: proto.Uint64(i), Term: proto.Uint64(l.terms[i-l.first()]),
	}}
	l.dropThrough(b, i, true)
	l.dropChunks(b)
	l.snap = snap
	b.Put(l.key("snap"), appendSnapshot(nil, snap))
	return nil
}

// dropThrough deletes the entries up to i (all of them unless keep) from
// b and from memory. Called with l.mu held, before l.snap moves to i.
func (l *Log) dropThrough(b *store.Batch, i uint64, keep bool) {
	first, last := l.first(), l.last()
	upto := min(i, last)
	if !keep {
		upto = last
	}
	for j := first; j <= upto; j++ {
		b.Delete(l.entryKey(j))
		delete(l.recent, j)
	}
	if keep && i <= last {
		l.terms = append([]uint64(nil), l.terms[i-first+1:]...)
	} else {
		l.terms = nil
	}
}

// Settled forgets the entries up to i kept in memory: the caller's batch
// holding them has been committed, and they need not be served from
// memory any more (the cluster settles them once applied).
func (l *Log) Settled(i uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for j := range l.recent {
		if j <= i {
			delete(l.recent, j)
		}
	}
}

func appendEntryValue(b []byte, e *pb.Entry) []byte {
	b = append(b, byte(e.GetType()))
	b = binary.AppendUvarint(b, e.GetTerm())
	return append(b, e.Data...)
}

func decodeEntryValue(v []byte) (pb.EntryType, uint64, []byte, error) {
	if len(v) < 2 {
		return 0, 0, nil, errors.New("truncated")
	}
	typ := pb.EntryType(v[0])
	if _, ok := pb.EntryType_name[int32(typ)]; !ok {
		return 0, 0, nil, fmt.Errorf("entry type %d", v[0])
	}
	term, n := binary.Uvarint(v[1:])
	if n <= 0 {
		return 0, 0, nil, errors.New("bad term")
	}
	data := v[1+n:]
	if len(data) == 0 {
		data = nil
	}
	return typ, term, data, nil
}

func appendHardState(b []byte, hs *pb.HardState) []byte {
	b = binary.AppendUvarint(b, hs.GetTerm())
	b = binary.AppendUvarint(b, hs.GetVote())
	return binary.AppendUvarint(b, hs.GetCommit())
}

func decodeHardState(v []byte) (*pb.HardState, error) {
	var f [3]uint64
	for i := range f {
		x, n := binary.Uvarint(v)
		if n <= 0 {
			return nil, fmt.Errorf("%w: hard state", ErrCorrupt)
		}
		f[i], v = x, v[n:]
	}
	if len(v) != 0 {
		return nil, fmt.Errorf("%w: hard state: %d bytes left over", ErrCorrupt, len(v))
	}
	return &pb.HardState{Term: proto.Uint64(f[0]), Vote: proto.Uint64(f[1]), Commit: proto.Uint64(f[2])}, nil
}

func appendSnapshot(b []byte, s *pb.Snapshot) []byte {
	meta, err := proto.Marshal(s.GetMetadata())
	if err != nil {
		panic(fmt.Sprintf("raftlog: marshal snapshot metadata: %v", err)) // only fails on invalid UTF-8 in strings; metadata has none
	}
	b = binary.AppendUvarint(b, uint64(len(meta)))
	b = append(b, meta...)
	return append(b, s.Data...)
}

func decodeSnapshot(v []byte) (*pb.Snapshot, error) {
	n, k := binary.Uvarint(v)
	if k <= 0 || n > uint64(len(v)-k) {
		return nil, fmt.Errorf("%w: snapshot", ErrCorrupt)
	}
	meta := &pb.SnapshotMetadata{}
	if err := proto.Unmarshal(v[k:k+int(n)], meta); err != nil {
		return nil, fmt.Errorf("%w: snapshot metadata: %v", ErrCorrupt, err)
	}
	if meta.ConfState == nil {
		meta.ConfState = &pb.ConfState{}
	}
	data := v[k+int(n):]
	if len(data) == 0 {
		data = nil
	}
	return &pb.Snapshot{Metadata: meta, Data: data}, nil
}

// Destroy puts into b the deletion of everything the group stores: its
// entries, hard state and snapshot. The Log must not be used after.
func (l *Log) Destroy(b *store.Batch) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := l.first(); i <= l.last(); i++ {
		b.Delete(l.entryKey(i))
	}
	b.Delete(l.key("hs"))
	b.Delete(l.key("snap"))
	b.Delete(l.key("cs"))
	l.terms, l.recent = nil, map[uint64]*pb.Entry{}
	return nil
}
