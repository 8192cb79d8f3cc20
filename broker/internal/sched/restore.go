package sched

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"
)

// Restore loads one stored record. The shell calls it for every record
// under Prefix, in key order, before the first Tick and before any
// command. Messages come back ready (or delayed until their stored due
// time) with the attempts recorded before the shutdown; leases do not
// survive it. Records that refer to something absent (a message of a
// deleted queue) are deleted in the first Ready. Restore fails on a
// record it cannot decode or a key it does not know; the error names the
// key.
func (s *Sched) Restore(key, value []byte) error {
	var err error
	switch {
	case bytes.HasPrefix(key, []byte(prefixQueue)):
		err = s.restoreQueue(key, value)
	case bytes.HasPrefix(key, []byte(prefixDedup)):
		err = s.restoreDedup(key, value)
	case bytes.HasPrefix(key, []byte(prefixMsg)):
		err = s.restoreMsg(key, value)
	case bytes.HasPrefix(key, []byte(prefixProducer)):
		err = s.restoreProducerRecord(key, value)
	case bytes.HasPrefix(key, []byte(prefixState)):
		err = s.restoreState(key, value)
	default:
		err = fmt.Errorf("unknown record kind")
	}
	if err != nil {
		return fmt.Errorf("restore record %q: %w", key, err)
	}
	return nil
}

// orphan schedules the deletion of a record that refers to nothing.
func (s *Sched) orphan(key []byte) {
	s.del(append(s.cur.alloc(len(key))[:0], key...))
}

func (s *Sched) restoreQueue(key, value []byte) error {
	name := string(key[len(prefixQueue):])
	spec, err := decodeQueueRecord(name, value)
	if err != nil {
		return err
	}
	if err := checkStored(&spec); err != nil {
		return err
	}
	if s.queues[name] != nil {
		return fmt.Errorf("queue %s restored twice", name)
	}
	s.addQueue(spec)
	return nil
}

func (s *Sched) restoreDedup(key, value []byte) error {
	rest := key[len(prefixDedup):]
	i := bytes.IndexByte(rest, 0)
	if i < 0 {
		return fmt.Errorf("no separator in key")
	}
	id, expires, err := decodeDedupRecord(value)
	if err != nil {
		return err
	}
	q := s.queues[string(rest[:i])]
	if q == nil || q.parent != nil {
		s.orphan(key)
		return nil
	}
	q.dedup.Restore(string(rest[i+1:]), id, int64(expires))
	if !q.dunsorted {
		q.dunsorted = true
		s.unsorted = append(s.unsorted, q)
	}
	return nil
}

// restoreProducerRecord restores a producer record or one of its run
// records; the header sorts first. A run's entries below the floor were
// forgotten.
func (s *Sched) restoreProducerRecord(key, value []byte) error {
	rest := key[len(prefixProducer):]
	i := bytes.IndexByte(rest, 0)
	if i < 0 || (len(rest)-i-1 != 16 && len(rest)-i-1 != 16+8) {
		return fmt.Errorf("malformed producer key")
	}
	var pid [16]byte
	copy(pid[:], rest[i+1:])
	if pid == [16]byte{} {
		return fmt.Errorf("zero producer")
	}
	q := s.queues[string(rest[:i])]
	if len(rest)-i-1 == 16 {
		floor, expires, err := decodeProducerRecord(value)
		if err != nil {
			return err
		}
		if q == nil || q.parent != nil {
			s.orphan(key)
			return nil
		}
		p := s.restoreProducer(q, pid)
		p.floor, p.expires = floor, expires
		return nil
	}
	last := binary.BigEndian.Uint64(rest[i+1+16:])
	run, err := decodeRunRecord(value, last)
	if err != nil {
		return err
	}
	var p *producer
	if q != nil && q.parent == nil {
		p = q.prods[pid]
	}
	if p == nil || last < p.floor {
		s.orphan(key)
		return nil
	}
	for _, e := range run {
		if e.seq >= p.floor {
			p.ents = append(p.ents, e)
		}
	}
	p.n = len(p.ents)
	p.runs = append(p.runs, last)
	return nil
}

