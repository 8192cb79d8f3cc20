package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// postWatcher is a shard that reports each Post.
type postWatcher struct {
	*shard.Shard
	posted chan struct{}
}

func (w *postWatcher) Post(ctx context.Context, cmd func(s *sched.Sched)) error {
	err := w.Shard.Post(ctx, cmd)
	w.posted <- struct{}{}
	return err
}

func message(queue string) sched.EnqueueItem {
	body := encodeBody(nil, nil, []byte("x"))
	return sched.EnqueueItem{Queue: queue, Msg: sched.Message{PayloadSize: 1, Body: body}}
}

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
	created := make(chan any, 1)
	sh.Call(ctx, func(s *sched.Sched, ref sched.Ref) { s.CreateQueue(ref, sched.QueueSpec{Name: "q"}) }, func(v any) { created <- v })
	if err := asErr(<-created); err != nil {
		t.Fatal(err)
	}

	// Hold the shard so the order of its command channel is the test's.
	hold := make(chan struct{})
	var once sync.Once
	release := func() { once.Do(func() { close(hold) }) }
	defer release() // before sh.Close, which waits for the shard
	sh.Post(ctx, func(*sched.Sched) { <-hold })

	items := make([]sched.EnqueueItem, 2*enqueueChunkItems+10)
	for i := range items {
		items[i] = message("q")
	}
	ids := make([][16]byte, len(items))
	finished := make(chan error, 1)
	w := &postWatcher{Shard: sh, posted: make(chan struct{}, 8)}
	go enqueueChunks(ctx, w, items, func(from, n int, v any) {
		for j, r := range v.([]sched.EnqueueResult) {
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
	if err := sh.Enqueue(ctx, []sched.EnqueueItem{message("q")}, func(v any) {
		other = v.([]sched.EnqueueResult)[0].ID
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
