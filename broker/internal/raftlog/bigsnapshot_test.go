package raftlog

import (
	"bytes"
	"errors"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fila-mq/fila/broker/internal/store"
)

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
	if got := l.Stored(); got.GetMetadata().GetIndex() != 100 || len(got.GetData()) != len(snap.Data) {
		t.Fatalf("reopened: snapshot %d of %d bytes; want 100 of %d", got.GetMetadata().GetIndex(), len(got.GetData()), len(snap.Data))
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
	got := l.Stored()
	if got.GetMetadata().GetIndex() != 100 || !bytes.Equal(got.GetData(), first.Data) {
		t.Fatalf("reopened: snapshot %d of %d bytes; want the first, 100 of %d", got.GetMetadata().GetIndex(), len(got.GetData()), len(first.Data))
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
	if got := l.Stored(); got.GetMetadata().GetIndex() != 300 || !bytes.Equal(got.GetData(), small.Data) {
		t.Fatalf("reopened: snapshot %d; want 300", got.GetMetadata().GetIndex())
	}
}
