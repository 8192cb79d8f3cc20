package sched

// Idempotency keys. Each queue remembers its keys in an idem.Table (see
// that package for the structure and its memory per key); Sched.expiry
// orders the queues by their first expiry, so one timer serves them all.

// remember looks key up in q's window: if it is remembered, it returns the
// first message's ID and dup; else it remembers key for id, persists it,
// and returns id.
func (s *Sched) remember(q *queue, key string, id [16]byte) (first [16]byte, dup bool) {
	if q.dunsorted {
		s.sortRestored()
	}
	expires := s.now.Add(q.window)
	if first, dup = q.dedup.Remember(key, id, int64(s.now), int64(expires)); dup {
		return first, true
	}
	b := s.cur
	k := appendDedupKey(b.alloc(len(prefixDedup) + len(q.name) + 1 + len(key))[:0], q.name, key)
	s.put(k, appendDedupRecord(b.alloc(1 + 16 + 8)[:0], id, expires))
	if q.dhidx < 0 {
		s.placeDedup(q)
	}
	return id, false
}

// delDedup deletes the record of a forgotten key.
func (s *Sched) delDedup(q *queue, key []byte) {
	b := s.cur
	k := append(b.alloc(len(prefixDedup) + len(q.name) + 1 + len(key))[:0], prefixDedup...)
	k = append(append(append(k, q.name...), 0), key...)
	s.del(k)
}

// expireDedup forgets q's keys and producers whose window has passed.
func (s *Sched) expireDedup(q *queue) {
	q.dedup.Expire(int64(s.now), func(key []byte) { s.delDedup(q, key) })
	s.expireProducers(q)
	s.placeDedup(q)
}

// placeDedup puts q in Sched.expiry by its first expiry (of a key or a
// producer), or takes it out.
func (s *Sched) placeDedup(q *queue) {
	next, ok := q.nextExpiry()
	switch {
	case !ok && q.dhidx >= 0:
		s.expiry.remove(q)
	case !ok:
	case q.dhidx >= 0:
		q.dnext = next
		s.expiry.fix(q)
	default:
		q.dnext = next
		s.expiry.push(q)
	}
}

// sortRestored enters the queues whose keys or producers were restored in
// the expiry heap (the tables sort the keys themselves; sortProducers
// the producers).
func (s *Sched) sortRestored() {
	for _, q := range s.unsorted {
		q.dunsorted = false
		if !q.deleted {
			s.sortProducers(q)
			s.placeDedup(q)
		}
	}
	clear(s.unsorted)
	s.unsorted = s.unsorted[:0]
}
