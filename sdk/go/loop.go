package fila

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/fila-mq/fila/sdk/core"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// loop is the owner goroutine's bookkeeping: the Router that speaks to
// the cluster, the sessions that carry its bytes, which ops wait on which
// request IDs, where deliveries go, and the Enqueue batches being built.
// Every method runs on the owner goroutine.
type loop struct {
	c     *Client
	r     *core.Router
	start time.Time // the origin of the Router's clock
	ready chan<- error

	sessions map[string]*session // by node address
	in       chan chunk          // from the sessions' readers
	wrote    chan writeDone      // from the sessions' writers
	dialed   chan dialResult
	dialCtx  context.Context // ends the dials in progress when the loop ends
	stopDial context.CancelFunc

	closing bool // Close was called: drain, then stop

	// nodeStatus is the state of the connection to each node that has
	// been connected, as the status handler was told (see setNode).
	nodeStatus map[string]ConnStatus

	inflight map[uint32]*inflight
	subs     map[uint32]*Subscription   // by subscription ID
	open     map[*Subscription]struct{} // every subscription not ended

	// Enqueue coalescing: messages of concurrent Sends, not yet sent,
	// per node the Router sends their queue's requests to.
	batches map[string]*sendBatch
	// Whether an Enqueue completed since the last look, and whether the
	// linger (WithLinger) ran out.
	sendsCompleted bool
	lingerFired    bool
	// The accumulator's spare buffers, swapped in when it is taken.
	spareMsgs []wire.EnqueueMessage
	spareOps  []*op

	// Ack coalescing: items of concurrent Acks not yet sent, and the Ack
	// frames in flight. As for Enqueue, a frame goes out at once when
	// none is in flight; otherwise acks gather until it completes.
	acks        []wire.LeaseRef
	ackOps      []*op
	ackInFlight int
}

// sendBatch is the Enqueue frame being built for one leader, and the
// frames in flight to it.
type sendBatch struct {
	msgs     []wire.EnqueueMessage
	ops      []*op
	bytes    int
	last     int // size of the last frame sent, to size the next
	inFlight int
}

// inflight is a request in flight: a single op, the ops whose messages
// were coalesced into one Enqueue (each owning a run of the results), or
// the ops whose Ack items were coalesced into one Ack.
type inflight struct {
	op     *op
	ops    []*op
	batch  *sendBatch // of ops
	ackOps []*op
}

func newLoop(c *Client) *loop {
	o := &c.opts
	ctx, cancel := context.WithCancel(context.Background())
	return &loop{
		c: c,
		r: core.NewRouter(core.RouterConfig{
			Conn: core.Config{
				ClientName:        o.clientName,
				APIKey:            o.apiKey,
				KeepaliveInterval: o.keepalive,
				KeepaliveTimeout:  o.dialTimeout,
			},
			Seeds:      c.seeds,
			ProducerID: uuid.New(),
			DialMin:    o.backoffMin,
			DialMax:    o.backoffMax,
			JitterSeed: rand.Uint64(),
		}),
		start:    time.Now(),
		sessions: map[string]*session{},
		in:       make(chan chunk, 16),
		wrote:    make(chan writeDone, 4),
		dialed:   make(chan dialResult), // unbuffered: a dial that ends after the loop closes its session
		dialCtx:  ctx,
		stopDial: cancel,
		inflight: map[uint32]*inflight{},
		subs:     map[uint32]*Subscription{},
		open:     map[*Subscription]struct{}{},
		batches:  map[string]*sendBatch{},
	}
}

func (l *loop) stopDials() { l.stopDial() }

// deadline is ctx's deadline on the Router's clock, 0 for none.
func (l *loop) deadline(ctx context.Context) core.Time {
	return l.at(ctx.Deadline())
}

// settle returns the credit of deliveries of this client's
// subscriptions; deliveries of another client are skipped: their credit
// is not this client's. Each is settled in the queue that delivered it:
// a subscription of a sharded queue is one per shard, and lease numbers
// are only unique within a shard.
func (l *loop) settle(ds []*Delivery) {
	mine := func(d *Delivery) bool { return d.s.c == l.c && !d.s.gone }
	if len(ds) == 1 {
		// The common case: one delivery, nothing to group.
		if d := ds[0]; mine(d) {
			l.r.SettleIn(d.s.id, d.m.Queue, d.m.Lease)
		}
		return
	}
	// Settle each subscription's deliveries of one queue together, so
	// their credit goes back in one Credit frame.
	same := func(a, b *Delivery) bool { return a.s == b.s && a.m.Queue == b.m.Queue }
	var leases []uint64
	for i, d := range ds {
		if !mine(d) || slices.ContainsFunc(ds[:i], func(p *Delivery) bool { return same(p, d) }) {
			continue // not ours, or settled with the first of its subscription and queue
		}
		leases = leases[:0]
		for _, o := range ds[i:] {
			if same(o, d) {
				leases = append(leases, o.m.Lease)
			}
		}
		l.r.SettleIn(d.s.id, d.m.Queue, leases...)
	}
}

