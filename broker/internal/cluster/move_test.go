package cluster

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// placed waits until every running node's meta state has queue on
// replicas with no move under way, the running nodes among them hold
// converged replicas of it, and the others hold none.
func (c *testCluster) placed(queue string, replicas ...uint64) {
	c.t.Helper()
	eventually(c.t, fmt.Sprintf("%s placed on %v", queue, replicas), func() error {
		var first [32]byte
		var firstApplied uint64
		seen := 0
		for i, n := range c.nodes {
			if n == nil {
				continue
			}
			n.mu.RLock()
			q := n.meta.queues[queue]
			var g *group
			var have, target []uint64
			if q != nil {
				g = n.groups[q.group]
				have, target = slices.Clone(q.replicas), slices.Clone(q.target)
			}
			n.mu.RUnlock()
			if q == nil {
				return fmt.Errorf("node %d: no queue %s", i+1, queue)
			}
			if !slices.Equal(have, replicas) || target != nil {
				return fmt.Errorf("node %d: replicas %v, target %v", i+1, have, target)
			}
			if !slices.Contains(replicas, uint64(i+1)) {
				if g != nil {
					return fmt.Errorf("node %d still holds a replica", i+1)
				}
				continue
			}
			if g == nil {
				return fmt.Errorf("node %d holds no replica", i+1)
			}
			d, applied, err := g.sh.QueueDigest(queue)
			if err != nil {
				return err
			}
			if seen == 0 {
				first, firstApplied = d, applied
			} else if d != first || applied != firstApplied {
				return fmt.Errorf("node %d at %d differs from the first at %d", i+1, applied, firstApplied)
			}
			seen++
		}
		return nil
	})
}

// TestMoveQueue: a queue on nodes 1–3 of four moves, under load, to
// nodes 1, 2 and 4, leaving out its leader: node 4 joins as a learner
// and catches up from a snapshot (the leader's log was compacted), the
// lead moves to a new voter, and node 3 deletes its replica. Every
// message enqueued before and during the move is on the new replicas.
// The queue then moves to nodes 2–4 while node 1 is down: node 1,
// restarted, deletes the replica it was left holding. Bad plans are
// refused with typed errors.
func TestMoveQueue(t *testing.T) {
	c := newTestCluster(t, 4, func(c *testCluster) { c.snap = 16 << 10 })
	ctx := context.Background()
	c.create("q")
	c.placed("q", 1, 2, 3)
	lead := c.compacted("q")

	for _, bad := range []struct {
		queue string
		ids   []uint64
		want  error
	}{
		{"nope", []uint64{1, 2, 3}, fault.ErrQueueNotFound},
		{"q" + sched.DLQSuffix, []uint64{1, 2, 3}, fault.ErrInvalidArgument},
		{"q", nil, fault.ErrInvalidArgument},
		{"q", []uint64{1, 2, 2}, fault.ErrInvalidArgument},
		{"q", []uint64{1, 2, 9}, fault.ErrInvalidArgument},
	} {
		if err := c.nodes[1].MoveQueue(ctx, bad.queue, bad.ids); !errors.Is(err, bad.want) {
			t.Errorf("move %s to %v: %v; want %v", bad.queue, bad.ids, err, bad.want)
		}
	}

	// Leave out the leader.
	out := uint64(lead + 1)
	var to []uint64
	for id := uint64(1); id <= 4; id++ {
		if id != out {
			to = append(to, id)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := c.nodes[3].MoveQueue(ctx, "q", to); err != nil {
			t.Error(err)
		}
	}()
	c.load("q", 20) // while it moves
	<-done
	c.placed("q", to...)
	c.load("q", 5)
	c.placed("q", to...)
	before := c.stats(int(to[0]-1), "q")
	if got := before.Ready + before.Leased; got == 0 {
		t.Fatalf("no messages after the move: %+v", before)
	}
	if l := c.leader("q"); l == lead {
		t.Fatalf("node %d, left out, still leads", lead+1)
	}
	// The node left out holds no record of the group.
	c.nodes[lead].mu.RLock()
	gid := c.nodes[lead].meta.queues["q"].group
	c.nodes[lead].mu.RUnlock()
	if _, err := c.stores[lead].Get(appliedKey(gid)); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("node %d kept the applied index of a replica it no longer holds: %v", lead+1, err)
	}

	// A move while a node left out is down: it deletes its copy at its
	// next start.
	down := to[0] - 1
	c.stop(int(down))
	var next []uint64
	for id := uint64(1); id <= 4; id++ {
		if id != down+1 {
			next = append(next, id)
		}
	}
	eventually(t, "move with a node down", func() error { return c.nodes[int(next[0]-1)].MoveQueue(ctx, "q", next) })
	c.placed("q", next...)
	if _, err := c.stores[down].Get(appliedKey(gid)); err != nil {
		t.Fatalf("node %d, down, lost its records before it started: %v", down+1, err)
	}
	c.start(int(down))
	c.placed("q", next...)
	eventually(t, "the stale replica deleted", func() error {
		if _, err := c.stores[down].Get(appliedKey(gid)); !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("node %d still has its applied index: %v", down+1, err)
		}
		return nil
	})
	after := c.stats(int(next[0]-1), "q")
	if after.Ready+after.Leased < before.Ready+before.Leased {
		t.Fatalf("after the second move: %+v; before it: %+v", after, before)
	}
}

