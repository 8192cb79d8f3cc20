package server

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
	fila "github.com/fila-mq/fila/sdk/go"
)

// inProcess runs a broker (durable store, shard, server) in the test
// process, for benchmarks and profiles of the whole path.
func inProcess(b testing.TB, noSync bool) (addr string, st *store.Disk, stop func()) {
	b.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	st, err := store.Open(b.TempDir(), store.Options{UnsafeNoSync: noSync, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	sh, err := shard.Open(shard.Config{Logger: log}, st)
	if err != nil {
		b.Fatal(err)
	}
	srv := New(Config{NodeID: "bench", Logger: log}, node.New(node.Config{NodeID: "bench", Logger: log}, sh))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	return ln.Addr().String(), st, func() {
		srv.Shutdown(context.Background())
		sh.Close()
		st.Close()
	}
}

// typicalHook is an on_enqueue hook of the usual shape: a tenant header
// as fairness key, a weight from the runtime config, a provider throttle
// key.
const typicalHook = `
function on_enqueue(msg)
  local tenant = msg.headers.tenant or "default"
  local weight = tonumber(fila.get("weight." .. tenant)) or 1
  return { fairness_key = tenant, weight = weight, throttle_keys = { "provider:" .. (msg.headers.provider or "none") } }
end
`

// BenchmarkProduce measures durable enqueue throughput through the whole
// broker, in process: producers each keep `depth` batches of `batch` 1 KiB
// messages in flight. Variants add a typical on_enqueue hook, and an
// idempotency key on every message. Reported as msgs/s, with the fsyncs
// and messages per fsync behind them.
func BenchmarkProduce(b *testing.B) {
	for _, tc := range []struct {
		name                    string
		producers, batch, depth int
		hook, idem              bool
	}{
		{"plain", 1, 64, 4, false, false},
		{"plain", 3, 64, 4, false, false},
		{"plain", 3, 256, 1, false, false},
		{"hook", 3, 64, 4, true, false},
		{"idempotency", 3, 64, 4, false, true},
	} {
		b.Run(fmt.Sprintf("%s/producers=%d/batch=%d/depth=%d", tc.name, tc.producers, tc.batch, tc.depth), func(b *testing.B) {
			addr, st, stop := inProcess(b, false)
			defer stop()
			ctx := context.Background()
			setup, err := fila.Connect(ctx, addr)
			if err != nil {
				b.Fatal(err)
			}
			defer setup.Close()
			spec := fila.NewQueueSpec("bench")
			if tc.hook {
				spec.OnEnqueue(typicalHook)
			}
			if err := setup.Admin().CreateQueue(ctx, spec); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 1024)
			var seq atomic.Uint64
			batchOf := func() []*fila.Message {
				msgs := make([]*fila.Message, tc.batch)
				for i := range msgs {
					m := fila.NewMessage("bench", payload).FairnessKey(fmt.Sprint("k", i%10)).
						Header("tenant", fmt.Sprint("t", i%16)).Header("provider", "stripe")
					if tc.idem {
						m.IdempotencyKey(fmt.Sprint("order-", seq.Add(1)))
					}
					msgs[i] = m
				}
				return msgs
			}
			var clients []*fila.Client
			for p := 0; p < tc.producers; p++ {
				c, err := fila.Connect(ctx, addr)
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				clients = append(clients, c)
			}
			batches := b.N/tc.batch + 1
			var next sync.Mutex
			left := batches
			syncs0 := st.Stats().Syncs
			b.ResetTimer()
			var wg sync.WaitGroup
			for _, c := range clients {
				for d := 0; d < tc.depth; d++ {
					wg.Add(1)
					go func(c *fila.Client) {
						defer wg.Done()
						for {
							next.Lock()
							if left == 0 {
								next.Unlock()
								return
							}
							left--
							next.Unlock()
							if _, err := c.Producer().SendBatch(ctx, batchOf()); err != nil {
								b.Error(err)
								return
							}
						}
					}(c)
				}
			}
			wg.Wait()
			b.StopTimer()
			b.ReportMetric(float64(batches*tc.batch)/b.Elapsed().Seconds(), "msgs/s")
			syncs := st.Stats().Syncs - syncs0
			b.ReportMetric(float64(syncs)/b.Elapsed().Seconds(), "fsyncs/s")
			b.ReportMetric(float64(batches*tc.batch)/float64(max(syncs, 1)), "msgs/fsync")
		})
	}
}

// BenchmarkConsume measures durable consume+ack throughput through the
// whole broker, in process: b.N 1 KiB messages are enqueued first, then
// consumers with the given prefetch take them, acking each delivery from
// its own goroutine (concurrent Acks) or in batches with AckAll.
func BenchmarkConsume(b *testing.B) {
	for _, tc := range []struct {
		name      string
		consumers int
		prefetch  uint32
		ackAll    bool
	}{
		{"ack-each", 1, 256, false},
		{"ack-each", 3, 256, false},
		{"ack-all", 3, 256, true},
	} {
		b.Run(fmt.Sprintf("%s/consumers=%d/prefetch=%d", tc.name, tc.consumers, tc.prefetch), func(b *testing.B) {
			addr, _, stop := inProcess(b, false)
			defer stop()
			ctx := context.Background()
			c, err := fila.Connect(ctx, addr)
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("bench")); err != nil {
				b.Fatal(err)
			}
			payload := make([]byte, 1024)
			for n := 0; n < b.N; n += 256 {
				batch := make([]*fila.Message, 0, 256)
				for i := n; i < min(n+256, b.N); i++ {
					batch = append(batch, fila.NewMessage("bench", payload).FairnessKey(fmt.Sprint("k", i%10)))
				}
				if _, err := c.Producer().SendBatch(ctx, batch); err != nil {
					b.Fatal(err)
				}
			}
			var done atomic.Int64
			finished := make(chan struct{})
			b.ResetTimer()
			for i := 0; i < tc.consumers; i++ {
				cc, err := fila.Connect(ctx, addr)
				if err != nil {
					b.Fatal(err)
				}
				defer cc.Close()
				sub, err := cc.Consumer().Subscribe(ctx, "bench", fila.Prefetch(tc.prefetch))
				if err != nil {
					b.Fatal(err)
				}
				go func() {
					var held []*fila.Delivery
					flush := func() {
						if len(held) == 0 {
							return
						}
						if err := cc.Consumer().AckAll(ctx, held); err == nil && done.Add(int64(len(held))) == int64(b.N) {
							close(finished)
						}
						held = held[:0]
					}
					idle := time.NewTimer(time.Hour)
					for {
						select {
						case d, ok := <-sub.C():
							if !ok {
								return // the run is over and the client closed
							}
							if !tc.ackAll {
								go func() {
									if err := d.Ack(ctx); err == nil && done.Add(1) == int64(b.N) {
										close(finished)
									}
								}()
								continue
							}
							held = append(held, d)
							if len(held) == 64 {
								flush()
							} else {
								idle.Reset(time.Millisecond)
							}
						case <-idle.C:
							flush()
						case <-finished:
							return
						}
					}
				}()
			}
			<-finished
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}
