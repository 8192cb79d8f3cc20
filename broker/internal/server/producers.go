package server

import (
	"sync/atomic"
	"time"
)

// sharedWindow is how long a producer of small requests keeps the bulk
// producers held to Config.BulkEnqueueInFlight after its last enqueue.
// It spans the gaps between a closed-loop producer's requests (its answer
// on the way back, its next request on the way in), which would otherwise
// let the bulk producers' bound spring back to its full size each time.
const sharedWindow = 100 * time.Millisecond

// producers isolates the connections that enqueue little from those that
// enqueue in bulk, in the manner of fair queueing's sparse flows.
//
// Every enqueue waits for the commit (one write and one fsync) that
// carries it, and a commit carries every connection's bodies submitted
// before it. A connection with megabytes in flight therefore makes every
// other producer's enqueue wait for megabytes to be written and synced.
// Alone, or beside other bulk producers, a connection may fill the
// pipeline up to Config.MaxEnqueueInFlight, for throughput. While a sparse
// producer (one whose requests and bodies in flight fit in
// Config.BulkEnqueueInFlight) has enqueued within sharedWindow, each
// bulk producer is held to the sparse producers' own demand (the most
// bytes one of them asked to have in flight in the window), between
// Config.BulkEnqueueInFlight/4 and Config.BulkEnqueueInFlight, and its
// large batches reach the shard in chunks of that size. Every commit then
// carries about as many bytes of a bulk producer as of a sparse one, as
// deficit round robin with equal quanta would share it (Shreedhar &
// Varghese, SIGCOMM 1995): the commits stay small, the sparse producer
// keeps its latency, and the bulk producers keep the rest of the disk's
// throughput. The floor keeps a producer of tiny requests from cutting
// bulk producers down to one message per commit, which would cost them
// far more throughput than it saves the sparse producer in latency.
type producers struct {
	shared int64 // Config.BulkEnqueueInFlight
	// sparseUntil is when the hold on bulk producers ends (nanoseconds
	// on the monotonic clock since epoch); sparseBy is the flow of the
	// sparse producer that set it, which is never held by its own mark.
	sparseUntil atomic.Int64
	sparseBy    atomic.Pointer[flow]
	// sparseDemand is the most bytes a sparse producer asked to have in
	// flight since the hold began: the bound of held bulk producers,
	// before the floor. Writes race harmlessly: a lost maximum costs
	// one window at a smaller bound.
	sparseDemand atomic.Int64
	// now returns the monotonic time in nanoseconds; nil means
	// monotonic. Tests inject a fake.
	now func() int64
}

func (p *producers) clock() int64 {
	if p.now != nil {
		return p.now()
	}
	return monotonic()
}

// A flow is one connection's enqueues, as producers sees them.
type flow struct {
	p *producers
	// bulkUntil is when the connection stops counting as a bulk
	// producer: sharedWindow after it last asked for more than the
	// shared bound. Reader goroutine only.
	bulkUntil int64
}

// epoch is the origin of the monotonic times in producers.
var epoch = time.Now()

func monotonic() int64 { return int64(time.Since(epoch)) }

// heldBound returns the bytes a held bulk producer may have in flight:
// the sparse producers' demand, within [shared/4, shared].
func (p *producers) heldBound() int64 {
	return min(max(p.sparseDemand.Load(), p.shared/4), p.shared)
}

// held reports whether a sparse producer other than f enqueued within
// sharedWindow, so that f, if it is a bulk producer, is held to the
// shared bound.
func (f *flow) held() bool {
	return f.p != nil && f.p.clock() < f.p.sparseUntil.Load() && f.p.sparseBy.Load() != f
}

// bound returns how many bytes of bodies the connection may have in
// flight now: limit, or the held bound while it is held.
func (f *flow) bound(limit int64) int64 {
	if f.held() {
		return min(f.p.heldBound(), limit)
	}
	return limit
}

// chunkBytes returns the most body bytes one chunk of a large batch
// carries now: enqueueChunkBytes, or the held bound while the
// connection is held.
func (f *flow) chunkBytes() int64 {
	if f.held() {
		return min(f.p.heldBound(), enqueueChunkBytes)
	}
	return enqueueChunkBytes
}

// admitted records an admission: demand is the connection's bytes in
// flight before it plus what is left of the request, this chunk
// included. A demand over the shared bound marks the connection a bulk
// producer for sharedWindow; a connection that is not one marks itself
// the sparse producer that holds the others, and its demand raises their
// held bound.
func (f *flow) admitted(demand int64) {
	if f.p == nil {
		return
	}
	now := f.p.clock()
	if demand > f.p.shared {
		f.bulkUntil = now + int64(sharedWindow)
		return
	}
	if now >= f.bulkUntil {
		if now >= f.p.sparseUntil.Load() || demand > f.p.sparseDemand.Load() {
			f.p.sparseDemand.Store(demand) // a new hold, or a larger demand
		}
		f.p.sparseUntil.Store(now + int64(sharedWindow))
		if f.p.sparseBy.Load() != f {
			f.p.sparseBy.Store(f)
		}
	}
}
