package cluster

import (
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"
)

// peerDown runs on the driver when the connection to node id failed: its
// process ended, most often, since a network that fails between two
// processes seldom closes their connection. In each group that id led and
// this node follows, the replicas take over at once rather than after an
// election timeout (a second on the defaults, and up to twice that by
// Raft's randomization), in turn: the replica next in line, the group's
// voter with the lowest ID other than id, campaigns at once; the next one
// takeOverStep later if the group still has no leader (the first one's
// log may lack an entry the second has, and then it cannot win); and so
// on. Each steps the MsgTimeoutNow a leader sends in a leadership
// transfer, so that it campaigns without a pre-vote and the other
// followers, which heard from the leader a moment ago, vote for it all
// the same (Raft's lease check lets a transfer through).
//
// Nothing of Raft's safety depends on it: a vote still needs a log as up
// to date as the voter's, and a group in which no candidate wins is left
// to its election timeout, as before. A leader whose connection failed
// while it kept running loses its leadership to a higher term (the cost
// of a connection that fails while both ends live). A replica being
// rebuilt never campaigns.
func (n *Node) peerDown(id uint64) {
	for _, g := range n.groups {
		n.takeOver(g, id, true)
	}
}

// takeOverStep is how long each replica in line waits after the one
// before it (peerDown).
const takeOverStep = 250 * time.Millisecond

// takeOver campaigns in g, which dead led, if the group still has no
// other leader. On the first call, from peerDown, a node whose turn is
// later schedules a second call for then instead. Driver goroutine.
func (n *Node) takeOver(g *group, dead uint64, first bool) {
	if n.groups[g.id] != g || g.rebuilding.Load() {
		return
	}
	st := g.rn.BasicStatus()
	if st.RaftState == raft.StateLeader || (st.Lead != dead && st.Lead != raft.None) {
		return // a leader, or another one
	}
	if first {
		if g.leader.Load() != dead || st.Lead != dead {
			return // not the group's leader as this node knows it
		}
		turn := rank(g.replicas, dead, n.cfg.NodeID)
		if turn < 0 {
			return // not a voter of the group
		}
		if turn > 0 {
			time.AfterFunc(time.Duration(turn)*takeOverStep, func() {
				n.post(func() { n.takeOver(g, dead, false) })
			})
			return
		}
	}
	n.wake(g)
	n.log.Info("the leader's connection failed; campaigning at once", "group", g.id, "queue", g.queue, "leader", dead, "term", st.GetTerm())
	err := g.rn.Step(&pb.Message{
		Type: pb.MessageType_MsgTimeoutNow.Enum(),
		From: proto.Uint64(dead),
		To:   proto.Uint64(n.cfg.NodeID),
		Term: proto.Uint64(st.GetTerm()),
	})
	if err != nil {
		n.log.Debug("campaign", "group", g.id, "err", err)
	}
}

// rank returns node's place in line to take over from leader: 0 for the
// voter with the lowest ID other than leader, 1 for the next, and so on;
// -1 if node is not a voter (or is the leader).
func rank(voters []uint64, leader, node uint64) int {
	if node == leader || !slices.Contains(voters, node) {
		return -1
	}
	r := 0
	for _, v := range voters {
		if v != leader && v < node {
			r++
		}
	}
	return r
}
