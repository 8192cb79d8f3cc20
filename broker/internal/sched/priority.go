package sched

// Priorities within a fairness key. A message's priority (Message.Priority)
// orders it among the messages of its own fairness key only: the key
// serves its runnable lanes highest priority first, round robin among
// lanes of equal priority, while the fair policy (drr, stfq) chooses
// among keys exactly as without priorities, so a key's share does not
// depend on its messages' priorities.
//
//   - A lane without an ordering key holds messages of one priority
//     (the priority is part of its laneID), so each priority of a key is
//     first in first out, by throttle key set.
//   - A lane with an ordering key holds that key's messages of every
//     priority, in enqueue order: ordering wins, and the lane competes at
//     the priority of its next message.
//   - A lane whose next message waits for a throttle token parks as
//     before, and the key serves its next lane by priority: a waiting
//     high-priority message holds back no message that does not need its
//     bucket.
//
// Cost. A message's priority takes the top four bits of its record's
// weight field (table.go), which holds weights below 2^12 (larger ones go
// to the extension record, as weights of 2^16 and more did). A key whose
// lanes have all been of the default priority keeps one runnable ring
// and no prioRings; the first lane of another priority to become
// runnable gives the key its prioRings (one small allocation per key).

// Priorities within a fairness key.
const (
	// DefaultPriority is the priority of a message enqueued without one
	// (Message.Priority 0).
	DefaultPriority = 4
	// MaxPriority is the highest priority; 0 is the lowest.
	MaxPriority = 9
)

// rankOf returns the priority, 0 to 9, that p encodes as Message.Priority
// does.
func rankOf(p uint8) uint8 {
	if p == 0 {
		return DefaultPriority
	}
	return p - 1
}

// prioRings are a fairness key's runnable rings, one per priority: pos[r]
// is the next lane to serve of priority r, n[r] the ring's length.
type prioRings struct {
	pos [MaxPriority + 1]*lane
	n   [MaxPriority + 1]int32
}

// top returns the highest priority with a runnable lane, or -1.
func (p *prioRings) top() int {
	for r := MaxPriority; r >= 0; r-- {
		if p.n[r] > 0 {
			return r
		}
	}
	return -1
}

// laneRank returns the priority l competes at: its messages' if it has
// no ordering key, else its next message's (the default if it has none:
// only a bad image makes such a lane runnable).
func (s *Sched) laneRank(l *lane) uint8 {
	if l.okey == "" || l.head == 0 {
		return rankOf(l.prio)
	}
	return rankOf(s.prioOf(s.msg(l.head)))
}

// ringInsert adds l at the tail of the ring whose next lane is *pos.
func ringInsert(pos **lane, l *lane) {
	if *pos == nil {
		l.next, l.prev = l, l
		*pos = l
		return
	}
	h := *pos
	l.next = h
	l.prev = h.prev
	h.prev.next = l
	h.prev = l
}

// ringCut takes l out of the ring whose next lane is *pos.
func ringCut(pos **lane, l *lane) {
	if l.next == l {
		*pos = nil
	} else {
		l.prev.next = l.next
		l.next.prev = l.prev
		if *pos == l {
			*pos = l.next
		}
	}
	l.next, l.prev = nil, nil
}

// prioAdd adds l, of priority r, to k's rings, giving k its prioRings if
// it has none yet.
func (s *Sched) prioAdd(k *fkey, l *lane, r uint8) {
	p := k.pr
	if p == nil {
		p = &prioRings{}
		p.pos[DefaultPriority], p.n[DefaultPriority] = k.run, k.nrun
		k.pr = p
	} else if t := p.top(); t >= 0 {
		p.pos[t] = k.run // where the top ring's rotation stands
	}
	ringInsert(&p.pos[r], l)
	p.n[r]++
	k.nrun++
	k.run = p.pos[p.top()]
}

// prioRemove takes l out of k's rings.
func (s *Sched) prioRemove(k *fkey, l *lane) {
	p := k.pr
	if t := p.top(); t >= 0 {
		p.pos[t] = k.run
	}
	ringCut(&p.pos[l.rank], l)
	p.n[l.rank]--
	k.nrun--
	if t := p.top(); t >= 0 {
		k.run = p.pos[t]
	} else {
		k.run = nil
	}
}

// eachRunnable calls f on k's runnable lanes, highest priority first,
// each ring from its next lane.
func (k *fkey) eachRunnable(f func(*lane)) {
	if k.pr == nil {
		for i, l := int32(0), k.run; i < k.nrun; i, l = i+1, l.next {
			f(l)
		}
		return
	}
	p := k.pr
	if t := p.top(); t >= 0 {
		p.pos[t] = k.run
	}
	for r := MaxPriority; r >= 0; r-- {
		for i, l := int32(0), p.pos[r]; i < p.n[r]; i, l = i+1, l.next {
			f(l)
		}
	}
}
