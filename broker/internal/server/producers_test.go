package server

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/sdk/core/wire"
)

const testShared = 128 << 10

func testProducers() (*producers, *int64) {
	now := int64(1)
	p := &producers{shared: testShared}
	p.now = func() int64 { return now }
	return p, &now
}

// TestSparseProducerHoldsBulk: a bulk producer may fill the pipeline
// until a producer of small requests enqueues; then, for sharedWindow
// after that producer's last enqueue, it is held to the sparse producer's
// demand and its batches are cut into chunks of that size. The sparse
// producer is not held by its own mark.
func TestSparseProducerHoldsBulk(t *testing.T) {
	p, now := testProducers()
	bulk, sparse := &flow{p: p}, &flow{p: p}
	const max = 2 << 20

	bulk.admitted(8 << 20)
	if got := bulk.bound(max); got != max {
		t.Fatalf("bulk producer alone: bound %d, want %d", got, max)
	}
	if got := bulk.chunkBytes(); got != enqueueChunkBytes {
		t.Fatalf("bulk producer alone: chunks of %d, want %d", got, enqueueChunkBytes)
	}

	sparse.admitted(testShared)
	if got := bulk.bound(max); got != testShared {
		t.Fatalf("beside a sparse producer: bound %d, want %d", got, testShared)
	}
	if got := bulk.chunkBytes(); got != testShared {
		t.Fatalf("beside a sparse producer: chunks of %d, want %d", got, testShared)
	}
	if got := sparse.bound(max); got != max {
		t.Fatalf("the sparse producer is held by its own mark: bound %d, want %d", got, max)
	}

	// Held, the bulk producer's chunks fit the shared bound; it stays a
	// bulk producer as long as its batch asks for more.
	*now += int64(sharedWindow) / 2
	bulk.admitted(testShared)
	bulk.admitted(testShared / 2)
	if p.sparseBy.Load() == bulk {
		t.Fatal("a held bulk producer marked itself sparse")
	}

	*now += int64(sharedWindow)
	if got := bulk.bound(max); got != max {
		t.Fatalf("%v after the sparse producer's last enqueue: bound %d, want %d", sharedWindow*3/2, got, max)
	}
}

// TestHeldBoundIsSparseDemand: a held bulk producer may have in flight
// as much as the sparse producers asked for in the window (the most of
// them), so that each commit carries about as many of its bytes as of
// theirs, but never less than a quarter of the shared bound. A new hold,
// after the window ended, starts from the new demand.
func TestHeldBoundIsSparseDemand(t *testing.T) {
	p, now := testProducers()
	bulk, a, b := &flow{p: p}, &flow{p: p}, &flow{p: p}
	const max = 2 << 20
	bulk.admitted(8 << 20)

	steps := []struct {
		who    *flow
		demand int64
		want   int64
		why    string
	}{
		{a, 48 << 10, 48 << 10, "one sparse producer: its demand"},
		{b, 64 << 10, 64 << 10, "a second, larger: the larger"},
		{a, 40 << 10, 64 << 10, "a smaller demand within the window: still the larger"},
		{a, 1 << 10, 64 << 10, "a tiny one within the window: still the larger"},
	}
	for _, st := range steps {
		st.who.admitted(st.demand)
		if got := bulk.bound(max); got != st.want {
			t.Fatalf("%s: bound %d, want %d", st.why, got, st.want)
		}
		if got := bulk.chunkBytes(); got != st.want {
			t.Fatalf("%s: chunks of %d, want %d", st.why, got, st.want)
		}
	}

	*now += 2 * int64(sharedWindow)
	a.admitted(1 << 10)
	if got, want := bulk.bound(max), int64(testShared/4); got != want {
		t.Fatalf("a new hold by a producer of 1 KiB requests: bound %d, want the floor %d", got, want)
	}
	a.admitted(100 << 10)
	if got := bulk.bound(max); got != 100<<10 {
		t.Fatalf("then a demand of 100 KiB: bound %d, want %d", got, 100<<10)
	}
	if got := bulk.bound(64 << 10); got != 64<<10 {
		t.Fatalf("a connection limit under the held bound: bound %d, want the limit", got)
	}
}

