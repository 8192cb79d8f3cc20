package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"
	"google.golang.org/protobuf/proto"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// A queue's placement plan is stored beside its record, under
//
//	m/p/<name>    boot count uvarint, boot IDs uvarint…, target count uvarint, target IDs uvarint…, preferred leader uvarint
//
// boot is the replica set the queue's group was created with (its
// bootstrap configuration, which a replica that starts with an empty log
// writes again: the same entries as every other replica's first ones);
// target is the replica set a move is taking it to. A queue without the
// record was never moved: boot is its replicas, and no move is under way.

// maxReplicas bounds a queue's replica set.
const maxReplicas = 64

// catchUpSlack is how many entries short of the leader's commit index a
// learner may be and still count as caught up: under load the log grows
// while it catches up, and a learner promoted a few entries behind has
// them within a round trip.
const catchUpSlack = 256

// MoveQueue moves queue's replicas to the nodes replicas (member node
// IDs, 1 to 64 distinct ones, in any order): it records the plan in the
// meta group and returns once this node has applied it. The move itself
// runs in the background, driven by the queue group's leader, one Raft
// configuration change at a time: each new node joins as a learner and
// catches up (by snapshot when the log was compacted); then, in one
// joint configuration change (ConfChangeV2; Ongaro, "Consensus: Bridging
// Theory and Practice", 2014, §4.3), the learners become voters and the
// nodes left out stop being voters; a leader left out hands its
// leadership to a new voter before the joint configuration is left;
// last, the meta group records the new replicas, and the nodes left out
// delete their copies. Status shows a move under way as its group's
// Target. Any leader continues a move a failed one started. A plan
// replaces the one under way, if any; moving a queue to the replicas it
// has undoes what a plan under way began.
//
// The error wraps fault.ErrQueueNotFound (no such queue; a dead-letter
// queue moves with its queue), fault.ErrInvalidArgument (an empty list,
// a duplicate, or a node that is not a member) or fault.ErrUnavailable
// (no meta leader took the plan in time).
func (n *Node) MoveQueue(ctx context.Context, queue string, replicas []uint64) error {
	if _, err := n.checkMove(queue, replicas); err != nil {
		return err
	}
	r, err := n.proposeMeta(ctx, metaMoveQueue, appendMove(nil, queue, replicas))
	if err != nil {
		return err
	}
	return r.err
}

// checkMove checks a move of queue to replicas against this node's meta
// state, and returns replicas sorted.
func (n *Node) checkMove(queue string, replicas []uint64) ([]uint64, error) {
	n.mu.RLock()
	q := n.meta.queues[queue]
	dlq := q == nil && n.meta.queueOf(queue) != nil
	n.mu.RUnlock()
	switch {
	case dlq:
		return nil, fmt.Errorf("move queue %s: a dead-letter queue moves with its queue: %w", queue, fault.ErrInvalidArgument)
	case q == nil:
		return nil, fmt.Errorf("move queue %s: %w", queue, n.missing(queue))
	case len(replicas) == 0 || len(replicas) > maxReplicas:
		return nil, fmt.Errorf("move queue %s: %d replicas, want 1 to %d: %w", queue, len(replicas), maxReplicas, fault.ErrInvalidArgument)
	}
	ids := slices.Sorted(slices.Values(replicas))
	for i, id := range ids {
		if i > 0 && ids[i-1] == id {
			return nil, fmt.Errorf("move queue %s: node %d named twice: %w", queue, id, fault.ErrInvalidArgument)
		}
		if !n.meta.isMember(id) {
			return nil, fmt.Errorf("move queue %s: node %d is not a member of the cluster: %w", queue, id, fault.ErrInvalidArgument)
		}
	}
	return ids, nil
}

func appendMove(b []byte, queue string, ids []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(queue)))
	b = append(b, queue...)
	return appendIDs(b, ids)
}

func decodeMove(b []byte) (string, []uint64, error) {
	l, k := binary.Uvarint(b)
	if k <= 0 || l > uint64(len(b)-k) {
		return "", nil, errors.New("move: bad queue name")
	}
	name := string(b[k : k+int(l)])
	ids, rest, err := decodeIDs(b[k+int(l):])
	if err != nil {
		return "", nil, fmt.Errorf("move: %w", err)
	}
	if len(rest) != 0 {
		return "", nil, errors.New("move: trailing bytes")
	}
	return name, ids, nil
}

