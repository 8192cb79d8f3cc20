package sched

import (
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"math"
	"slices"
)

// Digest returns a SHA-256 digest of the scheduler's state: the clock, the
// lease counter, and every queue (definition and effective settings,
// counters, the fair scheduler's state with its keys' order,
// idempotency keys, idempotent producers with their remembered
// sequences, fairness keys with their deficits, tags and weights, lanes
// in order and the order they are served in, every message with its
// state, attempts, due time and lease), subscription (credit, leases held
// in order, the order they take turns in, its own lease length), timer
// (in firing order), token bucket (with its waiters in order and its
// timer) and throttled
// redrive (its rate, key, progress and next move). What depends on
// when the shell took its Readys (queues left to pump, the last
// deadline) is left out. Two schedulers that
// applied the same commands to the same restored records have equal
// digests, and behave the same from then on; that is what replaying a log
// and replicating one rely on.
//
// It walks the whole state, in a canonical order, and changes nothing: it
// is for tests and consistency checks, not for hot paths.
func (s *Sched) Digest() [32]byte {
	d := digester{h: sha256.New()}
	d.int(int64(s.now))
	d.uint(s.lease)
	d.uint(s.tseq)

	names := sortedKeys(s.queues, cmp.Compare)
	d.uint(uint64(len(names)))
	for _, name := range names {
		d.queue(s, s.queues[name])
	}

	ids := sortedKeys(s.subs, cmp.Compare)
	d.uint(uint64(len(ids)))
	for _, id := range ids {
		sb := s.subs[id]
		d.uint(uint64(sb.id))
		d.str(sb.q.name)
		d.uint(uint64(sb.credit))
		d.uint(uint64(sb.held))
		d.uint(uint64(sb.state))
		d.bool(sb.closed)
		for _, l := range sb.limits {
			d.str(l.name)
		}
		for x := sb.lhead; x != 0; x = s.msg(x).next {
			m := s.msg(x)
			d.id(m.id)
			d.uint(s.leaseOf(m))
		}
		if sb.lease != 0 { // its own lease length
			d.int(int64(sb.lease))
		}
	}
	// The order subscriptions take turns in.
	var ring []SubID
	for _, name := range names {
		q := s.queues[name]
		ring = ring[:0]
		for sb := q.elig; sb != nil; sb = sb.next {
			if ring = append(ring, sb.id); sb.next == q.elig {
				break
			}
		}
		d.uint(uint64(len(ring)))
		for _, id := range ring {
			d.uint(uint64(id))
		}
	}
	// The order timers fire in: by deadline, then by when they were set.
	timers := slices.Clone(s.timers.a)
	slices.SortFunc(timers, func(a, b xref) int {
		x, y := s.exts.at(uint32(a)), s.exts.at(uint32(b))
		return cmp.Or(cmp.Compare(x.due, y.due), cmp.Compare(x.tseq, y.tseq))
	})
	d.uint(uint64(len(timers)))
	for _, t := range timers {
		e := s.exts.at(uint32(t))
		m := s.msg(e.msg)
		d.str(s.queueOf(m).name)
		d.id(m.id)
		d.uint(e.tseq)
	}

	keys := sortedKeys(s.buckets, cmp.Compare)
	d.uint(uint64(len(keys)))
	for _, k := range keys {
		d.bucket(s.buckets[k])
	}
	// Throttled redrives, in the order they run (none adds nothing).
	for _, q := range s.redrives {
		r := q.redrive
		d.str(q.name)
		d.uint(uint64(r.rate))
		d.str(r.key)
		d.uint(r.moved)
		d.int(int64(r.next))
		d.uint(uint64(len(r.ids)))
		for _, id := range r.ids {
			d.id(id)
		}
	}
	var sum [32]byte
	d.h.Sum(sum[:0])
	return sum
}

// QueueDigest returns a SHA-256 digest of one queue's state and its
// dead-letter queue's, as Digest walks them; the zero digest if there is
// no such queue. Two schedulers that restored the same records of a
// queue (sched.QueueRanges) have equal digests for it.
func (s *Sched) QueueDigest(name string) [32]byte {
	var sum [32]byte
	q := s.queues[name]
	if q == nil {
		return sum
	}
	d := digester{h: sha256.New()}
	d.queue(s, q)
	if q.dlq != nil {
		d.queue(s, q.dlq)
	}
	d.h.Sum(sum[:0])
	return sum
}

