package cluster

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestPlanRebalance: for any placement of queues over up to eight nodes,
// some draining, the plan leaves every node that is not draining within
// one replica and within one preferred lead of every other, moves each
// queue at most once, from a node holding it to one not holding it, and
// prefers only leaders among a queue's replicas. Planning the result
// again plans no move.
func TestPlanRebalance(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nodes := rapid.IntRange(1, 8).Draw(t, "nodes")
		var members []uint64
		for i := range nodes {
			members = append(members, uint64(i+1))
		}
		m := &metaState{queues: map[string]*queueInfo{}, draining: map[uint64]bool{}}
		for _, id := range members {
			if id > 1 && rapid.IntRange(0, 4).Draw(t, fmt.Sprint("drain ", id)) == 0 {
				m.draining[id] = true
			}
		}
		queues := rapid.IntRange(0, 40).Draw(t, "queues")
		for i := range queues {
			rf := rapid.IntRange(1, min(3, nodes)).Draw(t, fmt.Sprint("rf ", i))
			perm := rapid.Permutation(members).Draw(t, fmt.Sprint("placement ", i))
			set := slices.Sorted(slices.Values(perm[:rf]))
			m.queues[fmt.Sprintf("q%02d", i)] = &queueInfo{group: uint64(i + 2), replicas: set, boot: set}
		}
		plan := m.planRebalance(members, nil)
		moved := map[string]bool{}
		for _, mv := range plan.Moves {
			q := m.queues[mv.Queue]
			if moved[mv.Queue] || !slices.Contains(q.replicas, mv.From) || slices.Contains(q.replicas, mv.To) || m.draining[mv.To] {
				t.Fatalf("bad move %+v of %v", mv, q.replicas)
			}
			moved[mv.Queue] = true
			q.replicas = slices.DeleteFunc(q.replicas, func(id uint64) bool { return id == mv.From })
			q.replicas = append(q.replicas, mv.To)
			slices.Sort(q.replicas)
		}
		for _, l := range plan.Leads {
			q := m.queues[l.Queue]
			if !slices.Contains(q.replicas, l.Node) || m.draining[l.Node] {
				t.Fatalf("queue %s prefers %d, not one of its replicas %v", l.Queue, l.Node, q.replicas)
			}
			q.lead = l.Node
		}
		load, leads := map[uint64]int{}, map[uint64]int{}
		for _, q := range m.queues {
			for _, id := range q.replicas {
				load[id]++
			}
			leads[q.lead]++
		}
		var active []uint64
		for _, id := range members {
			if !m.draining[id] {
				active = append(active, id)
			}
		}
		spread := func(c map[uint64]int) int {
			lo, hi := c[active[0]], c[active[0]]
			for _, id := range active {
				lo, hi = min(lo, c[id]), max(hi, c[id])
			}
			return hi - lo
		}
		// A queue holding every active node's replica cannot even out
		// further; nor can the leads of queues whose replicas are all
		// draining but one. The bound holds whenever a move exists.
		if s := spread(load); s > 1 {
			again := m.planRebalance(members, nil)
			if len(again.Moves) == 0 {
				t.Fatalf("replicas spread by %d after the plan, and no move is left: %v", s, load)
			}
		}
		if again := m.planRebalance(members, nil); len(again.Moves) > 0 && spread(load) <= 1 {
			t.Fatalf("balanced, yet planned again: %+v", again.Moves)
		}
		if s := spread(leads); s > 1 {
			// Only queues whose replica sets pin their leader may leave
			// leads uneven.
			again := m.planRebalance(members, nil)
			if len(again.Leads) > 0 {
				t.Fatalf("leads spread by %d after the plan, and planning again changes %d: %v", s, len(again.Leads), leads)
			}
		}
	})
}

