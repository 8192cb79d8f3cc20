package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// postWatcher is a node that reports each Barrier.
type postWatcher struct {
	*node.Node
	posted chan struct{}
}

func (w *postWatcher) Barrier(ctx context.Context, fn func()) error {
	err := w.Node.Barrier(ctx, fn)
	w.posted <- struct{}{}
	return err
}

func message(queue string) sched.EnqueueItem {
	body := node.EncodeBody(nil, nil, []byte("x"))
	return sched.EnqueueItem{Queue: queue, Msg: sched.Message{PayloadSize: 1, Body: body}}
}

// encoded returns the size function of enqueueChunks for items whose
// bodies are already encoded.
func encoded(items []sched.EnqueueItem) func(int) int {
	return func(j int) int { return len(items[j].Msg.Body) }
}

func noBodies(int, int) func() { return func() {} }

// openFlow is a connection without a bound on bodies in flight.
type openFlow struct{}

func (openFlow) chunkBytes() int64               { return enqueueChunkBytes }
func (openFlow) waitEnqueueRoom(_, _ int64) bool { return true }
func (openFlow) enqueueDone(int64)               {}

// TestLargeEnqueueInterleaves: while a large batch is being enqueued, a
// message another connection sends after the batch's first chunk reached
// the shard is enqueued before the batch's second chunk, not after the
// whole batch. Message IDs increase in the order the shard enqueues.
func TestLargeEnqueueInterleaves(t *testing.T) {
	ctx := context.Background()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sh, err := shard.Open(shard.Config{Logger: log}, store.NewMem())
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	created := make(chan shard.Result, 1)
	sh.Submit(ctx, &shard.CreateQueue{Spec: sched.QueueSpec{Name: "q"}}, func(r shard.Result) { created <- r })
	if err := (<-created).Err; err != nil {
		t.Fatal(err)
	}

	// Hold the shard so the order of its command channel is the test's.
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	defer release() // before sh.Close, which waits for the shard
	sh.Barrier(ctx, func() { <-hold })

	items := make([]sched.EnqueueItem, 2*enqueueChunkItems+10)
	for i := range items {
		items[i] = message("q")
	}
	ids := make([][16]byte, len(items))
	finished := make(chan error, 1)
	w := &postWatcher{Node: node.New(node.Config{Logger: log}, sh), posted: make(chan struct{}, 8)}
	go enqueueChunks(ctx, w, openFlow{}, items, encoded(items), noBodies, func(from, n int, res shard.Result) {
		for j, r := range res.Enqueued {
			ids[from+j] = r.ID
		}
	}, func(err error) { finished <- err })

	select {
	case <-w.posted: // the first chunk is queued, then the wait for it
	case <-time.After(30 * time.Second):
		t.Fatal("the batch was submitted without waiting for its first chunk to run")
	}
	var other [16]byte
	otherDone := make(chan struct{})
	if err := sh.Submit(ctx, &shard.Enqueue{Items: []sched.EnqueueItem{message("q")}}, func(r shard.Result) {
		other = r.Enqueued[0].ID
		close(otherDone)
	}); err != nil {
		t.Fatal(err)
	}
	release()
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	<-otherDone

	last, next := ids[enqueueChunkItems-1], ids[enqueueChunkItems]
	if bytes.Compare(last[:], other[:]) >= 0 || bytes.Compare(other[:], next[:]) >= 0 {
		t.Fatalf("the other connection's message was not enqueued between the first chunk and the second")
	}
	for i := 1; i < len(ids); i++ {
		if bytes.Compare(ids[i-1][:], ids[i][:]) >= 0 {
			t.Fatalf("message %d of the batch enqueued before message %d: the batch lost its order", i, i-1)
		}
	}
}

// heldQueue is a shard whose Enqueue replies only when the test says.
type heldQueue struct {
	mu      sync.Mutex
	replies []func()
	queued  chan int // each Enqueue's item count
}

func (q *heldQueue) Enqueue(_ context.Context, items []node.EnqueueItem, done func(node.Result)) error {
	q.mu.Lock()
	q.replies = append(q.replies, func() { done(shard.Result{Enqueued: make([]sched.EnqueueResult, len(items))}) })
	q.mu.Unlock()
	q.queued <- len(items)
	return nil
}

func (q *heldQueue) Barrier(_ context.Context, fn func()) error {
	fn()
	return nil
}

func (q *heldQueue) answerOne() {
	q.mu.Lock()
	r := q.replies[0]
	q.replies = q.replies[1:]
	q.mu.Unlock()
	r()
}

// TestEnqueueInFlightBound: the chunks of a batch wait for room in the
// connection's bound on bodies in flight to storage, so a producer of
// huge batches never has more than the bound in the storage pipeline
// (here two chunks), however large its batch.
func TestEnqueueInFlightBound(t *testing.T) {
	c := &conn{s: &Server{cfg: Config{MaxEnqueueInFlight: 2 * enqueueChunkBytes}}}
	c.room.L = &c.mu
	items := make([]sched.EnqueueItem, 5)
	for i := range items {
		items[i] = sched.EnqueueItem{Queue: "q", Msg: sched.Message{Body: make([]byte, enqueueChunkBytes)}}
	}
	q := &heldQueue{queued: make(chan int, len(items))}
	finished := make(chan error, 1)
	go enqueueChunks(context.Background(), q, c, items, encoded(items), noBodies,
		func(int, int, shard.Result) {}, func(err error) { finished <- err })
	for range 2 {
		<-q.queued
	}
	select {
	case <-q.queued:
		t.Fatal("a third chunk was submitted with two chunks' bytes in flight; want it to wait for room")
	case <-time.After(200 * time.Millisecond):
	}
	for range 3 {
		q.answerOne()
		<-q.queued
	}
	for range 2 {
		q.answerOne()
	}
	if err := <-finished; err != nil {
		t.Fatal(err)
	}
	if c.enqBytes != 0 {
		t.Fatalf("%d bytes still counted in flight after every reply", c.enqBytes)
	}
}
