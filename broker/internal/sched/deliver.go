package sched

import (
	"math"

	"github.com/fila-mq/fila/broker/internal/sched/bucket"
)

// pump delivers q's messages to its eligible subscriptions, round robin
// among them, one DRR decision per message, until no subscription can
// take one or no message can go.
func (s *Sched) pump(q *queue) {
	for q.elig != nil {
		sb := q.elig
		if lb := s.limitBlock(sb); lb != nil {
			s.parkSub(sb, lb)
			continue
		}
		x := s.pick(q)
		if x == 0 {
			return
		}
		s.deliver(sb, x)
	}
}

// pick makes one DRR decision: the fairness key at the head of the round,
// then its next runnable lane whose buckets all hold a token. Lanes short
// of a token park on that bucket; a key left with no runnable lane leaves
// the round with its deficit kept. pick takes the tokens and the message
// out of its lane and returns it, or 0 if nothing can go now.
func (s *Sched) pick(q *queue) mref {
	for {
		k, ok := q.fair.next()
		if !ok {
			return 0
		}
		for k.nrun > 0 {
			l := k.run
			if b := s.admit(l); b != nil {
				s.park(l, b)
				continue
			}
			x := l.head
			m := s.msg(x)
			s.unlink(l, x, m)
			m.flags &^= fListed
			if l.ordered() {
				l.inflight = x
			}
			m.state = stNone
			k.pending--
			q.ready--
			k.delivered++
			s.noteDelivery(q, k, m.enq)
			k.run = l.next
			if k.pr != nil {
				k.pr.pos[l.rank] = k.run
			}
			q.fair.charge(k, int64(m.cost))
			s.laneSync(l)
			return x
		}
		s.keySync(k)
	}
}

// admit takes a token from each of l's limited buckets if they all hold
// one, and returns nil; else it returns the first bucket short of one and
// takes nothing. DLQs are not throttled.
func (s *Sched) admit(l *lane) *tbucket {
	if l.ts == nil || l.key.q.parent != nil {
		return nil
	}
	now := int64(s.now)
	for _, b := range l.ts.buckets {
		if b.limited && !b.b.Has(now, 1) {
			b.held++
			return b
		}
	}
	for _, b := range l.ts.buckets {
		if b.limited {
			b.b.Take(now, 1)
		}
	}
	return nil
}

// deliver leases message x to sb.
func (s *Sched) deliver(sb *sub, x mref) {
	q := sb.q
	now := int64(s.now)
	for _, lb := range sb.limits {
		lb.b.Take(now, 1)
	}
	m := s.msg(x)
	m.state = stLeased
	m.flags |= fFresh
	q.leased++
	q.counts.Delivered++
	s.lease++
	e := s.extFor(x, m)
	e.lease = s.lease
	e.slot = sb.slot
	if q.fair.byTime {
		q.fair.leased(s.laneOf(m).key, s.lease, s.now)
	}
	vis := q.vis
	if sb.lease > 0 {
		vis = sb.lease
	}
	s.setTimer(x, m, s.now.Add(vis))
	s.leaseLink(sb, x, m)
	sb.held++
	s.cur.dl = append(s.cur.dl, pendingDelivery{s: sb, m: x, lease: s.lease})
	sb.credit--
	sb.batch++
	switch {
	case sb.batch >= s.cfg.MaxDeliveryBatch:
		s.subOut(sb)
		sb.capped = true
		s.capped = append(s.capped, sb)
	case !s.canTake(sb):
		s.subOut(sb)
	default:
		q.elig = sb.next
	}
}

// leaseLink appends message x, its record m, to sb's lease list.
func (s *Sched) leaseLink(sb *sub, x mref, m *msg) {
	m.next, m.prev = 0, sb.ltail
	if sb.ltail != 0 {
		s.msg(sb.ltail).next = x
	} else {
		sb.lhead = x
	}
	sb.ltail = x
}

// leaseUnlink takes message x, its record m, out of sb's lease list.
func (s *Sched) leaseUnlink(sb *sub, x mref, m *msg) { s.unlinkMsg(&sb.lhead, &sb.ltail, m) }

// laneSync puts l where its contents say it belongs: in its key's
// runnable ring if it has a message to deliver, else idle. A parked lane
// stays parked while it has one. Then it does the same for the key.
func (s *Sched) laneSync(l *lane) {
	want := s.canRun(l)
	switch l.state {
	case lsIdle:
		if want {
			s.ringAdd(l)
		}
	case lsRunnable:
		if !want {
			s.ringRemove(l)
		} else if l.okey != "" && s.laneRank(l) != l.rank {
			s.ringRemove(l) // its next message is of another priority
			s.ringAdd(l)
		}
	case lsParked:
		if !want {
			b := l.tb
			b.removeWaiter(l)
			l.tb = nil
			l.state = lsIdle
			s.arm(b)
		}
	}
	s.keySync(l.key)
}

// keySync puts k where its lanes say it belongs in the DRR lists: active
// while a lane is runnable; out of the lists with its deficit kept while
// it has pending messages but none can run (tokens, ordering); forgotten
// when nothing is pending.
func (s *Sched) keySync(k *fkey) {
	q := k.q
	if k.pending == 0 {
		if k.backlogged {
			q.fair.forget(k, s.now)
			k.backlogged = false
		}
		return
	}
	if k.nrun > 0 {
		if !q.fair.active(k) {
			if k.backlogged {
				q.fair.resume(k)
			} else {
				k.backlogged = true
				k.delivered = 0
				q.fair.activate(k, s.now)
			}
			s.markDirty(q)
		}
	} else if q.fair.active(k) {
		q.fair.remove(k)
	}
}

