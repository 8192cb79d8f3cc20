package sched

import (
	"fmt"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched/bucket"
)

// Why a message is not delivered yet: Explanation.Reason.
const (
	// WhyDelayed: not due until Until (an enqueue delay or a retry's
	// backoff).
	WhyDelayed = "delayed"
	// WhyDeciding: it failed, and waits for its queue's on_failure hook
	// to decide between a retry and the dead-letter queue.
	WhyDeciding = "deciding"
	// WhyLeased: delivered, and leased to a consumer until Until.
	WhyLeased = "leased"
	// WhyOrdering: the message before it with the same ordering key is
	// delivered and not yet acked.
	WhyOrdering = "ordering"
	// WhyBehindKey: Ahead messages of its fairness key, with the same
	// throttle keys and ordering key, go before it.
	WhyBehindKey = "behind-key"
	// WhyThrottled: it is next in its lane, which waits for a token of
	// ThrottleKeys; the next comes at Until.
	WhyThrottled = "throttled"
	// WhyKeyWaiting: it is its key's next message; the key waits in Lane
	// behind Ahead other keys for the consumers' credit.
	WhyKeyWaiting = "key-waiting"
	// WhyNoCredit: it goes next, but no subscription of the queue has
	// credit; or the queue has no subscription at all.
	WhyNoCredit = "no-credit"
)

// Explanation is Explain's result: why one message is not delivered yet.
type Explanation struct {
	Queue       string   // the queue asked about
	ID          [16]byte // the message
	FairnessKey string   // its fairness key
	Attempts    uint32   // failed attempts so far
	// Reason is one of the Why constants.
	Reason string
	// Until is when the condition ends, where the scheduler knows it:
	// the due time (WhyDelayed), the lease deadline (WhyLeased), the
	// next token (WhyThrottled); 0 otherwise.
	Until Time
	// Ahead counts what goes first: messages of its lane (WhyBehindKey),
	// or keys (WhyKeyWaiting).
	Ahead uint64
	// ThrottleKeys is the bucket short of a token (WhyThrottled).
	ThrottleKeys []string
	// Lane is where the key waits (WhyKeyWaiting): "latency" or
	// "throughput" in an stfq queue, "round" in a drr queue.
	Lane string
	// ETA estimates when it is delivered: for WhyBehindKey and
	// WhyKeyWaiting, at the rates its key and its queue were delivered at
	// over the stats window (window.go); for WhyDelayed and
	// WhyThrottled, Until, its earliest. 0 when there is no estimate.
	ETA Time
}

// Explain says why message id of queue (a queue or a DLQ) is not
// delivered yet. The reply is an Explanation, or an error wrapping
// fault.ErrQueueNotFound or fault.ErrMessageNotFound (no such message:
// never enqueued, acked, or moved to the DLQ, which has its own name).
// It changes nothing. Cost: O(messages ahead in its lane + keys) for a
// ready message, O(1) otherwise.
func (s *Sched) Explain(ref Ref, queue string, id [16]byte) {
	q := s.queues[queue]
	if q == nil {
		s.reply(ref, fmt.Errorf("explain %s: %w", queue, fault.ErrQueueNotFound))
		return
	}
	x := q.msgs.get(&s.recs, id)
	if x == 0 {
		s.reply(ref, fmt.Errorf("explain %s: %w", queue, fault.ErrMessageNotFound))
		return
	}
	m := s.msg(x)
	k := s.laneOf(m).key
	e := Explanation{Queue: queue, ID: id, FairnessKey: k.name, Attempts: s.attempts(m)}
	switch m.state {
	case stDelayed:
		e.Reason, e.Until, e.ETA = WhyDelayed, s.due(m), s.due(m)
	case stDeciding:
		e.Reason = WhyDeciding
	case stLeased:
		e.Reason, e.Until = WhyLeased, s.due(m)
	default:
		s.explainReady(q, x, &e)
	}
	s.reply(ref, e)
}

// explainReady explains ready message m: what in its lane, its key and
// its queue comes first.
func (s *Sched) explainReady(q *queue, m mref, e *Explanation) {
	l := s.laneOf(s.msg(m))
	k := l.key
	if l.ordered() && l.inflight != 0 && l.inflight != m {
		e.Reason = WhyOrdering
		return
	}
	var ahead uint64
	for x := l.head; x != 0 && x != m; x = s.msg(x).next {
		ahead++
	}
	if ahead > 0 {
		e.Reason, e.Ahead = WhyBehindKey, ahead
		// Its key's pace: its own over the window, else its entitled
		// share of the queue's.
		rate := s.windowRate(k.win)
		if rate == 0 {
			rate = s.windowRate(&q.win) * q.fair.entitled(q, k)
		}
		e.ETA = s.eta(ahead+1, rate)
		return
	}
	if l.ts != nil && q.parent == nil { // DLQs are not throttled
		now := int64(s.now)
		for _, b := range l.ts.buckets {
			if next := b.b.Peek(now, 1); b.limited && next > now {
				e.Reason, e.ThrottleKeys = WhyThrottled, []string{b.name}
				if next != bucket.Never {
					e.Until, e.ETA = Time(next), Time(next)
				}
				return
			}
		}
	}
	e.Lane, e.Ahead = q.fair.position(k)
	if len(q.subs) == 0 || (e.Ahead == 0 && q.elig == nil) {
		e.Reason, e.Lane, e.Ahead = WhyNoCredit, "", 0
		return
	}
	e.Reason = WhyKeyWaiting
	// About one delivery per key ahead, at the queue's pace.
	e.ETA = s.eta(e.Ahead+1, s.windowRate(&q.win))
}

// windowRate returns the deliveries per nanosecond w counted over the
// stats window; 0 for nil or none.
func (s *Sched) windowRate(w *window) float64 {
	if w == nil {
		return 0
	}
	n, _ := w.view(epochOf(s.now))
	span := s.windowSpan()
	if n == 0 || span <= 0 {
		return 0
	}
	return float64(n) / float64(span)
}

// eta returns when n more deliveries at rate (per nanosecond) are done;
// 0 for no rate.
func (s *Sched) eta(n uint64, rate float64) Time {
	if rate <= 0 {
		return 0
	}
	return s.now + Time(float64(n)/rate)
}
