package fila_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
	"github.com/fila-mq/fila/sdk/go/internal/testbroker"
)

// These tests run the SDK against a real fila-server (built once per test
// process, or $FILA_TEST_SERVER_BIN). None asserts on timing: waits are
// bounded by generous contexts and end on events.

func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func connect(t *testing.T, addr string, opts ...fila.Option) *fila.Client {
	t.Helper()
	c, err := fila.Connect(testCtx(t), addr, opts...)
	if err != nil {
		t.Fatalf("Connect(%s) = %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func createQueue(t *testing.T, c *fila.Client, spec *fila.QueueSpec) {
	t.Helper()
	if err := c.Admin().CreateQueue(testCtx(t), spec); err != nil {
		t.Fatalf("CreateQueue(%q) = %v", spec.Name(), err)
	}
}

func subscribe(t *testing.T, c *fila.Client, queue string, opts ...fila.SubscribeOption) *fila.Subscription {
	t.Helper()
	sub, err := c.Consumer().Subscribe(testCtx(t), queue, opts...)
	if err != nil {
		t.Fatalf("Subscribe(%q) = %v", queue, err)
	}
	t.Cleanup(func() { sub.Close(context.Background()) })
	return sub
}

func next(t *testing.T, sub *fila.Subscription) *fila.Delivery {
	t.Helper()
	d, err := sub.Next(testCtx(t))
	if err != nil {
		t.Fatalf("Next(%q) = %v", sub.Queue(), err)
	}
	return d
}

// wantErr checks that err is a *E and matches sentinel.
func wantErr[E error](t *testing.T, what string, err error, sentinel error) E {
	t.Helper()
	var e E
	if !errors.As(err, &e) {
		t.Fatalf("%s = %v (%T); want %T", what, err, err, e)
	}
	if !errors.Is(err, sentinel) {
		t.Fatalf("%s = %v; want errors.Is %v", what, err, sentinel)
	}
	return e
}

func TestConnectPingAndIdentity(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	if _, err := c.Ping(testCtx(t)); err != nil {
		t.Fatalf("Ping() = %v", err)
	}
	if got := c.NodeID(); got != "test" {
		t.Errorf("NodeID() = %q; want %q", got, "test")
	}
	if got := c.ServerName(); !strings.HasPrefix(got, "fila-server/") {
		t.Errorf("ServerName() = %q; want fila-server/...", got)
	}
}

func TestConnectFails(t *testing.T) {
	srv := testbroker.Start(t)
	addr := srv.Addr
	srv.Stop(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if c, err := fila.Connect(ctx, addr); err == nil {
		c.Close()
		t.Fatalf("Connect(%s) to a stopped server = nil error", addr)
	} else if !strings.HasPrefix(err.Error(), "fila: connect "+addr+": ") {
		t.Errorf("Connect(%s) = %q; want prefix %q", addr, err, "fila: connect "+addr+": ")
	}
}

func TestProducerEnqueueAndSendOptions(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("orders"))
	p := c.Producer()

	id1, err := p.Enqueue(ctx, "orders", []byte("plain"))
	if err != nil {
		t.Fatalf("Enqueue(orders) = %v", err)
	}
	m := fila.NewMessage("orders", []byte("rich")).
		Header("tenant", "acme").
		Header("trace", "t-1").
		FairnessKey("acme").
		Weight(3).
		ThrottleKey("provider:stripe").
		ThrottleKey("region:eu").
		IdempotencyKey("order-42").
		OrderingKey("cart-7")
	id2, err := p.Send(ctx, m)
	if err != nil {
		t.Fatalf("Send(rich) = %v", err)
	}
	if !(id1.String() < id2.String()) {
		t.Errorf("IDs %s, %s not in enqueue order (UUIDv7)", id1, id2)
	}
	if parsed, err := fila.ParseID(id2.String()); err != nil || parsed != id2 {
		t.Errorf("ParseID(%q) = %v, %v; want %v", id2, parsed, err, id2)
	}
	// A duplicate of the idempotency key gets the first message's ID.
	res, err := p.SendBatch(ctx, []*fila.Message{fila.NewMessage("orders", []byte("again")).IdempotencyKey("order-42")})
	if err != nil || res[0].Err != nil || res[0].ID != id2 || !res[0].Duplicate {
		t.Fatalf("SendBatch(duplicate) = %+v, %v; want ID %v, Duplicate", res, err, id2)
	}
	// A delayed message is not ready yet.
	if _, err := p.Send(ctx, fila.NewMessage("orders", []byte("later")).Delay(time.Hour)); err != nil {
		t.Fatalf("Send(delayed) = %v", err)
	}
	st, err := c.Admin().QueueStats(ctx, "orders")
	if err != nil {
		t.Fatalf("QueueStats(orders) = %v", err)
	}
	if st.Ready != 2 || st.Delayed != 1 {
		t.Errorf("QueueStats(orders) ready, delayed = %d, %d; want 2, 1", st.Ready, st.Delayed)
	}

	// The rate of provider:stripe and region:eu is unlimited until set.
	sub := subscribe(t, c, "orders")
	got := map[fila.ID]*fila.Delivery{}
	for range 2 {
		d := next(t, sub)
		got[d.ID()] = d
	}
	d1, d2 := got[id1], got[id2]
	if d1 == nil || d2 == nil {
		t.Fatalf("delivered %v; want %v and %v", got, id1, id2)
	}
	if string(d1.Payload()) != "plain" || d1.FairnessKey() != "default" || d1.Weight() != 1 || d1.Attempt() != 1 {
		t.Errorf("plain delivery = %q key %q weight %d attempt %d; want plain default 1 1", d1.Payload(), d1.FairnessKey(), d1.Weight(), d1.Attempt())
	}
	h := d2.Headers()
	if h["tenant"] != "acme" || h["trace"] != "t-1" || d2.Header("tenant") != "acme" || d2.Header("none") != "" {
		t.Errorf("Headers() = %v; want tenant=acme trace=t-1", h)
	}
	if d2.FairnessKey() != "acme" || d2.Weight() != 3 || d2.OrderingKey() != "cart-7" || d2.Queue() != "orders" {
		t.Errorf("rich delivery key %q weight %d ordering %q queue %q; want acme 3 cart-7 orders", d2.FairnessKey(), d2.Weight(), d2.OrderingKey(), d2.Queue())
	}
	if tk := d2.ThrottleKeys(); len(tk) != 2 || tk[0] != "provider:stripe" || tk[1] != "region:eu" {
		t.Errorf("ThrottleKeys() = %v; want [provider:stripe region:eu]", tk)
	}
	if !d2.LeaseDeadline().After(d2.EnqueuedAt()) || d2.EnqueuedAt().Before(id2.Time().Add(-time.Second)) {
		t.Errorf("EnqueuedAt %v, LeaseDeadline %v, ID time %v: want enqueue ≈ ID time < deadline", d2.EnqueuedAt(), d2.LeaseDeadline(), id2.Time())
	}
	if err := c.Consumer().AckAll(ctx, []*fila.Delivery{d1, d2}); err != nil {
		t.Fatalf("AckAll() = %v", err)
	}
}

func TestProducerErrors(t *testing.T) {
	srv := testbroker.Start(t, testbroker.WithEnv("FILA_SERVER_MAX_MESSAGE_SIZE=64KB"))
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("orders"))
	p := c.Producer()

	_, err := p.Enqueue(ctx, "nope", []byte("x"))
	e := wantErr[*fila.EnqueueError](t, "Enqueue(nope)", err, fila.ErrQueueNotFound)
	if e.Code != fila.EnqueueQueueNotFound || e.Code.String() != "QUEUE_NOT_FOUND" {
		t.Errorf("Enqueue(nope) code = %v; want QUEUE_NOT_FOUND", e.Code)
	}
	if got, want := err.Error(), "fila: enqueue nope: queue not found"; !strings.HasPrefix(got, want) {
		t.Errorf("Enqueue(nope) = %q; want prefix %q", got, want)
	}

	_, err = p.Enqueue(ctx, "orders", make([]byte, 100<<10))
	wantErr[*fila.EnqueueError](t, "Enqueue(100 KiB)", err, fila.ErrMessageTooLarge)

	// In a batch each message succeeds or fails alone.
	res, err := p.SendBatch(ctx, []*fila.Message{
		fila.NewMessage("orders", []byte("a")),
		fila.NewMessage("nope", []byte("b")),
		fila.NewMessage("orders", []byte("c")),
	})
	if err != nil || len(res) != 3 {
		t.Fatalf("SendBatch() = %v, %v; want 3 results", res, err)
	}
	if res[0].Err != nil || res[2].Err != nil {
		t.Errorf("SendBatch() results 0, 2 = %v, %v; want nil", res[0].Err, res[2].Err)
	}
	wantErr[*fila.EnqueueError](t, "SendBatch()[1]", res[1].Err, fila.ErrQueueNotFound)
	if res, err := p.SendBatch(ctx, nil); res != nil || err != nil {
		t.Errorf("SendBatch(nil) = %v, %v; want nil, nil", res, err)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p.Enqueue(cctx, "orders", []byte("x")); !errors.Is(err, context.Canceled) {
		t.Errorf("Enqueue(canceled ctx) = %v; want context.Canceled", err)
	}
}

// TestConcurrentSendsCoalesce sends from many goroutines at once: every
// Send gets its own ID and result, and the client used fewer Enqueue
// frames than messages.
func TestConcurrentSendsCoalesce(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("jobs"))
	const workers, each = 64, 40
	var mu sync.Mutex
	ids := map[fila.ID]bool{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				q := "jobs"
				if i == each/2 {
					q = "missing" // one failure per worker must not fail the others
				}
				id, err := c.Producer().Send(ctx, fila.NewMessage(q, fmt.Appendf(nil, "%d-%d", w, i)))
				if q == "missing" {
					if !errors.Is(err, fila.ErrQueueNotFound) {
						errs <- fmt.Errorf("Send(missing) = %v; want ErrQueueNotFound", err)
					}
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				ids[id] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := workers * (each - 1)
	if len(ids) != want {
		t.Fatalf("%d distinct IDs; want %d", len(ids), want)
	}
	st, err := c.Admin().QueueStats(ctx, "jobs")
	if err != nil || st.Ready != uint64(want) {
		t.Fatalf("QueueStats(jobs) = %+v, %v; want ready %d", st, err, want)
	}
	s := c.Stats()
	if s.EnqueuedMessages != uint64(workers*each) || s.EnqueueFrames >= s.EnqueuedMessages {
		t.Errorf("Stats() = %+v; want %d messages in fewer frames", s, workers*each)
	}
	t.Logf("%d messages in %d Enqueue frames", s.EnqueuedMessages, s.EnqueueFrames)
}

func TestConsumerIteratorChannelAndManySubscriptions(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("orders"))
	createQueue(t, c, fila.NewQueueSpec("billing"))
	for i := range 3 {
		if _, err := c.Producer().Enqueue(ctx, "orders", fmt.Appendf(nil, "o%d", i)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Producer().Enqueue(ctx, "billing", fmt.Appendf(nil, "b%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	orders := subscribe(t, c, "orders")
	billing := subscribe(t, c, "billing")

	// Range-over-func iterator.
	var got []string
	for d, err := range orders.Messages(ctx) {
		if err != nil {
			t.Fatalf("orders.Messages() yielded %v", err)
		}
		got = append(got, string(d.Payload()))
		if err := d.Ack(ctx); err != nil {
			t.Fatalf("Ack() = %v", err)
		}
		if len(got) == 3 {
			break
		}
	}
	if strings.Join(got, ",") != "o0,o1,o2" {
		t.Errorf("orders delivered %v; want o0,o1,o2", got)
	}
	// Channel.
	got = nil
	for d := range billing.C() {
		got = append(got, string(d.Payload()))
		d.Ack(ctx)
		if len(got) == 3 {
			break
		}
	}
	if strings.Join(got, ",") != "b0,b1,b2" {
		t.Errorf("billing delivered %v; want b0,b1,b2", got)
	}

	// The iterator stops with ctx's error.
	short, cancel := context.WithCancel(ctx)
	cancel()
	for d, err := range orders.Messages(short) {
		if d != nil || !errors.Is(err, context.Canceled) {
			t.Errorf("Messages(canceled) yielded %v, %v; want nil, context.Canceled", d, err)
		}
	}

	// Close ends the channel; Err stays nil and Next reports ErrClosed.
	if err := orders.Close(ctx); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if _, ok := <-orders.C(); ok {
		t.Errorf("C() delivered after Close")
	}
	if err := orders.Err(); err != nil {
		t.Errorf("Err() after Close = %v; want nil", err)
	}
	if _, err := orders.Next(ctx); !errors.Is(err, fila.ErrClosed) {
		t.Errorf("Next() after Close = %v; want ErrClosed", err)
	}
	if err := orders.Close(ctx); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
}

func TestSubscribeErrorsAndQueueDeletion(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	_, err := c.Consumer().Subscribe(ctx, "nope")
	e := wantErr[*fila.SubscribeError](t, "Subscribe(nope)", err, fila.ErrQueueNotFound)
	if e.Code != fila.SubscribeQueueNotFound {
		t.Errorf("Subscribe(nope) code = %v; want QUEUE_NOT_FOUND", e.Code)
	}

	createQueue(t, c, fila.NewQueueSpec("doomed"))
	sub := subscribe(t, c, "doomed")
	if err := c.Admin().DeleteQueue(ctx, "doomed"); err != nil {
		t.Fatalf("DeleteQueue(doomed) = %v", err)
	}
	for d, err := range sub.Messages(ctx) {
		if d != nil {
			t.Fatalf("delivery from a deleted queue")
		}
		wantErr[*fila.SubscribeError](t, "Messages() after DeleteQueue", err, fila.ErrQueueNotFound)
	}
	if !errors.Is(sub.Err(), fila.ErrQueueNotFound) {
		t.Errorf("Err() = %v; want ErrQueueNotFound", sub.Err())
	}
}

// TestPrefetchBoundsLeases checks delivery credit: with Prefetch(2) the
// broker leases exactly two messages until one is settled.
func TestPrefetchBoundsLeases(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("jobs"))
	for i := range 6 {
		if _, err := c.Producer().Enqueue(ctx, "jobs", fmt.Appendf(nil, "%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	sub := subscribe(t, c, "jobs", fila.Prefetch(2))
	if sub.Prefetch() != 2 {
		t.Fatalf("Prefetch() = %d; want 2", sub.Prefetch())
	}
	a, b := next(t, sub), next(t, sub)
	st, err := c.Admin().QueueStats(ctx, "jobs")
	if err != nil || st.Leased != 2 || st.Ready != 4 {
		t.Fatalf("QueueStats(jobs) = %+v, %v; want leased 2 ready 4", st, err)
	}
	// Settling returns credit: the rest arrive as they are acked.
	if err := a.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	var held []*fila.Delivery
	for range 4 {
		d := next(t, sub)
		held = append(held, d)
		if len(held)%2 == 0 {
			if err := c.Consumer().AckAll(ctx, held[len(held)-2:]); err != nil {
				t.Fatal(err)
			}
		}
	}
	// Raising the prefetch grants more credit at once.
	if err := sub.SetPrefetch(ctx, 10); err != nil {
		t.Fatalf("SetPrefetch(10) = %v", err)
	}
	if err := sub.SetPrefetch(ctx, 0); !errors.Is(err, fila.ErrInvalidArgument) {
		t.Errorf("SetPrefetch(0) = %v; want ErrInvalidArgument", err)
	}
}

func TestSettleOperations(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("jobs").MaxAttempts(2).Backoff(time.Millisecond, time.Millisecond))
	p := c.Producer()
	sub := subscribe(t, c, "jobs")

	// RetryAfter: redelivered, attempt 2; an hour's delay leaves it delayed.
	id, err := p.Enqueue(ctx, "jobs", []byte("retry"))
	if err != nil {
		t.Fatal(err)
	}
	d := next(t, sub)
	if err := d.RetryAfter(ctx, 0); err != nil {
		t.Fatalf("RetryAfter(0) = %v", err)
	}
	d = next(t, sub)
	if d.ID() != id || d.Attempt() != 2 {
		t.Fatalf("after RetryAfter: delivery %v attempt %d; want %v attempt 2", d.ID(), d.Attempt(), id)
	}
	// Settling twice: the lease is gone.
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("Ack() = %v", err)
	}
	err = d.Nack(ctx, "late")
	var ne *fila.NackError
	if !errors.As(err, &ne) || !(errors.Is(err, fila.ErrMessageNotFound) || errors.Is(err, fila.ErrLeaseExpired)) {
		t.Errorf("Nack() after Ack = %v; want *NackError MESSAGE_NOT_FOUND or LEASE_EXPIRED", err)
	}

	// ExtendLease moves the deadline.
	if _, err := p.Enqueue(ctx, "jobs", []byte("long")); err != nil {
		t.Fatal(err)
	}
	d = next(t, sub)
	before := d.LeaseDeadline()
	after, err := d.ExtendLease(ctx, time.Hour)
	if err != nil {
		t.Fatalf("ExtendLease(1h) = %v", err)
	}
	if !after.After(before) || !d.LeaseDeadline().Equal(after) {
		t.Errorf("ExtendLease(1h) = %v, LeaseDeadline() = %v; want after %v", after, d.LeaseDeadline(), before)
	}
	if err := d.RetryAfter(ctx, time.Hour); err != nil {
		t.Fatalf("RetryAfter(1h) = %v", err)
	}
	st, err := c.Admin().QueueStats(ctx, "jobs")
	if err != nil || st.Delayed != 1 {
		t.Fatalf("QueueStats(jobs) = %+v, %v; want delayed 1", st, err)
	}
	_, err = d.ExtendLease(ctx, time.Minute)
	wantErr[*fila.ExtendLeaseError](t, "ExtendLease() after RetryAfter", err, fila.ErrLeaseExpired)
	_, err = d.ExtendLease(ctx, time.Minute)
	if !errors.Is(err, fila.ErrLeaseExpired) && !errors.Is(err, fila.ErrMessageNotFound) {
		t.Errorf("ExtendLease() = %v", err)
	}
}

// TestNackDeadLetterRedrive follows a message through its attempts into
// the dead-letter queue and back.
func TestNackDeadLetterRedrive(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	admin := c.Admin()
	createQueue(t, c, fila.NewQueueSpec("jobs").MaxAttempts(2).Backoff(time.Millisecond, time.Millisecond))
	id, err := c.Producer().Enqueue(ctx, "jobs", []byte("poison"))
	if err != nil {
		t.Fatal(err)
	}
	sub := subscribe(t, c, "jobs")
	for attempt := uint32(1); attempt <= 2; attempt++ {
		d := next(t, sub)
		if d.ID() != id || d.Attempt() != attempt {
			t.Fatalf("delivery %v attempt %d; want %v attempt %d", d.ID(), d.Attempt(), id, attempt)
		}
		if err := d.Nack(ctx, "downstream timeout"); err != nil {
			t.Fatalf("Nack() = %v", err)
		}
	}
	// Read the DLQ on a connection of its own, so that closing it releases
	// the lease and leaves the message in the DLQ, ready to redrive.
	dc := connect(t, srv.Addr)
	dlq := subscribe(t, dc, "jobs.dlq")
	d := next(t, dlq)
	if d.ID() != id || d.Header("fila-error") != "downstream timeout" || d.Header("fila-attempts") != "2" {
		t.Fatalf("DLQ delivery %v headers %v; want %v with fila-error and fila-attempts=2", d.ID(), d.Headers(), id)
	}
	dc.Close()

	qs, err := admin.ListQueues(ctx)
	if err != nil {
		t.Fatalf("ListQueues() = %v", err)
	}
	var saw bool
	for _, q := range qs {
		if q.Name == "jobs.dlq" && q.Parent == "jobs" {
			saw = true
		}
	}
	if !saw {
		t.Errorf("ListQueues() = %+v; want jobs.dlq with parent jobs", qs)
	}

	_, err = admin.Redrive(ctx, "jobs", 0)
	wantErr[*fila.RedriveError](t, "Redrive(jobs)", err, fila.ErrNotADLQ)
	_, err = admin.Redrive(ctx, "nope.dlq", 0)
	wantErr[*fila.RedriveError](t, "Redrive(nope.dlq)", err, fila.ErrQueueNotFound)
	// The release reaches the broker with the closed connection, and the
	// DLQ retries it after the queue's 1ms backoff: redrive until it moves.
	var moved uint64
	for moved == 0 && ctx.Err() == nil {
		if moved, err = admin.Redrive(ctx, "jobs.dlq", 10); err != nil {
			t.Fatalf("Redrive(jobs.dlq) = %v", err)
		}
		if moved == 0 {
			time.Sleep(10 * time.Millisecond)
		}
	}
	if moved != 1 {
		t.Fatalf("Redrive(jobs.dlq) moved %d; want 1", moved)
	}
	d = next(t, sub)
	if d.ID() != id || d.Attempt() != 1 {
		t.Fatalf("redriven delivery %v attempt %d; want %v attempt 1", d.ID(), d.Attempt(), id)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseExpired lets a lease run out: the message is delivered again,
// and the first delivery's Ack fails with LEASE_EXPIRED.
func TestLeaseExpired(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("jobs").VisibilityTimeout(200*time.Millisecond).Backoff(time.Millisecond, time.Millisecond))
	if _, err := c.Producer().Enqueue(ctx, "jobs", []byte("slow")); err != nil {
		t.Fatal(err)
	}
	sub := subscribe(t, c, "jobs")
	first := next(t, sub)
	second := next(t, sub) // after the lease expired
	if second.ID() != first.ID() || second.Attempt() != 2 {
		t.Fatalf("redelivery %v attempt %d; want %v attempt 2", second.ID(), second.Attempt(), first.ID())
	}
	err := first.Ack(ctx)
	e := wantErr[*fila.AckError](t, "Ack(expired lease)", err, fila.ErrLeaseExpired)
	if e.Code != fila.AckLeaseExpired {
		t.Errorf("Ack(expired lease) code = %v; want LEASE_EXPIRED", e.Code)
	}
	err = c.Consumer().AckAll(ctx, []*fila.Delivery{first, second})
	if !errors.Is(err, fila.ErrLeaseExpired) {
		t.Errorf("AckAll(expired, current) = %v; want ErrLeaseExpired for the first", err)
	}
	if err := second.Ack(ctx); err == nil {
		t.Errorf("Ack() of a delivery AckAll acked = nil; want an error")
	}
}

func TestAdminQueues(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	a := c.Admin()
	spec := fila.NewQueueSpec("orders").VisibilityTimeout(45*time.Second).MaxAttempts(5).
		Backoff(2*time.Second, time.Minute).DedupWindow(time.Minute).
		OnEnqueue(`function on_enqueue(msg) return { fairness_key = msg.headers["tenant"] or "none" } end`)
	createQueue(t, c, spec)

	err := a.CreateQueue(ctx, fila.NewQueueSpec("orders"))
	e := wantErr[*fila.CreateQueueError](t, "CreateQueue(orders) again", err, fila.ErrQueueExists)
	if e.Code != fila.CreateQueueQueueExists {
		t.Errorf("code = %v; want QUEUE_EXISTS", e.Code)
	}
	err = a.CreateQueue(ctx, fila.NewQueueSpec("bad").OnEnqueue("function on_enqueue(msg) return {"))
	wantErr[*fila.CreateQueueError](t, "CreateQueue(bad lua)", err, fila.ErrScriptError)
	err = a.CreateQueue(ctx, fila.NewQueueSpec("x.dlq"))
	wantErr[*fila.StatusError](t, "CreateQueue(x.dlq)", err, fila.ErrInvalidArgument)

	st, err := a.QueueStats(ctx, "orders")
	if err != nil {
		t.Fatalf("QueueStats(orders) = %v", err)
	}
	if st.Name != "orders" || st.VisibilityTimeout != 45*time.Second || st.MaxAttempts != 5 {
		t.Errorf("QueueStats(orders) = %+v; want visibility 45s, max attempts 5", st)
	}
	// The hook sets the fairness key.
	if _, err := c.Producer().Send(ctx, fila.NewMessage("orders", []byte("x")).Header("tenant", "acme")); err != nil {
		t.Fatal(err)
	}
	st, err = a.QueueStats(ctx, "orders")
	if err != nil || len(st.FairnessKeys) != 1 || st.FairnessKeys[0].Key != "acme" || st.FairnessKeys[0].Pending != 1 || st.OnEnqueueCalls != 1 {
		t.Errorf("QueueStats(orders) = %+v, %v; want key acme pending 1, one on_enqueue call", st, err)
	}

	qs, err := a.ListQueues(ctx)
	if err != nil {
		t.Fatalf("ListQueues() = %v", err)
	}
	var names []string
	for _, q := range qs {
		names = append(names, q.Name)
	}
	if strings.Join(names, ",") != "orders,orders.dlq" || qs[0].DeadLetterQueue != "orders.dlq" || qs[0].Ready != 1 {
		t.Errorf("ListQueues() = %+v; want orders (ready 1, dlq orders.dlq), orders.dlq", qs)
	}
	shards, err := a.Topology(ctx, "orders")
	if err != nil || len(shards) != 1 || shards[0].LeaderNodeID != "test" || shards[0].LeaderAddr == "" {
		t.Errorf("Topology(orders) = %+v, %v; want one shard led by test", shards, err)
	}
	_, err = a.Topology(ctx, "nope")
	wantErr[*fila.TopologyError](t, "Topology(nope)", err, fila.ErrQueueNotFound)
	_, err = a.QueueStats(ctx, "nope")
	wantErr[*fila.QueueStatsError](t, "QueueStats(nope)", err, fila.ErrQueueNotFound)

	if err := a.DeleteQueue(ctx, "orders"); err != nil {
		t.Fatalf("DeleteQueue(orders) = %v", err)
	}
	err = a.DeleteQueue(ctx, "orders")
	wantErr[*fila.DeleteQueueError](t, "DeleteQueue(orders) again", err, fila.ErrQueueNotFound)
	if qs, err := a.ListQueues(ctx); err != nil || len(qs) != 0 {
		t.Errorf("ListQueues() after delete = %+v, %v; want none", qs, err)
	}
}

func TestAdminRuntimeConfig(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	a := c.Admin()
	if err := a.SetConfig(ctx, "throttle.provider:stripe", "100,200"); err != nil {
		t.Fatalf("SetConfig(throttle) = %v", err)
	}
	if err := a.SetConfig(ctx, "routing.region", "eu"); err != nil {
		t.Fatalf("SetConfig(routing.region) = %v", err)
	}
	err := a.SetConfig(ctx, "throttle.x", "fast")
	e := wantErr[*fila.SetConfigError](t, `SetConfig(throttle.x, "fast")`, err, fila.ErrInvalidConfigValue)
	if e.Code != fila.SetConfigInvalidConfigValue {
		t.Errorf("code = %v; want INVALID_CONFIG_VALUE", e.Code)
	}
	if v, ok, err := a.GetConfig(ctx, "routing.region"); v != "eu" || !ok || err != nil {
		t.Errorf("GetConfig(routing.region) = %q, %v, %v; want eu, true", v, ok, err)
	}
	if v, ok, err := a.GetConfig(ctx, "unset"); v != "" || ok || err != nil {
		t.Errorf("GetConfig(unset) = %q, %v, %v; want \"\", false, nil", v, ok, err)
	}
	es, err := a.ListConfig(ctx, "throttle.")
	if err != nil || len(es) != 1 || es[0] != (fila.ConfigEntry{Key: "throttle.provider:stripe", Value: "100,200"}) {
		t.Errorf("ListConfig(throttle.) = %v, %v; want the stripe limit", es, err)
	}
	if es, err := a.ListConfig(ctx, ""); err != nil || len(es) != 2 {
		t.Errorf("ListConfig(\"\") = %v, %v; want 2 entries", es, err)
	}
	if existed, err := a.DeleteConfig(ctx, "routing.region"); !existed || err != nil {
		t.Errorf("DeleteConfig(routing.region) = %v, %v; want true", existed, err)
	}
	if existed, err := a.DeleteConfig(ctx, "routing.region"); existed || err != nil {
		t.Errorf("DeleteConfig(routing.region) again = %v, %v; want false", existed, err)
	}
}

func TestPermissionParsing(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want fila.Permission
		err  bool
	}{
		{"produce:orders.*", fila.Produce("orders.*"), false},
		{"consume:orders.eu", fila.Consume("orders.eu"), false},
		{"ADMIN:*", fila.Admin("*"), false},
		{"publish:orders", fila.Permission{}, true},
		{"produce:", fila.Permission{}, true},
		{"orders", fila.Permission{}, true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := fila.ParsePermission(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Fatalf("ParsePermission(%q) = %v, %v; want %v (error %v)", tc.in, got, err, tc.want, tc.err)
			}
			if !tc.err {
				if back, _ := fila.ParsePermission(got.String()); back != got {
					t.Errorf("ParsePermission(%q) = %v; want round trip to %v", got.String(), back, got)
				}
			}
		})
	}
}

// TestAckAllThroughAnotherClient acks deliveries of one client's
// subscription through another client's Consumer: the credit still
// returns to the subscription's own connection, so deliveries go on past
// the prefetch.
func TestAckAllThroughAnotherClient(t *testing.T) {
	srv := testbroker.Start(t)
	ctx := testCtx(t)
	owner, acker := connect(t, srv.Addr), connect(t, srv.Addr)
	createQueue(t, owner, fila.NewQueueSpec("shared"))
	var msgs []*fila.Message
	for i := 0; i < 30; i++ {
		msgs = append(msgs, fila.NewMessage("shared", []byte("x")))
	}
	if _, err := owner.Producer().SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	sub := subscribe(t, owner, "shared", fila.Prefetch(10))
	for round := 0; round < 3; round++ {
		var ds []*fila.Delivery
		for i := 0; i < 10; i++ {
			ds = append(ds, next(t, sub))
		}
		if err := acker.Consumer().AckAll(ctx, ds); err != nil {
			t.Fatalf("AckAll() through another client = %v", err)
		}
	}
}

// TestReleaseAndCloseReleasesUnread gives a delivery back with Release
// (redelivered with the same attempt), and checks that closing a
// subscription gives back the deliveries it received but never handed to
// the application, while the one the application holds stays leased.
func TestReleaseAndCloseReleasesUnread(t *testing.T) {
	srv := testbroker.Start(t)
	ctx := testCtx(t)
	c := connect(t, srv.Addr)
	createQueue(t, c, fila.NewQueueSpec("rel").VisibilityTimeout(time.Hour))
	var msgs []*fila.Message
	for i := 0; i < 5; i++ {
		msgs = append(msgs, fila.NewMessage("rel", []byte{byte('a' + i)}))
	}
	if _, err := c.Producer().SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Consumer().Subscribe(ctx, "rel", fila.Prefetch(5))
	if err != nil {
		t.Fatal(err)
	}
	d := next(t, sub)
	if err := d.Release(ctx); err != nil {
		t.Fatalf("Release() = %v", err)
	}
	if err := d.Release(ctx); !errors.Is(err, fila.ErrLeaseExpired) {
		t.Fatalf("second Release() = %v; want LEASE_EXPIRED", err)
	}
	held := next(t, sub) // handed to the application: stays leased
	// Let the other deliveries arrive in the client's buffer, unread.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		st, err := c.Admin().QueueStats(ctx, "rel")
		if err != nil {
			t.Fatal(err)
		}
		if st.Leased == 5 {
			break
		}
	}
	if err := sub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	other := subscribe(t, connect(t, srv.Addr), "rel")
	seen := map[fila.ID]bool{}
	for i := 0; i < 4; i++ {
		d := next(t, other)
		if d.ID() == held.ID() || d.Attempt() != 1 {
			t.Fatalf("after Close: delivered %v attempt %d; want an unread message, attempt 1", d.ID(), d.Attempt())
		}
		seen[d.ID()] = true
	}
	if len(seen) != 4 {
		t.Fatalf("after Close: %d distinct messages; want the 4 unread", len(seen))
	}
	if err := held.Ack(ctx); err != nil {
		t.Fatalf("Ack() of the held delivery after Close = %v", err)
	}
}