func (d *digester) queue(s *Sched, q *queue) {
	d.str(q.name)
	sp := &q.spec
	d.int(int64(sp.VisibilityTimeout))
	d.str(sp.OnEnqueue)
	d.str(sp.OnFailure)
	d.uint(uint64(sp.MaxAttempts))
	d.int(int64(sp.BackoffBase))
	d.int(int64(sp.BackoffMax))
	d.int(int64(sp.DedupWindow))
	if q.parent != nil {
		d.str(q.parent.name)
	}
	d.uint(q.ready)
	d.uint(q.delayed)
	d.uint(q.leased)
	d.bool(q.deleted)
	d.int(int64(q.vis))
	d.uint(uint64(q.policy.MaxAttempts))
	d.int(int64(q.policy.BackoffBase))
	d.int(int64(q.policy.BackoffMax))
	d.int(int64(q.window))
	d.str(q.fair.name())
	if f := &q.fair; f.stfq {
		d.uint(f.fq.V())
		d.uint(f.fq.Seq())
		d.uint(uint64(f.fq.Len()))
		d.uint(uint64(f.budget))
		d.int(int64(f.idle))
		d.int(f.credit)
		d.uint(uint64(f.nlat))
		for k := f.lhead; k != nil; k = k.lnext {
			d.str(k.name)
		}
		// Cost by time: the estimates and open leases (nothing without).
		if f.byTime {
			d.uint(uint64(f.est))
			for _, l := range sortedKeys(f.held, cmp.Compare) {
				d.uint(l)
				d.int(int64(f.held[l].start))
				d.uint(uint64(f.held[l].est))
			}
		}
		// Tenants: the top scheduler and each tenant's (nothing without,
		// as before tenants).
		if f.sep != "" {
			d.str(f.sep)
			d.uint(f.top.V())
			d.uint(f.top.Seq())
			d.uint(uint64(f.top.Len()))
			for _, name := range sortedKeys(f.tenants, cmp.Compare) {
				t := f.tenants[name]
				d.str(name)
				d.uint(t.sflow.Tag())
				d.uint(t.sflow.Seq())
				d.uint(uint64(t.sflow.Weight()))
				d.bool(t.sflow.Active())
				d.uint(t.keys.V())
				d.uint(t.keys.Seq())
				d.uint(uint64(t.keys.Len()))
				d.int(int64(t.nkeys))
				d.int(int64(t.nback))
				d.int(int64(t.idleSince))
			}
		}
		// Keys that left a moment ago, remembered for their return.
		d.uint(uint64(len(f.recent)))
		for _, name := range sortedKeys(f.recent, cmp.Compare) {
			d.str(name)
			d.int(int64(f.recent[name].at))
			d.uint(f.recent[name].tag)
		}
		d.uint(uint64(len(f.recentQ) - f.rhead))
		for _, e := range f.recentQ[f.rhead:] {
			d.str(e.name)
			d.int(int64(e.at))
		}
	} else {
		d.uint(uint64(f.drr.Quantum()))
		d.uint(f.drr.Round())
		d.uint(f.drr.Target())
		d.uint(uint64(f.drr.Len()))
		// The visiting order, which round each key waits for, and the
		// round its deficit was credited for.
		f.drr.Each(func(k *fkey, next bool) {
			d.str(k.name)
			d.bool(next)
			d.uint(k.flow.State().Round)
		})
	}
	if d.bool(q.dhidx >= 0); q.dhidx >= 0 {
		d.int(int64(q.dnext))
	}

	type idk struct {
		key     string
		id      [16]byte
		expires int64
	}
	var dedup []idk
	q.dedup.All(func(key []byte, id [16]byte, expires int64) {
		dedup = append(dedup, idk{string(key), id, expires})
	})
	slices.SortFunc(dedup, func(a, b idk) int { return cmp.Compare(a.key, b.key) })
	d.uint(uint64(len(dedup)))
	for _, e := range dedup {
		d.str(e.key)
		d.id(e.id)
		d.int(e.expires)
	}

	pids := sortedKeys(q.prods, func(a, b [16]byte) int { return slices.Compare(a[:], b[:]) })
	d.uint(uint64(len(pids)))
	for _, pid := range pids {
		p := q.prods[pid]
		d.id(p.id)
		d.uint(p.floor)
		d.int(int64(p.expires))
		if q.dunsorted {
			// As Restore left it, for sortProducers: entries and run
			// keys in record order.
			d.uint(uint64(len(p.ents)))
			for _, e := range p.ents {
				d.uint(e.seq)
				d.id(e.id)
			}
			d.uint(uint64(len(p.runs)))
			for _, r := range p.runs {
				d.uint(r)
			}
			continue
		}
		d.uint(uint64(p.n))
		for i := 0; i < p.n; i++ {
			e := p.at(i)
			d.uint(e.seq)
			d.id(e.id)
			d.bool(p.endsRun(i))
		}
	}

	fks := sortedKeys(q.keys, cmp.Compare)
	d.uint(uint64(len(fks)))
	for _, name := range fks {
		k := q.keys[name]
		d.str(k.name)
		if q.fair.stfq {
			d.uint(k.sflow.Tag())
			d.uint(k.sflow.Seq())
			d.int(int64(k.idleSince))
			d.uint(uint64(k.left))
			d.bool(k.inLat)
			if q.fair.byTime {
				d.uint(uint64(k.est))
			}
		} else {
			d.int(k.flow.Deficit())
		}
		d.uint(uint64(k.flow.Weight()))
		d.bool(q.fair.active(k))
		d.int(int64(k.pending))
		d.uint(k.delivered)
		d.bool(k.backlogged)
		lanes := []*lane{&k.dflt}
		for _, l := range k.lanes {
			lanes = append(lanes, l)
		}
		slices.SortFunc(lanes[1:], func(a, b *lane) int {
			return cmp.Or(cmp.Compare(canon(a.ts), canon(b.ts)), cmp.Compare(a.okey, b.okey), cmp.Compare(a.prio, b.prio))
		})
		for _, l := range lanes {
			d.str(canon(l.ts))
			d.str(l.okey)
			d.uint(uint64(l.prio))
			d.uint(uint64(l.state))
			d.int(int64(l.n))
			for x := l.head; x != 0; x = s.msg(x).next {
				d.id(s.msg(x).id)
			}
			if l.inflight != 0 {
				d.id(s.msg(l.inflight).id)
			}
		}
		// The order the key serves its runnable lanes in.
		d.int(int64(k.nrun))
		k.eachRunnable(func(l *lane) {
			d.str(canon(l.ts))
			d.str(l.okey)
			d.uint(uint64(l.prio))
		})
	}

	msgs := make([]mref, 0, q.msgs.len())
	for x := range q.msgs.all() {
		msgs = append(msgs, x)
	}
	s.sortByID(msgs)
	d.uint(uint64(len(msgs)))
	for _, x := range msgs {
		m := s.msg(x)
		e := s.ext(m)
		d.id(m.id)
		d.str(s.laneOf(m).key.name)
		d.uint(uint64(m.state))
		d.uint(uint64(m.flags &^ fFresh))
		d.int(int64(m.enq))
		d.int(int64(e.due))
		d.uint(e.lease)
		d.uint(uint64(e.attempts))
		d.uint(uint64(m.cost))
		d.uint(uint64(s.weightOf(m)))
		d.uint(uint64(s.prioOf(m)))
		d.uint(uint64(e.ttl))
		if sb := s.slots[e.slot]; sb != nil {
			d.uint(uint64(sb.id))
		} else {
			d.uint(0)
		}
		d.str(s.reasons[x])
	}

	lims := sortedKeys(q.limits, cmp.Compare)
	d.uint(uint64(len(lims)))
	for _, name := range lims {
		d.bucket(q.limits[name])
	}
}

