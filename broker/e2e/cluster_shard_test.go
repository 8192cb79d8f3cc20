package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

// TestClusterShardedQueue: a queue of 4 shards on 3 nodes. Producers
// send by the queue's name; the client core spreads the messages by the
// hash of their fairness key, so each key's messages land in one shard,
// the one core.ShardOf names, and come out in the order they were sent;
// one subscription of the queue consumes every shard, and its acks reach
// the right shard (nothing is delivered twice, nothing is left). The
// queue's own name answers a raw Enqueue with QUEUE_SHARDED, enqueueing
// nothing; list and inspect show the queue, not its shards; delete takes
// them all.
func TestClusterShardedQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process cluster test")
	}
	c := filatest.StartCluster(t, 3, filatest.WithEnv(clusterEnv...))
	ctx := ctxT(t, 5*time.Minute)
	admin := connect(t, c.Addrs()).Admin()
	for {
		err := admin.CreateQueue(ctx, fila.NewQueueSpec("events").Shards(4))
		if err == nil {
			break
		}
		if !errors.Is(err, fila.ErrUnavailable) && !errors.Is(err, fila.ErrNotLeader) || ctx.Err() != nil {
			t.Fatalf("create: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	var shards []fila.Shard
	for {
		var err error
		shards, err = admin.Topology(ctx, "events")
		if err == nil && !slices.ContainsFunc(shards, func(s fila.Shard) bool { return s.LeaderAddr == "" }) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("topology: %v %+v", err, shards)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(shards) != 4 || shards[3].Queue != "events~3" {
		t.Fatalf("topology: %+v", shards)
	}

	// A client that does not know of shards is told, and nothing is
	// enqueued.
	rc := dialRaw(t, c.Nodes[0].Addr, true)
	rc.send(2, &wire.Enqueue{Messages: []wire.EnqueueMessage{{Queue: "events", Payload: []byte("x")}}})
	if _, f := rc.recv(); !isCode(f, wire.CodeQueueSharded) {
		t.Fatalf("raw enqueue to the sharded queue answered %+v, want QUEUE_SHARDED", f)
	}

	const keys, perKey = 40, 25
	var wg sync.WaitGroup
	for p := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			prod := connect(t, c.Addrs()).Producer()
			for i := range perKey {
				var batch []*fila.Message
				for k := p; k < keys; k += 2 {
					batch = append(batch, fila.NewMessage("events", []byte(strconv.Itoa(i))).FairnessKey(fmt.Sprint("key-", k)))
				}
				res, err := prod.SendBatch(ctx, batch)
				if err != nil {
					t.Errorf("send: %v", err)
					return
				}
				for _, r := range res {
					if r.Err != nil {
						t.Errorf("send: %v", r.Err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	var st *fila.QueueStats
	for {
		var err error
		st, err = admin.QueueStats(ctx, "events")
		if err != nil {
			t.Fatalf("inspect: %v", err)
		}
		if st.Ready == keys*perKey || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if st.Shards != 4 || st.Ready != keys*perKey || st.BackloggedKeys != keys {
		t.Fatalf("inspect: %d shards, %d ready, %d keys; want 4, %d, %d", st.Shards, st.Ready, st.BackloggedKeys, keys*perKey, keys)
	}
	qs, err := admin.ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
		if q.Name == "events" && (q.Shards != 4 || q.Ready != keys*perKey) {
			t.Errorf("list: %+v", q)
		}
	}
	if !slices.Equal(names, []string{"events", "events.dlq"}) {
		t.Fatalf("list: %v", names)
	}

	sub, err := connect(t, c.Addrs()).Consumer().Subscribe(ctx, "events", fila.Prefetch(64))
	if err != nil {
		t.Fatal(err)
	}
	next := map[string]int{}
	shardOf := map[string]string{}
	for range keys * perKey {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("next: %v", err)
		}
		k := d.FairnessKey()
		want := fmt.Sprint("events~", core.ShardOf(k, "", 4))
		if d.Queue() != want {
			t.Fatalf("%s delivered from %s, want %s", k, d.Queue(), want)
		}
		shardOf[k] = d.Queue()
		if got := string(d.Payload()); got != strconv.Itoa(next[k]) || d.Attempt() != 1 {
			t.Fatalf("%s: delivery %s (attempt %d), want %d: out of order", k, got, d.Attempt(), next[k])
		}
		next[k]++
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("ack %s from %s: %v", k, d.Queue(), err)
		}
	}
	used := map[string]bool{}
	for _, s := range shardOf {
		used[s] = true
	}
	if len(used) != 4 {
		t.Errorf("%d keys used %d shards, want 4", keys, len(used))
	}
	// Everything was acked on its shard: nothing comes back.
	for {
		st, err = admin.QueueStats(ctx, "events")
		if err != nil {
			t.Fatal(err)
		}
		if st.Ready+st.Leased+st.Delayed == 0 || ctx.Err() != nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if n := st.Ready + st.Leased + st.Delayed; n != 0 {
		t.Fatalf("%d messages left after every delivery was acked", n)
	}
	nctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	if d, err := sub.Next(nctx); err == nil {
		t.Fatalf("delivered again: %s %s", d.Queue(), d.Payload())
	}
	cancel()

	if err := admin.DeleteQueue(ctx, "events"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Topology(ctx, "events"); !errors.Is(err, fila.ErrQueueNotFound) {
		t.Fatalf("topology after delete: %v", err)
	}
}

// isCode reports whether f is an Error frame with code.
func isCode(f wire.Frame, code wire.Code) bool {
	e, ok := f.(*wire.ErrorFrame)
	return ok && e.Code == code && strings.Contains(e.Message, "shards")
}