func appendIDs(b []byte, ids []uint64) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = binary.AppendUvarint(b, id)
	}
	return b
}

func decodeIDs(b []byte) ([]uint64, []byte, error) {
	cnt, k := binary.Uvarint(b)
	if k <= 0 || cnt > maxReplicas {
		return nil, nil, errors.New("bad node count")
	}
	b = b[k:]
	var ids []uint64
	for range cnt {
		id, k := binary.Uvarint(b)
		if k <= 0 {
			return nil, nil, errors.New("truncated node IDs")
		}
		ids = append(ids, id)
		b = b[k:]
	}
	return ids, b, nil
}

// placementKey is where queue name's placement plan is stored.
func placementKey(name string) []byte { return []byte("m/p/" + name) }

func appendPlacement(b []byte, q *queueInfo) []byte {
	return binary.AppendUvarint(appendIDs(appendIDs(b, q.boot), q.target), q.lead)
}

// putPlacement puts q's record and placement plan into b.
func putPlacement(b *store.Batch, q *queueInfo) {
	b.Put([]byte("m/q/"+q.spec.Name), appendQueueInfo(nil, q))
	b.Put(placementKey(q.spec.Name), appendPlacement(nil, q))
}

func decodePlacement(v []byte, q *queueInfo) error {
	boot, rest, err := decodeIDs(v)
	if err != nil {
		return err
	}
	target, rest, err := decodeIDs(rest)
	if err != nil {
		return err
	}
	lead, k := binary.Uvarint(rest)
	if k <= 0 || len(rest) != k {
		return errors.New("bad preferred leader")
	}
	q.boot, q.target, q.lead = boot, target, lead
	return nil
}

// hosts reports whether node id holds, or is to hold, a replica of q.
func (q *queueInfo) hosts(id uint64) bool {
	return slices.Contains(q.replicas, id) || slices.Contains(q.target, id)
}

// applyMove records a move of a queue (the metaMoveQueue command) and
// opens the queue's group here if this node is one of its new replicas
// (driver goroutine).
func (n *Node) applyMove(b *store.Batch, body []byte) (metaResult, error) {
	name, ids, err := decodeMove(body)
	if err != nil {
		return metaResult{}, err
	}
	ids, err = n.checkMove(name, ids)
	if err != nil {
		return metaResult{err: err}, nil
	}
	// A plan of the replicas the queue has is kept too: its leader then
	// undoes what a plan it replaces began (learners, a joint
	// configuration) before recording it done.
	n.mu.Lock()
	q := n.meta.queues[name]
	q.target = ids
	n.mu.Unlock()
	putPlacement(b, q)
	n.log.Info("queue move planned", "queue", name, "replicas", q.replicas, "target", q.target)
	return metaResult{}, n.place(q)
}

// applyPlaced records that a queue's group reached the replicas its move
// was taking it to (the metaPlaced command, which its leader proposes),
// and deletes this node's replica if it is not one of them. A stale
// command (the queue was deleted, or moved elsewhere since) changes
// nothing (driver goroutine).
func (n *Node) applyPlaced(b *store.Batch, body []byte) (metaResult, error) {
	gid, k := binary.Uvarint(body)
	if k <= 0 {
		return metaResult{}, errors.New("placed: bad group")
	}
	name, ids, err := decodeMove(body[k:])
	if err != nil {
		return metaResult{}, err
	}
	n.mu.Lock()
	q := n.meta.queues[name]
	if q == nil || q.group != gid || q.target == nil || !slices.Equal(q.target, ids) {
		n.mu.Unlock()
		return metaResult{}, nil
	}
	q.replicas, q.target = ids, nil
	n.mu.Unlock()
	putPlacement(b, q)
	n.log.Info("queue moved", "queue", name, "replicas", ids)
	return metaResult{}, n.place(q)
}

