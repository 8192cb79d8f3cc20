package fila_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
	"github.com/fila-mq/fila/sdk/go/internal/testbroker"
)

// BenchmarkSend compares the two ways to enqueue at throughput, 1 KiB
// payloads against a real broker with durable (fsynced) storage:
//
//   - coalesced: 64 goroutines each calling Send, one message at a time;
//     the client coalesces them into batch frames (and, for comparison,
//     the same with a 200µs linger).
//   - batch: the same messages sent with SendBatch, 64 per call, by one
//     goroutine (the same 64 messages in flight as the coalesced case)
//     and by four (four times as many in flight).
//
// Each reports msgs/s; the coalesced path should reach at least 80% of
// batch-1x64. Run with:
//
//	go test -run '^$' -bench BenchmarkSend -benchtime 20000x
func BenchmarkSend(b *testing.B) {
	srv := testbroker.Start(b)
	payload := make([]byte, 1024)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	queues := 0
	setup := func(b *testing.B, opts ...fila.Option) (*fila.Client, string) {
		b.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := fila.Connect(ctx, srv.Addr, opts...)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		queues++
		q := fmt.Sprintf("bench-%d", queues)
		if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)); err != nil {
			b.Fatal(err)
		}
		return c, q
	}
	report := func(b *testing.B, start time.Time) {
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
	}

	coalesced := func(opts ...fila.Option) func(b *testing.B) {
		return func(b *testing.B) {
			c, q := setup(b, opts...)
			p := c.Producer()
			const workers = 64
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			start := time.Now()
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					for next.Add(1) <= int64(b.N) {
						if _, err := p.Send(ctx, fila.NewMessage(q, payload)); err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			report(b, start)
			if st := c.Stats(); st.EnqueueFrames > 0 {
				b.ReportMetric(float64(st.EnqueuedMessages)/float64(st.EnqueueFrames), "msgs/frame")
			}
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
		}
	}
	batch := func(goroutines, size int) func(b *testing.B) {
		return func(b *testing.B) {
			c, q := setup(b)
			p := c.Producer()
			var next atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, goroutines)
			b.SetBytes(int64(len(payload)))
			b.ResetTimer()
			start := time.Now()
			for range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					msgs := make([]*fila.Message, 0, size)
					for {
						end := next.Add(int64(size))
						n := min(int64(size), int64(b.N)-(end-int64(size)))
						if n <= 0 {
							return
						}
						msgs = msgs[:0]
						for range n {
							msgs = append(msgs, fila.NewMessage(q, payload))
						}
						res, err := p.SendBatch(ctx, msgs)
						if err == nil {
							for _, r := range res {
								if r.Err != nil {
									err = r.Err
									break
								}
							}
						}
						if err != nil {
							errs <- err
							return
						}
					}
				}()
			}
			wg.Wait()
			report(b, start)
			if st := c.Stats(); st.EnqueueFrames > 0 {
				b.ReportMetric(float64(st.EnqueuedMessages)/float64(st.EnqueueFrames), "msgs/frame")
			}
			close(errs)
			for err := range errs {
				b.Fatal(err)
			}
		}
	}

	b.Run("coalesced-64", coalesced())
	b.Run("coalesced-64-linger200us", coalesced(fila.WithLinger(200*time.Microsecond)))
	b.Run("batch-1x64", batch(1, 64))
	b.Run("batch-4x64", batch(4, 64))
}
