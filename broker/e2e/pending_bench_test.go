package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

var pendingN = flag.Int("e2e.pending", 1_000_000, "messages for BenchmarkPending")

// BenchmarkPending fills a real broker with e2e.pending 1 KiB messages
// spread over 1,000 fairness keys, and reports the broker's RSS with them
// pending, then kills it with SIGKILL and reports how long the restart
// takes until the broker serves again (listening and answering
// QueueStats). Run it alone:
//
//	go test ./e2e -run '^$' -bench Pending -benchtime 1x -timeout 30m
func BenchmarkPending(b *testing.B) {
	srv := filatest.Start(b)
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	c, err := fila.Connect(ctx, srv.Addr)
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("pending")); err != nil {
		b.Fatal(err)
	}
	n := *pendingN / 4 * 4
	ids, fill, err := fillPending(ctx, srv.Addr, "pending", n, 4, 1000)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(len(ids))/fill.Seconds(), "enqueue-msgs/s")
	time.Sleep(3 * time.Second) // let the broker's GC settle
	rss, err := srv.RSS()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(rss)/(1<<20), "RSS-MiB")
	c.Close()

	srv.Kill()
	t0 := time.Now()
	srv.Restart(b)
	c2, err := fila.Connect(ctx, srv.Addr)
	if err != nil {
		b.Fatal(err)
	}
	defer c2.Close()
	st, err := c2.Admin().QueueStats(ctx, "pending")
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(time.Since(t0).Seconds(), "restart-s")
	if st.Ready != uint64(n) {
		b.Errorf("after restart: %d ready; want %d", st.Ready, n)
	}
	rss2, _ := srv.RSS()
	b.ReportMetric(float64(rss2)/(1<<20), "RSS-after-restart-MiB")
}

// fillPending enqueues n messages of 1 KiB to queue at addr from
// producers clients at once, each sending batches of 256, message i with
// fairness key "t<i mod keys>". It returns the IDs the broker
// acknowledged, in no particular order, and how long the fill took. A
// message the broker refused, or a failed batch, fails the fill: the
// callers count on every message being pending.
func fillPending(ctx context.Context, addr, queue string, n, producers, keys int) ([]fila.ID, time.Duration, error) {
	payload := make([]byte, 1024)
	per := n / producers
	ids := make([][]fila.ID, producers)
	errs := make([]error, producers)
	start := time.Now()
	var wg sync.WaitGroup
	for p := 0; p < producers; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			count := per
			if p == producers-1 {
				count = n - per*(producers-1)
			}
			errs[p] = func() error {
				pc, err := fila.Connect(ctx, addr)
				if err != nil {
					return err
				}
				defer pc.Close()
				got := make([]fila.ID, 0, count)
				batch := make([]*fila.Message, 0, 256)
				for i := 0; i < count; i += 256 {
					batch = batch[:0]
					for j := i; j < min(i+256, count); j++ {
						batch = append(batch, fila.NewMessage(queue, payload).FairnessKey(fmt.Sprint("t", (p*per+j)%keys)))
					}
					res, err := pc.Producer().SendBatch(ctx, batch)
					if err != nil {
						return err
					}
					for k, r := range res {
						if r.Err != nil {
							return fmt.Errorf("message %d of a batch: %w", k, r.Err)
						}
						got = append(got, r.ID)
					}
				}
				ids[p] = got
				return nil
			}()
		}(p)
	}
	wg.Wait()
	fill := time.Since(start)
	if err := errors.Join(errs...); err != nil {
		return nil, fill, fmt.Errorf("fill %s: %w", queue, err)
	}
	all := make([]fila.ID, 0, n)
	for _, part := range ids {
		all = append(all, part...)
	}
	return all, fill, nil
}
