package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
)

// TestQueueRecreated: a queue deleted and created again at once under the
// same name is a new queue on every replica, although the old replica's
// deletion runs on its own goroutine while the new one opens: the new
// queue holds only its own messages, its idempotency keys are its own,
// and so it stays across a restart and on a replica that was down
// through the deletion and creation.
func TestQueueRecreated(t *testing.T) {
	c := newTestCluster(t, 3, func(c *testCluster) { c.snap = 1 << 10 })
	ctx := context.Background()
	create := func() {
		t.Helper()
		eventually(t, "create", func() error {
			_, err := c.nodes[0].CreateQueue(ctx, sched.QueueSpec{Name: "q"})
			return err
		})
	}
	keyed := func(body, key string) func() shard.Command {
		return func() shard.Command {
			return &shard.Enqueue{Items: []sched.EnqueueItem{{Queue: "q", Msg: sched.Message{Body: []byte(body), PayloadSize: uint32(len(body)), IdempotencyKey: key}}}}
		}
	}
	stats := func(i int) sched.QueueStats { return c.stats(i, "q") }
	for round := range 3 {
		create()
		for i := range 50 {
			if r := c.submit("q", keyed(fmt.Sprintf("old-%d-%d", round, i), fmt.Sprintf("k%d", i))); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		c.converged("q")
		if round == 2 {
			c.stop(2) // it comes back to the new queue, by snapshot
		}
		if err := c.nodes[1].DeleteQueue(ctx, "q"); err != nil {
			t.Fatal(err)
		}
	}
	create()
	// The same idempotency keys: new messages in the new queue.
	var ids [][16]byte
	for i := range 5 {
		r := c.submit("q", keyed(fmt.Sprintf("new-%d", i), fmt.Sprintf("k%d", i)))
		if r.Err != nil || r.Enqueued[0].Err != nil || r.Enqueued[0].Duplicate {
			t.Fatalf("enqueue %d in the recreated queue: %+v", i, r)
		}
		ids = append(ids, r.Enqueued[0].ID)
	}
	for i := range 30 { // enough log for images, and a compaction past node 3
		if r := c.submit("q", enqueueCmd("q", fmt.Sprintf("filler-%d-%s", i, strings.Repeat("x", 100)))); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	c.start(2)
	c.converged("q")
	for i := range c.nodes {
		if st := stats(i); st.Ready != 35 {
			t.Fatalf("node %d: %d ready in the recreated queue; want its 35", i+1, st.Ready)
		}
	}
	for i := range c.nodes {
		c.stop(i)
		c.start(i)
		c.converged("q")
		if st := stats(i); st.Ready != 35 {
			t.Fatalf("node %d after a restart: %d ready; want 35", i+1, st.Ready)
		}
	}
	// The keys are the new queue's: a resend is a duplicate of the new message.
	r := c.submit("q", keyed("again", "k3"))
	if r.Err != nil || !r.Enqueued[0].Duplicate || r.Enqueued[0].ID != ids[3] {
		t.Fatalf("resend with key k3: %+v; want a duplicate of %x", r, ids[3])
	}
}
