package e2e

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// TestSTFQQueueEndToEnd creates a queue with the stfq policy on a real
// server, fills it at weights 1:2:3:4:5 with payloads of mixed sizes,
// kills the server with SIGKILL and restarts it, then consumes one message
// at a time: the queue still reports its policy, and every window of 100
// consecutive deliveries gives each key 100 × w / 15 messages within ±2.
// A policy the broker does not know is refused with INVALID_ARGUMENT.
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
		if len(batch) >= 1000 || i == 399 {
			res, err := prod.SendBatch(ctx, batch)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
			}
			batch = batch[:0]
		}
	}

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
		if len(order) == 2000 {
			break
		}
	}
	worst := 0.0
	for start := 0; start+100 <= len(order); start++ {
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
