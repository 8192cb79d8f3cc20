package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
)

// TestAddRemoveNode: node 4 starts with Join and waits; added, it joins
// the meta group and takes a queue moved to it. Node 1 (maybe the meta
// leader) is drained and removed: it stops taking part, the others
// forget it, it refuses to start again on its data, and its ID is never
// accepted back. The cluster of nodes 2–4 goes on: a new queue is
// placed on them.
func TestAddRemoveNode(t *testing.T) {
	c := newTestCluster(t, 4, func(c *testCluster) { c.members = 3 })
	ctx := context.Background()
	c.create("q")
	c.create("q2") // placed while node 4 waits, which must agree
	c.load("q", 3)
	members := func(i int) ([]uint64, uint64) {
		st, err := c.nodes[i].Status()
		if err != nil {
			return nil, 0
		}
		var ids []uint64
		for _, ns := range st.Nodes {
			ids = append(ids, ns.ID)
		}
		var voters []uint64
		for _, r := range st.Groups[0].Replicas {
			if !r.Learner {
				voters = append(voters, r.NodeID)
			}
		}
		if !slices.Equal(ids, voters) {
			return nil, 0
		}
		return ids, st.Groups[0].Leader
	}
	if err := c.nodes[0].AddNode(ctx, 2, "127.0.0.1:1"); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Fatalf("add a member again: %v", err)
	}
	if err := c.nodes[0].AddNode(ctx, 5, "no-port"); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Fatalf("add a node at a bad address: %v", err)
	}
	eventually(t, "add node 4", func() error { return c.nodes[0].AddNode(ctx, 4, c.peers[4]) })
	eventually(t, "node 4 a voter of the meta group on every node", func() error {
		for i := range 4 {
			if ids, lead := members(i); !slices.Equal(ids, []uint64{1, 2, 3, 4}) || lead == 0 {
				return fmt.Errorf("node %d: members %v, meta leader %d", i+1, ids, lead)
			}
		}
		return nil
	})
	c.metaAgrees()
	eventually(t, "move q to node 4", func() error { return c.nodes[3].MoveQueue(ctx, "q", []uint64{2, 3, 4}) })
	c.placed("q", 2, 3, 4)
	if st := c.stats(3, "q"); st.Ready != 9 {
		t.Fatalf("node 4's replica: %+v; want 9 ready", st)
	}

	c.create("r") // on node 1 too
	if err := c.nodes[1].RemoveNode(ctx, 1); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Fatalf("remove a node that holds replicas: %v", err)
	}
	eventually(t, "drain node 1", func() error { _, err := c.nodes[1].DrainNode(ctx, 1, false); return err })
	c.placed("r", 2, 3, 4)
	eventually(t, "remove node 1", func() error { return c.nodes[1].RemoveNode(ctx, 1) })
	eventually(t, "node 1 gone from the meta group", func() error {
		for i := 1; i < 4; i++ {
			if ids, lead := members(i); !slices.Equal(ids, []uint64{2, 3, 4}) || lead == 0 || lead == 1 {
				return fmt.Errorf("node %d: members %v, meta leader %d", i+1, ids, lead)
			}
		}
		return nil
	})
	eventually(t, "node 1 stopped", func() error {
		if !errors.Is(c.nodes[0].Err(), ErrRemoved) {
			return fmt.Errorf("node 1: %v", c.nodes[0].Err())
		}
		return nil
	})
	c.stop(0)
	if n, err := Open(c.config(0), c.storage(0)); !errors.Is(err, ErrRemoved) {
		if n != nil {
			n.Close()
		}
		t.Fatalf("node 1 restarted on its data: %v; want ErrRemoved", err)
	}
	if err := c.nodes[2].AddNode(ctx, 1, c.peers[1]); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Fatalf("add node 1 back: %v", err)
	}
	eventually(t, "create a queue", func() error {
		_, err := c.nodes[1].CreateQueue(ctx, sched.QueueSpec{Name: "after"})
		return err
	})
	c.placed("after", 2, 3, 4)
	if r := c.submit("after", enqueueCmd("after", "x")); r.Err != nil {
		t.Fatal(r.Err)
	}
	c.metaAgrees()
}

// metaAgrees waits until every running node's meta state, at the same
// applied index, holds the same members and the same placements.
func (c *testCluster) metaAgrees() {
	c.t.Helper()
	eventually(c.t, "meta states agree", func() error {
		var first string
		var at uint64
		for i, n := range c.nodes {
			if n == nil {
				continue
			}
			st, err := n.Status()
			if err != nil {
				return err
			}
			n.mu.RLock()
			s := fmt.Sprint(n.meta.memberIDs(), n.memberAddrs(), n.meta.removed, n.meta.draining, n.meta.pending)
			for _, name := range slices.Sorted(mapKeys(n.meta.queues)) {
				q := n.meta.queues[name]
				s += fmt.Sprint(name, q.group, q.replicas, q.boot, q.target, q.lead)
			}
			n.mu.RUnlock()
			if first == "" {
				first, at = s, st.Groups[0].Applied
			} else if st.Groups[0].Applied != at {
				return fmt.Errorf("node %d at %d, another at %d", i+1, st.Groups[0].Applied, at)
			} else if s != first {
				c.t.Fatalf("node %d's meta state differs at index %d:\n%s\nwant\n%s", i+1, at, s, first)
			}
		}
		return nil
	})
}

// TestRemoveMetaLeader: the node removed leads the meta group (it holds
// no queue, and was never drained, so it kept the lead): it hands the
// lead over, the others finish its removal, and it stops taking part.
func TestRemoveMetaLeader(t *testing.T) {
	c := newTestCluster(t, 4)
	ctx := context.Background()
	var lead uint64
	eventually(t, "a meta leader", func() error {
		st, err := c.nodes[0].Status()
		if err != nil {
			return err
		}
		if lead = st.Groups[0].Leader; lead == 0 {
			return errors.New("none")
		}
		return nil
	})
	var others []uint64
	for id := uint64(1); id <= 4; id++ {
		if id != lead {
			others = append(others, id)
		}
	}
	c.create("q")
	eventually(t, "move q off the meta leader", func() error { return c.nodes[0].MoveQueue(ctx, "q", others) })
	c.placed("q", others...)
	i := int(others[0] - 1)
	eventually(t, "remove the meta leader", func() error { return c.nodes[i].RemoveNode(ctx, lead) })
	eventually(t, "the removed leader stopped", func() error {
		if err := c.nodes[lead-1].Err(); !errors.Is(err, ErrRemoved) {
			return fmt.Errorf("node %d: %v", lead, err)
		}
		return nil
	})
	c.stop(int(lead - 1))
	eventually(t, "a new meta leader among the others", func() error {
		st, err := c.nodes[i].Status()
		if err != nil {
			return err
		}
		if l := st.Groups[0].Leader; !slices.Contains(others, l) || len(st.Nodes) != 3 {
			return fmt.Errorf("leader %d, %d members", l, len(st.Nodes))
		}
		return nil
	})
	c.metaAgrees()
}
