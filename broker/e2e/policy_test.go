package e2e

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// TestSTFQQueueEndToEnd creates a queue with the stfq policy on a real
// server, fills it at weights 1:2:3:4:5 with payloads of mixed sizes,
// kills the server with SIGKILL and restarts it, then consumes one message
// at a time: the queue still reports its policy, and once every key has
// spent its latency lane budget and the heavier keys have caught up (200
// deliveries), every window of 100 consecutive deliveries gives each key
// 100 × w / 15 messages within ±2. A policy the broker does not know is
// refused with INVALID_ARGUMENT.
func TestSTFQQueueEndToEnd(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 3*time.Minute)
	admin := connect(t, srv.Addr).Admin()
	if err := admin.CreateQueue(ctx, fila.NewQueueSpec("odd").Policy("fifo")); !errors.Is(err, fila.ErrInvalidArgument) {
		t.Fatalf("CreateQueue with policy fifo: %v; want INVALID_ARGUMENT", err)
	}
	if err := admin.CreateQueue(ctx, fila.NewQueueSpec("fair").Policy(fila.PolicySTFQ)); err != nil {
		t.Fatal(err)
	}
	prod := connect(t, srv.Addr).Producer()
	// 400 × w messages per key: 2,000 deliveries leave every key backlogged.
	var batch []*fila.Message
	for i := range 400 {
		for w := uint32(1); w <= 5; w++ {
			for range w {
				payload := make([]byte, 1+(i%7)*700) // shares are in messages, whatever the size
				batch = append(batch, fila.NewMessage("fair", payload).FairnessKey(fmt.Sprint("w", w)).Weight(w))
			}
		}
	}
	sendAll(t, ctx, prod, batch)

	srv.Kill()
	srv.Restart(t)
	admin = connect(t, srv.Addr).Admin()
	st, err := admin.QueueStats(ctx, "fair")
	if err != nil {
		t.Fatal(err)
	}
	if st.Policy != fila.PolicySTFQ || st.Ready != 6000 {
		t.Fatalf("after kill -9: policy %q, ready %d; want stfq, 6000", st.Policy, st.Ready)
	}

	sub, err := connect(t, srv.Addr).Consumer().Subscribe(ctx, "fair", fila.Prefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	var order []uint32
	for d, err := range sub.Messages(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		order = append(order, d.Weight())
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if len(order) == 2200 {
			break
		}
	}
	worst := 0.0
	for start := 200; start+100 <= len(order); start++ {
		var count [6]int
		for _, w := range order[start : start+100] {
			count[w]++
		}
		for w := 1; w <= 5; w++ {
			want := 100 * float64(w) / 15
			e := math.Abs(float64(count[w]) - want)
			worst = max(worst, e)
			if e > 2 {
				t.Fatalf("deliveries %d to %d: weight %d served %d, entitled %.1f", start, start+99, w, count[w], want)
			}
		}
	}
	t.Logf("largest error over every window of 100 deliveries: %.2f messages", worst)
}

