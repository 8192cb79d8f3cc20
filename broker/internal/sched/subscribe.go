package sched

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched/bucket"
)

// MaxRateLimits bounds the rate limits one subscription may declare.
const MaxRateLimits = 16

// Subscribe opens subscription id on queue (a DLQ included) with credit
// deliveries of initial credit, at most Config.MaxUnsettled, and the
// declared rate limits. The reply is a Subscribed with the credit granted,
// or an error wrapping fault.ErrQueueNotFound, or
// fault.ErrInvalidArgument (an id already open, a limit with an empty or
// repeated name, a zero limit or period, more than MaxRateLimits).
//
// Credit is finite: a shell offering "as much as the broker allows" asks
// for math.MaxUint32 and is granted Config.MaxUnsettled. Whatever credit
// a subscription accumulates (AddCredit), it never holds more than
// Config.MaxUnsettled leases at a time. A lease that expires gives its
// credit back (Ready.Expired). A rate limit's bucket is shared by the queue's
// subscriptions that declare the same name; the latest declaration sets
// its rate (limit per period) and burst (0 means limit), keeping the
// tokens it holds.
func (s *Sched) Subscribe(ref Ref, id SubID, queue string, credit uint32, limits []RateLimit) {
	s.SubscribeLease(ref, id, queue, credit, limits, 0)
}

// SubscribeLease is Subscribe with the subscription's own lease length:
// its deliveries are leased for lease instead of the queue's visibility
// timeout (a per-consumer lease timeout); 0 means the queue's. A lease
// above Config.MaxLeaseExtension, or negative, fails with
// fault.ErrInvalidArgument.
func (s *Sched) SubscribeLease(ref Ref, id SubID, queue string, credit uint32, limits []RateLimit, lease time.Duration) {
	q := s.queues[queue]
	if q == nil {
		s.reply(ref, fmt.Errorf("subscribe %s: %w", queue, fault.ErrQueueNotFound))
		return
	}
	if err := s.validateSubscribe(id, limits); err != nil {
		s.reply(ref, fmt.Errorf("subscribe %s: %w", queue, err))
		return
	}
	if lease < 0 || lease > s.cfg.MaxLeaseExtension {
		s.reply(ref, fmt.Errorf("subscribe %s: lease timeout %s: want at most max_lease_extension (%s): %w",
			queue, FormatDuration(lease), FormatDuration(s.cfg.MaxLeaseExtension), fault.ErrInvalidArgument))
		return
	}
	credit = min(credit, s.maxHeld)
	sb := &sub{id: id, q: q, credit: credit, lease: lease, group: -1, egroup: -1}
	s.allocSlot(sb)
	now := int64(s.now)
	for _, rl := range limits {
		rate := float64(rl.Limit) / rl.Period.Seconds()
		burst := float64(rl.Burst)
		if rl.Burst == 0 {
			burst = float64(rl.Limit)
		}
		lb := q.limits[rl.Name]
		if lb == nil {
			lb = &tbucket{name: rl.Name, q: q, b: bucket.New(now, rate, burst), limited: true, hidx: -1}
			q.limits[rl.Name] = lb
		} else {
			lb.b.Set(now, rate, burst)
			if lb.subs != nil {
				s.arm(lb)
			}
		}
		lb.refs++
		sb.limits = append(sb.limits, lb)
	}
	s.subs[id] = sb
	q.subs[id] = sb
	if s.canTake(sb) {
		s.subIn(sb)
		s.markDirty(q)
	}
	s.reply(ref, Subscribed{Credit: credit})
}

// canTake reports whether sb may take a delivery, rate limits and
// MaxDeliveryBatch aside: it has credit and holds fewer than MaxUnsettled
// leases.
func (s *Sched) canTake(sb *sub) bool { return sb.credit > 0 && sb.held < s.maxHeld }

// allocSlot gives sb a slot in s.slots, for its leased messages to name.
func (s *Sched) allocSlot(sb *sub) {
	if n := len(s.freeSlots); n > 0 {
		sb.slot = s.freeSlots[n-1]
		s.freeSlots = s.freeSlots[:n-1]
		s.slots[sb.slot] = sb
		return
	}
	sb.slot = uint32(len(s.slots))
	s.slots = append(s.slots, sb)
}

// orphanLeases detaches the leases sb still holds after it closed (they
// run on and can still be settled, but belong to no subscription) and
// frees its slot.
func (s *Sched) orphanLeases(sb *sub) {
	for x := sb.lhead; x != 0; {
		m := s.msg(x)
		next := m.next
		m.next, m.prev = 0, 0
		s.exts.at(uint32(m.ext)).slot = 0
		x = next
	}
	sb.lhead, sb.ltail = 0, 0
	sb.held = 0
	s.slots[sb.slot] = nil
	s.freeSlots = append(s.freeSlots, sb.slot)
	sb.slot = 0
}

// endLease takes message x, its record m, leased, out of its
// subscription's lease list and returns that subscription, or nil if it
// has closed. A subscription that was waiting for a lease to end
// (MaxUnsettled) becomes eligible again.
func (s *Sched) endLease(x mref, m *msg) *sub {
	l := s.laneOf(m)
	q := l.key.q
	q.leased--
	e := s.exts.at(uint32(m.ext))
	if q.fair.byTime {
		q.fair.settled(l.key, e.lease, s.now)
	}
	e.lease = 0
	m.flags &^= fFresh
	if e.slot == 0 {
		return nil
	}
	sb := s.slots[e.slot]
	e.slot = 0
	s.leaseUnlink(sb, x, m)
	sb.held--
	s.resume(sb)
	return sb
}

