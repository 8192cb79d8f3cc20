package shard

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// tagged returns an op that names n, in its barrier function's result.
func tagged(n int, got *[]int) op { return op{fn: func() { *got = append(*got, n) }} }

// TestOpQueueOrderAndBound checks the command queue behaves as the
// buffered channel it replaces: commands come out oldest first, in steps
// of at most what take asks for; a push to a full queue waits until a
// take makes room, and gives up with its context or once the shard has
// stopped.
func TestOpQueueOrderAndBound(t *testing.T) {
	q := opQueue{ready: make(chan struct{}, 1)}
	var got []int
	for i := range maxQueuedOps {
		if err := q.push(context.Background(), nil, tagged(i, &got)); err != nil {
			t.Fatal(err)
		}
	}
	if q.tryPush(tagged(-1, &got)) {
		t.Fatalf("tryPush succeeded on a queue of %d commands", maxQueuedOps)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := q.push(ctx, nil, tagged(-1, &got)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("push to a full queue = %v; want the context's deadline", err)
	}
	stopped := make(chan struct{})
	close(stopped)
	if err := q.push(context.Background(), stopped, tagged(-1, &got)); !errors.Is(err, fault.ErrUnavailable) {
		t.Fatalf("push once stopped = %v; want ErrUnavailable", err)
	}

	pushed := make(chan error, 1)
	go func() { pushed <- q.push(context.Background(), nil, tagged(maxQueuedOps, &got)) }()
	select {
	case err := <-pushed:
		t.Fatalf("push to a full queue returned %v before a take", err)
	case <-time.After(20 * time.Millisecond):
	}
	<-q.ready
	batch := q.take(nil, maxOpsPerStep)
	if len(batch) != maxOpsPerStep {
		t.Fatalf("take(%d) of a full queue took %d", maxOpsPerStep, len(batch))
	}
	if err := <-pushed; err != nil {
		t.Fatalf("push after a take = %v", err)
	}
	for {
		for _, o := range batch {
			o.fn()
		}
		clear(batch)
		select {
		case <-q.ready:
		default:
			if len(got) != maxQueuedOps+1 {
				t.Fatalf("no ready token with %d of %d commands taken", len(got), maxQueuedOps+1)
			}
		}
		batch = q.take(batch[:0], maxOpsPerStep)
		if len(batch) == 0 {
			break
		}
	}
	for i, n := range got {
		if n != i {
			t.Fatalf("command %d came out as the %dth; want in order", n, i)
		}
	}
}

// TestFailureWorkersOnDemand checks that a shard runs no on_failure
// worker while nothing fails, runs the hook of every failed message, and
// has none left once they are decided.
func TestFailureWorkersOnDemand(t *testing.T) {
	var mu sync.Mutex
	hooked := 0
	cfg := Config{
		Logger: quiet,
		Failure: func(context.Context, sched.Failure, []byte) (sched.Decision, error) {
			mu.Lock()
			hooked++
			mu.Unlock()
			return sched.Decision{DeadLetter: true}, nil
		},
	}
	st := store.NewMem()
	defer st.Close()
	before := runtime.NumGoroutine()
	sh := openWithQueue(t, cfg, st, sched.QueueSpec{Name: "q", OnFailure: "return {action = 'dlq'}"})
	defer sh.Close()
	if n := runtime.NumGoroutine() - before; n > 1 {
		t.Fatalf("an idle shard runs %d goroutines; want its loop alone", n)
	}
	const msgs = 50
	for range msgs {
		enqueue(t, sh, "q")
	}
	sink := newRecSink()
	subscribe(t, sh, 1, "q", sink)
	var refs []sched.NackItem
	for len(refs) < msgs {
		for _, d := range receive(t, sink.delivered, "deliveries") {
			refs = append(refs, sched.NackItem{LeaseRef: sched.LeaseRef{Queue: "q", ID: d.ID, Lease: d.Lease}, Reason: "no"})
		}
	}
	if r := call(t, sh, &Nack{Items: refs}); r.Err != nil {
		t.Fatal(r.Err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := stats(t, sh, "q")
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		if r.Stats.DeadLettered == msgs {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d failed messages dead-lettered after 10s", r.Stats.DeadLettered, msgs)
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	if hooked != msgs {
		t.Errorf("on_failure ran %d times for %d failed messages", hooked, msgs)
	}
	mu.Unlock()
	for {
		sh.failures.mu.Lock()
		w := sh.failures.workers
		sh.failures.mu.Unlock()
		if w == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d on_failure workers still running with nothing to decide", w)
		}
		time.Sleep(time.Millisecond)
	}
}
