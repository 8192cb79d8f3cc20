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

// TestShardedQueue: a sharded queue is one group per shard, created and
// deleted together; its own name answers QUEUE_SHARDED where a shard is
// needed, and Topology lists the shards, whose leaders spread over the
// nodes; all of it survives a restart.
func TestShardedQueue(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := context.Background()
	eventually(t, "create queue", func() error {
		created, err := c.nodes[0].CreateShardedQueue(ctx, sched.QueueSpec{Name: "jobs", TenantSeparator: "/"}, 4)
		if err == nil && created.Name != "jobs" {
			return fmt.Errorf("created %+v", created)
		}
		return err
	})
	for _, name := range []string{"jobs", "jobs~2"} {
		if _, err := c.nodes[1].CreateQueue(ctx, sched.QueueSpec{Name: name}); !errors.Is(err, fault.ErrQueueExists) {
			t.Fatalf("create %s again: %v, want QUEUE_EXISTS", name, err)
		}
	}
	if _, err := c.nodes[1].CreateShardedQueue(ctx, sched.QueueSpec{Name: "jobs"}, 2); !errors.Is(err, fault.ErrQueueExists) {
		t.Fatalf("create sharded again: %v, want QUEUE_EXISTS", err)
	}
	if _, err := c.nodes[1].CreateShardedQueue(ctx, sched.QueueSpec{Name: "big"}, sched.MaxShards+1); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Fatalf("too many shards: %v, want INVALID_ARGUMENT", err)
	}

	leaders := map[int]bool{}
	for i := range 4 {
		name := sched.ShardName("jobs", i)
		leaders[c.leader(name)] = true
		r := c.submit(name, enqueueCmd(name, "a", "b"))
		if r.Err != nil || len(r.Enqueued) != 2 {
			t.Fatalf("enqueue to %s: %+v", name, r)
		}
	}
	if len(leaders) != 3 {
		t.Errorf("4 shards led by %d nodes, want the 3", len(leaders))
	}
	for _, name := range []string{"jobs", "jobs.dlq"} {
		if _, err := c.nodes[2].Route(name); !errors.Is(err, fault.ErrQueueSharded) {
			t.Fatalf("route %s: %v, want QUEUE_SHARDED", name, err)
		}
		if _, err := c.nodes[2].Local(name); !errors.Is(err, fault.ErrQueueSharded) {
			t.Fatalf("local %s: %v, want QUEUE_SHARDED", name, err)
		}
	}
	if err := c.nodes[2].MoveQueue(ctx, "jobs", []uint64{1, 2}); !errors.Is(err, fault.ErrQueueSharded) {
		t.Fatalf("move jobs: %v, want QUEUE_SHARDED", err)
	}
	if err := c.nodes[2].DeleteQueue(ctx, "jobs~1"); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Fatalf("delete one shard: %v, want INVALID_ARGUMENT", err)
	}

	topology := func(n *Node, queue string) ([]string, string) {
		t.Helper()
		var names []string
		var sep string
		eventually(t, "the topology of "+queue, func() error {
			shards, s, err := n.Topology(queue)
			if err != nil {
				return err
			}
			names, sep = nil, s
			for _, sh := range shards {
				if sh.Leader == 0 || sh.Addr != fmt.Sprintf("client-%d:5555", sh.Leader) {
					return fmt.Errorf("shard %s led by %d at %q", sh.Queue, sh.Leader, sh.Addr)
				}
				names = append(names, sh.Queue)
			}
			return nil
		})
		return names, sep
	}
	if names, sep := topology(c.nodes[1], "jobs"); !slices.Equal(names, []string{"jobs~0", "jobs~1", "jobs~2", "jobs~3"}) || sep != "/" {
		t.Fatalf("topology: %v %q", names, sep)
	}
	if names, _ := topology(c.nodes[1], "jobs.dlq"); !slices.Equal(names, []string{"jobs~0.dlq", "jobs~1.dlq", "jobs~2.dlq", "jobs~3.dlq"}) {
		t.Fatalf("topology of the DLQ: %v", names)
	}
	if names, _ := topology(c.nodes[1], "jobs~3"); !slices.Equal(names, []string{"jobs~3"}) {
		t.Fatalf("topology of a shard: %v", names)
	}

	// The split survives a restart, from the meta group's records.
	c.stop(2)
	c.start(2)
	if got := c.nodes[2].ShardsOf("jobs"); len(got) != 4 {
		t.Fatalf("after a restart, shards %v", got)
	}
	c.converged("jobs~3")

	if err := c.nodes[0].DeleteQueue(ctx, "jobs"); err != nil {
		t.Fatalf("delete: %v", err)
	}
	eventually(t, "every node forgets the shards", func() error {
		for i, n := range c.nodes {
			n.mu.RLock()
			held, known := len(n.byQueue), len(n.meta.queues)+len(n.meta.sharded)
			n.mu.RUnlock()
			if held != 0 || known != 0 {
				return fmt.Errorf("node %d holds %d groups, knows %d queues", i+1, held, known)
			}
		}
		return nil
	})
	if _, err := c.nodes[1].Route("jobs"); !errors.Is(err, fault.ErrQueueNotFound) {
		t.Fatalf("route after delete: %v", err)
	}
	// The name is free again, for either kind of queue.
	eventually(t, "create again", func() error {
		_, err := c.nodes[0].CreateQueue(ctx, sched.QueueSpec{Name: "jobs"})
		return err
	})
}
