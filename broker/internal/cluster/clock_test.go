package cluster

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
)

// TestLeaderClockAheadExpiresNoLease: a message is leased for an hour
// (the test's visibility timeout) by a leader whose clock is right; the
// two other nodes' wall clocks are two hours ahead. When the leader goes,
// one of them leads: the lease is still held, and an ack of it succeeds.
// A new leader whose scheduler time jumped to its own clock would expire
// every lease at its first tick.
func TestLeaderClockAheadExpiresNoLease(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := context.Background()
	eventually(t, "create queue", func() error {
		_, err := c.nodes[0].CreateQueue(ctx, sched.QueueSpec{Name: "jobs"})
		return err
	})
	if r := c.submit("jobs", enqueueCmd("jobs", "a")); r.Err != nil {
		t.Fatal(r.Err)
	}
	c.converged("jobs")
	lead := c.leader("jobs")
	s := c.subscribe(lead, "jobs", 1)
	var got sched.Delivered
	eventually(t, "a delivery", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.got) == 0 {
			return errors.New("none yet")
		}
		got = s.got[0]
		return nil
	})
	for i := range c.nodes {
		if i == lead {
			continue
		}
		c.stop(i)
		c.skew[i] = 2 * time.Hour
		c.start(i)
		c.converged("jobs")
	}
	c.stop(lead)
	newLead := c.leader("jobs")
	// Entries of the new leader, each with a Tick of its time.
	for _, p := range []string{"b", "c"} {
		if r := c.submit("jobs", enqueueCmd("jobs", p)); r.Err != nil {
			t.Fatal(r.Err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.converged("jobs")
	if st := c.stats(newLead, "jobs"); st.Leased != 1 || st.Ready != 2 {
		t.Fatalf("on node %d, two hours ahead: leased %d ready %d; want the lease kept (1) and 2 ready", newLead+1, st.Leased, st.Ready)
	}
	refs := []sched.LeaseRef{{Queue: "jobs", ID: got.ID, Lease: got.Lease}}
	if r := c.submit("jobs", func() shard.Command { return &shard.Ack{Items: refs} }); r.Err != nil || r.Items[0] != nil {
		t.Fatalf("ack of the old leader's delivery on node %d: %+v", newLead+1, r)
	}
}
