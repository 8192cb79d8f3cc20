package fila

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/fila-mq/fila/sdk/core"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// loop is the owner goroutine's bookkeeping, kept across sessions: which
// ops wait on which request IDs, where deliveries go, which subscriptions
// to restore after a reconnect, and the Enqueue batch being built. Every
// method runs on the owner goroutine.
type loop struct {
	c     *Client
	s     *session // current session
	ready chan<- error

	handshaken bool   // the current session's handshake completed
	closing    bool   // Close was called: drain, then stop
	goingAway  bool   // the broker sent GoAway: drain, then reconnect
	leaderHint string // from the broker's GoAway

	inflight map[uint32]*inflight
	subs     map[uint32]*Subscription   // by subscription ID on the current session
	open     map[*Subscription]struct{} // every subscription not ended
	backlog  []*op                      // accepted, not sent; for the next session

	// Enqueue coalescing: messages of concurrent Sends, not yet sent.
	batch      []wire.EnqueueMessage
	batchOps   []*op
	batchBytes int
	lastBatch  int // size of the last batch sent, to size the next
	// Enqueue frames in flight, whether one completed since the last
	// look, and whether the linger (WithLinger) ran out.
	enqInFlight    int
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

// inflight is a request in flight: a single op, the ops whose messages
// were coalesced into one Enqueue (each owning a run of the results), or
// the re-subscription of an open subscription after a reconnect.
type inflight struct {
	op     *op
	ops    []*op
	ackOps []*op // ops whose Ack items were coalesced into one frame
	resub  *Subscription
}

func newLoop(c *Client) *loop {
	return &loop{
		c:        c,
		inflight: map[uint32]*inflight{},
		subs:     map[uint32]*Subscription{},
		open:     map[*Subscription]struct{}{},
	}
}

// attach starts serving s: open subscriptions are subscribed again, and
// what was accepted but never sent goes out on it.
func (l *loop) attach(s *session) {
	l.s = s
	l.handshaken = false
	l.goingAway = false
	for sub := range l.open {
		l.resubscribe(sub)
	}
	backlog := l.backlog
	l.backlog = nil
	for _, o := range backlog {
		l.submit(o)
	}
	l.takeSends()
	l.flushBatch()
}

func (l *loop) resubscribe(s *Subscription) {
	id, err := l.s.conn.Subscribe(s.queue, s.want, s.limits)
	if err != nil {
		l.endSub(s, err)
		return
	}
	s.id, s.epoch, s.active = id, l.s.epoch, false
	l.subs[id] = s
	l.inflight[id] = &inflight{resub: s}
}

// settle returns the credit of deliveries of this client's current
// session. Deliveries of another session (before a reconnect) or of
// another client are skipped: their credit is not this connection's.
func (l *loop) settle(ds []*Delivery) {
	mine := func(d *Delivery) bool { return d.s.c == l.c && d.epoch == l.s.epoch && d.s.epoch == l.s.epoch }
	if len(ds) == 1 {
		// The common case: one delivery, nothing to group.
		if mine(ds[0]) {
			l.s.conn.Settle(ds[0].s.id, ds[0].m.Lease)
		}
		return
	}
	// Settle each subscription's deliveries together, so their credit
	// goes back in one Credit frame.
	var leases []uint64
	for i, d := range ds {
		if !mine(d) || slices.ContainsFunc(ds[:i], func(p *Delivery) bool { return p.s == d.s && mine(p) }) {
			continue // not ours, or settled with the first of its subscription
		}
		leases = leases[:0]
		for _, o := range ds[i:] {
			if o.s == d.s && mine(o) {
				leases = append(leases, o.m.Lease)
			}
		}
		l.s.conn.Settle(d.s.id, leases...)
	}
}

// submit takes one op: sends it, adds it to the Enqueue batch, or keeps it
// for the next session.
func (l *loop) submit(o *op) {
	if err := o.ctx.Err(); err != nil {
		o.answer(result{err: err})
		return
	}
	if l.closing {
		o.answer(result{err: l.c.closedErr()})
		return
	}
	conn := l.s.conn
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
		l.flushBatch() // keep requests in submission order
		l.flushAcks()
		l.settle(o.settle)
		id, err := conn.Send(o.frame)
		if err != nil {
			l.rejected(o, err)
			return
		}
		l.inflight[id] = &inflight{op: o}
	case opSubscribe:
		l.flushBatch()
		s := o.sub
		id, err := conn.Subscribe(s.queue, s.want, s.limits)
		if err != nil {
			l.rejected(o, err)
			return
		}
		s.id, s.epoch = id, l.s.epoch
		l.subs[id] = s
		l.inflight[id] = &inflight{op: o}
	case opUnsubscribe:
		s := o.sub
		switch {
		case s.gone:
			o.answer(result{})
		case s.active && s.epoch == l.s.epoch:
			id, err := conn.Unsubscribe(s.id)
			if err != nil {
				l.rejected(o, err)
				return
			}
			l.inflight[id] = &inflight{op: o}
		default:
			// Being subscribed again after a reconnect: unsubscribe
			// once the broker confirms.
			s.closeOp = o
		}
	case opSettle:
		l.settle(o.settle)
		o.answer(result{})
	case opPrefetch:
		s := o.sub
		if s.gone {
			o.answer(result{err: ErrSubscriptionNotFound})
			return
		}
		if s.active && s.epoch == l.s.epoch {
			if err := conn.SetPrefetch(s.id, o.n); err != nil {
				o.answer(result{err: err})
				return
			}
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

// addSend adds the messages of one Send or SendBatch to the batch.
func (l *loop) addSend(o *op, msgs []wire.EnqueueMessage) {
	if err := o.ctx.Err(); err != nil {
		o.answer(result{err: err})
		return
	}
	if l.closing {
		o.answer(result{err: l.c.closedErr()})
		return
	}
	size := 0
	for i := range msgs {
		size += len(msgs[i].Payload)
	}
	maxN, maxB := l.c.opts.maxBatch, l.c.opts.maxBatchB
	if len(l.batch) > 0 && (len(l.batch)+len(msgs) > maxN || l.batchBytes+size > maxB) {
		l.flushBatch()
	}
	if l.batch == nil {
		l.batch = make([]wire.EnqueueMessage, 0, min(maxN, max(len(msgs), l.lastBatch)))
	}
	l.batch = append(l.batch, msgs...)
	l.batchOps = append(l.batchOps, o)
	l.batchBytes += size
	if len(l.batch) >= maxN || l.batchBytes >= maxB {
		l.flushBatch()
	}
}

// rejected handles an op the core would not send: after the broker's
// GoAway it waits for the next session; otherwise it fails.
func (l *loop) rejected(o *op, err error) {
	if errors.Is(err, core.ErrGoingAway) && !l.closing {
		l.backlog = append(l.backlog, o)
		return
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
	id, err := l.s.conn.Send(&wire.Ack{Items: items})
	if err != nil {
		for _, o := range ops {
			l.rejected(o, err)
		}
		return
	}
	l.inflight[id] = &inflight{ackOps: ops}
	l.ackInFlight++
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

func (l *loop) flushBatch() {
	if len(l.batch) == 0 {
		return
	}
	id, err := l.s.conn.Enqueue(l.batch)
	if err != nil {
		if errors.Is(err, core.ErrGoingAway) && !l.closing {
			return // kept for the next session
		}
		for _, o := range l.batchOps {
			o.answer(result{err: err})
		}
	} else {
		l.inflight[id] = &inflight{ops: l.batchOps}
		l.enqInFlight++
		l.c.stats.frames.Add(1)
		l.c.stats.msgs.Add(uint64(len(l.batch)))
	}
	// The core keeps the batch with the pending request: a new one is
	// made for the next frame.
	l.lastBatch = len(l.batch)
	l.batch, l.batchOps, l.batchBytes = nil, nil, 0
	l.lingerFired = false
}

// handle acts on what the core reports in a Ready.
func (l *loop) handle(rd core.Ready) {
	reconnect := l.c.opts.reconnect
	// Deliveries first: the broker sent them before any answer in this
	// Ready that ends their subscription, and Close, woken by the
	// UnsubscribeOk, gives back what was queued and never read.
	for _, d := range rd.Deliveries {
		if s, ok := l.subs[d.Subscription]; ok {
			s.push(d.Messages, l.s.epoch)
		}
	}
	for _, cp := range rd.Completions {
		inf, ok := l.inflight[cp.RequestID]
		if !ok {
			continue
		}
		delete(l.inflight, cp.RequestID)
		switch {
		case inf.ops != nil:
			l.completeBatch(inf.ops, cp)
		case inf.ackOps != nil:
			l.completeAcks(inf.ackOps, cp)
		case inf.resub != nil:
			s := inf.resub
			if cp.Err != nil {
				delete(l.subs, cp.RequestID)
				if !errors.Is(cp.Err, ErrConnectionLost) || !reconnect {
					l.endSub(s, cp.Err)
				}
				continue
			}
			s.active = true
			if o := s.closeOp; o != nil {
				s.closeOp = nil
				l.submit(o)
			}
		default:
			o := inf.op
			if o.kind == opSubscribe {
				if cp.Err != nil {
					delete(l.subs, cp.RequestID)
				} else {
					o.sub.active = true
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
		if errors.Is(e.Err, ErrConnectionLost) && reconnect {
			continue // restored on the next session; see detach
		}
		delete(l.subs, e.Subscription)
		l.endSub(s, e.Err)
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

func (l *loop) completeBatch(ops []*op, cp core.Completion) {
	l.enqInFlight--
	l.sendsCompleted = true
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
	if o := s.closeOp; o != nil {
		s.closeOp = nil
		o.answer(result{})
	}
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

// detach ends the current session's requests after it failed: requests
// in flight fail with ErrConnectionLost; open subscriptions wait for the
// next session.
func (l *loop) detach(err error) {
	lost := lostErr(err)
	for id, inf := range l.inflight {
		delete(l.inflight, id)
		switch {
		case inf.ops != nil:
			for _, o := range inf.ops {
				o.answer(result{err: lost})
			}
		case inf.ackOps != nil:
			for _, o := range inf.ackOps {
				o.answer(result{err: lost})
			}
		case inf.op != nil:
			o := inf.op
			if o.kind == opUnsubscribe {
				// The broker drops the subscription with the connection.
				l.endSub(o.sub, nil)
				o.answer(result{})
				continue
			}
			o.answer(result{err: lost})
		}
	}
	l.enqInFlight = 0
	for _, o := range l.ackOps {
		o.answer(result{err: lost})
	}
	l.acks, l.ackOps, l.ackInFlight = nil, nil, 0
	clear(l.subs)
	for s := range l.open {
		s.active = false
		if s.closeOp != nil {
			l.endSub(s, nil)
		}
	}
}

// finish ends the client: every op, queued or in flight, fails, and every
// subscription ends with err (ErrClosed after Close).
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
	for _, o := range l.batchOps {
		o.answer(result{err: closed})
	}
	l.batch, l.batchOps = nil, nil
	for _, o := range l.backlog {
		o.answer(result{err: closed})
	}
	l.backlog = nil
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
		if s.closeOp != nil {
			l.endSub(s, nil)
			continue
		}
		l.endSub(s, subErr)
	}
	clear(l.subs)
}
