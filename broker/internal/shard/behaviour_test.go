package shard

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// The shard's command handling, with a store whose completions the test
// holds (gateStore), a store that fails, and a fake clock.

// fakeClock is a clock the test moves.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// recSink records what a subscription is told.
type recSink struct {
	delivered chan []sched.Delivered
	expired   chan []sched.ExpiredLease
}

func newRecSink() *recSink {
	return &recSink{delivered: make(chan []sched.Delivered, 64), expired: make(chan []sched.ExpiredLease, 64)}
}

func (r *recSink) Deliver(_ sched.SubID, msgs []sched.Delivered)      { r.delivered <- msgs }
func (r *recSink) Expired(_ sched.SubID, leases []sched.ExpiredLease) { r.expired <- leases }
func (r *recSink) Ended(sched.SubID, error)                           {}

func subscribe(t *testing.T, sh *Shard, sub sched.SubID, queue string, sink Sink) {
	t.Helper()
	done := make(chan Result, 1)
	if err := sh.Subscribe(context.Background(), &Subscribe{Sub: sub, Queue: queue, Credit: 100}, sink, func(r Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	if err := (<-done).Err; err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
}

func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// openWithQueue opens a shard with cfg on st, closed when the test ends,
// and creates queue spec on it.
func openWithQueue(t *testing.T, cfg Config, st Storage, spec sched.QueueSpec) *Shard {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	sh, err := Open(cfg, st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Close)
	if r := call(t, sh, &CreateQueue{Spec: spec}); r.Err != nil {
		t.Fatalf("CreateQueue(%s) = %v", spec.Name, r.Err)
	}
	return sh
}

// TestRepliesWaitForDurability: an enqueue is answered, and its message
// delivered, only once the storage group that holds it is durable
// (persist before send).
func TestRepliesWaitForDurability(t *testing.T) {
	st := &gateStore{Mem: store.NewMem()}
	defer st.Close()
	sh := openWithQueue(t, Config{}, st, sched.QueueSpec{Name: "q"})
	sink := newRecSink()
	subscribe(t, sh, 1, "q", sink)

	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	reply := make(chan Result, 1)
	items := []sched.EnqueueItem{{Queue: "q", Msg: sched.Message{PayloadSize: 1, Body: []byte("x")}}}
	if err := sh.Submit(context.Background(), &Enqueue{Items: items}, func(r Result) { reply <- r }); err != nil {
		t.Fatal(err)
	}
	for st.holding() == 0 {
		time.Sleep(time.Millisecond)
	}
	select {
	case v := <-reply:
		t.Fatalf("enqueue answered (%v) before its group was durable", v)
	case msgs := <-sink.delivered:
		t.Fatalf("message delivered (%d) before its group was durable", len(msgs))
	case <-time.After(50 * time.Millisecond):
	}
	st.releaseAll()
	r := receive(t, reply, "enqueue reply")
	res := r.Enqueued
	if r.Err != nil || len(res) != 1 || res[0].Err != nil {
		t.Fatalf("Enqueue = %+v; want one result", r)
	}
	msgs := receive(t, sink.delivered, "delivery")
	if len(msgs) != 1 || msgs[0].ID != res[0].ID {
		t.Fatalf("delivered %v; want the enqueued message %x", msgs, res[0].ID)
	}
}

// failStore fails every group once failing is set.
type failStore struct {
	*store.Mem
	mu      sync.Mutex
	failing bool
}

var errDisk = errors.New("disk on fire")

func (f *failStore) ApplyAsync(b *store.Batch, done func(error)) {
	f.mu.Lock()
	failing := f.failing
	f.mu.Unlock()
	if failing {
		done(errDisk)
		return
	}
	f.Mem.ApplyAsync(b, done)
}

// TestStorageFailureIsSticky: a failed group fails its commands with
// UNAVAILABLE, and the shard refuses every later command: its scheduler
// is ahead of what is durable.
func TestStorageFailureIsSticky(t *testing.T) {
	st := &failStore{Mem: store.NewMem()}
	defer st.Close()
	sh := openWithQueue(t, Config{}, st, sched.QueueSpec{Name: "q"})
	st.mu.Lock()
	st.failing = true
	st.mu.Unlock()
	if err := enqueue(t, sh, "q").Err; !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("enqueue on a failed store = %v; want UNAVAILABLE", err)
	}
	if !errors.Is(sh.Err(), errDisk) {
		t.Fatalf("Err() = %v; want the storage failure", sh.Err())
	}
	err := sh.Submit(context.Background(), &Enqueue{Items: []sched.EnqueueItem{{Queue: "q", Msg: sched.Message{Body: []byte("x")}}}}, nil)
	if !errors.Is(err, errDisk) {
		t.Fatalf("a later command = %v; want it refused with the storage failure", err)
	}
}

// TestLeaseExpiresOnTheClock: a delivery not settled within the queue's
// visibility timeout, by the shard's clock, expires: the subscription
// hears of it, and the message is delivered again after its backoff.
func TestLeaseExpiresOnTheClock(t *testing.T) {
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	st := store.NewMem()
	defer st.Close()
	sh := openWithQueue(t, Config{Clock: clock.Now}, st, sched.QueueSpec{Name: "q", VisibilityTimeout: time.Minute})
	sink := newRecSink()
	subscribe(t, sh, 1, "q", sink)
	if err := enqueue(t, sh, "q").Err; err != nil {
		t.Fatal(err)
	}
	first := receive(t, sink.delivered, "delivery")[0]

	clock.advance(59 * time.Second)
	stats(t, sh, "q") // the shard ticks on each command
	select {
	case l := <-sink.expired:
		t.Fatalf("lease expired (%v) before its visibility timeout", l)
	default:
	}

	clock.advance(2 * time.Second)
	stats(t, sh, "q")
	expired := receive(t, sink.expired, "expired lease")
	if len(expired) != 1 || expired[0].ID != first.ID || expired[0].Lease != first.Lease {
		t.Fatalf("expired %v; want the lease of %x", expired, first.ID)
	}
	// An expired lease is a failed attempt: the message comes back after
	// the queue's retry backoff, by the same clock. Poke the shard until
	// it has (the failure's decision is made on a worker, then posted).
	var again sched.Delivered
	for deadline := time.Now().Add(30 * time.Second); ; {
		clock.advance(time.Minute)
		stats(t, sh, "q")
		select {
		case msgs := <-sink.delivered:
			again = msgs[0]
		case <-time.After(10 * time.Millisecond):
		}
		if again.Lease != 0 || time.Now().After(deadline) {
			break
		}
	}
	if again.ID != first.ID || again.Lease == first.Lease {
		t.Fatalf("redelivered %x lease %d; want %x with a new lease (was %d)", again.ID, again.Lease, first.ID, first.Lease)
	}
}

// TestRecoveryRestoresState: a shard opened on the store another shard
// wrote finds its queues and its pending messages.
func TestRecoveryRestoresState(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	sh, err := Open(Config{Logger: quiet}, st)
	if err != nil {
		t.Fatal(err)
	}
	call(t, sh, &CreateQueue{Spec: sched.QueueSpec{Name: "q"}})
	var ids [][16]byte
	for range 3 {
		res := enqueue(t, sh, "q").Enqueued
		ids = append(ids, res[0].ID)
	}
	sh.Close()

	sh, err = Open(Config{Logger: quiet}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	if specs := sh.RestoredSpecs(); len(specs) == 0 || specs[0].Name != "q" {
		t.Fatalf("RestoredSpecs = %+v; want queue q", specs)
	}
	sink := newRecSink()
	subscribe(t, sh, 1, "q", sink)
	var got [][16]byte
	for len(got) < len(ids) {
		for _, m := range receive(t, sink.delivered, "delivery after recovery") {
			got = append(got, m.ID)
		}
	}
	for i := range ids {
		if got[i] != ids[i] {
			t.Fatalf("after recovery delivered %x; want %x, in enqueue order", got, ids)
		}
	}
}
