package raftlog

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fila-mq/fila/broker/internal/store"
)

// readData reads the stored snapshot's data whole.
func readData(t *testing.T, l *Log) []byte {
	t.Helper()
	r := l.OpenData()
	defer r.Close()
	data, err := io.ReadAll(r)
	if err != nil {
		t.Fatalf("reading the stored snapshot's data: %v", err)
	}
	return data
}

// TestStagedSnapshot: a snapshot's data staged in chunks as it arrives is
// recorded by ApplyStaged and read back whole, also after a reopen;
// chunks a node staged before it stopped are deleted by the next stage;
// a reader keeps reading what a later snapshot deletes; and a stage at or
// before the stored snapshot is refused.
func TestStagedSnapshot(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	l, err := Open(st, 3)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(b *store.Batch) {
		t.Helper()
		if err := st.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	chunks := func() int {
		n := 0
		st.ScanKeys(append(groupPrefix(3), "sd/"...), append(groupPrefix(3), "sd0"...), func([]byte) error { n++; return nil })
		return n
	}
	stage := func(index uint64, parts ...string) {
		t.Helper()
		var b store.Batch
		if err := l.Stage(&b, index); err != nil {
			t.Fatal(err)
		}
		apply(&b)
		for n, p := range parts {
			b = store.Batch{}
			l.PutChunk(&b, index, n, []byte(p))
			apply(&b)
		}
	}
	meta := func(index uint64) *pb.Snapshot {
		return &pb.Snapshot{Metadata: &pb.SnapshotMetadata{ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}, Index: proto.Uint64(index), Term: proto.Uint64(4)}}
	}

	// A node stopped while it staged a snapshot at 50: its chunks are
	// stale at the next Open, and the next stage deletes them.
	stage(50, "x", "y", "z")
	if l, err = Open(st, 3); err != nil {
		t.Fatal(err)
	}
	stage(60, "hello, ", "streamed ", "world")
	if n := chunks(); n != 3 {
		t.Fatalf("%d chunk records after the second stage; want its 3", n)
	}
	var b store.Batch
	if err := l.ApplyStaged(&b, meta(60), 3, 21); err != nil {
		t.Fatal(err)
	}
	apply(&b)
	if !l.HasData() || string(readData(t, l)) != "hello, streamed world" {
		t.Fatalf("staged data reads %q", readData(t, l))
	}
	if l, err = Open(st, 3); err != nil {
		t.Fatal(err)
	}
	if got := l.Stored().GetMetadata().GetIndex(); got != 60 || string(readData(t, l)) != "hello, streamed world" {
		t.Fatalf("reopened: snapshot %d reads %q", got, readData(t, l))
	}
	b = store.Batch{}
	if err := l.Stage(&b, 60); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("a stage at the stored snapshot's index: %v; want ErrSnapOutOfDate", err)
	}

	// A reader opened before a newer snapshot deletes the chunks reads
	// them all the same.
	r := l.OpenData()
	defer r.Close()
	stage(70, "newer")
	b = store.Batch{}
	if err := l.ApplyStaged(&b, meta(70), 1, 5); err != nil {
		t.Fatal(err)
	}
	apply(&b)
	if n := chunks(); n != 1 {
		t.Fatalf("%d chunk records after the newer snapshot; want 1", n)
	}
	if data, err := io.ReadAll(r); err != nil || string(data) != "hello, streamed world" {
		t.Fatalf("the older reader read %q, %v", data, err)
	}

	// A stage that fails deletes what it staged.
	stage(80, "a", "b")
	b = store.Batch{}
	l.DropStaged(&b, 80, 2)
	apply(&b)
	if n := chunks(); n != 1 {
		t.Fatalf("%d chunk records after a dropped stage; want the stored snapshot's 1", n)
	}
	// A chunk lost from the store fails the read.
	b = store.Batch{}
	b.Delete(l.chunkKey(70, 0))
	apply(&b)
	if _, err := io.ReadAll(l.OpenData()); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("reading a snapshot whose chunk is gone: %v; want ErrCorrupt", err)
	}
}

