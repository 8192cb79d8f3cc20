package e2e

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// stats returns the queue's statistics, asked on c: on the connection a
// subscription's Credit frames travel on, the answer reflects them.
func stats(t *testing.T, ctx context.Context, c *fila.Client, q string) *fila.QueueStats {
	t.Helper()
	st, err := c.Admin().QueueStats(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// TestExpiredLeasesReturnCredit: a subscription with prefetch 5 whose five
// deliveries all expire unsettled gets their credit back and keeps
// receiving. (Before, its credit was gone for good: the broker showed
// ready=5 leased=0 subscriptions=1 and the consumer waited forever.) A
// late ack of an expired delivery gets LEASE_EXPIRED and returns no
// credit twice: the subscription never holds more than 5.
func TestExpiredLeasesReturnCredit(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	const q = "expiring"
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q).VisibilityTimeout(time.Second)); err != nil {
		t.Fatal(err)
	}
	enqueueMany(t, ctx, c.Producer(), 20, func(i int) *fila.Message {
		return fila.NewMessage(q, fmt.Appendf(nil, "m%d", i))
	})
	sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(5))
	if err != nil {
		t.Fatal(err)
	}
	var expired []*fila.Delivery
	for range 5 {
		expired = append(expired, recv(t, ctx, sub))
	}
	// Settle nothing: the five leases expire, their credit comes back,
	// and the next five messages are delivered with it.
	seen := map[fila.ID]bool{}
	for _, d := range expired {
		seen[d.ID()] = true
	}
	var fresh []*fila.Delivery
	for len(fresh) < 5 {
		d := recv(t, ctx, sub)
		if !seen[d.ID()] {
			fresh = append(fresh, d)
		}
	}
	if st := stats(t, ctx, c, q); st.Leased > 5 {
		t.Errorf("leased = %d; want at most the prefetch, 5", st.Leased)
	}
	for _, d := range expired {
		if err := d.Ack(ctx); !errors.Is(err, fila.ErrLeaseExpired) {
			t.Errorf("ack of an expired delivery = %v; want LEASE_EXPIRED", err)
		}
	}
	if err := c.Consumer().AckAll(ctx, fresh); err != nil && !errors.Is(err, fila.ErrLeaseExpired) {
		t.Fatal(err)
	}
	// Had the late acks returned credit as well, the broker would now
	// lease up to 10 of the 10 messages still ready.
	if st := stats(t, ctx, c, q); st.Leased > 5 {
		t.Errorf("after the late acks: leased = %d; want at most the prefetch, 5", st.Leased)
	}
}

// TestPrefetchZeroIsCapped: prefetch 0 asks for as much as the broker
// allows, which is [server] max_unsettled: the subscription is granted
// it, and however large the backlog, and however much credit the client
// grants on top, it holds no more leases than that; each ack makes room
// for one more delivery.
func TestPrefetchZeroIsCapped(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_MAX_UNSETTLED=50"))
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	const q = "capped"
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q).VisibilityTimeout(10*time.Minute)); err != nil {
		t.Fatal(err)
	}
	const n = 2000
	enqueueMany(t, ctx, c.Producer(), n, func(i int) *fila.Message {
		return fila.NewMessage(q, fmt.Appendf(nil, "m%d", i))
	})
	sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(0))
	if err != nil {
		t.Fatal(err)
	}
	if got := sub.Prefetch(); got != 50 {
		t.Fatalf("Prefetch() = %d; want the cap, 50", got)
	}
	var held []*fila.Delivery
	for range 50 {
		held = append(held, recv(t, ctx, sub))
	}
	if st := stats(t, ctx, c, q); st.Leased != 50 || st.Ready != n-50 {
		t.Fatalf("leased %d, ready %d; want 50 and %d", st.Leased, st.Ready, n-50)
	}
	// Credit granted beyond the cap does not raise it.
	if err := sub.SetPrefetch(ctx, 500); err != nil {
		t.Fatal(err)
	}
	if st := stats(t, ctx, c, q); st.Leased != 50 {
		t.Fatalf("after granting 450 more credits: leased %d; want the cap, 50", st.Leased)
	}
	// Ten acks make room for exactly ten deliveries.
	if err := c.Consumer().AckAll(ctx, held[:10]); err != nil {
		t.Fatal(err)
	}
	for range 10 {
		recv(t, ctx, sub)
	}
	if st := stats(t, ctx, c, q); st.Leased != 50 || st.Ready != n-60 {
		t.Fatalf("after 10 acks: leased %d, ready %d; want 50 and %d", st.Leased, st.Ready, n-60)
	}
}

// TestSlowConsumerLeavesBacklogReady: a consumer with the SDK's default
// prefetch that stops settling (slow, or stuck) leases at most that
// many messages; the rest of a large backlog stays ready for other
// consumers. When its leases expire, the next messages replace them, and
// nothing is dead-lettered. (With the old default, prefetch 0, such a
// consumer leased the whole backlog, which then expired in its hands,
// attempt after attempt, into the dead-letter queue.)
func TestSlowConsumerLeavesBacklogReady(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	const q = "backlog"
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q).VisibilityTimeout(2*time.Second)); err != nil {
		t.Fatal(err)
	}
	const n = 5000
	enqueueMany(t, ctx, c.Producer(), n, func(i int) *fila.Message {
		return fila.NewMessage(q, fmt.Appendf(nil, "m%d", i))
	})
	sub, err := c.Consumer().Subscribe(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	if got := sub.Prefetch(); got != fila.DefaultPrefetch {
		t.Fatalf("Prefetch() = %d; want DefaultPrefetch, %d", got, fila.DefaultPrefetch)
	}
	check := func(when string) {
		t.Helper()
		st := stats(t, ctx, c, q)
		t.Logf("%s: ready %d, delayed %d, leased %d, dead-lettered %d", when, st.Ready, st.Delayed, st.Leased, st.DeadLettered)
		if st.Leased > fila.DefaultPrefetch {
			t.Errorf("%s: leased %d; want at most the default prefetch, %d", when, st.Leased, fila.DefaultPrefetch)
		}
		// An expired message goes back behind the rest of the backlog:
		// none can have failed its three attempts yet.
		if st.DeadLettered != 0 || st.Ready+st.Delayed+st.Leased != n {
			t.Errorf("%s: %d dead-lettered, %d in the queue; want none and all %d", when, st.DeadLettered, st.Ready+st.Delayed+st.Leased, n)
		}
		// The consumer took a window or so per visibility timeout, not
		// the backlog.
		if st.Ready < n/2 {
			t.Errorf("%s: %d of %d ready; want most of the backlog left for other consumers", when, st.Ready, n)
		}
	}
	// Read a window's worth, settle nothing.
	read := 0
	for ; read < fila.DefaultPrefetch; read++ {
		recv(t, ctx, sub)
	}
	check("window read")
	// Its leases expire; the next messages of the backlog come with the
	// credit they gave back.
	for ; read < 2*fila.DefaultPrefetch; read++ {
		recv(t, ctx, sub)
	}
	check("second window read")
}
