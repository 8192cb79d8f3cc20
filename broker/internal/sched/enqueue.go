package sched

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

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
	l := s.laneFor(q, fk, ts, m.OrderingKey)
	q.fair.setWeight(l.key, weight)

	meta := MessageMeta{
		EnqueuedAt:   s.now,
		Due:          due,
		Weight:       weight,
		PayloadSize:  m.PayloadSize,
		FairnessKey:  fk,
		ThrottleKeys: names,
		OrderingKey:  m.OrderingKey,
	}
	b := s.cur
	key := appendMsgKey(b.alloc(msgKeyLen(q.name))[:0], q.name, m.ID)
	s.put(key, appendMsgRecord(b.alloc(msgRecordLen(m, fk, names))[:0], &meta, m.Body))

	x := s.newMsg()
	x.id = m.ID
	x.enq = s.now
	x.cost = m.PayloadSize
	x.weight = weight
	q.counts.Enqueued++
	s.attach(q, x, l)
	if due > 0 {
		x.state = stDelayed
		q.delayed++
		s.setTimer(x, due)
		if l.ordered() {
			// Keeps its place: the messages behind it wait for it.
			l.pushBack(x)
			x.flags |= fListed
		}
	} else {
		x.state = stReady
		q.ready++
		l.key.pending++
		l.pushBack(x)
		x.flags |= fListed
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
	case q.msgs.get(m.ID) != nil || q.dlq.msgs.get(m.ID) != nil:
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

// laneFor returns the lane of (fairness key, throttle set, ordering key)
// in q, creating the key and the lane as needed.
func (s *Sched) laneFor(q *queue, fk string, ts *tset, okey string) *lane {
	k := q.keys[fk]
	if k == nil {
		k = &fkey{q: q, name: fk}
		q.fair.adopt(k, s.now)
		k.dflt.key = k
		q.keys[fk] = k
	}
	if ts == nil && okey == "" {
		return &k.dflt
	}
	id := laneID{ts: ts, okey: okey}
	l := k.lanes[id]
	if l == nil {
		if k.lanes == nil {
			k.lanes = make(map[laneID]*lane)
		}
		l = &lane{key: k, ts: ts, okey: okey}
		if ts != nil {
			ts.refs++
		}
		k.lanes[id] = l
	}
	return l
}

// attach makes m a message of lane l in q, in no state yet.
func (s *Sched) attach(q *queue, m *msg, l *lane) {
	m.lane = l
	m.state = stNone
	l.refs++
	l.key.refs++
	q.msgs.put(m)
}

// detach takes m, in no state, out of its lane and queue, dropping the
// lane and the key if nothing else holds them.
func (s *Sched) detach(m *msg) {
	l := m.lane
	k := l.key
	if l.inflight == m {
		l.inflight = nil
	}
	k.q.msgs.del(m)
	l.refs--
	k.refs--
	m.lane = nil
	s.laneSync(l)
	if l.refs == 0 && l != &k.dflt {
		delete(k.lanes, laneID{ts: l.ts, okey: l.okey})
		if l.ts != nil {
			s.releaseTset(l.ts)
		}
	}
	if k.refs == 0 {
		k.q.fair.drop(k, s.now)
		delete(k.q.keys, k.name)
	}
}

// leave takes m out of its state: its counts, the timers, its lease ring
// and its lane's list. An ordered lane keeps m as its in-flight message.
func (s *Sched) leave(m *msg) {
	l := m.lane
	k := l.key
	q := k.q
	switch m.state {
	case stReady:
		q.ready--
		k.pending--
	case stDelayed:
		q.delayed--
		s.timers.remove(m)
	case stLeased:
		s.timers.remove(m)
		s.endLease(m)
	case stDeciding:
		q.delayed--
	}
	if m.flags&fListed != 0 {
		l.unlink(m)
		m.flags &^= fListed
	}
	m.state = stNone
}

// remove deletes m, in no state, from memory and storage.
func (s *Sched) remove(m *msg) {
	home := m.queue().home().name
	b := s.cur
	s.del(appendMsgKey(b.alloc(msgKeyLen(home))[:0], home, m.id))
	if m.flags&fState != 0 {
		s.del(appendStateKey(b.alloc(stateKeyLen(home))[:0], home, m.id))
	}
	s.detach(m)
	s.freeMsg(m)
}

// maxFree bounds the recycled message structs kept.
const maxFree = 4096

func (s *Sched) newMsg() *msg {
	if n := len(s.free); n > 0 {
		m := s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
		return m
	}
	return &msg{hidx: -1}
}

func (s *Sched) freeMsg(m *msg) {
	s.setReason(m, "")
	if len(s.free) < maxFree {
		*m = msg{hidx: -1}
		s.free = append(s.free, m)
	}
}

// setReason records m's last failure reason, cut to MaxReasonLen; ""
// clears it.
func (s *Sched) setReason(m *msg, r string) {
	if r == "" {
		if m.flags&fReason != 0 {
			delete(s.reasons, m)
			m.flags &^= fReason
		}
		return
	}
	s.reasons[m] = cutReason(r)
	m.flags |= fReason
}

// reason returns m's last failure reason.
func (s *Sched) reason(m *msg) string {
	if m.flags&fReason == 0 {
		return ""
	}
	return s.reasons[m]
}