// place makes this node's replica of q follow q's placement: it opens
// the queue's group if this node is to hold it and does not, and deletes
// its replica if it holds one and is not to. It mirrors the move under
// way onto the group. Its error is a storage failure (driver goroutine).
func (n *Node) place(q *queueInfo) error {
	n.mu.RLock()
	g := n.groups[q.group]
	n.mu.RUnlock()
	me := n.cfg.NodeID
	switch {
	case g == nil && q.hosts(me):
		if done := n.dropping[q.group]; done != nil {
			// The replica of an earlier placement is still being
			// deleted: open the new one after it.
			go func() {
				<-done
				n.post(func() {
					if cur := n.meta.queues[q.spec.Name]; cur == q {
						if err := n.place(q); err != nil {
							n.fail(err)
						}
					}
				})
			}()
			return nil
		}
		if _, err := n.openQueueGroup(q); err != nil {
			// As at creation: the same on every node, so not this
			// node's failure; the move waits for it (status).
			n.log.Error("cannot open a replica of a moved queue", "queue", q.spec.Name, "group", q.group, "err", err)
			return nil
		}
		n.log.Info("opened a replica of a moved queue", "queue", q.spec.Name, "group", q.group)
	case g != nil && !q.hosts(me):
		var b store.Batch
		err := n.dropReplica(&b, q, g)
		if err == nil {
			err = n.st.Apply(&b)
		}
		if err != nil {
			return fmt.Errorf("queue %s: deleting the replica of a queue moved away: %w", q.spec.Name, err)
		}
		n.log.Info("deleted the replica of a queue moved away", "queue", q.spec.Name, "group", q.group)
	case g != nil:
		g.moveTo, g.lead = q.target, q.lead
		g.moveAt = 0
		n.wake(g)
	}
	return nil
}

// dropReplica closes this node's replica of q, group g: its shard
// deletes its messages on its own goroutine, and the deletion of the
// group's log and records goes into b. The queue's meta record is the
// caller's (driver goroutine).
func (n *Node) dropReplica(b *store.Batch, q *queueInfo, g *group) error {
	name := q.spec.Name
	n.mu.Lock()
	delete(n.groups, q.group)
	if n.byQueue[name] == g {
		delete(n.byQueue, name)
		delete(n.byQueue, name+sched.DLQSuffix)
	}
	n.mu.Unlock()
	done := make(chan struct{})
	n.dropping[q.group] = done
	// The replica's state goes outside the log: the group is gone. Its
	// shard may be waiting to propose to this goroutine, so it deletes
	// and stops on its own.
	go func() {
		defer func() {
			close(done)
			n.post(func() {
				if n.dropping[q.group] == done {
					delete(n.dropping, q.group)
				}
			})
		}()
		r := make(chan shard.Result, 1)
		if err := g.sh.Init(&shard.DeleteQueue{Name: name}, func(res shard.Result) { r <- res }); err == nil {
			<-r
		}
		g.sh.Close()
		// The shard wrote its applied index with its deletion, maybe
		// after b deleted it.
		var b store.Batch
		b.Delete(appliedKey(q.group))
		b.Delete(imageKey(q.group))
		if err := n.st.Apply(&b); err != nil {
			n.log.Warn("cannot delete a dropped replica's records", "queue", name, "group", q.group, "err", err)
		}
	}()
	if err := g.log.Destroy(b); err != nil {
		return err
	}
	b.Delete(appliedKey(q.group))
	b.Delete(imageKey(q.group))
	return nil
}

// setConf mirrors a group's Raft configuration onto it: its voters (of
// both halves of a joint configuration) and its learners (driver
// goroutine).
func (n *Node) setConf(g *group, cs *pb.ConfState) {
	voters := slices.Concat(cs.GetVoters(), cs.GetVotersOutgoing())
	slices.Sort(voters)
	g.replicas = slices.Compact(voters)
	learners := slices.Concat(cs.GetLearners(), cs.GetLearnersNext())
	slices.Sort(learners)
	g.learners = slices.Compact(learners)
	g.incoming = slices.Sorted(slices.Values(cs.GetVoters()))
	g.joint = len(cs.GetVotersOutgoing()) > 0
	g.confs++
	if g.id == MetaGroup {
		n.mu.Lock()
		n.meta.voters = slices.Clone(g.replicas)
		n.mu.Unlock()
		n.followMembers()
	}
}

