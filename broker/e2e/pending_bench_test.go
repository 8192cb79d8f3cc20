package e2e

import (
	"context"
	"flag"
	"fmt"
	"runtime"
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
	payload := make([]byte, 1024)
	n := *pendingN
	start := time.Now()
	var wg sync.WaitGroup
	per := n / 4
	for p := 0; p < 4; p++ {
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			pc, err := fila.Connect(ctx, srv.Addr)
			if err != nil {
				b.Error(err)
				return
			}
			defer pc.Close()
			for i := 0; i < per; i += 256 {
				batch := make([]*fila.Message, 0, 256)
				for j := i; j < min(i+256, per); j++ {
					batch = append(batch, fila.NewMessage("pending", payload).FairnessKey(fmt.Sprint("t", (p*per+j)%1000)))
				}
				if _, err := pc.Producer().SendBatch(ctx, batch); err != nil {
					b.Error(err)
					return
				}
			}
		}(p)
	}
	wg.Wait()
	fill := time.Since(start)
	b.ReportMetric(float64(4*per)/fill.Seconds(), "enqueue-msgs/s")
	time.Sleep(3 * time.Second) // let the broker's GC settle
	runtime.GC()
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
	if st.Ready != uint64(4*per) {
		b.Errorf("after restart: %d ready; want %d", st.Ready, 4*per)
	}
	rss2, _ := srv.RSS()
	b.ReportMetric(float64(rss2)/(1<<20), "RSS-after-restart-MiB")
}
