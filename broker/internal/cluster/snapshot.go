package cluster

import (
	"context"
	"fmt"
	"io"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"golang.org/x/time/rate"
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
// A follower that needs entries compacted away gets a snapshot, streamed
// on a connection of its own (peer.Transport.SendStream) so that a queue
// of any size is never held whole in memory and the group's heartbeats
// are not held up behind it: the leader's latest image and a scan of the
// queue's records (shard.WriteSnapshot), written as they are read. Raft
// asks the log for a snapshot (snapshotSource) and gets the metadata at
// the latest image; the driver takes the MsgSnap raft emits out of the
// ordinary traffic (route) and streams it with its data (streamSnapshot).
//
// The follower (receiveSnapshot) checks the data as it arrives
// (shard.CheckSnapshot) and stores it in chunks in its log's store
// (raftlog.Stage), then steps the MsgSnap into raft. If raft takes it,
// the driver records it (raftlog.ApplyStaged) and the replica installs it
// (shard.Install), reading the chunks back, before the entries after it;
// if not, the driver deletes the chunks. If the node stops between the
// two, recoverReplica installs it again from the log at the next start.

// slowSnapshots, set by tests before the cluster starts, is how long a
// leader waits at least before it streams a snapshot, as if the queue
// were large.
var slowSnapshots time.Duration

// snapshotGrace is how long a leader keeps the entries a follower needs
// after a snapshot, while the follower installs it. Without it a leader
// under load could compact its log past a snapshot before the follower
// had installed it, and the follower would need another, and another: it
// never caught up while the load lasted. After snapshotGrace the usual
// rule holds again, so a follower that went away does not keep the log
// from compacting; and a leader that sent a follower a snapshot longer
// ago no longer takes it for proof that the follower holds it (handOver).
// A var so that tests may shorten it.
var snapshotGrace = time.Minute

// stageChunk is the size of the chunks a follower stores a streamed
// snapshot's data in.
var stageChunk = 4 << 20

// grant is a snapshot sent to a follower: its index, the driver tick it
// went at, and whether the follower has since caught up with the
// leader's latest image (from then on the leader keeps no entries for
// it, but still knows it holds the snapshot: handOver).
type grant struct {
	index, tick uint64
	caughtUp    bool
}

// staged is a streamed snapshot whose data a follower has stored, for
// raft to take (driver goroutine).
type staged struct {
	index  uint64
	chunks int
	size   int64
}

// snapshotSource returns group g's raftlog source: a snapshot at the
// replica's latest image (the one it opened from, if it made none since),
// whose data is streamed when it is sent (streamSnapshot). Driver
// goroutine.
func (n *Node) snapshotSource(g *group) func() (*pb.Snapshot, error) {
	return func() (*pb.Snapshot, error) {
		index := max(g.imaged, g.sh.OpenedAt())
		if index == 0 {
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
		term, err := g.log.Term(index)
		if err != nil {
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
		_, cs, err := g.log.InitialState()
		if err != nil {
			return nil, raft.ErrSnapshotTemporarilyUnavailable
		}
		return &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
			ConfState: cs, Index: proto.Uint64(index), Term: proto.Uint64(term),
		}}, nil
	}
}

// route sends group g's messages: a queue group's snapshots are streamed,
// the rest go on the peers' connections. Driver goroutine.
func (n *Node) route(g *group, msgs []*pb.Message, out map[uint64][]peer.Message) {
	for _, m := range msgs {
		if m.GetType() == pb.MessageType_MsgSnap && g.sh != nil {
			n.streamSnapshot(g, m)
			continue
		}
		out[m.GetTo()] = append(out[m.GetTo()], peer.Message{Group: g.id, Msg: m})
	}
}

// streamSnapshot streams m, a snapshot of queue group g, to its follower
// on a goroutine of its own, and reports to raft how it went. The image
// sent is the latest stored when the stream starts, which may be newer
// than m's; m's metadata follows it. Driver goroutine.
func (n *Node) streamSnapshot(g *group, m *pb.Message) {
	to := m.GetTo()
	n.streams.Add(1)
	go func() {
		defer n.streams.Done()
		index, size, err := n.sendSnapshot(g, m)
		if err != nil {
			n.log.Warn("cannot send a snapshot to a follower", "group", g.id, "queue", g.queue, "to", to, "err", err)
		} else {
			n.log.Info("sent a snapshot to a follower", "group", g.id, "queue", g.queue, "to", to, "index", index, "bytes", size)
		}
		n.post(func() {
			if n.groups[g.id] != g {
				return // deleted
			}
			st := raft.SnapshotFinish
			if err != nil {
				st = raft.SnapshotFailure
			} else {
				if g.granted == nil {
					g.granted = map[uint64]grant{}
				}
				g.granted[to] = grant{index: index, tick: n.ticks}
			}
			g.rn.ReportSnapshot(to, st)
		})
	}()
}

// sendSnapshot streams m with the data of group g's latest image, and
// returns the snapshot's index and its data's size.
func (n *Node) sendSnapshot(g *group, m *pb.Message) (index uint64, size int64, err error) {
	if d := slowSnapshots; d > 0 {
		select {
		case <-time.After(d):
		case <-n.stop:
			return 0, 0, ErrStopped
		}
	}
	index, image, found, err := shard.LoadImage(n.st, imageKey(g.id))
	switch {
	case err != nil:
		return 0, 0, err
	case !found:
		return 0, 0, fmt.Errorf("no image of queue %s", g.queue)
	}
	term, err := g.log.Term(index)
	if err != nil {
		return 0, 0, fmt.Errorf("the term of the image at %d: %w", index, err)
	}
	meta := proto.CloneOf(m.GetSnapshot().GetMetadata())
	meta.Index, meta.Term = proto.Uint64(index), proto.Uint64(term)
	m.Snapshot = &pb.Snapshot{Metadata: meta}
	g.streamed.Add(1)
	size, err = n.tr.SendStream(n.ctx, m.GetTo(), peer.Message{Group: g.id, Msg: m}, func(w io.Writer) error {
		if r := n.cfg.SnapshotRate; r > 0 {
			w = &rateWriter{ctx: n.ctx, w: w, l: rate.NewLimiter(rate.Limit(r), rateBurst)}
		}
		return shard.WriteSnapshot(w, n.st, g.queue, index, image)
	})
	return index, size, err
}

// rateBurst is the most a rateWriter writes at once.
const rateBurst = 256 << 10

// A rateWriter writes to w at the rate l allows, rateBurst bytes at most
// at a time; it fails with ctx's error once ctx is done.
type rateWriter struct {
	ctx context.Context
	w   io.Writer
	l   *rate.Limiter
}

func (r *rateWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), rateBurst)
		if err := r.l.WaitN(r.ctx, k); err != nil {
			return n, err
		}
		m, err := r.w.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}