// submit takes one op: sends it, or adds it to an Enqueue batch.
func (l *loop) submit(o *op) {
	if err := o.ctx.Err(); err != nil {
		o.answer(result{err: err})
		return
	}
	if l.closing {
		o.answer(result{err: l.c.closedErr()})
		return
	}
	switch o.kind {
	case opRequest:
		if a, ok := o.frame.(*wire.Ack); ok {
			l.settle(o.settle)
			l.acks = append(l.acks, a.Items...)
			l.ackOps = append(l.ackOps, o)
			if len(l.acks) >= l.c.opts.maxBatch {
				l.flushAcks()
			}
			return
		}
		l.flushBatches() // keep requests in submission order
		l.flushAcks()
		l.settle(o.settle)
		id, err := l.r.Send(o.frame, l.deadline(o.ctx))
		if err != nil {
			l.rejected(o, err)
			return
		}
		l.inflight[id] = &inflight{op: o}
	case opSubscribe:
		l.flushBatches()
		s := o.sub
		id, err := l.r.SubscribeLease(s.queue, s.want, s.limits, s.leaseMS, l.deadline(o.ctx))
		if err != nil {
			l.rejected(o, err)
			return
		}
		s.id = id
		l.subs[id] = s
		l.inflight[id] = &inflight{op: o}
	case opUnsubscribe:
		s := o.sub
		if s.gone {
			o.answer(result{})
			return
		}
		id, err := l.r.Unsubscribe(s.id)
		if err != nil {
			l.rejected(o, err)
			return
		}
		l.inflight[id] = &inflight{op: o}
	case opSettle:
		l.settle(o.settle)
		o.answer(result{})
	case opPrefetch:
		s := o.sub
		if s.gone {
			o.answer(result{err: ErrSubscriptionNotFound})
			return
		}
		if err := l.r.SetPrefetch(s.id, o.n); err != nil {
			o.answer(result{err: err})
			return
		}
		s.want = o.n
		o.answer(result{})
	}
}

// takeSends moves the messages gathered by concurrent Sends into Enqueue
// batches, sending each batch that fills.
func (l *loop) takeSends() {
	acc := &l.c.acc
	acc.mu.Lock()
	msgs, ops := acc.msgs, acc.ops
	acc.msgs, acc.ops = l.spareMsgs[:0], l.spareOps[:0]
	acc.mu.Unlock()
	off := 0
	for _, o := range ops {
		l.addSend(o, msgs[off:off+o.count])
		off += o.count
	}
	clear(msgs)
	clear(ops)
	l.spareMsgs, l.spareOps = msgs[:0], ops[:0]
}

// addSend adds the messages of one Send or SendBatch to the batch of the
// node that leads its first message's queue (its shard, for a sharded
// queue whose shards the Router knows). (A SendBatch to queues or shards
// on several leaders stays whole; the Router splits its frame per
// leader.)
func (l *loop) addSend(o *op, msgs []wire.EnqueueMessage) {
	if err := o.ctx.Err(); err != nil {
		o.answer(result{err: err})
		return
	}
	if l.closing {
		o.answer(result{err: l.c.closedErr()})
		return
	}
	key := l.r.LeaderOf(msgs[0].Queue, msgs[0].FairnessKey)
	b := l.batches[key]
	if b == nil {
		b = &sendBatch{}
		l.batches[key] = b
	}
	size := 0
	for i := range msgs {
		size += len(msgs[i].Payload)
	}
	maxN, maxB := l.c.opts.maxBatch, l.c.opts.maxBatchB
	if len(b.msgs) > 0 && (len(b.msgs)+len(msgs) > maxN || b.bytes+size > maxB) {
		l.flushBatch(b)
	}
	if b.msgs == nil {
		b.msgs = make([]wire.EnqueueMessage, 0, min(maxN, max(len(msgs), b.last)))
	}
	b.msgs = append(b.msgs, msgs...)
	b.ops = append(b.ops, o)
	b.bytes += size
	if len(b.msgs) >= maxN || b.bytes >= maxB {
		l.flushBatch(b)
	}
}

// rejected answers an op the Router would not take: it is closing.
func (l *loop) rejected(o *op, err error) {
	if errors.Is(err, core.ErrGoingAway) {
		err = l.c.closedErr()
	}
	o.answer(result{err: err})
}