// TestBulkProducersDoNotHoldEachOther: producers that each keep more
// than the shared bound in flight (pipelined batches, as `fila bench
// produce` keeps) are all bulk, and none is held.
func TestBulkProducersDoNotHoldEachOther(t *testing.T) {
	p, _ := testProducers()
	flows := []*flow{{p: p}, {p: p}, {p: p}}
	for range 3 {
		for _, f := range flows {
			f.admitted(256 << 10)
		}
	}
	for i, f := range flows {
		if got := f.bound(2 << 20); got != 2<<20 {
			t.Fatalf("producer %d: bound %d, want the full 2 MiB", i, got)
		}
	}
}

// chunkRecorder is a shard that answers each Enqueue at once and records
// its chunks: the body bytes of each, and whether the bodies of the
// batch's other items were encoded when it came.
type chunkRecorder struct {
	mu      sync.Mutex
	all     []sched.EnqueueItem
	payload []byte
	sizes   []int
	early   bool // a later chunk's body was encoded before its turn
	wrong   bool // a body did not decode to the payload
}

func (q *chunkRecorder) Enqueue(_ context.Context, items []node.EnqueueItem, done func(node.Result)) error {
	q.mu.Lock()
	n := 0
	for _, it := range items {
		n += len(it.Msg.Body)
		if !bytes.Equal(it.Msg.Body, node.EncodeBody(nil, nil, q.payload)) {
			q.wrong = true
		}
	}
	end := &items[len(items)-1]
	for i := range q.all {
		if &q.all[i] == end && i+1 < len(q.all) && q.all[i+1].Msg.Body != nil {
			q.early = true
		}
	}
	q.sizes = append(q.sizes, n)
	q.mu.Unlock()
	done(shard.Result{Enqueued: make([]sched.EnqueueResult, len(items))})
	return nil
}

func (q *chunkRecorder) Barrier(_ context.Context, fn func()) error {
	fn()
	return nil
}

// TestHeldBulkBatchInSharedChunks: a huge batch from a connection held by
// a sparse producer reaches the shard in chunks of the shared bound, each
// encoded only when its turn comes, so the commits the sparse producer
// waits for carry at most that much of it. Before sparse producers held
// bulk ones, the chunks were 1 MiB and the bound 2 MiB; before the bound
// followed the sparse producer's demand, it was the whole shared bound.
func TestHeldBulkBatchInSharedChunks(t *testing.T) {
	p, _ := testProducers()
	s := &Server{cfg: Config{MaxEnqueueInFlight: 2 << 20}}
	c := &conn{s: s, flow: flow{p: p}}
	c.room.L = &c.mu
	(&flow{p: p}).admitted(48 << 10) // a sparse producer enqueues
	const held = 48 << 10

	payload := make([]byte, 2048)
	msgs := make([]wire.EnqueueMessage, 4096)
	items := make([]sched.EnqueueItem, len(msgs))
	keep := make([]int, len(msgs))
	for i := range msgs {
		msgs[i] = wire.EnqueueMessage{Queue: "q", Payload: payload}
		items[i] = sched.EnqueueItem{Queue: "q"}
		keep[i] = i
	}
	q := &chunkRecorder{all: items, payload: payload}
	finished := make(chan error, 1)
	size := func(j int) int { return node.BodySize(nil, payload) }
	bodies := func(from, to int) func() { return encodeBodies(items[from:to], msgs, keep[from:to]) }
	go enqueueChunks(context.Background(), q, c, items, size, bodies, func(int, int, shard.Result) {}, func(err error) { finished <- err })
	select {
	case err := <-finished:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the batch did not finish")
	}
	if q.wrong {
		t.Fatal("a chunk's bodies did not decode to their payloads")
	}
	if q.early {
		t.Fatal("a chunk's bodies were encoded before the chunk's turn")
	}
	total := 0
	for i, n := range q.sizes {
		if n > held {
			t.Fatalf("chunk %d carried %d bytes of bodies; want at most the sparse producer's demand, %d", i, n, held)
		}
		total += n
	}
	if want := len(msgs) * node.BodySize(nil, payload); total != want {
		t.Fatalf("chunks carried %d bytes, want %d", total, want)
	}
	if c.enqBytes != 0 {
		t.Fatalf("%d bytes still counted in flight after every reply", c.enqBytes)
	}
}
