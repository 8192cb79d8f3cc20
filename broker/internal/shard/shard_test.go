package shard

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// gateStore is a store.Mem whose group completions the test holds back
// and releases, and whose Health the test sets.
type gateStore struct {
	*store.Mem
	mu     sync.Mutex
	hold   bool
	held   []func()
	health store.Health
}

func (g *gateStore) ApplyAsync(b *store.Batch, done func(error)) {
	g.mu.Lock()
	if g.hold {
		g.held = append(g.held, func() { g.Mem.ApplyAsync(b, done) })
		g.mu.Unlock()
		return
	}
	g.mu.Unlock()
	g.Mem.ApplyAsync(b, done)
}

func (g *gateStore) Health() store.Health {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.health
}

func (g *gateStore) holding() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.held)
}

// releaseAll completes the held groups, in order, and waits for them.
func (g *gateStore) releaseAll() {
	g.mu.Lock()
	held := g.held
	g.held, g.hold = nil, false
	g.mu.Unlock()
	for _, f := range held {
		f()
	}
	g.Mem.Apply(new(store.Batch)) // a barrier: every earlier group has completed
}

type chanSink chan []sched.Delivered

func (c chanSink) Deliver(_ sched.SubID, msgs []sched.Delivered) { c <- msgs }
func (c chanSink) Ended(sched.SubID, error)                      {}
func (c chanSink) Expired(sched.SubID, []sched.ExpiredLease)     {}

// call submits cmd to the shard and waits for its result.
func call(t *testing.T, sh *Shard, cmd Command) Result {
	t.Helper()
	reply := make(chan Result, 1)
	if err := sh.Submit(context.Background(), cmd, func(r Result) { reply <- r }); err != nil {
		t.Fatal(err)
	}
	return <-reply
}

// stats reads a queue's statistics.
func stats(t *testing.T, sh *Shard, queue string) Result {
	t.Helper()
	reply := make(chan Result, 1)
	if err := sh.QueueStats(context.Background(), queue, 0, func(r Result) { reply <- r }); err != nil {
		t.Fatal(err)
	}
	return <-reply
}

func enqueue(t *testing.T, sh *Shard, queue string) Result {
	t.Helper()
	return call(t, sh, &Enqueue{Items: []sched.EnqueueItem{{Queue: queue, Msg: sched.Message{PayloadSize: 1, Body: []byte("x")}}}})
}

// TestCloseWhileFailureCompletes closes the shard while the storage group
// of a nack on a queue with an on_failure hook is still waiting for
// durability, then completes it: the completion hands the failure to the
// hook workers after Close, which must neither panic nor race.
func TestCloseWhileFailureCompletes(t *testing.T) {
	st := &gateStore{Mem: store.NewMem()}
	defer st.Close()
	sh, err := Open(Config{
		Logger: quiet,
		Failure: func(context.Context, sched.Failure, []byte) (sched.Decision, error) {
			return sched.Retry(0), nil
		},
	}, st)
	if err != nil {
		t.Fatal(err)
	}
	if r := call(t, sh, &CreateQueue{Spec: sched.QueueSpec{Name: "q", OnFailure: "return {action = 'retry'}"}}); r.Err != nil {
		t.Fatalf("CreateQueue = %v", r.Err)
	}
	if r := enqueue(t, sh, "q"); r.Err != nil {
		t.Fatalf("Enqueue = %v", r.Err)
	}
	sink := make(chanSink, 16)
	subscribed := make(chan Result, 1)
	if err := sh.Subscribe(context.Background(), &Subscribe{Sub: 1, Queue: "q", Credit: 10}, sink, func(r Result) { subscribed <- r }); err != nil {
		t.Fatal(err)
	}
	if r := <-subscribed; r.Err != nil {
		t.Fatalf("Subscribe = %v", r.Err)
	}
	msgs := <-sink
	m := msgs[0]

	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	err = sh.Submit(context.Background(), &Nack{Items: []sched.NackItem{{LeaseRef: sched.LeaseRef{Queue: m.Queue, ID: m.ID, Lease: m.Lease}, Reason: "boom"}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Wait for the nack's group (which carries the failure) to reach the
	// store, without a deadline of our own.
	for st.holding() == 0 {
		time.Sleep(time.Millisecond)
	}
	sh.Close()
	st.releaseAll() // before the fix: send on the closed failure channel
}

// TestEnqueueRefusedWhileFull: while the store reports its disk full, an
// enqueue is refused with an error wrapping store.ErrNoSpace and
// fault.ErrResourceExhausted, and nothing reaches the scheduler; once the
// store is no longer full, enqueues succeed again.
func TestEnqueueRefusedWhileFull(t *testing.T) {
	st := &gateStore{Mem: store.NewMem()}
	defer st.Close()
	sh := openWithQueue(t, Config{}, st, sched.QueueSpec{Name: "q"})

	st.mu.Lock()
	st.health.Full = true
	st.mu.Unlock()
	if err := enqueue(t, sh, "q").Err; !errors.Is(err, store.ErrNoSpace) || !errors.Is(err, fault.ErrResourceExhausted) {
		t.Fatalf("Enqueue while full = %v; want an error wrapping store.ErrNoSpace", err)
	}
	if r := stats(t, sh, "q"); r.Err != nil || r.Stats.Ready != 0 {
		t.Fatalf("QueueStats after a refused enqueue = %+v, %v; want no message", r.Stats, r.Err)
	}

	st.mu.Lock()
	st.health.Full = false
	st.mu.Unlock()
	if r := enqueue(t, sh, "q"); r.Err != nil {
		t.Fatalf("Enqueue after space returned = %v", r.Err)
	}
}