// resume makes sb, open and idle, eligible again if it can take a
// delivery.
func (s *Sched) resume(sb *sub) {
	if sb.state == subIdle && !sb.capped && !sb.closed && s.canTake(sb) {
		s.subIn(sb)
		s.markDirty(sb.q)
	}
}

func (s *Sched) validateSubscribe(id SubID, limits []RateLimit) error {
	if s.subs[id] != nil {
		return fmt.Errorf("subscription %d: already open: %w", id, fault.ErrInvalidArgument)
	}
	if len(limits) > MaxRateLimits {
		return fmt.Errorf("rate_limits: %d, at most %d: %w", len(limits), MaxRateLimits, fault.ErrInvalidArgument)
	}
	for i, rl := range limits {
		switch {
		case rl.Name == "":
			return fmt.Errorf("rate_limits[%d].name: empty: %w", i, fault.ErrInvalidArgument)
		case rl.Limit == 0:
			return fmt.Errorf("rate_limits[%d].limit: must be positive: %w", i, fault.ErrInvalidArgument)
		case rl.Period <= 0:
			return fmt.Errorf("rate_limits[%d].period: must be positive: %w", i, fault.ErrInvalidArgument)
		}
		for _, prev := range limits[:i] {
			if prev.Name == rl.Name {
				return fmt.Errorf("rate_limits[%d].name %q: declared twice: %w", i, rl.Name, fault.ErrInvalidArgument)
			}
		}
	}
	return nil
}

// Unsubscribe closes subscription id: no delivery follows in any Ready
// (deliveries decided but not yet taken by Ready are undone, the messages
// ready again without an attempt counted). With release, the messages it
// holds leases on return to ready at once, each counting a failed attempt
// with reason "consumer disconnected" (or, on a queue with on_failure, a
// Failure); without, their leases run on and can still be acked. The
// reply is nil or an error wrapping fault.ErrSubscriptionNotFound.
func (s *Sched) Unsubscribe(ref Ref, id SubID, release bool) {
	sb := s.subs[id]
	if sb == nil {
		s.reply(ref, fmt.Errorf("unsubscribe %d: %w", id, fault.ErrSubscriptionNotFound))
		return
	}
	s.closeSub(sb)
	if release {
		s.releaseLeases(sb)
	}
	s.orphanLeases(sb)
	s.reply(ref, nil)
}

// releaseLeases returns every message leased to sb to its queue, counting
// the attempt as failed because the consumer disconnected.
func (s *Sched) releaseLeases(sb *sub) {
	for sb.lhead != 0 {
		x := sb.lhead
		m := s.msg(x)
		s.leave(x, m)
		s.fail(x, m, ReasonDisconnected, failRelease, 0)
	}
}

// closeSub takes sb out of every structure, undoing the deliveries of the
// Ready being built. Its lease list stays until orphanLeases.
func (s *Sched) closeSub(sb *sub) {
	switch sb.state {
	case subEligible:
		s.subOut(sb)
	case subParked:
		lb := sb.tb
		s.unparkSub(sb)
		s.arm(lb)
	}
	sb.closed = true
	// Last first, so that each lane gets its messages back in order.
	for _, p := range slices.Backward(s.cur.dl) {
		if p.s == sb && s.holds(p.m, p.lease) {
			s.undeliver(p.m, s.msg(p.m))
		}
	}
	for _, lb := range sb.limits {
		lb.refs--
		if lb.refs == 0 {
			if lb.hidx >= 0 {
				s.wakes.remove(lb)
			}
			delete(sb.q.limits, lb.name)
		}
	}
	delete(s.subs, sb.id)
	delete(sb.q.subs, sb.id)
}

// undeliver returns message x, its record m, leased in the Ready being
// built, to the head of its lane as if it had not been picked. Its tokens
// and DRR charge are not refunded. A message whose TTL has passed
// expires instead (ttl.go).
func (s *Sched) undeliver(x mref, m *msg) {
	s.leave(x, m)
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
	}
	s.pushFront(l, x, m)
	m.flags |= fListed
	s.laneSync(l)
	s.markDirty(q)
}

// AddCredit grants subscription id n more deliveries, saturating at
// 2^32-1. An unknown id is ignored: the subscription may have ended with
// its queue while the credit was on its way. Credit does not raise
// Config.MaxUnsettled: a subscription holding that many leases takes no
// delivery until one of them ends, whatever its credit.
func (s *Sched) AddCredit(id SubID, n uint32) {
	sb := s.subs[id]
	if sb == nil || n == 0 {
		return
	}
	sb.credit = uint32(min(uint64(sb.credit)+uint64(n), math.MaxUint32))
	s.resume(sb)
}

// Subs returns the IDs of the open subscriptions, in increasing order. A
// replicated queue's new leader unsubscribes them: their consumers were
// connected to the old leader.
func (s *Sched) Subs() []SubID {
	out := make([]SubID, 0, len(s.subs))
	for id := range s.subs {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}