// TestLatencyLaneEndToEnd: with a noisy tenant's 100,000 messages
// backlogged in an stfq queue, ten quiet tenants each send 10. Every quiet
// message is delivered within latency_budget × 10 + prefetch + 2
// deliveries of being enqueued: the latency lane serves them ahead of the
// backlog, where plain fair queueing would serve each quiet tenant one
// message in 11.
func TestLatencyLaneEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a queue with 100,000 messages")
	}
	srv := filatest.Start(t)
	ctx := ctxT(t, 5*time.Minute)
	admin := connect(t, srv.Addr).Admin()
	const budget, prefetch = 10, 8
	if err := admin.CreateQueue(ctx, fila.NewQueueSpec("jobs").Policy(fila.PolicySTFQ).LatencyLane(budget, 0)); err != nil {
		t.Fatal(err)
	}
	prod := connect(t, srv.Addr).Producer()
	send := func(key string, n int) []fila.ID {
		batch := make([]*fila.Message, n)
		for i := range batch {
			batch[i] = fila.NewMessage("jobs", make([]byte, 64)).FairnessKey(key)
		}
		var ids []fila.ID
		for len(batch) > 0 {
			part := batch[:min(len(batch), 2000)]
			batch = batch[len(part):]
			res, err := prod.SendBatch(ctx, part)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				ids = append(ids, r.ID)
			}
		}
		return ids
	}
	send("noisy", 100_000)

	sub, err := connect(t, srv.Addr).Consumer().Subscribe(ctx, "jobs", fila.Prefetch(prefetch))
	if err != nil {
		t.Fatal(err)
	}
	next := sub.Messages(ctx)
	var delivered atomicCount
	stop := make(chan struct{})
	quiet := make(map[fila.ID]int64) // ID → deliveries counted when its enqueue was acknowledged
	var mu sync.Mutex
	done := make(chan error, 1)
	go func() {
		for d, err := range next {
			if err != nil {
				done <- err
				return
			}
			n := delivered.add()
			mu.Lock()
			at, ok := quiet[d.ID()]
			mu.Unlock()
			if ok {
				if wait := n - at; wait > budget*10+prefetch+2 {
					done <- fmt.Errorf("quiet message %s of %s delivered %d deliveries after its enqueue; bound %d", d.ID(), d.FairnessKey(), wait, budget*10+prefetch+2)
					return
				}
				mu.Lock()
				delete(quiet, d.ID())
				left := len(quiet)
				mu.Unlock()
				if left == 0 {
					select {
					case <-stop:
						done <- nil
						return
					default:
					}
				}
			}
			if err := d.Ack(ctx); err != nil {
				done <- err
				return
			}
		}
		done <- ctx.Err()
	}()
	for delivered.load() < 1000 { // the backlog is being served
		time.Sleep(10 * time.Millisecond)
	}
	// The quiet tenants send at once; each message counts from the moment
	// its enqueue was acknowledged.
	mu.Lock()
	for i := range 10 {
		batch := make([]*fila.Message, 10)
		for j := range batch {
			batch[j] = fila.NewMessage("jobs", make([]byte, 64)).FairnessKey(fmt.Sprint("quiet-", i))
		}
		res, err := prod.SendBatch(ctx, batch)
		if err != nil {
			mu.Unlock()
			t.Fatal(err)
		}
		at := delivered.load()
		for _, r := range res {
			if r.Err != nil {
				mu.Unlock()
				t.Fatal(r.Err)
			}
			quiet[r.ID] = at
		}
	}
	mu.Unlock()
	close(stop)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	t.Logf("100 quiet messages delivered beside a backlog of %d, each within %d deliveries", 100_000-delivered.load(), budget*10+prefetch+2)
}

// atomicCount is a counter shared by the consumer and the test.
type atomicCount struct{ n atomic.Int64 }

func (c *atomicCount) add() int64  { return c.n.Add(1) }
func (c *atomicCount) load() int64 { return c.n.Load() }

