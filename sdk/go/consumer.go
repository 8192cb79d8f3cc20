package fila

import (
	"context"
	"errors"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
	"go.opentelemetry.io/otel/trace"
)

// Consumer subscribes to queues and settles deliveries. Get it from
// Client.Consumer.
type Consumer struct {
	c *Client
}

// A SubscribeOption configures Subscribe.
type SubscribeOption func(*Subscription)

// DefaultPrefetch is the prefetch of a subscription opened without the
// Prefetch option: enough deliveries in flight to keep a consumer busy
// across a network round trip, few enough that a consumer that falls
// behind leaves the rest of the backlog ready for the others rather than
// leased to it until the leases expire.
const DefaultPrefetch = 100

// Prefetch grants the broker n delivery credits: at most n deliveries of
// the subscription are unsettled at a time. A credit returns as a delivery
// is acked, nacked, retried or released (in Credit frames of at least n/4,
// so a busy subscription sends few), and the broker gives one back itself
// when a delivery's lease expires unsettled. Without this option the
// prefetch is DefaultPrefetch (100). 0 asks for as much as the broker
// allows: fila-server grants its cap on unsettled deliveries per
// subscription ([server] max_unsettled, 1000 by default), which also bounds
// any larger n. See Subscription.Prefetch for what was granted.
func Prefetch(n uint32) SubscribeOption { return func(s *Subscription) { s.want = n } }

// RateLimit declares a named limit on the subscription: the broker
// delivers to it at most limit messages per period, with bursts of up to
// burst (0 means limit). Subscriptions on the same queue that declare the
// same name share one token bucket. Periods are rounded up to a
// millisecond, so a positive one never becomes 0; limit and period must be
// positive, or Subscribe fails with INVALID_ARGUMENT.
func RateLimit(name string, limit uint32, period time.Duration, burst uint32) SubscribeOption {
	return func(s *Subscription) {
		s.limits = append(s.limits, wire.RateLimit{Name: name, Limit: limit, PeriodMS: ms(period), Burst: burst})
	}
}

// LeaseTimeout leases the subscription's deliveries for d instead of
// the queue's visibility timeout, shorter or longer: a per-consumer
// lease timeout, as for a consumer whose jobs take longer than the
// queue's others. It is rounded up to a millisecond; 0 means the
// queue's. Above the broker's maximum ([queue] max_lease_extension,
// 12h by default) Subscribe fails with *StatusError INVALID_ARGUMENT
// (errors.Is(err, ErrInvalidArgument)). A broker that predates the
// option ignores it.
func LeaseTimeout(d time.Duration) SubscribeOption {
	return func(s *Subscription) { s.leaseMS = ms(d) }
}

