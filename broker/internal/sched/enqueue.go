package sched

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// DefaultFairnessKey is the fairness key of messages that name none.
const DefaultFairnessKey = "default"

// MaxThrottleKeys bounds a message's throttle keys.
const MaxThrottleKeys = 64

// Enqueue appends messages to their queues. The reply is an
// []EnqueueResult, one per item in order; items fail alone. Each accepted
// message's record (and idempotency key, and producer sequence) is in
// this Ready's Persist, so the reply is durable once released. Strings in
// items are retained; Body is copied.
func (s *Sched) Enqueue(ref Ref, items []EnqueueItem) {
	b := s.cur
	start := len(b.enq)
	for i := range items {
		r := s.enqueue(&items[i])
		b.enq = append(b.enq, r)
	}
	if len(s.ptouched) > 0 {
		s.flushProducers()
	}
	s.reply(ref, b.enq[start:len(b.enq):len(b.enq)])
}

func (s *Sched) enqueue(it *EnqueueItem) EnqueueResult {
	q := s.queues[it.Queue]
	if q == nil {
		return EnqueueResult{Err: fmt.Errorf("enqueue %s: %w", it.Queue, fault.ErrQueueNotFound)}
	}
	m := &it.Msg
	if err := s.validateMessage(q, m); err != nil {
		return EnqueueResult{Err: fmt.Errorf("enqueue %s: %w", q.name, err)}
	}
	produced := m.ProducerID != [16]byte{}
	var p *producer
	if produced {
		if q.dunsorted {
			s.sortRestored()
		}
		var r EnqueueResult
		if p, r = s.checkProducer(q, m); r.Duplicate || r.Err != nil {
			return r
		}
	}
	if m.IdempotencyKey != "" {
		if first, dup := s.remember(q, m.IdempotencyKey, m.ID); dup {
			if produced {
				s.rememberSeq(q, p, m.ProducerID, m.Sequence, first)
			}
			return EnqueueResult{ID: first, Duplicate: true}
		}
	}
	if produced {
		s.rememberSeq(q, p, m.ProducerID, m.Sequence, m.ID)
	}
	var due Time
	if m.Delay > 0 {
		due = s.now.Add(m.Delay)
	}
	ts := s.internTset(m.ThrottleKeys)
	var names []string
	if ts != nil {
		names = ts.names
	}
	fk := cmp.Or(m.FairnessKey, DefaultFairnessKey)
	weight := max(m.Weight, 1)
	prio := m.Priority
	if prio == DefaultPriority+1 {
		prio = 0 // the default, named: one lane, one record format
	}
	l := s.laneFor(q, fk, ts, m.OrderingKey, prio)
	q.fair.setWeight(l.key, weight)

	meta := MessageMeta{
		EnqueuedAt:   s.now,
		Due:          due,
		Weight:       weight,
		PayloadSize:  m.PayloadSize,
		FairnessKey:  fk,
		ThrottleKeys: names,
		OrderingKey:  m.OrderingKey,
		Priority:     prio,
	}
	var ttl uint32
	if d := cmp.Or(m.TTL, q.spec.MessageTTL); d > 0 {
		ttl = ttlMillis(d)
		meta.Expires = s.now.Add(time.Duration(ttl) * time.Millisecond)
	}
	n := msgRecordLen(m, fk, names)
	if meta.Expires != 0 || meta.Priority != 0 {
		n += 8 + 1
	}
	b := s.cur
	key := appendMsgKey(b.alloc(msgKeyLen(q.name))[:0], q.name, m.ID)
	s.put(key, appendMsgRecord(b.alloc(n)[:0], &meta, m.Body))

	x, r := s.newMsg()
	r.id = m.ID
	r.enq = s.now
	r.cost = m.PayloadSize
	s.setWeight(x, r, weight)
	if prio != 0 {
		s.setPrio(x, r, prio)
	}
	q.counts.Enqueued++
	s.attach(q, x, r, l)
	if ttl != 0 {
		s.extFor(x, r).ttl = ttl
		q.ttls = true
	}
	if due > 0 {
		r.state = stDelayed
		q.delayed++
		s.setDelay(x, r, due)
		if l.ordered() {
			// Keeps its place: the messages behind it wait for it.
			s.pushBack(l, x, r)
			r.flags |= fListed
		}
	} else {
		r.state = stReady
		q.ready++
		l.key.pending++
		s.pushBack(l, x, r)
		r.flags |= fListed
		if ttl != 0 {
			s.setTimer(x, r, meta.Expires)
		}
	}
	s.laneSync(l)
	return EnqueueResult{ID: m.ID}
}

