package sched

import (
	"bytes"
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

// leased finds the message a LeaseRef names, and its record, and checks
// that its lease is current.
func (s *Sched) leased(op string, r *LeaseRef) (mref, *msg, error) {
	q := s.queues[r.Queue]
	if q == nil {
		return 0, nil, fmt.Errorf("%s %s: %w", op, r.Queue, fault.ErrQueueNotFound)
	}
	x := q.msgs.get(&s.recs, r.ID)
	if x == 0 {
		return 0, nil, fmt.Errorf("%s %s %s: %w", op, r.Queue, formatID(r.ID), fault.ErrMessageNotFound)
	}
	m := s.msg(x)
	if m.state != stLeased || s.leaseOf(m) != r.Lease {
		return 0, nil, fmt.Errorf("%s %s %s: lease %d: %w", op, r.Queue, formatID(r.ID), r.Lease, fault.ErrLeaseExpired)
	}
	return x, m, nil
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
// deliveries' DRR charge and tokens are not refunded; a message whose TTL
// has passed expires instead (ttl.go). The reply is an []error, one per
// item, as for Ack.
func (s *Sched) Release(ref Ref, items []LeaseRef) {
	errs := s.itemErrs(len(items))
	for i := len(items) - 1; i >= 0; i-- {
		x, m, err := s.leased("release", &items[i])
		if err != nil {
			errs[i] = err
			continue
		}
		s.undeliver(x, m)
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
		x, m, err := s.leased("ack", &items[i])
		if err != nil {
			errs[i] = err
			continue
		}
		s.queueOf(m).counts.Acked++
		s.leave(x, m)
		s.remove(x, m)
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
		x, m, err := s.leased("nack", &items[i].LeaseRef)
		if err != nil {
			errs[i] = err
			continue
		}
		s.queueOf(m).counts.Nacked++
		s.leave(x, m)
		s.fail(x, m, items[i].Reason, failNack, 0)
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
		x, m, err := s.leased("retry after", &items[i].LeaseRef)
		if err != nil {
			errs[i] = err
			continue
		}
		d := max(items[i].Delay, 0)
		s.queueOf(m).counts.Nacked++
		s.leave(x, m)
		s.fail(x, m, "retry after "+d.String()+" requested", failRetry, d)
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
		x, m, err := s.leased("extend lease", &items[i].LeaseRef)
		if err != nil {
			b.ext = append(b.ext, ExtendResult{Err: err})
			continue
		}
		due := s.now.Add(max(items[i].Duration, 0))
		s.setTimer(x, m, due)
		b.ext = append(b.ext, ExtendResult{Deadline: due})
	}
	s.reply(ref, b.ext[start:len(b.ext):len(b.ext)])
}

type failKind uint8

const (
	failNack    failKind = iota // nack or lease expiry: the queue's policy
	failRetry                   // retry_after: the given delay
	failRelease                 // subscription closed: ready at once
)

// fail records a failed attempt of message x, its record m, which has
// left its leased state, and applies the failure policy.
func (s *Sched) fail(x mref, m *msg, reason string, kind failKind, delay time.Duration) {
	q := s.queueOf(m)
	e := s.extFor(x, m)
	if e.attempts < math.MaxUint32 {
		e.attempts++
	}
	attempts := e.attempts
	s.setReason(x, m, reason)
	// A DLQ has no DLQ: its messages are never exhausted.
	exhausted := attempts >= q.policy.MaxAttempts && q.dlq != nil
	switch {
	case kind == failRetry:
		if exhausted {
			s.apply(x, m, DeadLetter())
		} else {
			s.apply(x, m, Retry(delay))
		}
	case q.spec.OnFailure != "" && q.parent == nil:
		m.state = stDeciding
		q.delayed++
		s.persistState(x, m)
		s.cur.failures = append(s.cur.failures, s.failureOf(x, m))
	case kind == failRelease:
		if exhausted {
			s.apply(x, m, DeadLetter())
		} else {
			s.apply(x, m, Retry(0))
		}
	default:
		s.apply(x, m, DefaultDecision(q.policy, attempts))
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
	x := q.msgs.get(&s.recs, id)
	if x == 0 {
		return
	}
	m := s.msg(x)
	if m.state != stDeciding {
		return
	}
	s.leave(x, m)
	s.apply(x, m, d)
}

// apply carries out a decision for message x, its record m, in no
// state. A message of a DLQ cannot be dead-lettered again: it retries
// after the policy's backoff.
func (s *Sched) apply(x mref, m *msg, d Decision) {
	q := s.queueOf(m)
	if !d.DeadLetter && m.ext != 0 && s.expired(m) {
		s.expire(x, m) // back from a lease after its expiry (ttl.go)
		return
	}
	if d.DeadLetter {
		if q.dlq != nil {
			s.deadLetter(x, m)
			return
		}
		d = Retry(q.policy.Backoff(s.attempts(m)))
	}
	if d.Delay <= 0 {
		s.persistState(x, m)
		s.makeReady(x, m)
		return
	}
	m.state = stDelayed
	q.delayed++
	s.setDelay(x, m, s.now.Add(d.Delay))
	s.persistState(x, m)
}

// makeReady puts message x, its record m, in no state, back in its lane:
// at the head if it is its ordered lane's in-flight message (a retry
// keeps its place), else at the tail. A message whose TTL has passed
// expires instead.
func (s *Sched) makeReady(x mref, m *msg) {
	if m.ext != 0 && s.expired(m) {
		s.expire(x, m)
		return
	}
	l := s.laneOf(m)
	q := l.key.q
	m.state = stReady
	s.clearDue(m)
	q.ready++
	l.key.pending++
	if l.inflight == x {
		l.inflight = 0
		s.pushFront(l, x, m)
	} else {
		s.pushBack(l, x, m)
	}
	m.flags |= fListed
	s.laneSync(l)
	s.markDirty(q)
}

// clearDue sets the due time of m, out of the timers and becoming
// ready, to its expiry, in the timers, if it has a TTL (ttl.go); else to
// 0, freeing its extension record if that leaves it empty.
func (s *Sched) clearDue(m *msg) {
	if m.ext != 0 {
		e := s.exts.at(uint32(m.ext))
		if exp := s.expiresAt(m); exp != 0 {
			s.setTimer(e.msg, m, exp)
			return
		}
		e.due = 0
		s.trimExt(m)
	}
}

// deadLetter moves message x, its record m, in no state, to its queue's
// DLQ, ready there, with its attempts and last error kept. Its records
// stay where they are; the state record marks it dead.
func (s *Sched) deadLetter(x mref, m *msg) {
	old := s.laneOf(m)
	d := old.key.q.dlq
	old.key.q.counts.DeadLettered++
	s.moveTo(x, m, s.laneFor(d, old.key.name, old.ts, old.okey, old.prio))
	m.flags |= fDead
	s.persistState(x, m)
	s.makeReady(x, m)
}

// moveTo makes message x, its record m, in no state, a message of lane l
// (of another queue).
func (s *Sched) moveTo(x mref, m *msg, l *lane) {
	l.refs++ // hold l (and its throttle set) while m leaves its old lane
	l.key.refs++
	s.detach(x, m)
	l.refs--
	l.key.refs--
	s.attach(l.key.q, x, m, l)
	l.key.q.fair.setWeight(l.key, s.weightOf(m))
}

// persistState writes the state record of message x, its record m.
func (s *Sched) persistState(x mref, m *msg) {
	e := s.ext(m)
	r := stateRecord{dead: m.flags&fDead != 0, noTTL: m.flags&fNoTTL != 0, attempts: e.attempts, lastErr: s.reason(x, m)}
	if m.state == stDelayed {
		r.due = e.due
	}
	home := s.queueOf(m).home().name
	b := s.cur
	key := appendStateKey(b.alloc(stateKeyLen(home))[:0], home, m.id)
	s.put(key, appendStateRecord(b.alloc(1 + 1 + 4 + 8 + 2 + len(r.lastErr))[:0], &r))
	m.flags |= fState
}

// fire handles message x, whose timer is due (already popped).
func (s *Sched) fire(x mref) {
	m := s.msg(x)
	if m.state == stReady || m.state == stDelayed {
		if s.expired(m) {
			s.expire(x, m)
			return
		}
	}
	l := s.laneOf(m)
	q := l.key.q
	switch m.state {
	case stDelayed:
		q.delayed--
		if m.flags&fListed != 0 {
			// Waited in place in its ordered lane.
			m.state = stReady
			s.clearDue(m)
			q.ready++
			l.key.pending++
			s.laneSync(l)
			s.markDirty(q)
			return
		}
		m.state = stNone
		s.makeReady(x, m)
	case stLeased:
		// The lease ends without a settle: its credit goes back to the
		// subscription, which is told unless the delivery never left
		// this Ready.
		lease, fresh := s.leaseOf(m), m.flags&fFresh != 0
		if sb := s.endLease(x, m); sb != nil {
			sb.credit = uint32(min(uint64(sb.credit)+1, math.MaxUint32))
			s.resume(sb)
			if !fresh {
				s.cur.exp = append(s.cur.exp, pendingExpiry{s: sb, id: m.id, lease: lease})
			}
		}
		m.state = stNone
		q.counts.Expired++
		s.fail(x, m, ReasonLeaseExpired, failNack, 0)
	}
}

// failureOf describes message x, its record m, failed and waiting for a
// Decide, for the shell's on_failure hook.
func (s *Sched) failureOf(x mref, m *msg) Failure {
	l := s.laneOf(m)
	q := l.key.q
	b := s.cur
	home := q.home().name
	return Failure{
		Queue:        q.name,
		ID:           m.id,
		Key:          appendMsgKey(b.alloc(msgKeyLen(home))[:0], home, m.id),
		Attempts:     s.attempts(m),
		Reason:       s.reason(x, m),
		FairnessKey:  l.key.name,
		Weight:       s.weightOf(m),
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
	var ms []mref
	for _, name := range sortedKeys(s.queues, strings.Compare) {
		ms = ms[:0]
		for x := range s.queues[name].msgs.all() {
			if s.msg(x).state == stDeciding {
				ms = append(ms, x)
			}
		}
		s.sortByID(ms)
		for _, x := range ms {
			s.cur.failures = append(s.cur.failures, s.failureOf(x, s.msg(x)))
		}
	}
}

// sortByID sorts messages by ID.
func (s *Sched) sortByID(ms []mref) {
	slices.SortFunc(ms, func(a, b mref) int { return bytes.Compare(s.msg(a).id[:], s.msg(b).id[:]) })
}