// receiveSnapshot takes a snapshot streamed by the leader of group
// m.Group: it checks the data and stores it in chunks as it reads it,
// then steps the MsgSnap into raft. It refuses, storing nothing, a
// snapshot of a group this node holds no replica of, a second one while
// one is being received, one older than the log's, and data that does
// not decode. Peer goroutine.
func (n *Node) receiveSnapshot(from uint64, m peer.Message, data io.Reader) error {
	meta := m.Msg.GetSnapshot().GetMetadata()
	index := meta.GetIndex()
	if m.Msg.GetType() != pb.MessageType_MsgSnap || index == 0 {
		return fmt.Errorf("a stream of a %s message", m.Msg.GetType())
	}
	var g *group
	err := n.call(func() error {
		g = n.groups[m.Group]
		switch {
		case g == nil || g.sh == nil:
			return fmt.Errorf("no replica of group %d here", m.Group)
		case g.receiving:
			return fmt.Errorf("group %d is receiving a snapshot already", m.Group)
		}
		g.receiving = true
		return nil
	})
	if err != nil {
		return err
	}
	st := &stager{n: n, g: g, index: index}
	err = st.receive(data)
	if err == nil {
		n.log.Info("received a snapshot's data", "group", g.id, "queue", g.queue, "from", from, "index", index, "bytes", st.size)
	}
	if cerr := n.call(func() error {
		g.receiving = false
		if err != nil || n.groups[g.id] != g {
			return err
		}
		g.staged = &staged{index: index, chunks: st.chunks, size: st.size}
		n.stagedGroups = append(n.stagedGroups, g)
		n.step([]peer.Message{m})
		return nil
	}); cerr != nil && err == nil {
		err = cerr
	}
	if err != nil {
		st.drop()
	}
	return err
}

// call runs fn on the driver goroutine and returns its error, or
// ErrStopped if the node stops first.
func (n *Node) call(fn func() error) error {
	done := make(chan error, 1)
	n.post(func() { done <- fn() })
	select {
	case err := <-done:
		return err
	case <-n.stop:
		return ErrStopped
	}
}