func (s *Sched) validateMessage(q *queue, m *Message) error {
	switch {
	case q.parent != nil:
		return fmt.Errorf("%s is a dead-letter queue; redrive it instead: %w", q.name, fault.ErrInvalidArgument)
	case m.ID == [16]byte{}:
		return fmt.Errorf("id: zero: %w", fault.ErrInvalidArgument)
	case q.msgs.get(&s.recs, m.ID) != 0 || q.dlq.msgs.get(&s.recs, m.ID) != 0:
		return fmt.Errorf("id %s: already in use: %w", formatID(m.ID), fault.ErrInvalidArgument)
	case len(m.FairnessKey) > math.MaxUint16:
		return fmt.Errorf("fairness_key: %d bytes, at most %d: %w", len(m.FairnessKey), math.MaxUint16, fault.ErrInvalidArgument)
	case len(m.OrderingKey) > math.MaxUint16:
		return fmt.Errorf("ordering_key: %d bytes, at most %d: %w", len(m.OrderingKey), math.MaxUint16, fault.ErrInvalidArgument)
	case len(m.IdempotencyKey) > math.MaxUint16:
		return fmt.Errorf("idempotency_key: %d bytes, at most %d: %w", len(m.IdempotencyKey), math.MaxUint16, fault.ErrInvalidArgument)
	case len(m.ThrottleKeys) > MaxThrottleKeys:
		return fmt.Errorf("throttle_keys: %d keys, at most %d: %w", len(m.ThrottleKeys), MaxThrottleKeys, fault.ErrInvalidArgument)
	case m.Delay < 0:
		return fmt.Errorf("delay: %v: must not be negative: %w", m.Delay, fault.ErrInvalidArgument)
	case m.TTL < 0 || m.TTL > MaxTTL:
		return fmt.Errorf("ttl: %s: want at most %s: %w", FormatDuration(m.TTL), FormatDuration(MaxTTL), fault.ErrInvalidArgument)
	case m.Priority > MaxPriority+1:
		return fmt.Errorf("priority: encoded %d: want 0 (the default, %d) or 1 to %d (priorities 0 to %d): %w", m.Priority, DefaultPriority, MaxPriority+1, MaxPriority, fault.ErrInvalidArgument)
	}
	for i, k := range m.ThrottleKeys {
		if len(k) == 0 || len(k) > math.MaxUint16 {
			return fmt.Errorf("throttle_keys[%d]: %d bytes, want 1 to %d: %w", i, len(k), math.MaxUint16, fault.ErrInvalidArgument)
		}
	}
	return nil
}

// internTset returns the interned set of the given throttle keys, nil for
// none. It does not allocate for a set already in use.
func (s *Sched) internTset(keys []string) *tset {
	if len(keys) == 0 {
		return nil
	}
	sk := append(s.keys[:0], keys...)
	slices.Sort(sk)
	sk = slices.Compact(sk)
	c := s.scratch[:0]
	for _, k := range sk {
		c = binary.AppendUvarint(c, uint64(len(k)))
		c = append(c, k...)
	}
	s.scratch = c
	defer func() { clear(sk); s.keys = sk[:0] }()
	if ts := s.tsets[string(c)]; ts != nil {
		return ts
	}
	ts := &tset{canon: string(c), names: make([]string, len(sk)), buckets: make([]*tbucket, len(sk))}
	for i, name := range sk {
		b := s.bucketFor(name)
		b.refs++
		ts.names[i] = b.name
		ts.buckets[i] = b
	}
	s.tsets[ts.canon] = ts
	return ts
}

func (s *Sched) releaseTset(ts *tset) {
	ts.refs--
	if ts.refs > 0 {
		return
	}
	delete(s.tsets, ts.canon)
	for _, b := range ts.buckets {
		b.refs--
		s.dropBucketIfUnused(b)
	}
}

// bucketFor returns the throttle bucket of key, creating an unlimited one.
func (s *Sched) bucketFor(key string) *tbucket {
	b := s.buckets[key]
	if b == nil {
		b = &tbucket{name: key, hidx: -1}
		s.buckets[key] = b
	}
	return b
}