// Subscribe opens a subscription to queue. Deliveries arrive until Close,
// the queue's deletion, or the client's end; read them with Messages (a
// range-over-func iterator), Next, or C (a channel). Several goroutines
// may read one subscription at once, each in any of these ways: every
// delivery goes to exactly one reader, and every reader sees the end.
// Many subscriptions may share one client.
//
// When its queue's leadership moves to another node (the subscription
// ends there with NOT_LEADER), the subscription is opened again on the
// new leader and keeps delivering on the same channel. When its
// connection is lost, the subscription does not end (unless the client
// was made WithoutReconnect): it is opened again once the client has
// reconnected, and keeps delivering on the same channel; meanwhile its
// readers wait. A reader that must tell an outage from an empty queue
// asks Client.Status, or watches WithStatusHandler. With WithoutReconnect
// a lost connection ends the client and the subscription: Next, Messages
// and Err return an error wrapping ErrConnectionLost.
//
// A sharded queue is consumed from every shard at once: the subscription
// opens one per shard, on each shard's leader, and merges their
// deliveries (Delivery.Queue names the shard, "<queue>~<i>"). Its prefetch
// is shared among the shards, each keeping at least 1, the rest going to
// the shards with the most messages ready; rate limits apply per shard.
//
// Subscribe returns *SubscribeError (QUEUE_NOT_FOUND; QUEUE_SHARDED when
// the shards of a sharded queue could not be listed), *StatusError
// (FORBIDDEN without consume permission), or an error wrapping
// ErrConnectionLost, ErrClosed or ctx's error.
func (c *Consumer) Subscribe(ctx context.Context, queue string, opts ...SubscribeOption) (*Subscription, error) {
	s := &Subscription{
		c:      c.c,
		queue:  queue,
		notify: make(chan struct{}, 1),
		stop:   make(chan struct{}),
		pumped: make(chan struct{}),
		ch:     make(chan *Delivery),
		want:   DefaultPrefetch,
	}
	for _, o := range opts {
		o(s)
	}
	r, err := c.c.call(ctx, &op{kind: opSubscribe, sub: s})
	if err != nil {
		return nil, wrapErr(wire.OpSubscribe, queue, err)
	}
	if r.err != nil {
		return nil, mapErr(wire.OpSubscribe, queue, r.err)
	}
	if ok, isOK := r.resp.(*wire.SubscribeOk); isOK {
		s.granted.Store(ok.Prefetch)
	}
	go s.pump()
	return s, nil
}

// AckAll acknowledges deliveries in one request: once it returns nil
// every one is deleted durably. Deliveries may come from different
// subscriptions and queues. A delivery the broker could not ack does not
// stop the others: the error joins (errors.Join) one *AckError per failed
// delivery, in order, so errors.As finds the first and errors.Is matches
// any (ErrLeaseExpired, ...). A failure of the whole request is
// *StatusError or wraps ErrConnectionLost, ErrClosed or ctx's error.
func (c *Consumer) AckAll(ctx context.Context, ds []*Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	items := make([]wire.LeaseRef, len(ds))
	var settle []*Delivery
	var foreign map[*Client][]*Delivery // deliveries of subscriptions on other clients
	for i, d := range ds {
		items[i] = d.ref()
		if !d.settled.CompareAndSwap(false, true) {
			continue
		}
		if d.s.c == c.c {
			settle = append(settle, d)
			continue
		}
		if foreign == nil {
			foreign = map[*Client][]*Delivery{}
		}
		foreign[d.s.c] = append(foreign[d.s.c], d)
	}
	// Credit belongs to the connection that received the deliveries.
	for fc, fds := range foreign {
		fc.call(ctx, &op{kind: opSettle, settle: fds})
	}
	resp, err := c.c.request(ctx, &wire.Ack{Items: items}, ds[0].m.Queue, settle...)
	if err != nil {
		for _, d := range ds {
			d.endProcess("ack", err)
		}
		return err
	}
	rs := resp.(*wire.AckResult).Results
	if len(rs) != len(ds) {
		return &StatusError{Code: wire.CodeInternal, Op: "ack", Target: ds[0].m.Queue, Message: "wrong number of results"}
	}
	var errs []error
	for i, r := range rs {
		var err error
		if r.Code != wire.CodeOK {
			err = opError(wire.OpAck, r.Code, ds[i].m.Queue, r.Message, "")
			errs = append(errs, err)
		}
		ds[i].endProcess("ack", err)
	}
	return errors.Join(errs...)
}

// Subscription is an open subscription. Read its deliveries with Messages,
// Next or C; several goroutines may read it at once, each in any of these
// ways: every delivery goes to exactly one reader, and when the
// subscription ends every reader sees the end. A lost connection ends it
// only with WithoutReconnect (see Subscribe).
type Subscription struct {
	c      *Client
	queue  string
	limits []wire.RateLimit
	// leaseMS is the subscription's own lease timeout (LeaseTimeout);
	// 0 for the queue's visibility timeout.
	leaseMS uint64

	// Owned by the client's owner goroutine.
	want    uint32        // prefetch asked for
	id      uint32        // subscription ID, the Router's (sdk/core)
	gone    bool          // ended
	granted atomic.Uint32 // prefetch granted at Subscribe

	mu     sync.Mutex
	queued []*Delivery
	err    error // why it ended
	ended  bool
	notify chan struct{} // a push or an end happened
	stop   chan struct{} // closed by Close: the pump stops and leaves what is left in queued
	pumped chan struct{} // closed when the pump has exited

	ch        chan *Delivery
	closeOnce sync.Once
}