// A stager stores a streamed snapshot's data in chunks of stageChunk
// bytes in group g's log, as it is read.
type stager struct {
	n      *Node
	g      *group
	index  uint64
	buf    []byte
	chunks int
	size   int64
}

// receive checks data as it reads it (shard.CheckSnapshot) and stores it.
func (s *stager) receive(data io.Reader) error {
	var b store.Batch
	if err := s.g.log.Stage(&b, s.index); err != nil {
		return err
	}
	if err := s.n.st.Apply(&b); err != nil {
		return err
	}
	s.buf = make([]byte, 0, stageChunk)
	got, err := shard.CheckSnapshot(s.g.queue, io.TeeReader(data, s))
	switch {
	case err != nil:
		return err
	case got != s.index:
		return fmt.Errorf("%w: data of index %d for a snapshot at %d", shard.ErrBadSnapshot, got, s.index)
	}
	return s.flush()
}

// Write stores p: a chunk each time stageChunk bytes are in.
func (s *stager) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		k := min(len(p), stageChunk-len(s.buf))
		s.buf = append(s.buf, p[:k]...)
		p = p[k:]
		if len(s.buf) == stageChunk {
			if err := s.flush(); err != nil {
				return 0, err
			}
		}
	}
	return n, nil
}

// flush stores the chunk in the buffer, if any. The chunks are not
// fsynced: the storage group that records the snapshot is, after them.
func (s *stager) flush() error {
	if len(s.buf) == 0 {
		return nil
	}
	var b store.Batch
	s.g.log.PutChunk(&b, s.index, s.chunks, s.buf)
	b.NoSync()
	if err := s.n.st.Apply(&b); err != nil {
		return err
	}
	s.chunks++
	s.size += int64(len(s.buf))
	s.buf = s.buf[:0]
	return nil
}

// drop deletes the chunks stored; a failure is left to the next stage or
// start, which find them stale.
func (s *stager) drop() {
	if s.chunks == 0 {
		return
	}
	var b store.Batch
	s.g.log.DropStaged(&b, s.index, s.chunks)
	b.NoSync()
	if err := s.n.st.Apply(&b); err != nil {
		s.n.log.Debug("cannot delete a dropped snapshot's chunks", "group", s.g.id, "err", err)
	}
}

// dropUntaken deletes the data of the streamed snapshots raft did not
// take in this round: a snapshot stepped into raft is in the next Ready
// if raft takes it (driver goroutine, at the end of handleReadies).
func (n *Node) dropUntaken() {
	for _, g := range n.stagedGroups {
		if s := g.staged; s != nil {
			g.staged = nil
			n.log.Debug("raft did not take a streamed snapshot; deleting its data", "group", g.id, "index", s.index)
			st := &stager{n: n, g: g, index: s.index, chunks: s.chunks}
			st.drop()
		}
	}
	n.stagedGroups = n.stagedGroups[:0]
}

// keep returns the index up to which group g's leader may compact its log
// at most, given its latest image at index and the one before at prev:
// the entries after it are still needed by a follower that is recently
// active and at most one image interval behind (beyond that a snapshot is
// cheaper), by a follower a snapshot is being sent to, or that got one
// within snapshotGrace and has not caught up to the latest image since.
// Driver goroutine.
func (n *Node) keep(g *group, index, prev uint64) uint64 {
	to := index
	n.expireGrants(g)
	for id, pr := range g.rn.Status().Progress {
		if id == n.cfg.NodeID {
			continue
		}
		need, kept := pr.Match, pr.RecentActive && pr.Match >= prev
		if gr, ok := g.granted[id]; ok && !gr.caughtUp {
			if pr.Match >= index {
				gr.caughtUp = true
				g.granted[id] = gr
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
	return to
}

// expireGrants forgets group g's snapshots sent more than snapshotGrace
// ago (driver goroutine).
func (n *Node) expireGrants(g *group) {
	grace := uint64(snapshotGrace / n.cfg.TickInterval)
	for id, gr := range g.granted {
		if n.ticks-gr.tick > grace {
			delete(g.granted, id)
		}
	}
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
	if !g.log.HasData() {
		return fmt.Errorf("%w: log compacted to %d, past the replica's image at %d", raftlog.ErrCorrupt, si, g.sh.OpenedAt())
	}
	n.log.Info("installing a snapshot received before the node stopped", "group", g.id, "queue", g.queue, "index", si)
	g.sh.Install(si, g.log.OpenData())
	return nil
}