func (s *Sched) dropBucketIfUnused(b *tbucket) {
	if b.refs == 0 && !b.limited {
		if b.hidx >= 0 {
			s.wakes.remove(b)
		}
		delete(s.buckets, b.name)
	}
}

// laneFor returns the lane of (fairness key, throttle set, ordering key,
// priority) in q, creating the key and the lane as needed. The priority
// prio, encoded as Message.Priority, is not part of an ordered lane's
// identity: an ordering key's messages share one lane.
func (s *Sched) laneFor(q *queue, fk string, ts *tset, okey string, prio uint8) *lane {
	k := q.keys[fk]
	if k == nil {
		k = &fkey{q: q, name: fk}
		q.fair.adopt(k, s.now)
		k.dflt.key = k
		s.addLane(&k.dflt)
		q.keys[fk] = k
	}
	if okey != "" {
		prio = 0
	}
	if ts == nil && okey == "" && prio == 0 {
		return &k.dflt
	}
	id := laneID{ts: ts, okey: okey, prio: prio}
	l := k.lanes[id]
	if l == nil {
		if k.lanes == nil {
			k.lanes = make(map[laneID]*lane)
		}
		l = &lane{key: k, ts: ts, okey: okey, prio: prio}
		if ts != nil {
			ts.refs++
		}
		s.addLane(l)
		k.lanes[id] = l
	}
	return l
}

// attach makes message x, its record m, a message of lane l in q, in no
// state yet.
func (s *Sched) attach(q *queue, x mref, m *msg, l *lane) {
	m.lane = l.idx
	m.state = stNone
	l.refs++
	l.key.refs++
	q.msgs.put(&s.recs, x)
}

// detach takes message x, its record m, in no state, out of its lane and
// queue, dropping the lane and the key if nothing else holds them.
func (s *Sched) detach(x mref, m *msg) {
	l := s.laneOf(m)
	k := l.key
	if l.inflight == x {
		l.inflight = 0
	}
	k.q.msgs.del(&s.recs, x)
	l.refs--
	k.refs--
	m.lane = 0
	s.laneSync(l)
	if l.refs == 0 && l != &k.dflt {
		delete(k.lanes, laneID{ts: l.ts, okey: l.okey, prio: l.prio})
		s.dropLane(l)
		if l.ts != nil {
			s.releaseTset(l.ts)
		}
	}
	if k.refs == 0 {
		k.q.fair.drop(k, s.now)
		delete(k.q.keys, k.name)
		s.dropLane(&k.dflt)
	}
}

// leave takes message x, its record m, out of its state: its counts, the
// timers, its lease list and its lane's list. An ordered lane keeps x as
// its in-flight message.
func (s *Sched) leave(x mref, m *msg) {
	l := s.laneOf(m)
	k := l.key
	q := k.q
	switch m.state {
	case stReady:
		q.ready--
		k.pending--
		s.untime(m) // its expiry
	case stDelayed:
		q.delayed--
		s.untime(m) // not in the heap if its timer fired (expire)
	case stLeased:
		s.timers.remove(m.ext)
		s.endLease(x, m)
	case stDeciding:
		q.delayed--
	}
	if m.flags&fListed != 0 {
		s.unlink(l, x, m)
		m.flags &^= fListed
	}
	m.state = stNone
}

// remove deletes message x, its record m, in no state, from memory and
// storage.
func (s *Sched) remove(x mref, m *msg) {
	home := s.queueOf(m).home().name
	b := s.cur
	s.del(appendMsgKey(b.alloc(msgKeyLen(home))[:0], home, m.id))
	if m.flags&fState != 0 {
		s.del(appendStateKey(b.alloc(stateKeyLen(home))[:0], home, m.id))
	}
	s.detach(x, m)
	s.freeMsg(x)
}

// setReason records the last failure reason of message x, its record m,
// cut to MaxReasonLen; "" clears it.
func (s *Sched) setReason(x mref, m *msg, r string) {
	if r == "" {
		if m.flags&fReason != 0 {
			delete(s.reasons, x)
			m.flags &^= fReason
		}
		return
	}
	s.reasons[x] = cutReason(r)
	m.flags |= fReason
}

// reason returns the last failure reason of message x, its record m.
func (s *Sched) reason(x mref, m *msg) string {
	if m.flags&fReason == 0 {
		return ""
	}
	return s.reasons[x]
}