func (s *Sched) restoreMsg(key, value []byte) error {
	name, id, ok := parseIDKey(key, prefixMsg)
	if !ok {
		return fmt.Errorf("malformed message key")
	}
	meta, _, err := DecodeMessageRecord(value)
	if err != nil {
		return err
	}
	q := s.queues[name]
	if q == nil || q.parent != nil {
		s.orphan(key)
		return nil
	}
	if q.msgs.get(&s.recs, id) != 0 || id == [16]byte{} {
		return fmt.Errorf("bad message id %s", formatID(id))
	}
	if meta.Priority == DefaultPriority+1 {
		meta.Priority = 0 // as Enqueue stores it
	}
	ts := s.internTset(meta.ThrottleKeys)
	l := s.laneFor(q, meta.FairnessKey, ts, meta.OrderingKey, meta.Priority)
	weight := max(meta.Weight, 1)
	q.fair.setWeight(l.key, weight)
	x, m := s.newMsg()
	m.id = id
	m.enq = meta.EnqueuedAt
	m.cost = meta.PayloadSize
	s.setWeight(x, m, weight)
	s.setPrio(x, m, meta.Priority)
	s.attach(q, x, m, l)
	if meta.Expires != 0 {
		ms := (meta.Expires - meta.EnqueuedAt + Time(time.Millisecond) - 1) / Time(time.Millisecond)
		s.extFor(x, m).ttl = uint32(min(max(ms, 1), Time(ttlMillis(MaxTTL))))
		q.ttls = true
	}
	if meta.Due > 0 {
		s.restoreDelayed(x, m, meta.Due)
	} else {
		s.restoreReady(x, m)
	}
	return nil
}

func (s *Sched) restoreState(key, value []byte) error {
	name, id, ok := parseIDKey(key, prefixState)
	if !ok {
		return fmt.Errorf("malformed state key")
	}
	r, err := decodeStateRecord(value)
	if err != nil {
		return err
	}
	q := s.queues[name]
	var x mref
	if q != nil && q.parent == nil {
		x = q.msgs.get(&s.recs, id)
	}
	if x == 0 {
		s.orphan(key)
		return nil
	}
	m := s.msg(x)
	if r.attempts != 0 || m.ext != 0 {
		s.extFor(x, m).attempts = r.attempts
	}
	s.setReason(x, m, r.lastErr)
	m.flags |= fState
	if r.noTTL {
		s.dropTTL(m)
		m.flags |= fNoTTL
		if m.state == stReady {
			s.untime(m) // its expiry; a delayed message is re-timed below
			s.clearDue(m)
		}
	}
	if r.dead {
		l := s.laneOf(m)
		s.leave(x, m)
		s.moveTo(x, m, s.laneFor(q.dlq, l.key.name, l.ts, l.okey, l.prio))
		m.flags |= fDead
		if r.due > 0 {
			s.restoreDelayed(x, m, r.due)
		} else {
			s.restoreReady(x, m)
		}
		return nil
	}
	s.restoreDue(x, m, r.due)
	return nil
}

// restoreDue sets the due time (0: ready) of restored message x, its
// record m, keeping its place in its lane when it stays there (always, in
// an ordered lane).
func (s *Sched) restoreDue(x mref, m *msg, due Time) {
	l := s.laneOf(m)
	k := l.key
	q := k.q
	switch {
	case due == 0 && m.state == stReady:
	case due > 0 && m.state == stDelayed:
		s.setDelay(x, m, due)
	case m.flags&fListed != 0 && due > 0: // ready → delayed, in place
		q.ready--
		k.pending--
		m.state = stDelayed
		q.delayed++
		s.setDelay(x, m, due)
		if !l.ordered() {
			s.unlink(l, x, m)
			m.flags &^= fListed
		}
	case m.flags&fListed != 0: // delayed → ready, in place
		s.timers.remove(m.ext)
		q.delayed--
		m.state = stReady
		s.clearDue(m)
		q.ready++
		k.pending++
	default: // delayed, out of the list → ready
		s.leave(x, m)
		s.restoreReady(x, m)
	}
	s.laneSync(l)
}

// restoreReady appends message x, its record m, in no state, to its lane.
func (s *Sched) restoreReady(x mref, m *msg) {
	l := s.laneOf(m)
	m.state = stReady
	l.key.q.ready++
	l.key.pending++
	s.pushBack(l, x, m)
	m.flags |= fListed
	if exp := s.expiresAt(m); exp != 0 {
		s.setTimer(x, m, exp)
	} else {
		s.clearDue(m) // a due time it had in its queue, dead-lettered
	}
	s.laneSync(l)
}

// restoreDelayed makes message x, its record m, in no state, wait until
// due; in an ordered lane it is appended to the list as well, to keep its
// place.
func (s *Sched) restoreDelayed(x mref, m *msg, due Time) {
	l := s.laneOf(m)
	m.state = stDelayed
	l.key.q.delayed++
	s.setDelay(x, m, due)
	if l.ordered() {
		s.pushBack(l, x, m)
		m.flags |= fListed
	}
	s.laneSync(l)
}
