package cluster

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	"go.etcd.io/raft/v3/tracker"

	"github.com/fila-mq/fila/broker/internal/store"
)

// PlannedMove is one step of a rebalance: queue's replica on node From
// moves to node To (a MoveQueue of the queue's replicas without From,
// with To).
type PlannedMove struct {
	Queue    string
	From, To uint64
}

// PlannedLead is a queue's preferred leader as a rebalance sets it: the
// node its group's leader hands the lead to, once that node is a voter
// caught up with the log.
type PlannedLead struct {
	Queue string
	Node  uint64
}

// RebalancePlan is what a rebalance does: the replica moves, in the
// order they start, and the preferred leaders it changes.
type RebalancePlan struct {
	Moves []PlannedMove
	Leads []PlannedLead
}

// Rebalance evens out the queues' replicas and leaders over the members
// that are not draining: it plans replica moves until no move of one
// queue from the most loaded node to the least loaded brings them
// closer, then preferred leaders the same way (over the replica sets the
// moves reach). A queue's load is its weight (queueWeights): 1, plus its
// payload bytes over the mean queue's, plus its deliveries of the last 30
// to 60 s over the mean queue's, as this node's replicas report them
// (the proposer's figures go in the command, so every node plans
// alike); a queue this node holds no replica of weighs as much as the
// mean queue. With queues of equal weight, as in a cluster without
// traffic, this is each node within one replica, and one lead, of every
// other. A queue with a move under way keeps it and is counted where it
// is going.
//
// With dryRun it returns the plan from this node's view of the meta
// state and changes nothing. Otherwise it records the plan in the meta
// group (replacing the moves of an earlier rebalance not yet started)
// and returns it once this node has applied it. The moves then start in
// order, driven by the meta group's leader, each once neither of its
// nodes takes part in another move under way: at most one move per node
// at a time. Status lists the moves not yet started, and each queue
// group's preferred leader. The plan lives in the meta group: it goes on
// across any node's restart. The error wraps fault.ErrUnavailable when
// no meta leader took the plan in time.
func (n *Node) Rebalance(ctx context.Context, dryRun bool) (RebalancePlan, error) {
	loads := n.queueLoads(ctx)
	if dryRun {
		n.mu.RLock()
		defer n.mu.RUnlock()
		return n.meta.planRebalance(n.meta.memberIDs(), loads), nil
	}
	r, err := n.proposeMeta(ctx, metaRebalance, appendLoads(nil, loads))
	if err != nil {
		return RebalancePlan{}, err
	}
	return r.plan, r.err
}

// rebalanceKey holds the moves of the last rebalance not yet started:
// count uvarint, count × (name length uvarint, name, from uvarint, to
// uvarint).
var rebalanceKey = []byte("m/b")

func appendMoves(b []byte, moves []PlannedMove) []byte {
	b = binary.AppendUvarint(b, uint64(len(moves)))
	for _, m := range moves {
		b = appendPlannedMove(b, m)
	}
	return b
}

func appendPlannedMove(b []byte, m PlannedMove) []byte {
	b = binary.AppendUvarint(b, uint64(len(m.Queue)))
	b = append(b, m.Queue...)
	b = binary.AppendUvarint(b, m.From)
	return binary.AppendUvarint(b, m.To)
}

func decodePlannedMove(b []byte) (PlannedMove, []byte, error) {
	l, k := binary.Uvarint(b)
	if k <= 0 || l > uint64(len(b)-k) {
		return PlannedMove{}, nil, errors.New("bad queue name")
	}
	m := PlannedMove{Queue: string(b[k : k+int(l)])}
	b = b[k+int(l):]
	var k1, k2 int
	m.From, k1 = binary.Uvarint(b)
	if k1 > 0 {
		m.To, k2 = binary.Uvarint(b[k1:])
	}
	if k1 <= 0 || k2 <= 0 {
		return PlannedMove{}, nil, errors.New("truncated move")
	}
	return m, b[k1+k2:], nil
}

func decodeMoves(b []byte) ([]PlannedMove, error) {
	cnt, k := binary.Uvarint(b)
	if k <= 0 || cnt > uint64(len(b)) {
		return nil, errors.New("bad move count")
	}
	b = b[k:]
	moves := make([]PlannedMove, 0, cnt)
	for range cnt {
		m, rest, err := decodePlannedMove(b)
		if err != nil {
			return nil, err
		}
		moves = append(moves, m)
		b = rest
	}
	if len(b) != 0 {
		return nil, errors.New("trailing bytes")
	}
	return moves, nil
}