// push queues deliveries for the pump. It runs on the owner goroutine and
// never blocks.
func (s *Subscription) push(msgs []wire.DeliveredMessage) {
	s.mu.Lock()
	for i := range msgs {
		d := &Delivery{s: s, m: msgs[i]}
		d.deadline.Store(int64(msgs[i].LeaseDeadlineAtMS))
		d.traceProcess()
		s.queued = append(s.queued, d)
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Subscription) end(err error) {
	s.mu.Lock()
	if !s.ended {
		s.ended = true
		s.err = err
	}
	s.mu.Unlock()
	s.wake()
}

func (s *Subscription) wake() {
	select {
	case s.notify <- struct{}{}:
	default:
	}
}

// pump moves deliveries from the owner's queue to the channel, so the
// owner never waits on the application. It exits, closing the channel,
// once the subscription has ended and everything queued was read, or at
// once after Close.
func (s *Subscription) pump() {
	defer close(s.pumped)
	defer close(s.ch)
	for {
		s.mu.Lock()
		batch := s.queued
		s.queued = nil
		ended := s.ended
		s.mu.Unlock()
		for i, d := range batch {
			select {
			case s.ch <- d:
			case <-s.stop:
				// Keep what the application never received, for Close
				// to give back.
				s.mu.Lock()
				s.queued = append(batch[i:], s.queued...)
				s.mu.Unlock()
				return
			}
		}
		if len(batch) > 0 {
			continue
		}
		if ended {
			return
		}
		select {
		case <-s.notify:
		case <-s.stop:
			return
		}
	}
}

// Queue returns the subscribed queue.
func (s *Subscription) Queue() string { return s.queue }

// Prefetch returns the delivery credit the broker granted: the prefetch
// asked for or less (fila-server grants at most its max_unsettled, and
// that much for a prefetch of 0), summed over the shards of a sharded
// queue, or as SetPrefetch last set it. 0 means no limit, which only an
// older broker grants.
func (s *Subscription) Prefetch() uint32 { return s.granted.Load() }

// SetPrefetch changes the subscription's credit limit to n: an increase is
// granted at once; a decrease is taken back as deliveries are settled.
// Switching between limited (n > 0) and unlimited (0) credit is not
// possible on an open subscription: subscribe again. A sharded queue's n
// is shared among its shards again, each keeping at least 1. It fails
// with ErrSubscriptionNotFound after the subscription ended.
func (s *Subscription) SetPrefetch(ctx context.Context, n uint32) error {
	if s.Prefetch() == 0 || n == 0 {
		return &StatusError{Code: wire.CodeInvalidArgument, Op: "set prefetch", Target: s.queue,
			Message: "only between nonzero values"}
	}
	r, err := s.c.call(ctx, &op{kind: opPrefetch, sub: s, n: n})
	if err == nil {
		err = r.err
	}
	if err != nil {
		return wrapErr(wire.OpCredit, s.queue, err)
	}
	s.granted.Store(n)
	return nil
}

// C returns the channel of deliveries. Several goroutines may receive
// from it, and may call Next or range over Messages at the same time; each
// delivery goes to one of them. It is closed when the subscription ends;
// then Err says why (nil after Close). While the client reconnects, the
// channel stays open and delivers nothing (see Subscribe).
func (s *Subscription) C() <-chan *Delivery { return s.ch }

// Next waits for the next delivery. It returns ctx's error when ctx ends
// first, and Err (or ErrClosed after Close) once the subscription has
// ended and every delivery was read: with WithoutReconnect, an error
// wrapping ErrConnectionLost once the connection is lost. While the client
// reconnects (the default after a lost connection) Next waits, as for an
// empty queue; see Subscribe. Several goroutines may call Next at once,
// and each delivery goes to one of them.
func (s *Subscription) Next(ctx context.Context) (*Delivery, error) {
	select {
	case d, ok := <-s.ch:
		if !ok {
			if err := s.Err(); err != nil {
				return nil, err
			}
			return nil, ErrClosed
		}
		return d, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Messages returns an iterator over deliveries for range-over-func:
//
//	for d, err := range sub.Messages(ctx) {
//		if err != nil {
//			return err
//		}
//		handle(d.Payload())
//		d.Ack(ctx)
//	}
//
// It stops when ctx is done (yielding ctx.Err()), or when the subscription
// ends (yielding why, unless it was closed with Close): with
// WithoutReconnect, an error wrapping ErrConnectionLost once the
// connection is lost. While the client reconnects (the default after a
// lost connection) it waits, as for an empty queue; see Subscribe.
// Several goroutines may range over Messages of one subscription at once,
// and each delivery goes to one of them. Breaking out of the loop leaves
// the subscription open: it keeps receiving up to its prefetch, and
// deliveries nobody reads expire, each counting a failed attempt, and
// make room for more. Close a subscription you are done with.
func (s *Subscription) Messages(ctx context.Context) iter.Seq2[*Delivery, error] {
	return func(yield func(*Delivery, error) bool) {
		for {
			select {
			case d, ok := <-s.ch:
				if !ok {
					if err := s.Err(); err != nil {
						yield(nil, err)
					}
					return
				}
				if !yield(d, nil) {
					return
				}
			case <-ctx.Done():
				yield(nil, ctx.Err())
				return
			}
		}
	}
}

// Err returns why the subscription ended: nil while it is open (a client
// reconnecting included) and after Close; a *SubscribeError
// (QUEUE_NOT_FOUND when the queue was deleted) or *StatusError from the
// broker; ErrClosed after the client's Close; an error wrapping
// ErrConnectionLost when the client ended without Close (a lost
// connection with WithoutReconnect, or a broker that refused the API key
// on reconnecting).
func (s *Subscription) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		return nil
	}
	return mapErr(wire.OpSubscribe, s.queue, s.err)
}

// Close unsubscribes and closes the channel. Deliveries that arrived but
// were not yet read go back to the queue at once, released (their attempt
// not counted); those read but not settled stay leased until they are
// settled or their visibility timeout passes. Close returns nil also when the subscription
// had already ended; otherwise *UnsubscribeError, *StatusError, or an
// error wrapping ctx's.
func (s *Subscription) Close(ctx context.Context) error {
	var err error
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.pumped
		var r result
		r, err = s.c.call(ctx, &op{kind: opUnsubscribe, sub: s})
		if err == nil && r.err != nil {
			err = mapErr(wire.OpUnsubscribe, s.queue, r.err)
		}
		if errors.Is(err, ErrClosed) {
			err = nil
		} else if err != nil {
			err = wrapErr(wire.OpUnsubscribe, s.queue, err)
		}
		// Deliveries that arrived but never reached the application go
		// back to the queue at once, without counting an attempt, rather
		// than staying leased until they expire.
		s.mu.Lock()
		unread := s.queued
		s.queued = nil
		s.mu.Unlock()
		if len(unread) > 0 && err == nil {
			s.c.release(ctx, unread)
		}
	})
	return err
}

