package server

import (
	"slices"
	"sync"
	"time"

	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/tracing"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// maxTracedLeases bounds the traced deliveries a connection remembers
// until they are settled; a delivery beyond it gets no settle span.
const maxTracedLeases = 1 << 16

// maxEnqueueHeaders is an EnqueueMessage's most headers (the spec's max):
// a message that has them all has no room for a traceparent.
const maxEnqueueHeaders = 1024

// tracedLeases are a connection's traced deliveries not yet settled, by
// message ID: the settle span's parent and start.
type tracedLeases struct {
	mu sync.Mutex
	m  map[[16]byte]tracedLease
}

type tracedLease struct {
	mc tracing.Context
	at time.Time
}

func (t *tracedLeases) put(id [16]byte, l tracedLease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = map[[16]byte]tracedLease{}
	}
	if len(t.m) < maxTracedLeases {
		t.m[id] = l
	}
}

// take removes and returns the traced delivery of id.
func (t *tracedLeases) take(id [16]byte) (tracedLease, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.m[id]
	if ok {
		delete(t.m, id)
	}
	return l, ok
}

// traceContext returns the trace headers' values among headers.
func traceContext(headers []wire.MessageHeader) (traceparent, tracestate string) {
	for _, h := range headers {
		switch h.Key {
		case tracing.HeaderTraceparent:
			traceparent = h.Value
		case tracing.HeaderTracestate:
			tracestate = h.Value
		}
	}
	return traceparent, tracestate
}

// traceEnqueue starts the enqueue span of m, a message admitted to the
// queue, and gives it a traceparent header when the tracer samples it
// without one. m's headers are the request's and are replaced, not
// appended to in place.
func (c *conn) traceEnqueue(m *wire.EnqueueMessage, start time.Time) tracing.Span {
	tp, ts := traceContext(m.Headers)
	sp, add := c.s.cfg.Tracer.Enqueue(m.Queue, tp, ts, len(m.Headers) < maxEnqueueHeaders, start)
	if add != "" {
		m.Headers = append(slices.Clip(m.Headers), wire.MessageHeader{Key: tracing.HeaderTraceparent, Value: add})
	}
	return sp
}

// traceDeliver records the deliver span of a message about to be written
// with headers, and remembers it for its settle span.
func (c *conn) traceDeliver(m *node.Delivered, headers []wire.MessageHeader) {
	tp, ts := traceContext(headers)
	mc, ok := tracing.Parse(tp, ts)
	if !ok || !mc.Traced() {
		return
	}
	now := time.Now()
	c.s.cfg.Tracer.Deliver(mc, tracing.Delivery{
		Queue:       m.Queue,
		ID:          m.ID,
		FairnessKey: m.FairnessKey,
		Attempt:     m.Attempt,
		EnqueuedAt:  time.Unix(0, int64(m.EnqueuedAt)),
		Subscriber:  c.clientName,
	}, now)
	c.traced.put(m.ID, tracedLease{mc: mc, at: now})
}

// traceSettle returns what records the settle spans of op's n items,
// ref(i) the lease of item i, once their results are known; nil when
// none of them is traced.
func (c *conn) traceSettle(op string, n int, ref func(i int) node.LeaseRef) func(errs []error, err error) {
	tr := c.s.cfg.Tracer
	if tr == nil {
		return nil
	}
	type settling struct {
		i     int
		queue string
		id    [16]byte
		tracedLease
	}
	var ss []settling
	for i := range n {
		r := ref(i)
		if l, ok := c.traced.take(r.ID); ok {
			ss = append(ss, settling{i, r.Queue, r.ID, l})
		}
	}
	if len(ss) == 0 {
		return nil
	}
	return func(errs []error, err error) {
		now := time.Now()
		for _, s := range ss {
			e := err
			if e == nil && s.i < len(errs) {
				e = errs[s.i]
			}
			tr.Settle(s.mc, op, s.queue, s.id, s.at, now, e)
		}
	}
}

// traceExpired forgets the traced deliveries whose leases expired.
func (c *conn) traceExpired(leases []node.ExpiredLease) {
	if c.s.cfg.Tracer == nil {
		return
	}
	for _, l := range leases {
		c.traced.take(l.ID)
	}
}
