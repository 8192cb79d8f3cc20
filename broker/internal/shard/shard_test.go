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

// call runs cmd on the shard and waits for its reply.
func call(t *testing.T, sh *Shard, cmd func(s *sched.Sched, ref sched.Ref)) any {
	t.Helper()
	reply := make(chan any, 1)
	if err := sh.Call(context.Background(), cmd, func(v any) { reply <- v }); err != nil {
		t.Fatal(err)
	}
	return <-reply
}

func enqueue(t *testing.T, sh *Shard, queue string) any {
	t.Helper()
	reply := make(chan any, 1)
	items := []sched.EnqueueItem{{Queue: queue, Msg: sched.Message{PayloadSize: 1, Body: []byte("x")}}}
	if err := sh.Enqueue(context.Background(), items, func(v any) { reply <- v }); err != nil {
		t.Fatal(err)
	}
	return <-reply
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
	if v := call(t, sh, func(s *sched.Sched, ref sched.Ref) {
		s.CreateQueue(ref, sched.QueueSpec{Name: "q", OnFailure: "return {action = 'retry'}"})
	}); asError(v) != nil {
		t.Fatalf("CreateQueue = %v", v)
	}
	if v := enqueue(t, sh, "q"); asError(v) != nil {
		t.Fatalf("Enqueue = %v", v)
	}
	sink := make(chanSink, 16)
	subscribed := make(chan any, 1)
	if err := sh.Subscribe(context.Background(), 1, "q", 10, nil, sink, func(v any) { subscribed <- v }); err != nil {
		t.Fatal(err)
	}
	if v := <-subscribed; asError(v) != nil {
		t.Fatalf("Subscribe = %v", v)
	}
	msgs := <-sink
	m := msgs[0]

	st.mu.Lock()
	st.hold = true
	st.mu.Unlock()
	err = sh.Call(context.Background(), func(s *sched.Sched, ref sched.Ref) {
		s.Nack(ref, []sched.NackItem{{LeaseRef: sched.LeaseRef{Queue: m.Queue, ID: m.ID, Lease: m.Lease}, Reason: "boom"}})
	}, func(any) {})
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
	v := enqueue(t, sh, "q")
	if err := asError(v); !errors.Is(err, store.ErrNoSpace) || !errors.Is(err, fault.ErrResourceExhausted) {
		t.Fatalf("Enqueue while full = %v; want an error wrapping store.ErrNoSpace", v)
	}
	stats := call(t, sh, func(s *sched.Sched, ref sched.Ref) { s.QueueStats(ref, "q") })
	if qs, ok := stats.(sched.QueueStats); !ok || qs.Ready != 0 {
		t.Fatalf("QueueStats after a refused enqueue = %+v; want no message", stats)
	}

	st.mu.Lock()
	st.health.Full = false
	st.mu.Unlock()
	if v := enqueue(t, sh, "q"); asError(v) != nil {
		t.Fatalf("Enqueue after space returned = %v", v)
	}
}

func asError(v any) error {
	if err, ok := v.(error); ok {
		return err
	}
	return nil
}