// TestRebalance: four nodes, eight queues created while node 4 was
// draining (so all on nodes 1–3); a rebalance moves replicas to node 4
// until every node holds six, at most one move per node at a time, and
// prefers leaders so that each node leads two queues; the leaders
// follow.
func TestRebalance(t *testing.T) {
	c := newTestCluster(t, 4)
	ctx := context.Background()
	eventually(t, "drain node 4", func() error { _, err := c.nodes[0].DrainNode(ctx, 4, false); return err })
	var names []string
	for i := range 8 {
		name := fmt.Sprintf("q%d", i)
		names = append(names, name)
		c.create(name)
		c.placed(name, 1, 2, 3)
		c.load(name, 2)
	}
	if _, err := c.nodes[1].DrainNode(ctx, 4, true); err != nil {
		t.Fatal(err)
	}
	var dry RebalancePlan
	eventually(t, "a dry run once node 3 knows node 4 is back", func() (err error) {
		if dry, err = c.nodes[2].Rebalance(ctx, true); err == nil && len(dry.Moves) != 6 {
			err = fmt.Errorf("dry run: %d moves; want 6 (24 replicas over 4 nodes): %+v", len(dry.Moves), dry.Moves)
		}
		return err
	})
	plan, err := c.nodes[2].Rebalance(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(plan.Moves, dry.Moves) {
		t.Fatalf("plan %+v differs from the dry run's %+v", plan.Moves, dry.Moves)
	}
	// At most one move per node at a time: node 4 takes part in every
	// move, so no two are under way at once.
	eventually(t, "the rebalance done", func() error {
		st, err := c.nodes[0].Status()
		if err != nil {
			return err
		}
		c.nodes[0].mu.RLock()
		moving := 0
		load := map[uint64]int{}
		for _, q := range c.nodes[0].meta.queues {
			if q.target != nil {
				moving++
			}
			for _, id := range q.replicas {
				load[id]++
			}
		}
		c.nodes[0].mu.RUnlock()
		if moving > 1 {
			t.Fatalf("%d moves under way at once", moving)
		}
		if len(st.Pending) > 0 || moving > 0 || load[4] != 6 {
			return fmt.Errorf("%d moves pending, %d under way; replicas per node %v", len(st.Pending), moving, load)
		}
		for id := uint64(1); id <= 4; id++ {
			if load[id] != 6 {
				t.Fatalf("replicas per node after the rebalance: %v; want 6 each", load)
			}
		}
		return nil
	})
	for _, name := range names {
		c.nodes[0].mu.RLock()
		set := slices.Clone(c.nodes[0].meta.queues[name].replicas)
		c.nodes[0].mu.RUnlock()
		c.placed(name, set...)
		if st := c.stats(int(set[0]-1), name); st.Ready+st.Leased != 6 {
			t.Fatalf("queue %s after the rebalance: %+v; want its 6 messages", name, st)
		}
	}
	// A drain takes back the preferences it finds on the node drained.
	eventually(t, "drain node 4", func() error { _, err := c.nodes[0].DrainNode(ctx, 4, false); return err })
	eventually(t, "no queue prefers node 4", func() error {
		for i := range c.nodes {
			c.nodes[i].mu.RLock()
			for _, q := range c.nodes[i].meta.queues {
				if q.lead == 4 {
					c.nodes[i].mu.RUnlock()
					return fmt.Errorf("node %d: %s prefers node 4", i+1, q.spec.Name)
				}
			}
			c.nodes[i].mu.RUnlock()
		}
		return nil
	})
	if _, err := c.nodes[0].DrainNode(ctx, 4, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.nodes[0].Rebalance(ctx, false); err != nil {
		t.Fatal(err)
	}
	eventually(t, "leaders follow the preferences", func() error {
		leads := map[int]int{}
		for _, name := range names {
			leads[c.leader(name)]++
		}
		for i := range 4 {
			if leads[i] != 2 {
				return fmt.Errorf("leaders per node: %v; want 2 each", leads)
			}
		}
		return nil
	})
}

// TestPlanRebalanceWeighted: queues weigh by their bytes and recent
// deliveries. Three nodes hold two queues each, one of them far heavier
// than the others: counting queues there is nothing to do, but weighing
// them the heavy queue's node gives its other queue away, and leads only
// the heavy queue.
func TestPlanRebalanceWeighted(t *testing.T) {
	members := []uint64{1, 2, 3}
	m := &metaState{queues: map[string]*queueInfo{}, draining: map[uint64]bool{}}
	for i, q := range []struct {
		name string
		on   uint64
	}{{"big", 1}, {"a", 1}, {"b", 2}, {"c", 2}, {"d", 3}, {"e", 3}} {
		m.queues[q.name] = &queueInfo{group: uint64(i + 2), replicas: []uint64{q.on}, boot: []uint64{q.on}}
	}
	if plan := m.planRebalance(members, nil); len(plan.Moves) != 0 {
		t.Fatalf("unweighted plan %+v; want no move", plan)
	}
	loads := map[string]QueueLoad{"big": {Bytes: 1 << 30, Delivered: 50000}}
	for _, name := range []string{"a", "b", "c", "d", "e"} {
		loads[name] = QueueLoad{Bytes: 1 << 20, Delivered: 100}
	}
	plan := m.planRebalance(members, loads)
	if len(plan.Moves) != 1 || plan.Moves[0].Queue != "a" || plan.Moves[0].From != 1 {
		t.Fatalf("weighted plan %+v; want a moved off node 1", plan)
	}

	// A fourth node joins three that hold every queue, one of them
	// busy: the busy queue moves to it, and idle ones follow until the
	// loads are as close as one idle queue can bring them.
	m = &metaState{queues: map[string]*queueInfo{}, draining: map[uint64]bool{}}
	four := []uint64{1, 2, 3, 4}
	loads4 := map[string]QueueLoad{"big": {Bytes: 1 << 30, Delivered: 50000}}
	for i := range 8 {
		name := fmt.Sprint("idle-", i)
		if i == 7 {
			name = "big"
		} else {
			loads4[name] = QueueLoad{}
		}
		m.queues[name] = &queueInfo{group: uint64(i + 2), replicas: members, boot: members}
	}
	plan = m.planRebalance(four, loads4)
	count := map[uint64]int{1: 8, 2: 8, 3: 8}
	for _, mv := range plan.Moves {
		count[mv.From]--
		count[mv.To]++
	}
	if plan.Moves[0].Queue != "big" || plan.Moves[0].To != 4 || count[4] < 3 {
		t.Fatalf("plan %+v, replicas per node %v; want big to node 4 first, then idle queues", plan.Moves, count)
	}

	// Leads: three replicas each, so only the leads can move. Node 1
	// leads the heavy queue; the light ones' leads go to the others.
	m = &metaState{queues: map[string]*queueInfo{}, draining: map[uint64]bool{}}
	for i, name := range []string{"big", "a", "b", "c"} {
		m.queues[name] = &queueInfo{group: uint64(i + 2), replicas: members, boot: members, lead: 1}
	}
	plan = m.planRebalance(members, loads)
	if len(plan.Moves) != 0 {
		t.Fatalf("moves %+v with every queue on every node", plan.Moves)
	}
	lead := map[string]uint64{"big": 1, "a": 1, "b": 1, "c": 1}
	for _, l := range plan.Leads {
		lead[l.Queue] = l.Node
	}
	for _, name := range []string{"a", "b", "c"} {
		if lead[name] == lead["big"] {
			t.Errorf("leads %v: %s shares the heavy queue's leader", lead, name)
		}
	}
}

// TestQueueWeights: the mean queue weighs 3 units (its base, its bytes,
// its deliveries), a queue without figures as much, an idle one 1 unit,
// and huge figures neither overflow nor lose their order.
func TestQueueWeights(t *testing.T) {
	names := []string{"idle", "mean", "twice", "unknown", "huge"}
	w := queueWeights(names[:4], map[string]QueueLoad{
		"idle": {}, "mean": {Bytes: 100, Delivered: 10}, "twice": {Bytes: 200, Delivered: 20},
	})
	// The mean over the three known: 100 bytes, 10 deliveries.
	if w["idle"] != weightUnit || w["mean"] != 3*weightUnit || w["twice"] != 5*weightUnit || w["unknown"] != 3*weightUnit {
		t.Fatalf("weights %v", w)
	}
	w = queueWeights(names, map[string]QueueLoad{"huge": {Bytes: 1<<64 - 1, Delivered: 1<<64 - 1}, "mean": {Bytes: 1 << 63, Delivered: 1}})
	if w["huge"] <= w["mean"] || w["huge"] > weightUnit+2*maxWeightTerm {
		t.Fatalf("weights %v", w)
	}
	if got := queueWeights(names, nil); got["idle"] != weightUnit || got["huge"] != weightUnit {
		t.Fatalf("no loads: %v", got)
	}
	loads, err := decodeLoads(appendLoads(nil, map[string]QueueLoad{"a": {1, 2}, "b~3": {3, 4}}))
	if err != nil || len(loads) != 2 || loads["b~3"] != (QueueLoad{3, 4}) {
		t.Fatalf("round trip: %v %v", loads, err)
	}
	if _, err := decodeLoads([]byte{2, 1}); err == nil {
		t.Fatal("a truncated body decoded")
	}
}

// FuzzDecodeLoads: a rebalance's body never panics the decoder, and what
// decodes encodes back to the same loads.
func FuzzDecodeLoads(f *testing.F) {
	f.Add(appendLoads(nil, map[string]QueueLoad{"a": {1, 2}, "events~3": {1 << 40, 7}}))
	f.Add([]byte{})
	f.Add([]byte{1, 200, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		loads, err := decodeLoads(b)
		if err != nil || len(b) == 0 {
			return
		}
		again, err := decodeLoads(appendLoads(nil, loads))
		if err != nil || !maps.Equal(again, loads) {
			t.Fatalf("round trip of %v: %v, %v", loads, again, err)
		}
	})
}