// planRebalance computes a rebalance of the queues over members from m
// and the queues' loads (the caller holds what guards m). It is
// deterministic: every node applying the same meta state and loads
// computes the same plan.
func (m *metaState) planRebalance(members []uint64, loads map[string]QueueLoad) RebalancePlan {
	var plan RebalancePlan
	var nodes []uint64
	for _, id := range members {
		if !m.draining[id] {
			nodes = append(nodes, id)
		}
	}
	if len(nodes) == 0 {
		return plan
	}
	names := slices.Sorted(mapKeys(m.queues))
	weight := queueWeights(names, loads)
	sets := map[string][]uint64{}
	load := map[uint64]uint64{}
	for _, name := range names {
		q := m.queues[name]
		set := q.target
		if set == nil {
			set = q.replicas
		}
		sets[name] = slices.Clone(set)
		for _, id := range set {
			load[id] += weight[name]
		}
	}
	byLoad := func(load map[uint64]uint64) []uint64 {
		s := slices.Clone(nodes)
		slices.SortStableFunc(s, func(a, b uint64) int { return cmp.Compare(load[a], load[b]) })
		return s
	}
	// best returns, of the queues ok accepts, the one whose move between
	// two nodes diff apart brings them closest: of weight below diff (so
	// that the move narrows the gap), nearest diff/2; "" for none. Ties
	// go to the first by name.
	best := func(diff uint64, ok func(name string) bool) string {
		pick, dist := "", uint64(0)
		for _, name := range names {
			w := weight[name]
			if w >= diff || !ok(name) {
				continue
			}
			d := max(diff, 2*w) - min(diff, 2*w)
			if pick == "" || d < dist {
				pick, dist = name, d
			}
		}
		return pick
	}
	// Replicas: the most loaded node gives a queue to the least loaded
	// node it can give one to, while that narrows the gap between them
	// (with queues of equal weight: until every node is within one of
	// every other). Each move lowers the sum of the squared loads, so the
	// loop ends.
	planned := map[string]bool{}
	for {
		s := byLoad(load)
		hi := s[len(s)-1]
		step := false
		for _, lo := range s {
			if load[hi] <= load[lo] {
				break
			}
			name := best(load[hi]-load[lo], func(name string) bool {
				set := sets[name]
				return !planned[name] && m.queues[name].target == nil && slices.Contains(set, hi) && !slices.Contains(set, lo)
			})
			if name == "" {
				continue
			}
			plan.Moves = append(plan.Moves, PlannedMove{Queue: name, From: hi, To: lo})
			set := slices.DeleteFunc(sets[name], func(id uint64) bool { return id == hi })
			set = append(set, lo)
			slices.Sort(set)
			sets[name] = set
			load[hi] -= weight[name]
			load[lo] += weight[name]
			planned[name] = true
			step = true
			break
		}
		if !step {
			break
		}
	}
	// Leaders: each queue's preferred leader, kept where it is valid,
	// then moved from the node leading most to one leading least.
	lead := map[string]uint64{}
	leads := map[uint64]uint64{}
	for _, name := range names {
		q, set := m.queues[name], sets[name]
		l := q.lead
		if !slices.Contains(set, l) || m.draining[l] {
			l = 0
			if len(q.boot) > 0 {
				if p := q.boot[int(q.group)%len(q.boot)]; slices.Contains(set, p) && !m.draining[p] {
					l = p
				}
			}
			for _, id := range set {
				if l == 0 && !m.draining[id] {
					l = id
				}
			}
		}
		lead[name] = l
		leads[l] += weight[name]
	}
	for {
		s := byLoad(leads)
		hi := s[len(s)-1]
		step := false
		for _, lo := range s {
			if leads[hi] <= leads[lo] {
				break
			}
			name := best(leads[hi]-leads[lo], func(name string) bool {
				return lead[name] == hi && slices.Contains(sets[name], lo)
			})
			if name != "" {
				lead[name] = lo
				leads[hi] -= weight[name]
				leads[lo] += weight[name]
				step = true
				break
			}
		}
		if !step {
			break
		}
	}
	for _, name := range names {
		if l := lead[name]; l != 0 && l != m.queues[name].lead {
			plan.Leads = append(plan.Leads, PlannedLead{Queue: name, Node: l})
		}
	}
	return plan
}

// applyRebalance applies the metaRebalance command: it plans a rebalance
// from the meta state, records its moves to start, and sets its
// preferred leaders (driver goroutine).
func (n *Node) applyRebalance(b *store.Batch, body []byte) (metaResult, error) {
	loads, err := decodeLoads(body)
	if err != nil {
		return metaResult{}, fmt.Errorf("rebalance: %w", err)
	}
	n.mu.Lock()
	plan := n.meta.planRebalance(n.meta.memberIDs(), loads)
	n.meta.pending = plan.Moves
	var changed []*queueInfo
	for _, l := range plan.Leads {
		q := n.meta.queues[l.Queue]
		q.lead = l.Node
		changed = append(changed, q)
	}
	n.mu.Unlock()
	b.Put(rebalanceKey, appendMoves(nil, plan.Moves))
	for _, q := range changed {
		putPlacement(b, q)
		if err := n.place(q); err != nil {
			return metaResult{}, err
		}
	}
	n.log.Info("rebalance planned", "moves", len(plan.Moves), "leads", len(plan.Leads))
	return metaResult{plan: plan}, nil
}

