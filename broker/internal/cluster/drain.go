package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/store"
)

// The states of a member, as Status gives them.
const (
	// NodeActive: the node takes new replicas and leads.
	NodeActive = "active"
	// NodeDraining: the node is being drained (DrainNode) and still holds
	// replicas that are being moved off it.
	NodeDraining = "draining"
	// NodeDrained: the node is drained and holds no replica of any queue;
	// it still votes in the meta group.
	NodeDrained = "drained"
)

// DrainNode drains node id: it marks it draining in the meta group, so
// that no queue is placed on it and it leads no group (no queue prefers
// it as leader any more: see Rebalance), and plans a move
// (MoveQueue) of each queue it holds a replica of to the same replicas
// without it, plus the member holding the fewest replicas that is not
// draining, if there is one (otherwise the queue keeps one replica
// fewer). It returns the number of queues whose move it planned, once
// this node has applied the plan; the moves run in the background, and
// Status shows the node as draining until it holds nothing, then as
// drained. Draining a node again plans what a restart or a new queue
// left (the plans live in the meta group: a drain survives any node's
// restart). With undo, the node is no longer draining: it takes new
// replicas again, and the moves already planned go on (a move of a queue
// back onto it is a MoveQueue).
//
// The error wraps fault.ErrInvalidArgument (not a member, or no other
// member left that is not draining) or fault.ErrUnavailable (no meta
// leader took the plan in time).
func (n *Node) DrainNode(ctx context.Context, id uint64, undo bool) (int, error) {
	if err := n.checkDrain(id, undo); err != nil {
		return 0, err
	}
	body := binary.AppendUvarint(nil, id)
	if undo {
		body = append(body, 1)
	} else {
		body = append(body, 0)
	}
	r, err := n.proposeMeta(ctx, metaDrain, body)
	if err != nil {
		return 0, err
	}
	return r.moved, r.err
}

func (n *Node) checkDrain(id uint64, undo bool) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !n.meta.isMember(id) {
		return fmt.Errorf("drain node %d: not a member of the cluster: %w", id, fault.ErrInvalidArgument)
	}
	if undo {
		return nil
	}
	for _, m := range n.meta.memberIDs() {
		if m != id && !n.meta.draining[m] {
			return nil
		}
	}
	return fmt.Errorf("drain node %d: no other member is left that is not draining: %w", id, fault.ErrInvalidArgument)
}

func drainKey(id uint64) []byte { return binary.BigEndian.AppendUint64([]byte("m/d/"), id) }

// applyDrain applies the metaDrain command (driver goroutine).
func (n *Node) applyDrain(b *store.Batch, body []byte) (metaResult, error) {
	id, k := binary.Uvarint(body)
	if k <= 0 || len(body) != k+1 || body[k] > 1 {
		return metaResult{}, errors.New("drain: bad body")
	}
	undo := body[k] == 1
	if err := n.checkDrain(id, undo); err != nil {
		return metaResult{err: err}, nil
	}
	if undo {
		n.mu.Lock()
		delete(n.meta.draining, id)
		n.mu.Unlock()
		b.Delete(drainKey(id))
		n.log.Info("node no longer draining", "node", id)
		return metaResult{}, nil
	}
	n.mu.Lock()
	n.meta.draining[id] = true
	var moved, unpreferred []*queueInfo
	for _, name := range slices.Sorted(mapKeys(n.meta.queues)) {
		q := n.meta.queues[name]
		if q.lead == id {
			q.lead = 0 // a rebalance preferred it
			unpreferred = append(unpreferred, q)
		}
		cur := q.target
		if cur == nil {
			cur = q.replicas
		}
		if !slices.Contains(cur, id) {
			continue
		}
		next := slices.DeleteFunc(slices.Clone(cur), func(r uint64) bool { return r == id })
		for _, m := range n.meta.byLoad(n.meta.memberIDs()) {
			if !n.meta.draining[m] && !slices.Contains(next, m) {
				next = append(next, m)
				break
			}
		}
		slices.Sort(next)
		q.target = next
		moved = append(moved, q)
	}
	n.mu.Unlock()
	b.Put(drainKey(id), nil)
	n.log.Info("draining a node", "node", id, "queues", len(moved))
	for _, q := range slices.Concat(unpreferred, moved) {
		putPlacement(b, q)
		if err := n.place(q); err != nil {
			return metaResult{}, err
		}
	}
	return metaResult{moved: len(moved)}, nil
}

// byLoad returns members ordered by the replicas they hold or are to
// hold, fewest first, then by ID; draining nodes last.
func (m *metaState) byLoad(members []uint64) []uint64 {
	load := map[uint64]int{}
	for _, q := range m.queues {
		for _, id := range q.replicas {
			load[id]++
		}
		for _, id := range q.target {
			if !slices.Contains(q.replicas, id) {
				load[id]++
			}
		}
	}
	slices.SortStableFunc(members, func(a, b uint64) int {
		if m.draining[a] != m.draining[b] {
			if m.draining[a] {
				return 1
			}
			return -1
		}
		return load[a] - load[b]
	})
	return members
}

// nodeState returns member id's state (driver goroutine, or n.mu held).
func (n *Node) nodeState(id uint64) string {
	if !n.meta.draining[id] {
		return NodeActive
	}
	for _, q := range n.meta.queues {
		if q.hosts(id) {
			return NodeDraining
		}
	}
	return NodeDrained
}

// shedLead hands the lead of the meta group away from this node while it
// is draining, to the voter most caught up that is not (driver
// goroutine, each tick; queue groups hand theirs over in their moves).
func (n *Node) shedLead(g *group) {
	if !n.meta.draining[n.cfg.NodeID] || g.rn.BasicStatus().RaftState != raft.StateLeader {
		return
	}
	if g.moveAt != 0 && n.ticks-g.moveAt < uint64(n.cfg.ElectionTicks) {
		return
	}
	var to, best uint64
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id != n.cfg.NodeID && !n.meta.draining[id] && pr.Match >= best {
			to, best = id, pr.Match
		}
	})
	if to != 0 {
		g.moveAt = n.ticks
		n.log.Info("draining: handing over the lead of the meta group", "to", to)
		g.rn.TransferLeader(to)
	}
}
