package fila_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	fila "github.com/fila-mq/fila/sdk/go"
	"github.com/fila-mq/fila/sdk/go/internal/testbroker"
)

// TestProduceAndConsumeUnderBackPressure produces and consumes heavily on
// one client against a broker that applies back-pressure early
// (server.max_outbound_size at its 64KB minimum): pipelined 8 MiB Enqueue
// frames of 1024 messages, whose answers alone fill the broker's outbound
// bound, while a subscription on the same client receives the same
// messages and acks them.
//
// The broker stops reading the connection until the client reads its
// answers. A client whose owner goroutine blocks in a socket write while
// deliveries arrive stops reading too, and the two wait on each other
// until the broker's write timeout (5s here) closes the connection: calls
// fail with ErrConnectionLost and the client reconnects. Everything must
// instead complete on the first connection.
func TestProduceAndConsumeUnderBackPressure(t *testing.T) {
	srv := testbroker.Start(t, testbroker.WithEnv(
		"FILA_SERVER_MAX_OUTBOUND_SIZE=64KB",
		"FILA_SERVER_WRITE_TIMEOUT=5s",
	))
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("feed"))
	sub := subscribe(t, c, "feed", fila.Prefetch(1000))

	const (
		producers = 4
		batches   = 2    // per producer
		perBatch  = 1024 // messages per SendBatch: one frame
		size      = 8 << 10
		ackers    = 16
		total     = producers * batches * perBatch // 64 MiB of payload
	)
	var (
		mu   sync.Mutex
		errs []error
	)
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	fail := func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
		stop()
	}
	var wg sync.WaitGroup
	payload := make([]byte, size)
	for range producers {
		wg.Go(func() {
			msgs := make([]*fila.Message, perBatch)
			for i := range msgs {
				msgs[i] = fila.NewMessage("feed", payload)
			}
			for range batches {
				rs, err := c.Producer().SendBatch(wctx, msgs)
				if err != nil {
					fail(fmt.Errorf("SendBatch() = %w", err))
					return
				}
				for _, r := range rs {
					if r.Err != nil {
						fail(fmt.Errorf("SendBatch() result: %w", r.Err))
						return
					}
				}
			}
		})
	}
	var acked atomic.Int64
	for range ackers {
		wg.Go(func() {
			for {
				d, err := sub.Next(wctx)
				if err == nil {
					err = d.Ack(wctx)
				}
				if err != nil {
					if wctx.Err() == nil {
						fail(fmt.Errorf("Next() or Ack() = %w", err))
					}
					return
				}
				if acked.Add(1) == total {
					stop()
				}
			}
		})
	}
	wg.Wait()
	for _, err := range errs {
		t.Error(err)
	}
	if n := acked.Load(); n != total {
		t.Errorf("acked %d messages; want %d", n, total)
	}
	if n := c.Stats().Reconnects; n != 0 {
		t.Errorf("Stats().Reconnects = %d; want 0", n)
	}
}
