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

	"github.com/fila-mq/fila/broker/internal/hook"
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
	srv := New(Config{NodeID: "bench", Logger: log, Hooks: NewHooks(hook.Limits{}, nil, log)}, sh)
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
