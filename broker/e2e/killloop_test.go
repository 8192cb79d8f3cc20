package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// TestKillLoop kills the server with SIGKILL at random moments under
// concurrent produce and consume load, restarts it on the same data, and
// checks after every restart that nothing acknowledged was lost or
// resurrected:
//
//   - every enqueue a producer saw acknowledged is delivered eventually or
//     was acked;
//   - a message whose ack a consumer saw acknowledged is never delivered
//     again;
//   - at the end, draining the queue delivers each remaining message once.
//
// FILA_KILL_LOOPS sets the number of kills (default 3; `make kill-loop`
// runs 25). FILA_KILL_SEED replays a run.
func TestKillLoop(t *testing.T) {
	kills := 3
	if v := os.Getenv("FILA_KILL_LOOPS"); v != "" {
		kills, _ = strconv.Atoi(v)
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FILA_KILL_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("FILA_KILL_SEED=%d FILA_KILL_LOOPS=%d", seed, kills)
	rng := rand.New(rand.NewPCG(seed, seed))

	srv := filatest.Start(t, filatest.WithEnv("FILA_QUEUE_VISIBILITY_TIMEOUT=2s"))
	{
		ctx := ctxT(t, 30*time.Second)
		c := connect(t, srv.Addr)
		if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("crash")); err != nil {
			t.Fatal(err)
		}
		c.Close()
	}

	var mu sync.Mutex
	produced := map[fila.ID]bool{} // acknowledged enqueues
	acked := map[fila.ID]bool{}    // acknowledged acks
	ackSent := map[fila.ID]bool{}  // acks sent, acknowledged or not: a kill may land after the ack is durable and before its reply
	violations := 0
	note := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		violations++
		if violations <= 10 {
			t.Errorf(format, args...)
		}
	}

	for round := 0; round < kills; round++ {
		ctx, cancel := context.WithCancel(context.Background())
		var wg sync.WaitGroup
		for p := 0; p < 2; p++ {
			wg.Add(1)
			go func(p int) {
				defer wg.Done()
				c, err := fila.Connect(ctx, srv.Addr)
				if err != nil {
					return
				}
				defer c.Close()
				for i := 0; ctx.Err() == nil; i++ {
					var batch []*fila.Message
					for j := 0; j < 20; j++ {
						batch = append(batch, fila.NewMessage("crash", []byte(fmt.Sprintf("r%d-p%d-%d-%d", round, p, i, j))).FairnessKey(fmt.Sprint("k", j%5)))
					}
					res, err := c.Producer().SendBatch(ctx, batch)
					if err != nil {
						return // the server died
					}
					mu.Lock()
					for _, r := range res {
						if r.Err == nil {
							produced[r.ID] = true
						}
					}
					mu.Unlock()
				}
			}(p)
		}
		for k := 0; k < 2; k++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := fila.Connect(ctx, srv.Addr)
				if err != nil {
					return
				}
				defer c.Close()
				sub, err := c.Consumer().Subscribe(ctx, "crash", fila.Prefetch(64))
				if err != nil {
					return
				}
				for d, err := range sub.Messages(ctx) {
					if err != nil {
						return
					}
					mu.Lock()
					wasAcked := acked[d.ID()]
					mu.Unlock()
					if wasAcked {
						note("round %d: message %s delivered (attempt %d) after its ack was acknowledged", round, d.ID(), d.Attempt())
					}
					mu.Lock()
					ackSent[d.ID()] = true
					mu.Unlock()
					if err := d.Ack(ctx); err == nil {
						mu.Lock()
						acked[d.ID()] = true
						mu.Unlock()
					}
				}
			}()
		}
		time.Sleep(time.Duration(150+rng.IntN(500)) * time.Millisecond)
		srv.Kill()
		cancel()
		wg.Wait()
		srv.Restart(t)
		mu.Lock()
		t.Logf("round %d: %d enqueues and %d acks acknowledged so far", round, len(produced), len(acked))
		mu.Unlock()
	}

	// Drain: every acknowledged enqueue not yet acked must come out, once.
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	sub, err := c.Consumer().Subscribe(ctx, "crash", fila.Prefetch(256))
	if err != nil {
		t.Fatal(err)
	}
	drained := map[fila.ID]bool{}
	pending := 0
	for id := range produced {
		if !ackSent[id] {
			pending++
		}
	}
	var batch []*fila.Delivery
	idle := time.NewTimer(5 * time.Second)
	defer idle.Stop()
drain:
	for {
		select {
		case d, ok := <-sub.C():
			if !ok {
				t.Fatalf("subscription ended: %v", sub.Err())
			}
			if acked[d.ID()] {
				note("drain: message %s delivered after its ack was acknowledged", d.ID())
			}
			if drained[d.ID()] {
				note("drain: message %s delivered twice", d.ID())
			}
			drained[d.ID()] = true
			batch = append(batch, d)
			if len(batch) == 128 {
				if err := c.Consumer().AckAll(ctx, batch); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
			}
			idle.Reset(20 * time.Millisecond) // a pause: ack what we hold
		case <-idle.C:
			if len(batch) > 0 {
				if err := c.Consumer().AckAll(ctx, batch); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
				idle.Reset(5 * time.Second)
				continue
			}
			// Nothing for a while: check the queue is empty rather than
			// trusting the silence.
			st, err := c.Admin().QueueStats(ctx, "crash")
			if err != nil {
				t.Fatal(err)
			}
			if st.Ready+st.Leased+st.Delayed == 0 {
				break drain
			}
			idle.Reset(5 * time.Second)
		case <-ctx.Done():
			t.Fatal("drain timed out")
		}
	}
	lost := 0
	for id := range produced {
		if !ackSent[id] && !drained[id] {
			lost++
			if lost <= 10 {
				t.Errorf("acknowledged enqueue %s lost", id)
			}
		}
	}
	t.Logf("%d kills: %d enqueues acknowledged, %d acks acknowledged, %d drained at the end (%d expected), %d lost",
		kills, len(produced), len(acked), len(drained), pending, lost)
}