// TestApplySnapshotOverAStoreValue: a follower stores a received snapshot
// larger than a store value (store.MaxValueSize, 256 MiB); a peer message
// may be up to 1 GiB. It was stored as one value, so a follower sent one
// could not store it: the node stopped taking part, again at every
// restart (seen with a 300,000 x 1 KiB backlog, a 334 MB snapshot).
func TestApplySnapshotOverAStoreValue(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 300 MiB")
	}
	st := store.NewMem()
	l, err := Open(st, 2)
	if err != nil {
		t.Fatal(err)
	}
	snap := &pb.Snapshot{
		Data: make([]byte, store.MaxValueSize+(44<<20)), // 300 MiB < 1 GiB
		Metadata: &pb.SnapshotMetadata{
			ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}},
			Index:     proto.Uint64(100), Term: proto.Uint64(2),
		},
	}
	var b store.Batch
	pre, err := l.ApplySnapshot(&b, snap)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range append(pre, &b) {
		if err := st.Apply(p); err != nil {
			t.Fatalf("a follower cannot store a %d-byte snapshot: %v", len(snap.Data), err)
		}
	}
	l, err = Open(st, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got, data := l.Stored(), readData(t, l); got.GetMetadata().GetIndex() != 100 || len(data) != len(snap.Data) {
		t.Fatalf("reopened: snapshot %d of %d bytes; want 100 of %d", got.GetMetadata().GetIndex(), len(data), len(snap.Data))
	}
}

// TestSnapshotChunks: a received snapshot stored in chunks reads back
// whole; chunks written by a node that stopped before it recorded their
// snapshot are left out, and deleted with the next snapshot, as are the
// chunks of a snapshot compacted over.
func TestSnapshotChunks(t *testing.T) {
	defer func(n int) { chunkSize = n }(chunkSize)
	chunkSize = 1000
	st := store.NewMem()
	defer st.Close()
	l, err := Open(st, 2)
	if err != nil {
		t.Fatal(err)
	}
	snapAt := func(index uint64, size int) *pb.Snapshot {
		data := make([]byte, size)
		for i := range data {
			data[i] = byte(i*7) + byte(index)
		}
		return &pb.Snapshot{Data: data, Metadata: &pb.SnapshotMetadata{
			ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}},
			Index:     proto.Uint64(index), Term: proto.Uint64(2),
		}}
	}
	apply := func(bs ...*store.Batch) {
		t.Helper()
		for _, b := range bs {
			if err := st.Apply(b); err != nil {
				t.Fatal(err)
			}
		}
	}
	chunks := func() int {
		n := 0
		prefix := append(groupPrefix(2), "sd/"...)
		st.Scan(prefix, append(groupPrefix(2), "sd0"...), func(k, _ []byte) error { n++; return nil })
		return n
	}
	first := snapAt(100, 3500)
	var b store.Batch
	pre, err := l.ApplySnapshot(&b, first)
	if err != nil {
		t.Fatal(err)
	}
	if len(pre) != 4 {
		t.Fatalf("%d chunk batches for 3500 bytes in chunks of 1000; want 4", len(pre))
	}
	apply(append(pre, &b)...)

	// A second snapshot, whose record the node did not write: half its
	// chunks are stored.
	b = store.Batch{}
	pre, err = l.ApplySnapshot(&b, snapAt(200, 4000))
	if err != nil {
		t.Fatal(err)
	}
	apply(pre[:2]...)

	l, err = Open(st, 2)
	if err != nil {
		t.Fatal(err)
	}
	got, data := l.Stored(), readData(t, l)
	if got.GetMetadata().GetIndex() != 100 || !bytes.Equal(data, first.Data) {
		t.Fatalf("reopened: snapshot %d of %d bytes; want the first, 100 of %d", got.GetMetadata().GetIndex(), len(data), len(first.Data))
	}
	if n := chunks(); n != 6 {
		t.Fatalf("%d chunk records; want 4 + 2 stale", n)
	}
	b = store.Batch{}
	if err := l.Compact(&b, 100, &pb.ConfState{Voters: []uint64{1, 2, 3}}, nil); !errors.Is(err, raft.ErrSnapOutOfDate) {
		t.Fatalf("compact at the snapshot: %v", err)
	}
	b = store.Batch{}
	small := snapAt(300, 10)
	pre, err = l.ApplySnapshot(&b, small)
	if err != nil || len(pre) != 0 {
		t.Fatalf("a small snapshot: %d chunk batches, %v", len(pre), err)
	}
	apply(&b)
	if n := chunks(); n != 0 {
		t.Fatalf("%d chunk records after a snapshot stored whole; want 0", n)
	}
	l, err = Open(st, 2)
	if err != nil {
		t.Fatal(err)
	}
	if got := l.Stored(); got.GetMetadata().GetIndex() != 300 || !bytes.Equal(readData(t, l), small.Data) {
		t.Fatalf("reopened: snapshot %d; want 300", got.GetMetadata().GetIndex())
	}
}