// Delivery is a message leased to this consumer until LeaseDeadline.
// Settle it with exactly one of Ack, Nack or RetryAfter; ExtendLease keeps
// it longer. Its methods are safe for concurrent use.
type Delivery struct {
	s         *Subscription
	m         wire.DeliveredMessage
	deadline  atomic.Int64 // Unix ms
	settled   atomic.Bool  // its credit was returned
	span      trace.Span   // its consumer span, nil when not traced
	spanEnded atomic.Bool
}

// ID returns the message ID.
func (d *Delivery) ID() ID { return ID(d.m.ID) }

// Queue returns the queue it was delivered from: for a sharded queue, the
// shard ("<queue>~<i>", or "<queue>~<i>.dlq" from its dead-letter queue).
func (d *Delivery) Queue() string { return d.m.Queue }

// Payload returns the message body. It stays valid after the delivery is
// settled.
func (d *Delivery) Payload() []byte { return d.m.Payload }

// Headers returns the application headers as a new map (a key given twice
// keeps its last value). Messages read from a dead-letter queue also carry
// "fila-attempts" and "fila-error".
func (d *Delivery) Headers() map[string]string {
	h := make(map[string]string, len(d.m.Headers))
	for _, kv := range d.m.Headers {
		h[kv.Key] = kv.Value
	}
	return h
}

