package cluster

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
)

// groupStatus returns node i's status of queue's group.
func (c *testCluster) groupStatus(i int, queue string) (GroupStatus, error) {
	st, err := c.nodes[i].Status()
	if err != nil {
		return GroupStatus{}, err
	}
	for _, g := range st.Groups {
		if g.Queue == queue {
			return g, nil
		}
	}
	return GroupStatus{}, fmt.Errorf("node %d holds no replica of %s", i+1, queue)
}

// quiesced waits until queue's group is quiesced on every running node.
func (c *testCluster) quiesced(queue string) {
	c.t.Helper()
	eventually(c.t, queue+" quiesces on every node", func() error {
		for i, n := range c.nodes {
			if n == nil {
				continue
			}
			g, err := c.groupStatus(i, queue)
			if err != nil {
				return err
			}
			if !g.Quiesced {
				return fmt.Errorf("node %d: not quiesced (leader %d, commit %d, applied %d)", i+1, g.Leader, g.Commit, g.Applied)
			}
		}
		return nil
	})
}

func TestIdleGroupsQuiesce(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := context.Background()
	eventually(t, "create queue", func() error {
		_, err := c.nodes[0].CreateQueue(ctx, sched.QueueSpec{Name: "idle"})
		return err
	})
	c.quiesced("idle")

	// A quiesced group stays put: its term and commit index do not move
	// while nothing happens.
	lead := c.leader("idle")
	before, err := c.groupStatus(lead, "idle")
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * 20 * time.Millisecond) // 30 ticks, three election timeouts
	if after, _ := c.groupStatus(lead, "idle"); after.Term != before.Term || after.Commit != before.Commit || !after.Quiesced {
		t.Fatalf("an idle group moved: %+v, then %+v", before, after)
	}

	// A proposal wakes it, commits on every replica, and the group
	// quiesces again.
	if r := c.submit("idle", enqueueCmd("idle", "a")); r.Err != nil || r.Enqueued[0].Err != nil {
		t.Fatalf("enqueue: %+v", r)
	}
	c.converged("idle")
	c.quiesced("idle")

	// A subscription on the leader, which is then cut off from its
	// peers while quiesced: it wakes, steps down (its subscription ends
	// with NOT_LEADER), and the others elect a leader that serves.
	lead = c.leader("idle")
	s := c.subscribe(lead, "idle", 10)
	eventually(t, "the ready message delivered", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.got) != 1 {
			return fmt.Errorf("%d delivered", len(s.got))
		}
		return nil
	})
	c.quiesced("idle")
	var others []uint64
	for id := range c.peers {
		if id != uint64(lead+1) {
			others = append(others, id)
		}
	}
	c.nodes[lead].Transport().Isolate(others...)
	eventually(t, "the isolated leader's subscription ends with NOT_LEADER", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if !errors.Is(s.ended, fault.ErrNotLeader) {
			return fmt.Errorf("ended: %v", s.ended)
		}
		return nil
	})
	eventually(t, "another node leads", func() error {
		for i, n := range c.nodes {
			if i == lead {
				continue
			}
			if _, err := n.Route("idle"); err == nil {
				return nil
			}
		}
		return errors.New("no leader among the others")
	})
	c.nodes[lead].Transport().Heal()
	if r := c.submit("idle", enqueueCmd("idle", "b")); r.Err != nil || r.Enqueued[0].Err != nil {
		t.Fatalf("enqueue after the partition: %+v", r)
	}
	c.converged("idle")
	c.quiesced("idle")

	// The leader of a quiesced group stops: the followers notice its
	// silence, wake, and elect a new leader.
	lead = c.leader("idle")
	c.stop(lead)
	eventually(t, "a new leader after the quiesced leader stopped", func() error {
		for i, n := range c.nodes {
			if n == nil {
				continue
			}
			if _, err := n.Route("idle"); err == nil && i != lead {
				return nil
			}
		}
		return errors.New("none")
	})
	if r := c.submit("idle", enqueueCmd("idle", "c")); r.Err != nil || r.Enqueued[0].Err != nil {
		t.Fatalf("enqueue on the new leader: %+v", r)
	}
	c.start(lead)
	c.converged("idle")
}
