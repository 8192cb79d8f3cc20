package e2e

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// enqueueMany sends n messages built by mk in batches of 500.
func enqueueMany(t *testing.T, ctx context.Context, p *fila.Producer, n int, mk func(i int) *fila.Message) []fila.ID {
	t.Helper()
	var ids []fila.ID
	for start := 0; start < n; start += 500 {
		var batch []*fila.Message
		for i := start; i < min(start+500, n); i++ {
			batch = append(batch, mk(i))
		}
		res, err := p.SendBatch(ctx, batch)
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

// TestQuietTenantsBeforeNoisyBurst enqueues 100,000 messages of a noisy
// tenant and 100 of each of 10 quiet tenants, all before consuming: every
// quiet tenant's last message is delivered before the noisy tenant's
// 2,000th.
func TestQuietTenantsBeforeNoisyBurst(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 5*time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("tenants")); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, 256)
	enqueueMany(t, ctx, c.Producer(), 100000, func(int) *fila.Message {
		return fila.NewMessage("tenants", payload).FairnessKey("noisy")
	})
	enqueueMany(t, ctx, c.Producer(), 1000, func(i int) *fila.Message {
		return fila.NewMessage("tenants", payload).FairnessKey(fmt.Sprint("quiet-", i%10))
	})

	sub, err := connect(t, srv.Addr).Consumer().Subscribe(ctx, "tenants", fila.Prefetch(500))
	if err != nil {
		t.Fatal(err)
	}
	noisy, quiet := 0, map[string]int{}
	var batch []*fila.Delivery
	for len(quiet) < 10 || anyBelow(quiet, 100) {
		d := recv(t, ctx, sub)
		if d.FairnessKey() == "noisy" {
			noisy++
		} else {
			quiet[d.FairnessKey()]++
			if quiet[d.FairnessKey()] == 100 {
				t.Logf("%s: last of its 100 messages delivered after %d of the noisy tenant's", d.FairnessKey(), noisy)
				if noisy >= 2000 {
					t.Errorf("%s finished after the noisy tenant's %dth delivery; want before its 2000th", d.FairnessKey(), noisy)
				}
			}
		}
		batch = append(batch, d)
		if len(batch) == 250 {
			if err := c.Consumer().AckAll(ctx, batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
}

func anyBelow(m map[string]int, n int) bool {
	for _, v := range m {
		if v < n {
			return true
		}
	}
	return false
}

// TestIdempotencyKeys checks deduplication within the dedup window, a new
// enqueue after it, and deduplication across a restart.
func TestIdempotencyKeys(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("dedup").DedupWindow(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("dedup-long")); err != nil {
		t.Fatal(err)
	}
	send := func(c *fila.Client, q, key string) fila.SendResult {
		t.Helper()
		res, err := c.Producer().SendBatch(ctx, []*fila.Message{fila.NewMessage(q, []byte(key)).IdempotencyKey(key)})
		if err != nil || res[0].Err != nil {
			t.Fatalf("send %s: %v %v", key, err, res[0].Err)
		}
		return res[0]
	}
	first := send(c, "dedup", "order-1")
	if first.Duplicate {
		t.Fatal("first send reported a duplicate")
	}
	again := send(c, "dedup", "order-1")
	if !again.Duplicate || again.ID != first.ID {
		t.Fatalf("second send = %+v; want duplicate of %s", again, first.ID)
	}
	// Another queue has its own keys.
	if other := send(c, "dedup-long", "order-1"); other.Duplicate {
		t.Fatal("the same key on another queue is a duplicate")
	}
	// After the window, the key is new again.
	var after fila.SendResult
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(250 * time.Millisecond) {
		if after = send(c, "dedup", "order-1"); !after.Duplicate {
			break
		}
	}
	if after.Duplicate || after.ID == first.ID {
		t.Fatalf("send after the window = %+v; want a new message", after)
	}

	// The window survives a restart.
	kept := send(c, "dedup-long", "order-2")
	srv.Kill()
	srv.Restart(t)
	c2 := connect(t, srv.Addr)
	if got := send(c2, "dedup-long", "order-2"); !got.Duplicate || got.ID != kept.ID {
		t.Fatalf("send after restart = %+v; want duplicate of %s", got, kept.ID)
	}
}

// TestOrderingKeysUnderConcurrentConsumers runs 10 consumers over 50
// ordering keys of 100 messages each, nacking some attempts: per key,
// processing never overlaps and messages are processed in order.
func TestOrderingKeysUnderConcurrentConsumers(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 5*time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("ordered").MaxAttempts(100).Backoff(time.Millisecond, 5*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	const keys, per = 50, 100
	enqueueMany(t, ctx, c.Producer(), keys*per, func(i int) *fila.Message {
		k, seq := i%keys, i/keys
		return fila.NewMessage("ordered", []byte(fmt.Sprint(seq))).OrderingKey(fmt.Sprint("k", k)).FairnessKey(fmt.Sprint("t", k%5))
	})

	var mu sync.Mutex
	busy := map[string]bool{}
	next := map[string]int{}
	done := 0
	var wg sync.WaitGroup
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := 0; w < 10; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			cl, err := fila.Connect(cctx, srv.Addr)
			if err != nil {
				t.Error(err)
				return
			}
			defer cl.Close()
			sub, err := cl.Consumer().Subscribe(cctx, "ordered", fila.Prefetch(5))
			if err != nil {
				t.Error(err)
				return
			}
			n := 0
			for d, err := range sub.Messages(cctx) {
				if err != nil {
					return
				}
				key := d.OrderingKey()
				var seq int
				fmt.Sscan(string(d.Payload()), &seq)
				mu.Lock()
				if busy[key] {
					t.Errorf("key %s: two messages in processing at once", key)
				}
				if seq != next[key] {
					t.Errorf("key %s: got message %d; want %d", key, seq, next[key])
				}
				busy[key] = true
				mu.Unlock()
				n++
				time.Sleep(time.Duration(n%3) * time.Millisecond) // work
				mu.Lock()
				busy[key] = false
				mu.Unlock()
				if n%7 == 0 && d.Attempt() < 3 {
					// A failed attempt: the message keeps its place.
					if err := d.Nack(cctx, "transient"); err != nil {
						return
					}
					continue
				}
				mu.Lock()
				next[key]++
				done++
				all := done == keys*per
				mu.Unlock()
				if err := d.Ack(cctx); err != nil {
					return
				}
				if all {
					cancel()
				}
			}
		}(w)
	}
	wg.Wait()
	if done != keys*per {
		t.Fatalf("processed %d messages; want %d", done, keys*per)
	}
}

// TestConsumerRateLimit gives one subscription a declared limit of 50/s
// and another none: over 10 s the limited one takes 450–550 messages and
// the unlimited one the rest.
func TestConsumerRateLimit(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("limited")); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var producers sync.WaitGroup
	producers.Add(1)
	go func() { // keep the queue backlogged
		defer producers.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			enqueueMany(t, ctx, c.Producer(), 500, func(i int) *fila.Message { return fila.NewMessage("limited", []byte("x")) })
			st, err := c.Admin().QueueStats(ctx, "limited")
			if err == nil && st.Ready > 5000 {
				time.Sleep(100 * time.Millisecond)
			}
		}
	}()
	limitedSub, err := connect(t, srv.Addr).Consumer().Subscribe(ctx, "limited", fila.RateLimit("downstream", 50, time.Second, 0), fila.Prefetch(100))
	if err != nil {
		t.Fatal(err)
	}
	freeSub, err := connect(t, srv.Addr).Consumer().Subscribe(ctx, "limited", fila.Prefetch(100))
	if err != nil {
		t.Fatal(err)
	}
	// Each subscription is read and acked all along; deliveries are
	// counted only inside a 10 s window that starts after the limited
	// bucket's initial burst has been spent.
	var mu sync.Mutex
	measuring := false
	limited, free := 0, 0
	done := make(chan struct{})
	var readers sync.WaitGroup
	read := func(sub *fila.Subscription, n *int) {
		defer readers.Done()
		for {
			select {
			case d, ok := <-sub.C():
				if !ok {
					return
				}
				mu.Lock()
				if measuring {
					*n++
				}
				mu.Unlock()
				d.Ack(ctx)
			case <-done:
				return
			}
		}
	}
	readers.Add(2)
	go read(limitedSub, &limited)
	go read(freeSub, &free)
	time.Sleep(2 * time.Second)
	mu.Lock()
	measuring = true
	mu.Unlock()
	time.Sleep(10 * time.Second)
	mu.Lock()
	measuring = false
	mu.Unlock()
	close(done)
	readers.Wait()
	close(stop)
	producers.Wait()
	t.Logf("over 10 s: limited subscription %d, unlimited %d", limited, free)
	if limited < 450 || limited > 550 {
		t.Errorf("limited subscription took %d messages in 10 s at 50/s; want 450–550", limited)
	}
	if free <= limited {
		t.Errorf("unlimited subscription took %d; want more than the limited one's %d", free, limited)
	}
}
