package cluster

import (
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"
)

// Status is a node's view of the cluster, for `fila cluster status`.
type Status struct {
	// NodeID is the node that answered.
	NodeID uint64
	// Nodes are the cluster's members, by ID.
	Nodes []NodeStatus
	// Groups are the Raft groups this node holds a replica of: the meta
	// group first, then the queues' by name.
	Groups []GroupStatus
	// Pending are the moves of the last rebalance not yet started, in
	// the order they start (Rebalance).
	Pending []PlannedMove
}

// NodeStatus is one member as this node sees it.
type NodeStatus struct {
	ID uint64
	// Addr is the node's client address, host:port ("" until it has
	// registered it with the meta group).
	Addr string
	// PeerAddr is its peer transport address.
	PeerAddr string
	// Connected is whether this node has a peer connection to it (true
	// for the node itself).
	Connected bool
	// State is NodeActive, NodeDraining or NodeDrained (DrainNode).
	State string
}

// GroupStatus is one Raft group as this node sees it.
type GroupStatus struct {
	// ID is the group's ID; Queue its queue ("" for the meta group).
	ID    uint64
	Queue string
	// Leader is the leader's node ID, 0 while none is known; Term the
	// Raft term this node is in.
	Leader, Term uint64
	// Commit and Applied are this node's commit and applied indexes;
	// LastIndex the last index of its log.
	Commit, Applied, LastIndex uint64
	// FirstIndex is the first index its log holds: the entries before
	// it were compacted into a snapshot (1 while none was).
	FirstIndex uint64
	// Quiesced is whether the group is idle on this node: not ticked,
	// sending no heartbeats, until a proposal, a message or the loss of
	// a node it needs wakes it.
	Quiesced bool
	// Replicas are the group's members. Their Match (the last index the
	// leader knows each holds) and Lag (entries behind the leader's last
	// index) are known only when this node leads the group; otherwise
	// they are zero and Known is false.
	Replicas []ReplicaStatus
	// Target is the replica set a move is taking a queue's group to
	// (MoveQueue), by node ID; nil while none is under way.
	Target []uint64
	// PreferredLeader is the node a rebalance prefers to lead a queue's
	// group, which its leader hands the lead to once that node is
	// caught up; 0 for none.
	PreferredLeader uint64
}

// ReplicaStatus is one member of a group.
type ReplicaStatus struct {
	NodeID     uint64
	Known      bool
	Match, Lag uint64
	// Learner is whether the replica is a learner: it receives the log
	// but does not vote, while a move catches it up.
	Learner bool
}

// Status returns this node's view of the cluster. It runs on the driver
// goroutine and waits for it; the error wraps ErrStopped once the node
// has stopped, or its driver has (a storage failure, see Err).
func (n *Node) Status() (Status, error) {
	ch := make(chan Status, 1)
	select {
	case n.ctl <- func() { ch <- n.status() }:
	case <-n.stop:
		return Status{}, n.stopped()
	case <-n.done:
		return Status{}, n.stopped()
	}
	select {
	case s := <-ch:
		return s, nil
	case <-n.stop:
	case <-n.done:
	}
	return Status{}, n.stopped()
}

// stopped is the error of an operation that found the driver stopped:
// ErrStopped, with the storage failure that stopped it if any.
func (n *Node) stopped() error {
	if err := n.Err(); errors.Is(err, ErrRemoved) {
		return fmt.Errorf("%w: %v", ErrStopped, err)
	} else if err != nil {
		return fmt.Errorf("%w after a storage failure: %v", ErrStopped, err)
	}
	return ErrStopped
}

// status builds the Status on the driver goroutine.
func (n *Node) status() Status {
	s := Status{NodeID: n.cfg.NodeID}
	n.mu.RLock()
	addrs := n.memberAddrs()
	for _, id := range n.meta.memberIDs() {
		ns := NodeStatus{ID: id, Addr: n.meta.nodes[id], PeerAddr: addrs[id], State: n.nodeState(id)}
		ns.Connected = id == n.cfg.NodeID || n.tr.Connected(id)
		s.Nodes = append(s.Nodes, ns)
	}
	s.Pending = slices.Clone(n.meta.pending)
	gs := make([]*group, 0, len(n.groups))
	for _, g := range n.groups {
		gs = append(gs, g)
	}
	n.mu.RUnlock()
	slices.SortFunc(gs, func(a, b *group) int {
		if (a.id == MetaGroup) != (b.id == MetaGroup) {
			if a.id == MetaGroup {
				return -1
			}
			return 1
		}
		switch {
		case a.queue < b.queue:
			return -1
		case a.queue > b.queue:
			return 1
		}
		return 0
	})
	for _, g := range gs {
		bs := g.rn.BasicStatus()
		last, _ := g.log.LastIndex()
		first, _ := g.log.FirstIndex()
		st := GroupStatus{
			ID: g.id, Queue: g.queue, Leader: bs.Lead, Term: bs.GetTerm(),
			Commit: bs.GetCommit(), Applied: g.applied.Load(), LastIndex: last,
			Quiesced: g.quiesced.Load(), FirstIndex: first,
		}
		for _, id := range g.replicas {
			st.Replicas = append(st.Replicas, ReplicaStatus{NodeID: id})
		}
		for _, id := range g.learners {
			st.Replicas = append(st.Replicas, ReplicaStatus{NodeID: id, Learner: true})
		}
		st.Target = slices.Clone(g.moveTo)
		st.PreferredLeader = g.lead
		if bs.RaftState == raft.StateLeader {
			g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
				for i := range st.Replicas {
					if st.Replicas[i].NodeID == id {
						st.Replicas[i].Known = true
						st.Replicas[i].Match = pr.Match
						if last > pr.Match {
							st.Replicas[i].Lag = last - pr.Match
						}
					}
				}
			})
		}
		s.Groups = append(s.Groups, st)
	}
	return s
}
