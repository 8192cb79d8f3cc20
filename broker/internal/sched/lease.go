package sched

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// Failure reasons the scheduler records itself.
const (
	ReasonLeaseExpired = "lease expired"
	ReasonDisconnected = "consumer disconnected"
)

// leased finds the message a LeaseRef names and checks that its lease is
// current.
func (s *Sched) leased(op string, r *LeaseRef) (*msg, error) {
	q := s.queues[r.Queue]
	if q == nil {
		return nil, fmt.Errorf("%s %s: %w", op, r.Queue, fault.ErrQueueNotFound)
	}
	m := q.msgs.get(r.ID)
	if m == nil {
		return nil, fmt.Errorf("%s %s %s: %w", op, r.Queue, formatID(r.ID), fault.ErrMessageNotFound)
	}
	if m.state != stLeased || m.lease != r.Lease {
		return nil, fmt.Errorf("%s %s %s: lease %d: %w", op, r.Queue, formatID(r.ID), r.Lease, fault.ErrLeaseExpired)
	}
	return m, nil
}

func (s *Sched) itemErrs(n int) []error {
	b := s.cur
	start := len(b.errs)
	b.errs = slices.Grow(b.errs, n)[:start+n]
	return b.errs[start : start+n : start+n]
}

// Release gives back deliveries the consumer has not started: each
// message returns to the head of its lane, ready at once, without counting
// an attempt, so its next delivery has the same attempt number. Items are
// released last first, so messages of one lane keep their order. The
// deliveries' DRR charge and tokens are not refunded. The reply is an
// []error, one per item, as for Ack.
func (s *Sched) Release(ref Ref, items []LeaseRef) {
	errs := s.itemErrs(len(items))
	for i := len(items) - 1; i >= 0; i-- {
		m, err := s.leased("release", &items[i])
		if err != nil {
			errs[i] = err
			continue
		}
		s.undeliver(m)
	}
	s.reply(ref, errs)
}

// Ack settles deliveries: each acked message is deleted (its records are
// in this Ready's Persist). The reply is an []error, one per item: nil,
// or wrapping fault.ErrQueueNotFound, fault.ErrMessageNotFound or
// fault.ErrLeaseExpired (the lease expired or the message was delivered
// again; the current lease is untouched).
func (s *Sched) Ack(ref Ref, items []LeaseRef) {
	errs := s.itemErrs(len(items))
	for i := range items {
		m, err := s.leased("ack", &items[i])
		if err != nil {
			errs[i] = err
			continue
		}
		m.lane.key.q.counts.Acked++
		s.leave(m)
		s.remove(m)
	}
	s.reply(ref, errs)
}

// Nack fails deliveries with a reason (cut to MaxReasonLen bytes). A
// queue with an on_failure hook reports each in Ready.Failures and waits
// for Decide; otherwise the default policy retries after a backoff or
// dead-letters. The reply is as Ack's.
func (s *Sched) Nack(ref Ref, items []NackItem) {
	errs := s.itemErrs(len(items))
	for i := range items {
		m, err := s.leased("nack", &items[i].LeaseRef)
		if err != nil {
			errs[i] = err
			continue
		}
		m.lane.key.q.counts.Nacked++
		s.leave(m)
		s.fail(m, items[i].Reason, failNack, 0)
	}
	s.reply(ref, errs)
}

// RetryAfter fails deliveries and redelivers each after exactly its
// delay, bypassing the on_failure hook: it is the consumer's explicit
// instruction. The attempt counts: a message that has used its queue's
// max attempts is dead-lettered instead. The reply is as Ack's.
func (s *Sched) RetryAfter(ref Ref, items []RetryItem) {
	errs := s.itemErrs(len(items))
	for i := range items {
		m, err := s.leased("retry after", &items[i].LeaseRef)
		if err != nil {
			errs[i] = err
			continue
		}
		d := max(items[i].Delay, 0)
		m.lane.key.q.counts.Nacked++
		s.leave(m)
		s.fail(m, "retry after "+d.String()+" requested", failRetry, d)
	}
	s.reply(ref, errs)
}

// ExtendLease moves each lease's deadline to now + its duration. The
// reply is an []ExtendResult, one per item. An item whose duration is
// above Config.MaxLeaseExtension fails alone with fault.ErrInvalidArgument
// and leaves its lease as it was.
func (s *Sched) ExtendLease(ref Ref, items []ExtendItem) {
	b := s.cur
	start := len(b.ext)
	for i := range items {
		if d := items[i].Duration; d > s.cfg.MaxLeaseExtension {
			r := &items[i].LeaseRef
			b.ext = append(b.ext, ExtendResult{Err: fmt.Errorf("extend lease %s %s: duration %s: want at most max_lease_extension (%s): %w",
				r.Queue, formatID(r.ID), FormatDuration(d), FormatDuration(s.cfg.MaxLeaseExtension), fault.ErrInvalidArgument)})
			continue
		}
		m, err := s.leased("extend lease", &items[i].LeaseRef)
		if err != nil {
			b.ext = append(b.ext, ExtendResult{Err: err})
			continue
		}
		s.setTimer(m, s.now.Add(max(items[i].Duration, 0)))
		b.ext = append(b.ext, ExtendResult{Deadline: m.due})
	}
	s.reply(ref, b.ext[start:len(b.ext):len(b.ext)])
}

