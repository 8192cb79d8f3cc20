package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// quietSample is one message of the quiet tenant: when it was sent, how
// many deliveries the consumer had received when its enqueue was
// acknowledged, and, once delivered, when and at which delivery.
type quietSample struct {
	sent, acked, delivered time.Time
	ackedAt, deliveredAt   int64 // the consumer's delivery count
}

// TestClusterFairnessAcrossFailover shows that the fairness state
// survives a leader kill. A noisy tenant keeps thousands of messages
// waiting in a three-node queue while a quiet tenant sends one message
// every 100 ms; a slow consumer takes them. The quiet tenant's wait is
// measured in deliveries (how many messages the consumer received between
// the quiet enqueue's acknowledgement and its delivery) before the kill
// and right after writes resume on the new leader. The DRR state is
// replicated, so after the failover the quiet tenant is still served
// within a message or two of the noisy one: its wait stays within 2× of
// its wait before, plus the deliveries the killed leader had in flight
// (the prefetch), which come back when their leases expire. A new leader
// that lost the fairness state and served in arrival order would make it
// wait behind the whole backlog. The waits in milliseconds are logged
// beside the election time; they are not asserted, since the machine's
// load moves them.
func TestClusterFairnessAcrossFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process cluster test")
	}
	if filatest.RaceBuild() {
		t.Skip("a load test of three processes: under the race detector it would measure the detector")
	}
	const prefetch = 8
	c := filatest.StartCluster(t, 3, filatest.WithEnv(clusterEnv...))
	ctx := ctxT(t, 5*time.Minute)
	admin := connect(t, c.Addrs()).Admin()
	createQueue(t, ctx, admin, "fair")

	stop := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }) }
	t.Cleanup(halt)
	var wg sync.WaitGroup

	var (
		mu       sync.Mutex
		quiet    []*quietSample
		received atomic.Int64 // deliveries the consumer received
		noisy    atomic.Int64 // noisy messages acknowledged
	)

	// The consumer: slow, so that the noisy tenant's backlog grows.
	wg.Add(1)
	go func() {
		defer wg.Done()
		cons := connect(t, c.Addrs()).Consumer()
		var sub *fila.Subscription
		for {
			if sub == nil {
				s, err := cons.Subscribe(ctx, "fair", fila.Prefetch(prefetch))
				if err != nil {
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
					continue
				}
				sub = s
			}
			select {
			case <-stop:
				return
			case d, ok := <-sub.C():
				if !ok {
					sub = nil
					continue
				}
				n := received.Add(1)
				if d.FairnessKey() == "quiet" {
					i, err := strconv.Atoi(strings.TrimPrefix(string(d.Payload()), "q-"))
					mu.Lock()
					if err == nil && i < len(quiet) && quiet[i].deliveredAt == 0 {
						quiet[i].deliveredAt, quiet[i].delivered = n, time.Now()
					}
					mu.Unlock()
				}
				time.Sleep(2 * time.Millisecond) // the work
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				_ = d.Ack(actx) // a lease of the killed leader may be gone
				cancel()
			}
		}
	}()

	// The noisy tenant: batches of 50 as fast as they are taken.
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := connect(t, c.Addrs()).Producer()
		batch := make([]*fila.Message, 50)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for j := range batch {
				batch[j] = fila.NewMessage("fair", []byte(fmt.Sprint("n-", i, "-", j))).FairnessKey("noisy")
			}
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			res, err := p.SendBatch(sctx, batch)
			cancel()
			if err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			for _, r := range res {
				if r.Err == nil {
					noisy.Add(1)
				}
			}
		}
	}()

	// The quiet tenant: one message every 100 ms.
	wg.Add(1)
	go func() {
		defer wg.Done()
		p := connect(t, c.Addrs()).Producer()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			mu.Lock()
			i := len(quiet)
			s := &quietSample{sent: time.Now()}
			quiet = append(quiet, s)
			mu.Unlock()
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := p.Send(sctx, fila.NewMessage("fair", []byte(fmt.Sprint("q-", i))).FairnessKey("quiet"))
			cancel()
			if err == nil {
				n := received.Load()
				mu.Lock()
				s.acked, s.ackedAt = time.Now(), n
				mu.Unlock()
			}
		}
	}()

	// Let the noisy backlog build, then measure for 4 s, then kill the
	// leader.
	for noisy.Load()-received.Load() < 2000 {
		if ctx.Err() != nil {
			t.Fatalf("the noisy backlog never reached 2000: %d enqueued, %d delivered", noisy.Load(), received.Load())
		}
		time.Sleep(50 * time.Millisecond)
	}
	from := time.Now()
	time.Sleep(4 * time.Second)
	lead := leaderOf(t, ctx, c, admin, "fair")
	backlog := noisy.Load() - received.Load()
	killed := time.Now()
	c.Nodes[lead].Kill()

	// After: the first 10 quiet messages whose enqueue was acknowledged
	// after the kill, once all 10 are delivered.
	var after []*quietSample
	var resumed time.Duration
	for {
		mu.Lock()
		after = after[:0]
		for _, s := range quiet {
			if !s.acked.IsZero() && s.sent.After(killed) && len(after) < 10 {
				after = append(after, s)
			}
		}
		done := len(after) == 10
		for _, s := range after {
			done = done && s.deliveredAt != 0
		}
		if len(after) > 0 && resumed == 0 {
			resumed = after[0].acked.Sub(killed)
		}
		mu.Unlock()
		if done {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the quiet tenant's messages after the kill were not all delivered (%d acknowledged)", len(after))
		}
		time.Sleep(50 * time.Millisecond)
	}
	halt()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	var before []*quietSample
	for _, s := range quiet {
		if s.sent.After(from) && s.sent.Before(killed) && !s.acked.IsZero() && s.deliveredAt != 0 && s.delivered.Before(killed) {
			before = append(before, s)
		}
	}
	if len(before) < 10 {
		t.Fatalf("only %d quiet messages were delivered in the 4 s before the kill", len(before))
	}
	bd, bms := medianWaits(before)
	ad, ams := medianWaits(after)
	t.Logf("noisy backlog at the kill: %d messages; writes resumed %v after the kill", backlog, resumed.Round(time.Millisecond))
	t.Logf("quiet tenant's median wait before the kill: %d deliveries, %v (%d messages)", bd, bms.Round(time.Millisecond), len(before))
	t.Logf("quiet tenant's median wait right after:     %d deliveries, %v (its first 10 messages)", ad, ams.Round(time.Millisecond))
	t.Logf("in time: %v after against 2 × %v + the election's %v: within = %v", ams.Round(time.Millisecond), bms.Round(time.Millisecond), resumed.Round(time.Millisecond), ams <= 2*bms+resumed)
	if bound := 2*bd + prefetch + 2; ad > bound {
		t.Errorf("after the failover the quiet tenant waited %d deliveries (median), more than 2 × %d + %d: the fairness state did not carry over", ad, bd, prefetch+2)
	}
	if backlog < 10*(2*bd+prefetch+2) {
		t.Errorf("the noisy backlog (%d) is too small for the test to tell fair from first-come service", backlog)
	}
}

// medianWaits returns the median wait of samples in deliveries and in
// time, from the acknowledgement of their enqueue to their delivery.
func medianWaits(samples []*quietSample) (deliveries int64, d time.Duration) {
	ds := make([]int64, len(samples))
	ts := make([]time.Duration, len(samples))
	for i, s := range samples {
		ds[i] = max(s.deliveredAt-s.ackedAt, 0)
		ts[i] = max(s.delivered.Sub(s.acked), 0)
	}
	slices.Sort(ds)
	slices.Sort(ts)
	return ds[len(ds)/2], ts[len(ts)/2]
}