// ringAdd makes l runnable: at the tail of its key's runnable ring, or
// of its priority's (priority.go).
func (s *Sched) ringAdd(l *lane) {
	k := l.key
	l.state = lsRunnable
	r := s.laneRank(l)
	l.rank = r
	if k.pr != nil || r != DefaultPriority {
		s.prioAdd(k, l, r)
		return
	}
	ringInsert(&k.run, l)
	k.nrun++
}

func (s *Sched) ringRemove(l *lane) {
	k := l.key
	l.state = lsIdle
	if k.pr != nil {
		s.prioRemove(k, l)
		return
	}
	ringCut(&k.run, l)
	k.nrun--
}

// park moves l from its key's runnable ring to b's waiting list.
func (s *Sched) park(l *lane, b *tbucket) {
	s.ringRemove(l)
	l.state = lsParked
	l.tb = b
	b.addWaiter(l)
	s.arm(b)
}

// arm sets b's timer to its next token if something waits on it.
func (s *Sched) arm(b *tbucket) {
	at := int64(bucket.Never)
	if b.limited && (b.nwait > 0 || b.subs != nil) {
		at = b.b.Next(int64(s.now), 1)
	}
	if at == bucket.Never {
		if b.hidx >= 0 {
			s.wakes.remove(b)
		}
		return
	}
	if at <= int64(s.now) {
		// Tokens are there already (a config change, or waiters that
		// did not take them): wake now rather than through a timer.
		if b.hidx >= 0 {
			s.wakes.remove(b)
		}
		s.wake(b)
		return
	}
	b.wakeAt = Time(at)
	if b.hidx >= 0 {
		s.wakes.fix(b)
	} else {
		s.wakes.push(b)
	}
}

// wake unparks as many of b's waiting lanes as it holds whole tokens (all
// of them if b is unlimited), in the order they parked, and every
// subscription waiting on it if it holds a token. Woken lanes that do not
// use the tokens (their queue has no credit) stay runnable, and the pump
// lets b wake further lanes.
func (s *Sched) wake(b *tbucket) {
	n := math.MaxInt
	if b.limited {
		t := b.b.Tokens(int64(s.now)) + bucket.Epsilon
		if t < 1 {
			s.arm(b)
			return
		}
		if t < float64(math.MaxInt32) {
			n = int(t)
		}
	}
	woke := false
	for ; n > 0 && b.whead != nil; n-- {
		l := b.whead
		b.removeWaiter(l)
		l.tb = nil
		l.state = lsIdle
		s.laneSync(l)
		s.markDirty(l.key.q)
		woke = true
	}
	for b.subs != nil {
		sb := b.subs
		s.unparkSub(sb)
		s.resume(sb)
		woke = true
	}
	if woke && !b.woke {
		b.woke = true
		s.woke = append(s.woke, b)
	}
	if b.hidx >= 0 && b.nwait == 0 && b.subs == nil {
		s.wakes.remove(b)
	}
}

// rewake runs after a pump for a bucket that woke waiters: if tokens are
// left and lanes still wait, wake more; else arm its timer.
func (s *Sched) rewake(b *tbucket) {
	if b.nwait == 0 && b.subs == nil {
		if b.hidx >= 0 {
			s.wakes.remove(b)
		}
		return
	}
	s.arm(b)
}

// Subscriptions.

// limitBlock returns the first of sb's rate-limit buckets without a
// token, or nil.
func (s *Sched) limitBlock(sb *sub) *tbucket {
	now := int64(s.now)
	for _, lb := range sb.limits {
		if !lb.b.Has(now, 1) {
			return lb
		}
	}
	return nil
}

// subIn adds sb to its queue's eligible ring, last in turn.
func (s *Sched) subIn(sb *sub) {
	q := sb.q
	sb.state = subEligible
	if q.elig == nil {
		sb.next, sb.prev = sb, sb
		q.elig = sb
		return
	}
	sb.next = q.elig
	sb.prev = q.elig.prev
	q.elig.prev.next = sb
	q.elig.prev = sb
}

// subOut takes sb out of its queue's eligible ring.
func (s *Sched) subOut(sb *sub) {
	q := sb.q
	if sb.next == sb {
		q.elig = nil
	} else {
		sb.prev.next = sb.next
		sb.next.prev = sb.prev
		if q.elig == sb {
			q.elig = sb.next
		}
	}
	sb.next, sb.prev = nil, nil
	sb.state = subIdle
}

func (s *Sched) parkSub(sb *sub, lb *tbucket) {
	s.subOut(sb)
	sb.state = subParked
	sb.tb = lb
	sb.prev = nil
	sb.next = lb.subs
	if lb.subs != nil {
		lb.subs.prev = sb
	}
	lb.subs = sb
	s.arm(lb)
}

func (s *Sched) unparkSub(sb *sub) {
	lb := sb.tb
	if sb.prev != nil {
		sb.prev.next = sb.next
	} else {
		lb.subs = sb.next
	}
	if sb.next != nil {
		sb.next.prev = sb.prev
	}
	sb.next, sb.prev, sb.tb = nil, nil, nil
	sb.state = subIdle
}
