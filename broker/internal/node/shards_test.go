package node

import (
	"context"
	"errors"
	"reflect"
	"testing"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/fault"
)

// TestCreateShardedOnOneNode: a single node refuses shards, and every node
// refuses a name holding the shard separator or too many shards.
func TestCreateShardedOnOneNode(t *testing.T) {
	ctx := context.Background()
	n, _ := newNode(t)
	admin := auth.Unrestricted()
	for _, c := range []struct {
		name   string
		shards int
		want   error
	}{
		{"events", 4, fault.ErrNotSupported},
		{"events", 257, fault.ErrInvalidArgument},
		{"events~1", 0, fault.ErrInvalidArgument},
	} {
		if err := n.CreateQueue(ctx, admin, QueueSpec{Name: c.name}, c.shards, nil); !errors.Is(err, c.want) {
			t.Errorf("CreateQueue(%s, %d shards) = %v; want %v", c.name, c.shards, err, c.want)
		}
	}
	if r := wait(t, func(done func(Result)) error { return n.CreateQueue(ctx, admin, QueueSpec{Name: "events"}, 1, done) }); r.Err != nil {
		t.Fatalf("one shard: %v", r.Err)
	}
}

// TestMergeShards: ListQueues in a cluster shows a sharded queue, and its
// DLQ, once each, with its shards' counts summed; other queues, and a
// stale shard of no sharded queue, as they are.
func TestMergeShards(t *testing.T) {
	in := []QueueSummary{
		{Name: "a", Ready: 1, DeadLetterQueue: "a.dlq"},
		{Name: "a.dlq", Parent: "a"},
		{Name: "ev~0", Ready: 2, Leased: 1, DeadLetterQueue: "ev~0.dlq"},
		{Name: "ev~0.dlq", Ready: 5, Parent: "ev~0"},
		{Name: "ev~1", Ready: 3, Delayed: 4, DeadLetterQueue: "ev~1.dlq"},
		{Name: "ev~1.dlq", Ready: 6, Parent: "ev~1"},
		{Name: "old~1", Ready: 9, DeadLetterQueue: "old~1.dlq"},
	}
	got := mergeShards(in, func(base string) int {
		if base == "ev" {
			return 2
		}
		return 0
	})
	want := []QueueSummary{
		{Name: "a", Ready: 1, DeadLetterQueue: "a.dlq"},
		{Name: "a.dlq", Parent: "a"},
		{Name: "ev", Ready: 5, Delayed: 4, Leased: 1, DeadLetterQueue: "ev.dlq", Shards: 2},
		{Name: "ev.dlq", Ready: 11, Parent: "ev", Shards: 2},
		{Name: "old~1", Ready: 9, DeadLetterQueue: "old~1.dlq"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("mergeShards:\n got %+v\nwant %+v", got, want)
	}
}