// TestDrainNode: draining one of four nodes moves every queue it holds
// to the others, hands away its lead of the meta group, and places no
// new queue on it; status shows it draining, then drained. Undone, it
// takes new queues again.
func TestDrainNode(t *testing.T) {
	c := newTestCluster(t, 4)
	ctx := context.Background()
	names := []string{"a", "b", "c", "d", "e"}
	for _, q := range names {
		c.create(q)
		c.load(q, 3)
	}
	if _, err := c.nodes[0].DrainNode(ctx, 9, false); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Fatalf("drain of a non-member: %v", err)
	}
	// The node leading the meta group, so that it must hand it over.
	metaLeader := func() uint64 {
		st, err := c.nodes[0].Status()
		if err != nil {
			t.Fatal(err)
		}
		return st.Groups[0].Leader
	}
	var drained uint64
	eventually(t, "a meta leader", func() error {
		if drained = metaLeader(); drained == 0 {
			return errors.New("none")
		}
		return nil
	})
	var moved int
	eventually(t, "drain", func() (err error) {
		moved, err = c.nodes[0].DrainNode(ctx, drained, false)
		return err
	})
	if moved == 0 {
		t.Fatalf("drain of node %d planned no move", drained)
	}
	state := func() string {
		st, err := c.nodes[0].Status()
		if err != nil {
			t.Fatal(err)
		}
		return st.Nodes[drained-1].State
	}
	eventually(t, "drained", func() error {
		if s := state(); s != NodeDrained {
			return fmt.Errorf("node %d is %s", drained, s)
		}
		return nil
	})
	var others []uint64
	for id := uint64(1); id <= 4; id++ {
		if id != drained {
			others = append(others, id)
		}
	}
	for _, q := range names {
		c.placed(q, others...)
		if st := c.stats(int(others[0]-1), q); st.Ready+st.Leased != 9 {
			t.Fatalf("queue %s after the drain: %+v; want its 9 messages", q, st)
		}
	}
	eventually(t, "the meta lead handed over", func() error {
		if l := metaLeader(); l == drained || l == 0 {
			return fmt.Errorf("the meta group's leader is %d", l)
		}
		return nil
	})
	c.create("new")
	c.placed("new", others...)
	if _, err := c.nodes[1].DrainNode(ctx, drained, true); err != nil {
		t.Fatal(err)
	}
	eventually(t, "undrained", func() error {
		if s := state(); s != NodeActive {
			return fmt.Errorf("node %d is %s", drained, s)
		}
		return nil
	})
	c.create("after")
	c.nodes[0].mu.RLock()
	got := slices.Clone(c.nodes[0].meta.queues["after"].replicas)
	c.nodes[0].mu.RUnlock()
	if !slices.Contains(got, drained) {
		t.Fatalf("a queue created after the drain was undone went to %v, not to the emptiest node %d", got, drained)
	}
}
