package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// TestMillionPendingRestart fills a real fila-server with 1,000,000
// messages of 1 KiB over 1,000 fairness keys (four producers, batches of
// 256), kills it with SIGKILL, restarts it on the same data, and checks
// that nothing acknowledged was lost or duplicated: QueueStats reports
// every message ready, and draining the queue delivers exactly the IDs
// the producers were given, each once. It logs the fill rate, the
// broker's RSS after the fill, the time until the restarted broker
// serves (listening and answering QueueStats), its RSS then, and the
// drain rate.
//
// It writes a GiB of messages and keeps both CPUs of the reference
// machine busy for about half a minute (minutes on a slower disk), which
// would slow every other test of `make test` running beside it, so it
// runs only with FILA_TEST_MILLION=1 (`make million`);
// FILA_TEST_MILLION_N sets another number of messages. It is skipped in
// -short mode and under the race detector, whose slowdown and memory
// would be what it measures.
func TestMillionPendingRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a fill of a million messages takes minutes")
	}
	if os.Getenv("FILA_TEST_MILLION") != "1" {
		t.Skip("set FILA_TEST_MILLION=1 (make million) to fill, kill and drain a million messages")
	}
	if filatest.RaceBuild() {
		t.Skip("race build: the detector's cost would be what this measures")
	}
	n := 1_000_000
	if v := os.Getenv("FILA_TEST_MILLION_N"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n <= 0 {
			t.Fatalf("FILA_TEST_MILLION_N=%q: want a positive number", v)
		}
	}
	const queue = "million"
	srv := filatest.Start(t)
	ctx := ctxT(t, 30*time.Minute)
	c := connect(t, srv.Addr)
	// Leases long enough that a slow drain on a loaded machine never sees
	// one expire: a redelivery would be reported as a duplicate.
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec(queue).VisibilityTimeout(10*time.Minute)); err != nil {
		t.Fatal(err)
	}

	ids, fill, err := fillPending(ctx, srv.Addr, queue, n, 4, 1000)
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(ids, func(a, b fila.ID) int { return bytes.Compare(a[:], b[:]) })
	for i := 1; i < len(ids); i++ {
		if ids[i] == ids[i-1] {
			t.Fatalf("the broker acknowledged two messages with the same ID %s", ids[i])
		}
	}
	st, err := c.Admin().QueueStats(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != uint64(n) {
		t.Fatalf("after the fill: %d ready; want %d", st.Ready, n)
	}
	rssFill, err := srv.RSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("fill: %d messages of 1 KiB over 1,000 keys in %v: %.0f msgs/s; broker RSS %.0f MiB",
		n, fill.Round(time.Millisecond), float64(n)/fill.Seconds(), inMiB(rssFill))
	c.Close()

	srv.Kill()
	t0 := time.Now()
	srv.Restart(t)
	listening := time.Since(t0)
	c = connect(t, srv.Addr)
	st, err = c.Admin().QueueStats(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	serving := time.Since(t0)
	rssRestart, err := srv.RSS()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("restart after SIGKILL: listening after %v, QueueStats answered after %v; broker RSS %.0f MiB",
		listening.Round(time.Millisecond), serving.Round(time.Millisecond), inMiB(rssRestart))
	// Of the restart, the scheduler's part (the rest is mostly the
	// store's recovery): the shard logs it.
	lines := strings.Split(srv.Log(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], "recovered scheduler state") {
			t.Logf("restart: %s", lines[i])
			break
		}
	}
	if st.Ready != uint64(n) || st.Leased != 0 || st.Delayed != 0 || st.DeadLettered != 0 {
		t.Fatalf("after the restart: ready %d, leased %d, delayed %d, dead-lettered %d; want %d ready and nothing else",
			st.Ready, st.Leased, st.Delayed, st.DeadLettered, n)
	}

	d := drainIDs(t, ctx, srv.Addr, queue, ids, 2)
	t.Logf("drain: %d messages consumed and acked in %v: %.0f msgs/s", n, d.Round(time.Millisecond), float64(n)/d.Seconds())
	st, err = c.Admin().QueueStats(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready+st.Leased+st.Delayed+st.DeadLettered != 0 {
		t.Errorf("after the drain: ready %d, leased %d, delayed %d, dead-lettered %d; want an empty queue",
			st.Ready, st.Leased, st.Delayed, st.DeadLettered)
	}
}

// drainIDs consumes queue with consumers clients at once, each with the
// largest prefetch the broker grants, acking in batches, until every one
// of ids (sorted) has been delivered; it then waits a second for
// deliveries beyond them. It fails t for a delivery of an ID not in ids
// or of one delivered before (each is reported up to ten times), and
// returns how long the drain took.
func drainIDs(t *testing.T, ctx context.Context, addr, queue string, ids []fila.ID, consumers int) time.Duration {
	t.Helper()
	var (
		mu       sync.Mutex
		seen     = make([]bool, len(ids))
		unique   int
		dups     int
		unknown  int
		finished = make(chan struct{})
	)
	// note records one delivery; the one that completes ids closes finished.
	note := func(id fila.ID) {
		i, found := slices.BinarySearchFunc(ids, id, func(a, b fila.ID) int { return bytes.Compare(a[:], b[:]) })
		mu.Lock()
		defer mu.Unlock()
		switch {
		case !found:
			unknown++
			if unknown <= 10 {
				t.Errorf("delivered %s, an ID no producer was given", id)
			}
		case seen[i]:
			dups++
			if dups <= 10 {
				t.Errorf("delivered %s a second time", id)
			}
		default:
			seen[i] = true
			unique++
			if unique == len(ids) {
				close(finished)
			}
		}
	}
	dctx, stop := context.WithCancel(ctx)
	defer stop()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make([]error, consumers)
	for k := 0; k < consumers; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			errs[k] = func() error {
				cc, err := fila.Connect(ctx, addr)
				if err != nil {
					return err
				}
				defer cc.Close()
				sub, err := cc.Consumer().Subscribe(ctx, queue, fila.Prefetch(0))
				if err != nil {
					return err
				}
				batch := make([]*fila.Delivery, 0, 256)
				flush := func() error {
					err := cc.Consumer().AckAll(ctx, batch)
					batch = batch[:0]
					return err
				}
				idle := time.NewTimer(time.Hour)
				defer idle.Stop()
				for {
					select {
					case d, ok := <-sub.C():
						if !ok {
							return sub.Err()
						}
						note(d.ID())
						batch = append(batch, d)
						if len(batch) == cap(batch) {
							if err := flush(); err != nil {
								return err
							}
						}
						idle.Reset(5 * time.Millisecond) // a pause: ack what is held
					case <-idle.C:
						if err := flush(); err != nil {
							return err
						}
					case <-dctx.Done():
						return flush()
					}
				}
			}()
		}(k)
	}
	var took time.Duration
	select {
	case <-finished:
		took = time.Since(start)
		// Anything delivered from here on is a duplicate.
		time.Sleep(time.Second)
	case <-ctx.Done():
		mu.Lock()
		t.Errorf("drain timed out: %d of %d delivered", unique, len(ids))
		mu.Unlock()
	}
	stop()
	wg.Wait()
	for _, err := range errs {
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("consumer: %v", err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if unique != len(ids) || dups != 0 || unknown != 0 {
		t.Errorf("drain: %d of %d IDs delivered, %d deliveries of an ID already delivered, %d of an ID no producer was given",
			unique, len(ids), dups, unknown)
	}
	return took
}

// inMiB converts bytes to MiB.
func inMiB(b int64) float64 { return float64(b) / (1 << 20) }