func (d *digester) bucket(b *tbucket) {
	d.str(b.name)
	d.bool(b.limited)
	d.float(b.b.Rate())
	d.float(b.b.Burst())
	tokens, last := b.b.State()
	d.float(tokens)
	d.int(last)
	d.int(int64(b.nwait))
	for l := b.whead; l != nil; l = l.next {
		d.str(l.key.name)
		d.str(canon(l.ts))
		d.str(l.okey)
	}
	n := 0
	for sb := b.subs; sb != nil; sb = sb.next {
		n++
	}
	d.uint(uint64(n))
	for sb := b.subs; sb != nil; sb = sb.next {
		d.uint(uint64(sb.id))
	}
	if d.bool(b.hidx >= 0); b.hidx >= 0 {
		d.int(int64(b.wakeAt))
	}
}

func canon(ts *tset) string {
	if ts == nil {
		return ""
	}
	return ts.canon
}

// digester writes fields into a hash, each length-prefixed or fixed-size
// so that no two states write the same bytes.
type digester struct {
	h   hash.Hash
	buf [binary.MaxVarintLen64]byte
}

func (d *digester) uint(v uint64) { d.h.Write(binary.AppendUvarint(d.buf[:0], v)) }
func (d *digester) int(v int64)   { d.h.Write(binary.AppendVarint(d.buf[:0], v)) }
func (d *digester) float(v float64) {
	d.uint(math.Float64bits(v))
}
func (d *digester) bool(v bool) {
	if v {
		d.uint(1)
	} else {
		d.uint(0)
	}
}
func (d *digester) str(v string) {
	d.uint(uint64(len(v)))
	d.h.Write([]byte(v))
}
func (d *digester) id(id [16]byte) { d.h.Write(id[:]) }