// moveStep takes the next step of the move under way in group g, which
// this node leads: at most one configuration change in flight, each
// step taken once the one before it has applied, or again after an
// election timeout if it was lost (driver goroutine).
func (n *Node) moveStep(g *group) {
	if g.rn.BasicStatus().RaftState != raft.StateLeader || g.rebuilding.Load() {
		return
	}
	if g.moveConfs == g.confs && g.moveAt != 0 && n.ticks-g.moveAt < uint64(n.cfg.ElectionTicks) {
		return
	}
	target, me := g.moveTo, n.cfg.NodeID
	n.wake(g)
	step := func(what string, cc *pb.ConfChangeV2) {
		g.moveAt, g.moveConfs = n.ticks, g.confs
		if err := g.rn.ProposeConfChange(cc); err != nil {
			n.log.Debug("move: conf change", "group", g.id, "err", err)
			return
		}
		n.log.Info("queue move: "+what, "queue", g.queue, "group", g.id, "target", target)
	}
	change := func(t pb.ConfChangeType, id uint64) *pb.ConfChangeSingle {
		return &pb.ConfChangeSingle{Type: t.Enum(), NodeId: proto.Uint64(id)}
	}
	if g.joint {
		if !slices.Contains(g.incoming, me) {
			// Leaving the joint configuration would leave this leader
			// out: hand the lead to the new voter most caught up.
			var to, best uint64
			g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
				if slices.Contains(g.incoming, id) && pr.Match >= best {
					to, best = id, pr.Match
				}
			})
			if to != 0 {
				g.moveAt, g.moveConfs = n.ticks, g.confs
				n.log.Info("queue move: handing over the lead", "queue", g.queue, "group", g.id, "to", to)
				g.rn.TransferLeader(to)
			}
			return
		}
		step("leaving the joint configuration", &pb.ConfChangeV2{})
		return
	}
	for _, id := range target {
		if !slices.Contains(g.replicas, id) && !slices.Contains(g.learners, id) {
			step(fmt.Sprintf("adding node %d as a learner", id), &pb.ConfChangeV2{
				Changes: []*pb.ConfChangeSingle{change(pb.ConfChangeType_ConfChangeAddLearnerNode, id)},
			})
			return
		}
	}
	commit := g.rn.BasicStatus().GetCommit()
	caughtUp := true
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if pr.IsLearner && slices.Contains(target, id) && (pr.State != tracker.StateReplicate || pr.Match+catchUpSlack < commit) {
			caughtUp = false
		}
	})
	if !caughtUp {
		return
	}
	var changes []*pb.ConfChangeSingle
	for _, id := range g.learners {
		if slices.Contains(target, id) {
			changes = append(changes, change(pb.ConfChangeType_ConfChangeAddNode, id))
		} else {
			changes = append(changes, change(pb.ConfChangeType_ConfChangeRemoveNode, id))
		}
	}
	for _, id := range g.replicas {
		if !slices.Contains(target, id) {
			changes = append(changes, change(pb.ConfChangeType_ConfChangeRemoveNode, id))
		}
	}
	if len(changes) > 0 {
		step("entering the joint configuration", &pb.ConfChangeV2{
			Transition: pb.ConfChangeTransition_ConfChangeTransitionJointExplicit.Enum(),
			Changes:    changes,
		})
		return
	}
	if g.id == MetaGroup {
		g.moveTo = nil // the members are the meta state's already
		return
	}
	// The configuration is the target's: the meta group records it.
	g.moveAt, g.moveConfs = n.ticks, g.confs
	body := binary.AppendUvarint(nil, g.id)
	body = appendMove(body, g.queue, target)
	go func() {
		ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
		defer cancel()
		if _, err := n.proposeMeta(ctx, metaPlaced, body); err != nil {
			n.log.Debug("move: recording the new replicas", "queue", g.queue, "err", err)
		}
	}()
}

// dropStale deletes, at open, what this node still holds of a replica of
// q that it is no longer to hold: a move took it away while the node was
// down, or before the deletion was done.
func (n *Node) dropStale(q *queueInfo) error {
	if _, err := n.st.Get(appliedKey(q.group)); errors.Is(err, store.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	g, err := n.openQueueGroup(q)
	if err != nil {
		return err
	}
	var b store.Batch
	if err := n.dropReplica(&b, q, g); err != nil {
		return err
	}
	n.log.Info("deleting the replica of a queue moved away while this node was down", "queue", q.spec.Name, "group", q.group)
	return n.st.Apply(&b)
}