type failKind uint8

const (
	failNack    failKind = iota // nack or lease expiry: the queue's policy
	failRetry                   // retry_after: the given delay
	failRelease                 // subscription closed: ready at once
)

// fail records a failed attempt of m, which has left its leased state,
// and applies the failure policy.
func (s *Sched) fail(m *msg, reason string, kind failKind, delay time.Duration) {
	q := m.queue()
	if m.attempts < math.MaxUint32 {
		m.attempts++
	}
	s.setReason(m, reason)
	// A DLQ has no DLQ: its messages are never exhausted.
	exhausted := m.attempts >= q.policy.MaxAttempts && q.dlq != nil
	switch {
	case kind == failRetry:
		if exhausted {
			s.apply(m, DeadLetter())
		} else {
			s.apply(m, Retry(delay))
		}
	case q.spec.OnFailure != "" && q.parent == nil:
		m.state = stDeciding
		q.delayed++
		s.persistState(m)
		s.cur.failures = append(s.cur.failures, s.failureOf(m))
	case kind == failRelease:
		if exhausted {
			s.apply(m, DeadLetter())
		} else {
			s.apply(m, Retry(0))
		}
	default:
		s.apply(m, DefaultDecision(q.policy, m.attempts))
	}
}

// Decide answers a Failure: the message is dead-lettered or retried after
// d.Delay. A message that no longer waits for a decision (its queue was
// deleted) is ignored. The hook's decision is final: a retry is allowed
// beyond the queue's max attempts.
func (s *Sched) Decide(queue string, id [16]byte, d Decision) {
	q := s.queues[queue]
	if q == nil {
		return
	}
	m := q.msgs.get(id)
	if m == nil || m.state != stDeciding {
		return
	}
	s.leave(m)
	s.apply(m, d)
}

// apply carries out a decision for m, in no state. A message of a DLQ
// cannot be dead-lettered again: it retries after the policy's backoff.
func (s *Sched) apply(m *msg, d Decision) {
	q := m.queue()
	if d.DeadLetter {
		if q.dlq != nil {
			s.deadLetter(m)
			return
		}
		d = Retry(q.policy.Backoff(m.attempts))
	}
	if d.Delay <= 0 {
		s.persistState(m)
		s.makeReady(m)
		return
	}
	m.state = stDelayed
	q.delayed++
	s.setTimer(m, s.now.Add(d.Delay))
	s.persistState(m)
}

// makeReady puts m, in no state, back in its lane: at the head if it is
// its ordered lane's in-flight message (a retry keeps its place), else at
// the tail.
func (s *Sched) makeReady(m *msg) {
	l := m.lane
	q := l.key.q
	m.state = stReady
	m.due = 0
	q.ready++
	l.key.pending++
	if l.inflight == m {
		l.inflight = nil
		l.pushFront(m)
	} else {
		l.pushBack(m)
	}
	m.flags |= fListed
	s.laneSync(l)
	s.markDirty(q)
}

// deadLetter moves m, in no state, to its queue's DLQ, ready there, with
// its attempts and last error kept. Its records stay where they are; the
// state record marks it dead.
func (s *Sched) deadLetter(m *msg) {
	old := m.lane
	d := old.key.q.dlq
	old.key.q.counts.DeadLettered++
	s.moveTo(m, s.laneFor(d, old.key.name, old.ts, old.okey))
	m.flags |= fDead
	s.persistState(m)
	s.makeReady(m)
}

// moveTo makes m, in no state, a message of lane l (of another queue).
func (s *Sched) moveTo(m *msg, l *lane) {
	l.refs++ // hold l (and its throttle set) while m leaves its old lane
	l.key.refs++
	s.detach(m)
	l.refs--
	l.key.refs--
	s.attach(l.key.q, m, l)
	if m.weight > 0 {
		l.key.q.fair.setWeight(l.key, m.weight)
	}
}

// persistState writes m's state record.
func (s *Sched) persistState(m *msg) {
	r := stateRecord{dead: m.flags&fDead != 0, attempts: m.attempts, lastErr: s.reason(m)}
	if m.state == stDelayed {
		r.due = m.due
	}
	home := m.queue().home().name
	b := s.cur
	key := appendStateKey(b.alloc(stateKeyLen(home))[:0], home, m.id)
	s.put(key, appendStateRecord(b.alloc(1 + 1 + 4 + 8 + 2 + len(r.lastErr))[:0], &r))
	m.flags |= fState
}

