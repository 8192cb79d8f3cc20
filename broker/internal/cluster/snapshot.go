package cluster

import (
	"fmt"
	"sync"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/fila-mq/fila/broker/internal/peer"
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

// maxSnapshotSize bounds a snapshot's data: it goes to a follower as one
// peer message, with room for the message's other fields.
const maxSnapshotSize = peer.MaxMessageSize - 1<<20

// snapshotGrace is how long a leader keeps the entries a follower needs
// after a snapshot: while it is being made and held for sending, and
// while the follower installs it. Without it a leader under load could
// compact its log past a snapshot before the follower had installed it,
// and the follower would need another, and another: it never caught up
// while the load lasted. After snapshotGrace the usual rule holds again,
// so a follower that went away does not keep the log from compacting.
const snapshotGrace = time.Minute

// snapState is a leader's snapshot for its followers.
type snapState struct {
	mu    sync.Mutex
	busy  bool   // being made
	base  uint64 // the leader's image index when making started
	index uint64 // of data, when not nil
	data  []byte
	// at is the driver tick at which the driver first saw data, once
	// seen.
	at   uint64
	seen bool
	// made counts the snapshots made.
	made uint64
}

// slowSnapshots, set by tests before the cluster starts, is how long
// making a snapshot takes at least, as it does for a large queue.
var slowSnapshots time.Duration

// grant is a snapshot sent to a follower: its index, and the driver tick
// it went at.
type grant struct {
	index, tick uint64
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
			s.busy, s.base = true, g.imaged
			go n.makeSnapshot(g)
		}
		return nil, raft.ErrSnapshotTemporarilyUnavailable
	}
}

// makeSnapshot reads group g's snapshot from the store, off the driver.
func (n *Node) makeSnapshot(g *group) {
	index, data, err := shard.SnapshotData(n.st, g.queue, imageKey(g.id))
	if d := slowSnapshots; d > 0 {
		time.Sleep(d)
	}
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
	s.index, s.data, s.seen = index, data, false
	s.made++
	n.log.Info("made a snapshot for a follower", "group", g.id, "queue", g.queue, "index", index, "bytes", len(data))
}

// snapshotSent lets group g's snapshot go once the transport has sent or
// dropped it (it is made again if another follower needs one), and, if it
// went to follower to, notes the grant at driver tick now. Driver
// goroutine.
func (g *group) snapshotSent(to uint64, failed bool, now uint64) {
	g.snap.mu.Lock()
	index := g.snap.index
	g.snap.data = nil
	g.snap.mu.Unlock()
	if failed {
		return
	}
	if g.granted == nil {
		g.granted = map[uint64]grant{}
	}
	g.granted[to] = grant{index: index, tick: now}
}

// keep returns the index up to which group g's leader may compact its log
// at most, given its latest image at index and the one before at prev:
// the entries after it are still needed by a follower that is recently
// active and at most one image interval behind (beyond that a snapshot is
// cheaper), by a follower a snapshot is being sent to, or that got one
// within snapshotGrace and has not caught up to the latest image since,
// and by a snapshot being made or held for sending. Driver goroutine.
func (n *Node) keep(g *group, index, prev uint64) uint64 {
	to := index
	grace := uint64(snapshotGrace / n.cfg.TickInterval)
	for id, gr := range g.granted {
		if n.ticks-gr.tick > grace {
			delete(g.granted, id)
		}
	}
	for id, pr := range g.rn.Status().Progress {
		if id == n.cfg.NodeID {
			continue
		}
		need, kept := pr.Match, pr.RecentActive && pr.Match >= prev
		if gr, ok := g.granted[id]; ok {
			if pr.Match >= index {
				delete(g.granted, id) // caught up
			} else {
				need, kept = max(need, gr.index), true
			}
		}
		if pr.State == tracker.StateSnapshot {
			need, kept = max(pr.Match, pr.PendingSnapshot), true
		}
		if kept {
			to = min(to, need)
		}
	}
	s := &g.snap
	s.mu.Lock()
	if s.data != nil && !s.seen {
		s.at, s.seen = n.ticks, true
	}
	switch {
	case s.busy:
		to = min(to, s.base)
	case s.data != nil && n.ticks-s.at > grace:
		s.data = nil // no follower took it
	case s.data != nil:
		to = min(to, s.index)
	}
	s.mu.Unlock()
	return to
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
		to = n.keep(g, index, prev)
	} else {
		clear(g.granted)
	}
	first, _ := g.log.FirstIndex()
	if to < first {
		return
	}
	if n.compactLog(g, to, nil) {
		n.log.Debug("compacted a group's log", "group", g.id, "queue", g.queue, "to", to, "image", index)
	}
}

// compactLog compacts group g's log up to index to, with a snapshot of
// data (nil for a queue's group, whose state is in the store), and
// reports whether it did. A storage failure stops the node (driver
// goroutine).
func (n *Node) compactLog(g *group, to uint64, data []byte) bool {
	_, cs, err := g.log.InitialState()
	if err != nil {
		n.fail(err)
		return false
	}
	var b store.Batch
	if err := g.log.Compact(&b, to, cs, data); err != nil {
		n.log.Debug("compact", "group", g.id, "to", to, "err", err)
		return false
	}
	if err := n.st.Apply(&b); err != nil {
		n.fail(err)
		return false
	}
	return true
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
