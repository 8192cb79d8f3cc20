package cluster

import (
	"bytes"
	"slices"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/fila-mq/fila/broker/internal/peer"
)

// Quiescence: a queue group with nothing to do stops ticking, so an idle
// queue costs no heartbeats and no driver work, in the manner of
// CockroachDB's quiesced ranges.
//
// A leader quiesces its group once, at two ticks in a row, every entry is
// committed and applied, every replica holds the whole log, and it has
// heard from every replica within an election timeout. It then sends each
// follower a heartbeat carrying quiesceContext and stops ticking the group.
// A follower that receives it and holds the log up to its commit index
// stops ticking too.
//
// Anything else wakes a quiesced group on the node that sees it: a
// proposal, any other Raft message of the group, or the loss of a node the
// group needs. Every node sends every peer a liveness message each tick
// (group livenessGroup, no Raft group), so that each node knows when it
// last heard from each peer. A quiesced follower wakes once it has not
// heard from its leader for an election timeout, and its ticks then elect
// a new leader as usual; a quiesced leader wakes once it has not heard
// from a majority, so that CheckQuorum makes it step down and its
// subscriptions end.

// quiesceContext is the context of the heartbeat that quiesces a group.
var quiesceContext = []byte("fila-quiesce")

// livenessGroup is the group ID of the liveness messages: no Raft group
// has it, and the driver only notes who sent them.
const livenessGroup = 0

// quiesceAfter is how many ticks in a row a leader finds its group idle
// before it quiesces it.
const quiesceAfter = 2

// isQuiesce reports whether m is the heartbeat that quiesces a group, or
// a follower's answer to it.
func isQuiesce(m *pb.Message) bool {
	t := m.GetType()
	return (t == pb.MessageType_MsgHeartbeat || t == pb.MessageType_MsgHeartbeatResp) &&
		bytes.Equal(m.GetContext(), quiesceContext)
}

// keepalive sends every peer a liveness message. Driver goroutine.
func (n *Node) keepalive() {
	me := n.cfg.NodeID
	for id := range n.memberAddrs() {
		if id == me {
			continue
		}
		n.tr.Send(id, []peer.Message{{Group: livenessGroup, Msg: &pb.Message{
			Type: pb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(me), To: proto.Uint64(id),
		}}})
	}
}

// heardRecently reports whether a message from node id arrived within an
// election timeout (this node always has). Driver goroutine.
func (n *Node) heardRecently(id uint64) bool {
	if id == n.cfg.NodeID {
		return true
	}
	t, ok := n.heard[id]
	return ok && n.ticks-t <= uint64(n.cfg.ElectionTicks)
}

// wakeNeeded reports whether quiesced group g must tick again because a
// node it needs is gone: its leader, for a follower; a majority of its
// replicas, for its leader.
func (n *Node) wakeNeeded(g *group) bool {
	lead := g.leader.Load()
	if lead == 0 {
		return true
	}
	if lead != n.cfg.NodeID {
		return !n.heardRecently(lead)
	}
	alive := 0
	for _, id := range g.replicas {
		if n.heardRecently(id) {
			alive++
		}
	}
	return alive <= len(g.replicas)/2
}

// wake makes a quiesced group tick again.
func (n *Node) wake(g *group) {
	if g.quiesced.CompareAndSwap(true, false) {
		g.idle = 0
	}
}

// maybeQuiesce quiesces queue group g, and reports whether it did, if
// this node leads it and it has been idle for quiesceAfter ticks. Driver
// goroutine, at a tick, before g's Tick.
func (n *Node) maybeQuiesce(g *group) bool {
	if g.sh == nil || g.campaign || g.moveTo != nil || g.rebuilding.Load() || !n.quiescible(g) {
		g.idle = 0
		return false
	}
	if g.idle++; g.idle < quiesceAfter {
		return false
	}
	bs := g.rn.BasicStatus()
	me := n.cfg.NodeID
	for _, id := range slices.Concat(g.replicas, g.learners) {
		if id == me {
			continue
		}
		n.tr.Send(id, []peer.Message{{Group: g.id, Msg: &pb.Message{
			Type: pb.MessageType_MsgHeartbeat.Enum(), From: proto.Uint64(me), To: proto.Uint64(id),
			Term: proto.Uint64(bs.GetTerm()), Commit: proto.Uint64(bs.GetCommit()), Context: quiesceContext,
		}}})
	}
	g.quiesced.Store(true)
	g.idle = 0
	return true
}

// quiescible reports whether g is idle: this node leads it, every entry
// is committed and applied, every replica holds the whole log, and every
// replica was heard from within an election timeout.
func (n *Node) quiescible(g *group) bool {
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader || g.rn.HasReady() {
		return false
	}
	last, _ := g.log.LastIndex()
	if bs.GetCommit() != last || g.applied.Load() != last {
		return false
	}
	ok := true
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.Match != last || !n.heardRecently(id) {
			ok = false
		}
	})
	return ok
}

// stepQuiesce handles a quiesce heartbeat, or the answer to one, for
// group g; it reports whether m was one. A follower that holds the log up
// to the leader's commit index quiesces; the answers are dropped, so that
// they do not wake the leader.
func (n *Node) stepQuiesce(g *group, m *pb.Message) bool {
	if !isQuiesce(m) {
		return false
	}
	if m.GetType() == pb.MessageType_MsgHeartbeatResp {
		return true
	}
	if g.rebuilding.Load() {
		return false // stepped as any heartbeat: see step
	}
	last, _ := g.log.LastIndex()
	if m.GetCommit() > last {
		// Not from the leader this node knows (raft would take the
		// commit index for a corrupt log): drop it, stay awake.
		n.wake(g)
		return true
	}
	if err := g.rn.Step(m); err != nil {
		return true
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState == raft.StateFollower && bs.Lead == m.GetFrom() && bs.GetTerm() == m.GetTerm() &&
		bs.GetCommit() == m.GetCommit() {
		g.quiesced.Store(true)
		g.idle = 0
	}
	return true
}