// drainQueued submits every op already waiting, without blocking.
func (l *loop) drainQueued() {
	for {
		select {
		case o := <-l.c.reqs:
			l.submit(o)
		default:
			return
		}
	}
}

// flushAcks sends the gathered Ack items as one frame.
func (l *loop) flushAcks() {
	if len(l.acks) == 0 {
		return
	}
	items, ops := l.acks, l.ackOps
	l.acks, l.ackOps = nil, nil
	id, err := l.r.Send(&wire.Ack{Items: items}, l.latest(ops))
	if err != nil {
		for _, o := range ops {
			l.rejected(o, err)
		}
		return
	}
	l.inflight[id] = &inflight{ackOps: ops}
	l.ackInFlight++
}

// latest is the latest deadline of ops, 0 if one has none: a coalesced
// frame waits as long as its most patient op.
func (l *loop) latest(ops []*op) core.Time {
	var d core.Time
	for _, o := range ops {
		od := l.deadline(o.ctx)
		if od == 0 {
			return 0
		}
		d = max(d, od)
	}
	return d
}

// completeAcks splits a coalesced Ack's results among its ops.
func (l *loop) completeAcks(ops []*op, cp core.Completion) {
	l.ackInFlight--
	if cp.Err != nil {
		for _, o := range ops {
			o.answer(result{err: cp.Err})
		}
		return
	}
	results := cp.Response.(*wire.AckResult).Results
	i := 0
	for _, o := range ops {
		n := len(o.frame.(*wire.Ack).Items)
		if i+n > len(results) {
			o.answer(result{err: &StatusError{Code: wire.CodeInternal, Op: "ack",
				Message: fmt.Sprintf("broker returned %d results for %d items", len(results), i+n)}})
			continue
		}
		o.answer(result{resp: &wire.AckResult{Results: results[i : i+n : i+n]}})
		i += n
	}
}

// idleBatches reports whether a batch has messages and no frame in
// flight.
func (l *loop) idleBatches() bool {
	for _, b := range l.batches {
		if len(b.msgs) > 0 && b.inFlight == 0 {
			return true
		}
	}
	return false
}

// flushIdle sends every batch that has no frame in flight.
func (l *loop) flushIdle() {
	for _, b := range l.batches {
		if b.inFlight == 0 {
			l.flushBatch(b)
		}
	}
}

// flushBatches sends every batch.
func (l *loop) flushBatches() {
	for _, b := range l.batches {
		l.flushBatch(b)
	}
}

func (l *loop) flushBatch(b *sendBatch) {
	if len(b.msgs) == 0 {
		return
	}
	id, err := l.r.Enqueue(b.msgs, l.latest(b.ops))
	if err != nil {
		for _, o := range b.ops {
			l.rejected(o, err)
		}
	} else {
		l.inflight[id] = &inflight{ops: b.ops, batch: b}
		b.inFlight++
		l.c.stats.frames.Add(1)
		l.c.stats.msgs.Add(uint64(len(b.msgs)))
	}
	// The Router keeps the batch with the request: a new one is made for
	// the next frame.
	b.last = len(b.msgs)
	b.msgs, b.ops, b.bytes = nil, nil, 0
	l.lingerFired = false
}

// callErr is the error an op gets for a failure the Router reports.
func (l *loop) callErr(err error) error {
	switch {
	case errors.Is(err, core.ErrGoingAway):
		return l.c.closedErr()
	case errors.Is(err, core.ErrDeadlineExceeded):
		return fmt.Errorf("%w: %w", context.DeadlineExceeded, err)
	}
	return err
}