// fire handles a message whose timer is due (already popped).
func (s *Sched) fire(m *msg) {
	l := m.lane
	q := l.key.q
	switch m.state {
	case stDelayed:
		q.delayed--
		if m.flags&fListed != 0 {
			// Waited in place in its ordered lane.
			m.state = stReady
			m.due = 0
			q.ready++
			l.key.pending++
			s.laneSync(l)
			s.markDirty(q)
			return
		}
		m.state = stNone
		s.makeReady(m)
	case stLeased:
		// The lease ends without a settle: its credit goes back to the
		// subscription, which is told unless the delivery never left
		// this Ready.
		lease, fresh := m.lease, m.flags&fFresh != 0
		if sb := s.endLease(m); sb != nil {
			sb.credit = uint32(min(uint64(sb.credit)+1, math.MaxUint32))
			s.resume(sb)
			if !fresh {
				s.cur.exp = append(s.cur.exp, pendingExpiry{s: sb, id: m.id, lease: lease})
			}
		}
		m.state = stNone
		q.counts.Expired++
		s.fail(m, ReasonLeaseExpired, failNack, 0)
	}
}

// Redrive moves up to n messages (0: all) from the DLQ dlq back to its
// queue, oldest (lowest ID) first, with attempts and last error reset,
// ready at once. Messages leased or backing off in the DLQ stay. The
// reply is a Redriven, or an error wrapping fault.ErrQueueNotFound or
// fault.ErrNotADLQ. It costs O(m log m) for m messages in the DLQ.
func (s *Sched) Redrive(ref Ref, dlq string, n uint64) {
	d := s.queues[dlq]
	if d == nil {
		s.reply(ref, fmt.Errorf("redrive %s: %w", dlq, fault.ErrQueueNotFound))
		return
	}
	if d.parent == nil {
		s.reply(ref, fmt.Errorf("redrive %s: %w", dlq, fault.ErrNotADLQ))
		return
	}
	var ready []*msg
	for m := range d.msgs.all() {
		if m.state == stReady {
			ready = append(ready, m)
		}
	}
	slices.SortFunc(ready, func(a, b *msg) int { return slices.Compare(a.id[:], b.id[:]) })
	if n > 0 && uint64(len(ready)) > n {
		ready = ready[:n]
	}
	p := d.parent
	for _, m := range ready {
		s.leave(m)
		old := m.lane
		s.moveTo(m, s.laneFor(p, old.key.name, old.ts, old.okey))
		m.flags &^= fDead
		m.attempts = 0
		s.setReason(m, "")
		if m.flags&fState != 0 {
			b := s.cur
			s.del(appendStateKey(b.alloc(stateKeyLen(p.name))[:0], p.name, m.id))
			m.flags &^= fState
		}
		s.makeReady(m)
	}
	d.counts.Redriven += uint64(len(ready))
	p.counts.Redriven += uint64(len(ready))
	s.reply(ref, Redriven{Moved: uint64(len(ready))})
}

// failureOf describes m, failed and waiting for a Decide, for the shell's
// on_failure hook.
func (s *Sched) failureOf(m *msg) Failure {
	q := m.queue()
	l := m.lane
	b := s.cur
	home := q.home().name
	return Failure{
		Queue:        q.name,
		ID:           m.id,
		Key:          appendMsgKey(b.alloc(msgKeyLen(home))[:0], home, m.id),
		Attempts:     m.attempts,
		Reason:       s.reason(m),
		FairnessKey:  l.key.name,
		Weight:       m.weight,
		ThrottleKeys: l.throttleKeys(),
		OrderingKey:  l.okey,
		PayloadSize:  m.cost,
		Policy:       q.policy,
	}
}

// Redecide puts every message waiting for a Decide (failed, its queue's
// on_failure hook not yet answered) into the next Ready's Failures again.
// A replicated queue's new leader calls it: the old leader may have died
// before its hook answered, and only a leader runs hooks. The failures
// come by queue, then by message ID, whatever the layout of the index.
func (s *Sched) Redecide() {
	var ms []*msg
	for _, name := range sortedKeys(s.queues, strings.Compare) {
		ms = ms[:0]
		for m := range s.queues[name].msgs.all() {
			if m.state == stDeciding {
				ms = append(ms, m)
			}
		}
		slices.SortFunc(ms, func(a, b *msg) int { return slices.Compare(a.id[:], b.id[:]) })
		for _, m := range ms {
			s.cur.failures = append(s.cur.failures, s.failureOf(m))
		}
	}
}