// TestTenantHierarchyEndToEnd: on a real server, a queue created with a
// tenant separator (and no policy: it becomes stfq) gives a tenant that
// spreads 4,000 messages over 1,000 fairness keys its single share against
// a tenant with one key, across a kill -9 and a restart: of 2,000
// deliveries taken one at a time, 50% ± 1% each. QueueStats reports the
// separator and each key's entitled share, its tenant's split among the
// tenant's keys; a separator on a drr queue is refused with
// INVALID_ARGUMENT.
func TestTenantHierarchyEndToEnd(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 3*time.Minute)
	admin := connect(t, srv.Addr).Admin()
	if err := admin.CreateQueue(ctx, fila.NewQueueSpec("flat").Policy(fila.PolicyDRR).TenantSeparator("/")); !errors.Is(err, fila.ErrInvalidArgument) {
		t.Fatalf("a tenant separator on a drr queue: %v; want INVALID_ARGUMENT", err)
	}
	if err := admin.CreateQueue(ctx, fila.NewQueueSpec("reports").TenantSeparator("/")); err != nil {
		t.Fatal(err)
	}
	prod := connect(t, srv.Addr).Producer()
	var batch []*fila.Message
	for i := range 4000 {
		batch = append(batch,
			fila.NewMessage("reports", []byte("s")).FairnessKey(fmt.Sprint("sybil/", i%1000)),
			fila.NewMessage("reports", []byte("h")).FairnessKey("honest"))
	}
	sendAll(t, ctx, prod, batch)
	srv.Kill()
	srv.Restart(t)
	admin = connect(t, srv.Addr).Admin()
	st, err := admin.QueueStats(ctx, "reports", fila.WithTopKeys(2000))
	if err != nil {
		t.Fatal(err)
	}
	if st.Policy != fila.PolicySTFQ || st.TenantSeparator != "/" || st.Ready != 8000 || st.BackloggedKeys != 1001 {
		t.Fatalf("after kill -9: policy %q, separator %q, ready %d, %d keys; want stfq, /, 8000, 1001", st.Policy, st.TenantSeparator, st.Ready, st.BackloggedKeys)
	}
	for _, k := range st.FairnessKeys {
		want := 0.5 / 1000
		if k.Key == "honest" {
			want = 0.5
		}
		if math.Abs(k.EntitledShare-want) > 1e-9 {
			t.Fatalf("key %s: entitled share %v; want %v", k.Key, k.EntitledShare, want)
		}
	}

	sub, err := connect(t, srv.Addr).Consumer().Subscribe(ctx, "reports", fila.Prefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	sybil, n := 0, 0
	for d, err := range sub.Messages(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if d.FairnessKey() != "honest" {
			sybil++
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if n++; n == 2000 {
			break
		}
	}
	share := float64(sybil) / float64(n)
	t.Logf("the tenant with 1,000 keys got %.4f of %d deliveries", share, n)
	if math.Abs(share-0.5) > 0.01 {
		t.Fatalf("the tenant with 1,000 keys got %.4f of the deliveries; want 0.5 ± 0.01", share)
	}
}

// TestCostByTimeEndToEnd: on a real server, a queue that charges by
// consumer time, with a key of 10 ms jobs and a key of 100 ms jobs both
// backlogged and four consumers taking one message at a time, gives the
// fast key several times the deliveries of the slow one (about ten: the
// same consumer time), where a queue charging per delivery splits them
// evenly. QueueStats reports it; on a drr queue it is refused with
// INVALID_ARGUMENT.
func TestCostByTimeEndToEnd(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 2*time.Minute)
	admin := connect(t, srv.Addr).Admin()
	if err := admin.CreateQueue(ctx, fila.NewQueueSpec("flat").Policy(fila.PolicyDRR).CostByTime()); !errors.Is(err, fila.ErrInvalidArgument) {
		t.Fatalf("cost by time on a drr queue: %v; want INVALID_ARGUMENT", err)
	}
	if err := admin.CreateQueue(ctx, fila.NewQueueSpec("jobs").CostByTime()); err != nil {
		t.Fatal(err)
	}
	if st, err := admin.QueueStats(ctx, "jobs"); err != nil || !st.CostByTime || st.Policy != fila.PolicySTFQ {
		t.Fatalf("QueueStats: %+v, %v; want cost by time, stfq", st, err)
	}
	prod := connect(t, srv.Addr).Producer()
	var batch []*fila.Message
	for i := range 2000 {
		batch = append(batch, fila.NewMessage("jobs", []byte("f")).FairnessKey("fast"))
		if i < 400 {
			batch = append(batch, fila.NewMessage("jobs", []byte("s")).FairnessKey("slow"))
		}
	}
	sendAll(t, ctx, prod, batch)
	job := map[string]time.Duration{"fast": 10 * time.Millisecond, "slow": 100 * time.Millisecond}
	run, stop := context.WithTimeout(ctx, 4*time.Second)
	defer stop()
	var mu sync.Mutex
	count := map[string]int{}
	var wg sync.WaitGroup
	for range 4 {
		sub, err := connect(t, srv.Addr).Consumer().Subscribe(ctx, "jobs", fila.Prefetch(1))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d, err := range sub.Messages(run) {
				if err != nil {
					return
				}
				time.Sleep(job[d.FairnessKey()])
				if d.Ack(ctx) != nil {
					return
				}
				mu.Lock()
				count[d.FairnessKey()]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	ratio := float64(count["fast"]) / float64(max(count["slow"], 1))
	t.Logf("in 4 s: fast %d, slow %d deliveries (%.1f : 1)", count["fast"], count["slow"], ratio)
	if count["slow"] == 0 || ratio < 4 || ratio > 25 {
		t.Fatalf("fast %d, slow %d deliveries; want the fast key about ten times the slow one's", count["fast"], count["slow"])
	}
}

// sendAll sends msgs in batches of 1,000 and fails the test on any error.
func sendAll(t *testing.T, ctx context.Context, prod *fila.Producer, msgs []*fila.Message) {
	t.Helper()
	for len(msgs) > 0 {
		n := min(len(msgs), 1000)
		res, err := prod.SendBatch(ctx, msgs[:n])
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		msgs = msgs[n:]
	}
}