// busy returns the nodes taking part in a move under way: joining or
// leaving a queue's replicas (n.mu held, or the driver goroutine).
func (m *metaState) busy() map[uint64]bool {
	busy := map[uint64]bool{}
	for _, q := range m.queues {
		if q.target == nil {
			continue
		}
		for _, id := range q.target {
			if !slices.Contains(q.replicas, id) {
				busy[id] = true
			}
		}
		for _, id := range q.replicas {
			if !slices.Contains(q.target, id) {
				busy[id] = true
			}
		}
	}
	return busy
}

// startable reports whether pending move p can start now, and whether it
// is still worth starting (its queue is there, From holds a replica, To
// none); a move not worth starting is dropped (n.mu held, or the driver
// goroutine).
func (m *metaState) startable(p PlannedMove, busy map[uint64]bool) (now, valid bool) {
	q := m.queues[p.Queue]
	if q == nil || m.draining[p.To] {
		return false, false
	}
	set := q.target
	if set == nil {
		set = q.replicas
	}
	if !slices.Contains(set, p.From) || slices.Contains(set, p.To) {
		return false, false
	}
	return q.target == nil && !busy[p.From] && !busy[p.To], true
}

// rebalanceStep proposes the start of the first pending move that can
// start, or the drop of the first that is no longer worth starting, when
// this node leads the meta group: at most one proposal an election
// timeout (driver goroutine, each tick).
func (n *Node) rebalanceStep(g *group) {
	if len(n.meta.pending) == 0 || g.rn.BasicStatus().RaftState != raft.StateLeader {
		return
	}
	if g.rebalanceAt != 0 && n.ticks-g.rebalanceAt < uint64(n.cfg.ElectionTicks) {
		return
	}
	busy := n.meta.busy()
	for _, p := range n.meta.pending {
		now, valid := n.meta.startable(p, busy)
		if valid && !now {
			continue
		}
		g.rebalanceAt = n.ticks
		body := appendPlannedMove(nil, p)
		go func() {
			ctx, cancel := context.WithTimeout(n.ctx, 5*time.Second)
			defer cancel()
			if _, err := n.proposeMeta(ctx, metaRebalanceStep, body); err != nil {
				n.log.Debug("rebalance: starting a move", "queue", p.Queue, "err", err)
			}
		}()
		return
	}
}

// applyRebalanceStep applies the metaRebalanceStep command: it takes the
// pending move out of the plan and starts it, if it can start; if it
// cannot yet, nothing changes (driver goroutine).
func (n *Node) applyRebalanceStep(b *store.Batch, body []byte) (metaResult, error) {
	p, rest, err := decodePlannedMove(body)
	if err != nil || len(rest) != 0 {
		return metaResult{}, fmt.Errorf("rebalance step: bad body: %v", err)
	}
	n.mu.Lock()
	i := slices.Index(n.meta.pending, p)
	if i < 0 {
		n.mu.Unlock()
		return metaResult{}, nil
	}
	now, valid := n.meta.startable(p, n.meta.busy())
	if valid && !now {
		n.mu.Unlock()
		return metaResult{}, nil
	}
	n.meta.pending = slices.Delete(slices.Clone(n.meta.pending), i, i+1)
	q := n.meta.queues[p.Queue]
	if valid {
		next := slices.DeleteFunc(slices.Clone(q.replicas), func(id uint64) bool { return id == p.From })
		next = append(next, p.To)
		slices.Sort(next)
		q.target = next
	}
	pending := n.meta.pending
	n.mu.Unlock()
	b.Put(rebalanceKey, appendMoves(nil, pending))
	if !valid {
		n.log.Info("rebalance: a move no longer applies", "queue", p.Queue, "from", p.From, "to", p.To)
		return metaResult{}, nil
	}
	n.log.Info("rebalance: starting a move", "queue", p.Queue, "from", p.From, "to", p.To, "left", len(pending))
	putPlacement(b, q)
	return metaResult{}, n.place(q)
}

// followLead hands the lead of queue group g, which this node leads, to
// the group's preferred leader (a rebalance's) once that node is a voter
// caught up with the log and not draining: at most once an election
// timeout (driver goroutine, each tick).
func (n *Node) followLead(g *group) {
	to := g.lead
	if g.joint || !slices.Contains(g.incoming, to) || n.meta.draining[to] || g.rebuilding.Load() {
		return
	}
	if g.moveAt != 0 && n.ticks-g.moveAt < uint64(n.cfg.ElectionTicks) {
		return
	}
	if !n.heardRecently(to) {
		return
	}
	bs := g.rn.BasicStatus()
	if bs.RaftState != raft.StateLeader {
		return
	}
	ready := false
	g.rn.WithProgress(func(id uint64, _ raft.ProgressType, pr tracker.Progress) {
		if id == to && pr.State == tracker.StateReplicate && pr.Match+catchUpSlack >= bs.GetCommit() {
			ready = true
		}
	})
	if !ready {
		return
	}
	g.moveAt = n.ticks
	n.wake(g)
	n.log.Info("handing the lead to the preferred leader", "queue", g.queue, "group", g.id, "to", to)
	g.rn.TransferLeader(to)
}