// handle acts on the results a Ready reports.
func (l *loop) handle(rd core.RouterReady) {
	// Deliveries first: the broker sent them before any answer in this
	// Ready that ends their subscription, and Close, woken by the
	// UnsubscribeOk, gives back what was queued and never read.
	for _, d := range rd.Deliveries {
		if s, ok := l.subs[d.Subscription]; ok {
			s.push(d.Messages)
		}
	}
	for _, cp := range rd.Completions {
		inf, ok := l.inflight[cp.RequestID]
		if !ok {
			continue
		}
		delete(l.inflight, cp.RequestID)
		if cp.Err != nil {
			cp.Err = l.callErr(cp.Err)
		}
		switch {
		case inf.ops != nil:
			l.completeBatch(inf, cp)
		case inf.ackOps != nil:
			l.completeAcks(inf.ackOps, cp)
		default:
			o := inf.op
			if o.kind == opSubscribe {
				if cp.Err != nil {
					delete(l.subs, cp.RequestID)
				} else {
					l.open[o.sub] = struct{}{}
					if err := o.ctx.Err(); err != nil {
						// The caller gave up waiting and will never read
						// the subscription: close it.
						o.answer(result{err: err})
						l.submit(&op{kind: opUnsubscribe, ctx: context.Background(), sub: o.sub, res: make(chan result, 1), abandoned: true})
						continue
					}
				}
			}
			if o.abandoned && cp.Err == nil {
				l.releaseQueued(o.sub)
			}
			o.answer(result{resp: cp.Response, err: cp.Err})
		}
	}
	// rd.Expired needs nothing here: the core has taken the expired
	// deliveries' credit back, and an Ack of one gets LEASE_EXPIRED.
	for _, e := range rd.Ended {
		s, ok := l.subs[e.Subscription]
		if !ok {
			continue
		}
		delete(l.subs, e.Subscription)
		err := e.Err
		if err != nil {
			err = l.callErr(err)
		}
		l.endSub(s, err)
	}
}

// releaseQueued gives back the deliveries queued for s, which no one will
// read: its caller gave up before it opened. The Release goes out with no
// one waiting for its answer.
func (l *loop) releaseQueued(s *Subscription) {
	s.mu.Lock()
	ds := s.queued
	s.queued = nil
	s.mu.Unlock()
	if len(ds) == 0 {
		return
	}
	items := make([]wire.LeaseRef, len(ds))
	for i, d := range ds {
		d.settled.Store(true)
		items[i] = d.ref()
	}
	l.submit(&op{kind: opRequest, ctx: context.Background(), frame: &wire.Release{Items: items}, res: make(chan result, 1)})
}

func (l *loop) completeBatch(inf *inflight, cp core.Completion) {
	inf.batch.inFlight--
	l.sendsCompleted = true
	ops := inf.ops
	if cp.Err != nil {
		for _, o := range ops {
			o.answer(result{err: cp.Err})
		}
		return
	}
	results := cp.Response.(*wire.EnqueueResult).Results
	i := 0
	for _, o := range ops {
		n := o.count
		if i+n > len(results) {
			o.answer(result{err: &StatusError{Code: wire.CodeInternal, Op: "enqueue",
				Message: fmt.Sprintf("broker returned %d results for %d messages", len(results), i+n)}})
			continue
		}
		o.answer(result{items: results[i : i+n : i+n]})
		i += n
	}
}

func (l *loop) endSub(s *Subscription, err error) {
	delete(l.open, s)
	s.gone = true
	s.end(err)
}

// lostErr wraps err in ErrConnectionLost unless it already says so. The
// result wraps err too, so that errors.Is and errors.As still find why the
// connection was lost (ErrUnauthorized when the key was revoked).
func lostErr(err error) error {
	if errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrClosed) {
		return err
	}
	return &lostError{err}
}

// lostError is ErrConnectionLost because of err.
type lostError struct{ err error }

func (e *lostError) Error() string   { return ErrConnectionLost.Error() + ": " + trimFila(e.err).Error() }
func (e *lostError) Unwrap() []error { return []error{ErrConnectionLost, e.err} }

// finish ends the client: every op, queued or in flight, fails, every
// subscription ends with err (ErrClosed after Close), and the client's
// status becomes StatusClosed.
func (l *loop) finish(err error) {
	if errors.Is(err, errDrained) {
		err = ErrClosed
	}
	l.c.setErr(err)
	closed := l.c.closedErr()
	lost := lostErr(err)
	for id, inf := range l.inflight {
		delete(l.inflight, id)
		for _, o := range inf.ops {
			o.answer(result{err: lost})
		}
		for _, o := range inf.ackOps {
			o.answer(result{err: lost})
		}
		if inf.op != nil {
			inf.op.answer(result{err: lost})
		}
	}
	for _, o := range l.ackOps {
		o.answer(result{err: closed})
	}
	l.acks, l.ackOps = nil, nil
	l.closing = true // takeSends answers closedErr
	l.takeSends()
	for _, b := range l.batches {
		for _, o := range b.ops {
			o.answer(result{err: closed})
		}
	}
	clear(l.batches)
	for {
		select {
		case o := <-l.c.reqs:
			o.answer(result{err: closed})
			continue
		default:
		}
		break
	}
	subErr := closed
	if !errors.Is(err, ErrClosed) {
		subErr = lost
	}
	for s := range l.open {
		l.endSub(s, subErr)
	}
	clear(l.subs)
	var why error // nil after Close
	if !errors.Is(err, ErrClosed) {
		why = lost
	}
	l.closed(why)
}