// Header returns the value of the header key, or "" if absent.
func (d *Delivery) Header(key string) string {
	for _, kv := range d.m.Headers {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

// FairnessKey returns the fairness key the message was scheduled under:
// the producer's, the on_enqueue hook's, or "default".
func (d *Delivery) FairnessKey() string { return d.m.FairnessKey }

// Weight returns the resolved DRR weight of the fairness key.
func (d *Delivery) Weight() uint32 { return d.m.Weight }

// ThrottleKeys returns the resolved throttle keys.
func (d *Delivery) ThrottleKeys() []string { return d.m.ThrottleKeys }

// OrderingKey returns the ordering key, or "".
func (d *Delivery) OrderingKey() string { return d.m.OrderingKey }

// Attempt returns which delivery attempt this is, from 1.
func (d *Delivery) Attempt() uint32 { return d.m.Attempt }

// EnqueuedAt returns when the broker accepted the message (millisecond
// precision).
func (d *Delivery) EnqueuedAt() time.Time { return time.UnixMilli(int64(d.m.EnqueuedAtMS)) }

// LeaseDeadline returns when the lease expires unless extended; it moves
// with ExtendLease.
func (d *Delivery) LeaseDeadline() time.Time { return time.UnixMilli(d.deadline.Load()) }

func (d *Delivery) ref() wire.LeaseRef {
	return wire.LeaseRef{Queue: d.m.Queue, ID: d.m.ID, Lease: d.m.Lease}
}

// settle returns the delivery for the op that settles it, the first time
// only, so its credit goes back to the broker once.
func (d *Delivery) settle() []*Delivery {
	if d.settled.CompareAndSwap(false, true) {
		return []*Delivery{d}
	}
	return nil
}

// Ack acknowledges the delivery: once it returns nil the message is
// deleted durably and never delivered again. It returns *AckError
// (LEASE_EXPIRED when the lease expired or was released and the message
// may be delivered again; MESSAGE_NOT_FOUND; QUEUE_NOT_FOUND),
// *StatusError, or an error wrapping ErrConnectionLost, ErrClosed or ctx's
// error.
func (d *Delivery) Ack(ctx context.Context) error {
	resp, err := d.s.c.request(ctx, &wire.Ack{Items: []wire.LeaseRef{d.ref()}}, d.m.Queue, d.settle()...)
	if err != nil {
		return d.endProcess("ack", err)
	}
	return d.endProcess("ack", itemErr(wire.OpAck, d.m.Queue, resp.(*wire.AckResult).Results))
}

// Nack reports the delivery failed with reason; the queue's failure policy
// (its on_failure hook, or the default retries with exponential backoff)
// decides between retry and dead-letter, and reason becomes the
// "fila-error" header if the message is dead-lettered. Errors as for Ack,
// as *NackError.
func (d *Delivery) Nack(ctx context.Context, reason string) error {
	f := &wire.Nack{Items: []wire.NackItem{{Queue: d.m.Queue, ID: d.m.ID, Lease: d.m.Lease, Reason: reason}}}
	resp, err := d.s.c.request(ctx, f, d.m.Queue, d.settle()...)
	if err != nil {
		return d.endProcess("nack", err)
	}
	return d.endProcess("nack", itemErr(wire.OpNack, d.m.Queue, resp.(*wire.NackResult).Results))
}

// Release gives the delivery back without processing it: the message
// returns to the head of its lane at once, and its next delivery has the
// same attempt number. Use it for work the consumer will not start (it is
// shutting down, or took more than it can handle). Errors as for Ack, as
// *ReleaseError.
func (d *Delivery) Release(ctx context.Context) error {
	f := &wire.Release{Items: []wire.LeaseRef{d.ref()}}
	resp, err := d.s.c.request(ctx, f, d.m.Queue, d.settle()...)
	if err != nil {
		return d.endProcess("release", err)
	}
	return d.endProcess("release", itemErr(wire.OpRelease, d.m.Queue, resp.(*wire.ReleaseResult).Results))
}

// RetryAfter fails the delivery with an explicit backoff: it is
// redelivered no sooner than delay from now (rounded up to a millisecond;
// 0 or negative: at once), and
// the attempt counts toward the queue's limit. Errors as for Ack, as
// *RetryAfterError.
func (d *Delivery) RetryAfter(ctx context.Context, delay time.Duration) error {
	f := &wire.RetryAfter{Items: []wire.RetryAfterItem{{Queue: d.m.Queue, ID: d.m.ID, Lease: d.m.Lease, DelayMS: ms(delay)}}}
	resp, err := d.s.c.request(ctx, f, d.m.Queue, d.settle()...)
	if err != nil {
		return d.endProcess("retry", err)
	}
	return d.endProcess("retry", itemErr(wire.OpRetryAfter, d.m.Queue, resp.(*wire.RetryAfterResult).Results))
}

// ExtendLease moves the lease deadline to now plus dur (rounded up to a
// millisecond; 0 or negative: now), keeping long work alive, and returns
// the new deadline. dur is at most the broker's [queue]
// max_lease_extension (12h by default): a longer one fails with
// *StatusError INVALID_ARGUMENT (errors.Is(err, ErrInvalidArgument)) and
// leaves the deadline as it was. Other errors as for Ack, as
// *ExtendLeaseError.
func (d *Delivery) ExtendLease(ctx context.Context, dur time.Duration) (time.Time, error) {
	f := &wire.ExtendLease{Items: []wire.ExtendLeaseItem{{Queue: d.m.Queue, ID: d.m.ID, Lease: d.m.Lease, DurationMS: ms(dur)}}}
	resp, err := d.s.c.request(ctx, f, d.m.Queue)
	if err != nil {
		return time.Time{}, err
	}
	rs := resp.(*wire.ExtendLeaseResult).Results
	if len(rs) != 1 {
		return time.Time{}, &StatusError{Code: wire.CodeInternal, Op: "extend lease", Target: d.m.Queue, Message: "wrong number of results"}
	}
	if rs[0].Code != wire.CodeOK {
		return time.Time{}, opError(wire.OpExtendLease, rs[0].Code, d.m.Queue, rs[0].Message, "")
	}
	d.deadline.Store(int64(rs[0].LeaseDeadlineAtMS))
	return time.UnixMilli(int64(rs[0].LeaseDeadlineAtMS)), nil
}

func itemErr(op wire.Opcode, queue string, rs []wire.ItemResult) error {
	if len(rs) != 1 {
		return &StatusError{Code: wire.CodeInternal, Op: opVerb(op), Target: queue, Message: "wrong number of results"}
	}
	if rs[0].Code != wire.CodeOK {
		return opError(op, rs[0].Code, queue, rs[0].Message, "")
	}
	return nil
}
