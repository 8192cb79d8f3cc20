package cluster

import (
	"fmt"
	"sync"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fila-mq/fila/broker/internal/raftlog"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// Snapshots and log compaction of a queue's group.
//
// Each replica stores an image of its state every
// Config.SnapshotEvery bytes of applied entries (shard.Replication); once
// the image is visible in the store, the driver compacts the group's log
// up to it (compact). A leader keeps the entries a recently active
// follower still needs, up to one image interval behind the image, so
// that a follower that is only slow catches up from the log, as etcd
// keeps SnapshotCatchUpEntries.
//
// A follower that needs entries compacted away gets a snapshot: the
// leader's latest image and a scan of the queue's records
// (shard.SnapshotData), made on a goroutine of its own while raft is told
// the snapshot is temporarily unavailable, and sent as one MsgSnap. The
// follower writes it into its log's store (raftlog.ApplySnapshot), then
// its replica installs it (shard.Install) before the entries after it.
// If the node stops between the two, recoverReplica installs it again
// from the log at the next start.

// maxSnapshotSize bounds a snapshot's data: a follower stores it as one
// record of its log (raftlog.ApplySnapshot), so it must fit in a store
// value, with room for the metadata.
const maxSnapshotSize = store.MaxValueSize - 4096

// snapState is a leader's snapshot for its followers.
type snapState struct {
	mu    sync.Mutex
	busy  bool   // being made
	index uint64 // of data, when not nil
	data  []byte
}

// snapshotSource returns group g's raftlog source: the snapshot at the
// replica's latest image, made on first demand.
func (n *Node) snapshotSource(g *group) func() (*pb.Snapshot, error) {
	return func() (*pb.Snapshot, error) {
		s := &g.snap
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.data != nil {
			term, err := g.log.Term(s.index)
			if err == nil {
				_, cs, err := g.log.InitialState()
				if err == nil {
					return &pb.Snapshot{Data: s.data, Metadata: &pb.SnapshotMetadata{
						ConfState: cs, Index: proto.Uint64(s.index), Term: proto.Uint64(term),
					}}, nil
				}
			}
			// Older than the log's start: make a newer one.
			s.data = nil
		}
		if !s.busy {
			s.busy = true
			go n.makeSnapshot(g)
		}
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
}

// makeSnapshot reads group g's snapshot from the store, off the driver.
func (n *Node) makeSnapshot(g *group) {
	index, data, err := shard.SnapshotData(n.st, g.queue, imageKey(g.id))
	s := &g.snap
	s.mu.Lock()
	defer s.mu.Unlock()
	s.busy = false
	if err == nil && len(data) > maxSnapshotSize {
		err = fmt.Errorf("%d bytes, over the %d a follower can store", len(data), maxSnapshotSize)
	}
	if err != nil {
		n.log.Error("cannot make a snapshot for a follower", "group", g.id, "queue", g.queue, "err", err)
		return
	}
	s.index, s.data = index, data
	n.log.Info("made a snapshot for a follower", "group", g.id, "queue", g.queue, "index", index, "bytes", len(data))
}

// snapshotSent lets group g's snapshot go once the transport has sent or
// dropped it: it is made again if another follower needs one.
func (g *group) snapshotSent() {
	g.snap.mu.Lock()
	g.snap.data = nil
	g.snap.mu.Unlock()
}

// compact compacts group g's log once its replica's image at index is
// visible in the store (driver goroutine).
func (n *Node) compact(g *group, index uint64) {
	if n.groups[g.id] != g {
		return // deleted
	}
	prev := g.imaged
	g.imaged = index
	to := index
	if g.rn.BasicStatus().RaftState == raft.StateLeader {
		// Keep what a recently active follower still needs, up to one
		// image interval: beyond that a snapshot is cheaper.
		for id, pr := range g.rn.Status().Progress {
			if id != n.cfg.NodeID && pr.RecentActive && pr.Match < to && pr.Match >= prev {
				to = pr.Match
			}
		}
	}
	first, _ := g.log.FirstIndex()
	if to < first {
		return
	}
	_, cs, err := g.log.InitialState()
	if err != nil {
		n.fail(err)
		return
	}
	var b store.Batch
	if err := g.log.Compact(&b, to, cs, nil); err != nil {
		n.log.Debug("compact", "group", g.id, "to", to, "err", err)
		return
	}
	if err := n.st.Apply(&b); err != nil {
		n.fail(err)
		return
	}
	n.log.Debug("compacted a group's log", "group", g.id, "queue", g.queue, "to", to, "image", index)
}

// recoverReplica checks, at open, that queue group g's replica can go on
// from its log: its image must be at or after the log's snapshot. A
// snapshot received and made durable in the log, but not yet installed
// when the node stopped, is installed now. A log compacted past the
// image with no data to install fails with raftlog.ErrCorrupt: the node
// then rebuilds its replicas from its peers.
func (n *Node) recoverReplica(g *group) error {
	snap := g.log.Stored()
	si := snap.GetMetadata().GetIndex()
	if si <= g.sh.OpenedAt() {
		return nil
	}
	if len(snap.GetData()) == 0 {
		return fmt.Errorf("%w: log compacted to %d, past the replica's image at %d", raftlog.ErrCorrupt, si, g.sh.OpenedAt())
	}
	n.log.Info("installing a snapshot received before the node stopped", "group", g.id, "queue", g.queue, "index", si)
	g.sh.Install(si, snap.GetData())
	return nil
}
