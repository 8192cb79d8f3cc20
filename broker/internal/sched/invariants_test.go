package sched

import (
	"fmt"
	"math/bits"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched/bucket"
)

// checkInvariants verifies the scheduler's internal consistency: every
// message in exactly one state and counted once, every list and ring
// agreeing with the flags that claim membership, refcounts exact. With
// pumped set (right after HasReady or Ready) it also checks liveness: no
// queue with an eligible subscription has a runnable key, and no bucket
// holds a whole token while lanes wait on it.
func checkInvariants(s *Sched, pumped bool) error {
	inHeap := func(m *msg) bool {
		if m.ext == 0 {
			return false
		}
		i := int(s.exts.at(uint32(m.ext)).heap) - 1
		return i >= 0 && i < len(s.timers.a) && s.timers.a[i] == m.ext
	}
	for i, t := range s.timers.a {
		e := s.exts.at(uint32(t))
		m := s.msg(e.msg)
		if e.heap != uint32(i+1) || m.ext != t {
			return fmt.Errorf("timer heap: %s at %d has index %d", formatID(m.id), i, int(e.heap)-1)
		}
		if m.state != stDelayed && m.state != stLeased && (m.state != stReady || s.expiresAt(m) == 0) {
			return fmt.Errorf("timer heap: %s in state %v (expiry %d)", formatID(m.id), m.state, s.expiresAt(m))
		}
		if exp := s.expiresAt(m); exp != 0 && m.state != stLeased && e.due > exp {
			return fmt.Errorf("timer heap: %s in state %v due %d after its expiry %d", formatID(m.id), m.state, e.due, exp)
		}
		if i > 0 && s.timers.o.before(t, s.timers.a[(i-1)/2]) {
			return fmt.Errorf("timer heap: order broken at %d", i)
		}
	}
	for i, l := range s.lanes {
		if l != nil && l.idx != uint32(i) {
			return fmt.Errorf("lane table: lane %q of key %q at %d has index %d", l.okey, l.key.name, i, l.idx)
		}
	}
	leases := make(map[uint64]mref)
	heldBy := make(map[*sub]uint32)
	fresh := make(map[mref]bool)
	for _, p := range s.cur.dl {
		if s.holds(p.m, p.lease) {
			fresh[p.m] = true
		}
	}
	var nmsgs, nexts int
	for name, q := range s.queues {
		if q.name != name || q.deleted {
			return fmt.Errorf("queue %s: registered as %s (deleted %v)", q.name, name, q.deleted)
		}
		var ready, delayed, leased uint64
		pending := make(map[*fkey]int32)
		lrefs := make(map[*lane]int32)
		krefs := make(map[*fkey]int32)
		for x := range q.msgs.all() {
			m := s.msg(x)
			id := m.id
			nmsgs++
			if q.msgs.get(&s.recs, id) != x || m.lane == 0 || int(m.lane) >= len(s.lanes) || s.laneOf(m) == nil || s.queueOf(m) != q {
				return fmt.Errorf("queue %s: message %s misfiled", name, formatID(id))
			}
			l := s.laneOf(m)
			e := s.ext(m)
			if m.ext != 0 {
				nexts++
				if e.msg != x {
					return fmt.Errorf("queue %s: message %s: extension record of message %d", name, formatID(id), e.msg)
				}
			}
			if w := s.weightOf(m); w == 0 || (m.weight&weightMask == 0) != (w >= 1<<weightBits) {
				return fmt.Errorf("queue %s: message %s: weight %d kept as %d", name, formatID(id), w, m.weight)
			}
			if (e.lease != 0) != (m.state == stLeased) || (e.slot != 0 && m.state != stLeased) {
				return fmt.Errorf("queue %s: message %s in state %v with lease %d, slot %d", name, formatID(id), m.state, e.lease, e.slot)
			}
			if (m.flags&fDead != 0) != (q.parent != nil) {
				return fmt.Errorf("queue %s: message %s: dead flag %v in a queue with parent %v", name, formatID(id), m.flags&fDead != 0, q.parent != nil)
			}
			if (m.flags&fReason != 0) != (s.reasons[x] != "") {
				return fmt.Errorf("queue %s: message %s: reason flag %v, reason %q", name, formatID(id), m.flags&fReason != 0, s.reasons[x])
			}
			lrefs[l]++
			krefs[l.key]++
			if (m.flags&fFresh != 0) != fresh[x] {
				return fmt.Errorf("queue %s: message %s: fresh flag %v, delivered in the Ready being built %v", name, formatID(id), m.flags&fFresh != 0, fresh[x])
			}
			switch m.state {
			case stReady:
				ready++
				pending[l.key]++
				if m.flags&fListed == 0 || inHeap(m) != (s.expiresAt(m) != 0) {
					return fmt.Errorf("queue %s: ready message %s: listed %v, in heap %v, expiry %d", name, formatID(id), m.flags&fListed != 0, inHeap(m), s.expiresAt(m))
				}
			case stDelayed:
				delayed++
				if !inHeap(m) {
					return fmt.Errorf("queue %s: delayed message %s not in the timer heap", name, formatID(id))
				}
				if m.flags&fListed != 0 && !l.ordered() {
					return fmt.Errorf("queue %s: delayed message %s listed in an unordered lane", name, formatID(id))
				}
			case stLeased:
				leased++
				if !inHeap(m) || m.flags&fListed != 0 {
					return fmt.Errorf("queue %s: leased message %s: in heap %v, listed %v", name, formatID(id), inHeap(m), m.flags&fListed != 0)
				}
				if other := leases[e.lease]; other != 0 {
					return fmt.Errorf("lease %d held by %s and %s", e.lease, formatID(s.msg(other).id), formatID(id))
				}
				leases[e.lease] = x
				if e.slot == 0 {
					// Its subscription closed: in no list.
					if m.next != 0 || m.prev != 0 {
						return fmt.Errorf("queue %s: leased message %s of a closed subscription still linked", name, formatID(id))
					}
					break
				}
				if int(e.slot) >= len(s.slots) || s.slots[e.slot] == nil || s.slots[e.slot].q != q {
					return fmt.Errorf("queue %s: leased message %s: slot %d names no subscription of the queue", name, formatID(id), e.slot)
				}
				heldBy[s.slots[e.slot]]++
			case stDeciding:
				delayed++
				if inHeap(m) || m.flags&fListed != 0 {
					return fmt.Errorf("queue %s: deciding message %s in heap or list", name, formatID(id))
				}
			default:
				return fmt.Errorf("queue %s: message %s in state %v", name, formatID(id), m.state)
			}
			if l.ordered() && m.flags&fListed == 0 && l.inflight != x {
				return fmt.Errorf("queue %s: message %s of ordered lane %q is neither listed nor in flight", name, formatID(id), l.okey)
			}
		}
		if ready != q.ready || delayed != q.delayed || leased != q.leased {
			return fmt.Errorf("queue %s: counted ready/delayed/leased %d/%d/%d, have %d/%d/%d", name, q.ready, q.delayed, q.leased, ready, delayed, leased)
		}
		active := 0
		for fk, k := range q.keys {
			if k.name != fk || k.q != q {
				return fmt.Errorf("queue %s: key %q misfiled", name, fk)
			}
			if k.refs != krefs[k] || k.refs == 0 {
				return fmt.Errorf("queue %s key %s: refs %d, messages %d", name, fk, k.refs, krefs[k])
			}
			if k.pending != pending[k] {
				return fmt.Errorf("queue %s key %s: pending %d, ready messages %d", name, fk, k.pending, pending[k])
			}
			var nrun int32
			for l := range k.allLanes() {
				if l.refs != lrefs[l] {
					return fmt.Errorf("queue %s key %s lane %q: refs %d, messages %d", name, fk, l.okey, l.refs, lrefs[l])
				}
				if l.idx == 0 || int(l.idx) >= len(s.lanes) || s.lanes[l.idx] != l {
					return fmt.Errorf("queue %s key %s lane %q: index %d names another lane", name, fk, l.okey, l.idx)
				}
				var n int32
				var prev mref
				for x := l.head; x != 0; x = s.msg(x).next {
					m := s.msg(x)
					if s.laneOf(m) != l || m.prev != prev || m.flags&fListed == 0 {
						return fmt.Errorf("queue %s key %s lane %q: broken list at %s", name, fk, l.okey, formatID(m.id))
					}
					prev = x
					n++
				}
				if n != l.n || prev != l.tail {
					return fmt.Errorf("queue %s key %s lane %q: %d listed, n %d", name, fk, l.okey, n, l.n)
				}
				if f := l.inflight; f != 0 && (s.laneOf(s.msg(f)) != l || !l.ordered() || s.msg(f).flags&fListed != 0) {
					return fmt.Errorf("queue %s key %s lane %q: bad in-flight message", name, fk, l.okey)
				}
				switch l.state {
				case lsIdle:
					if s.canRun(l) {
						return fmt.Errorf("queue %s key %s lane %q: idle but can run", name, fk, l.okey)
					}
				case lsRunnable:
					if !s.canRun(l) || l.tb != nil {
						return fmt.Errorf("queue %s key %s lane %q: runnable but cannot run", name, fk, l.okey)
					}
					nrun++
				case lsParked:
					if !s.canRun(l) || l.tb == nil {
						return fmt.Errorf("queue %s key %s lane %q: parked but cannot run", name, fk, l.okey)
					}
				}
			}
			if nrun != k.nrun {
				return fmt.Errorf("queue %s key %s: nrun %d, runnable lanes %d", name, fk, k.nrun, nrun)
			}
			if err := checkPrioRings(s, k); err != nil {
				return fmt.Errorf("queue %s key %s: %v", name, fk, err)
			}
			if k.nrun > 0 && k.pr == nil {
				var n int32
				for l := k.run; ; l = l.next {
					if l.state != lsRunnable || l.key != k {
						return fmt.Errorf("queue %s key %s: foreign lane in runnable ring", name, fk)
					}
					n++
					if l.next == k.run {
						break
					}
					if n > k.nrun {
						return fmt.Errorf("queue %s key %s: runnable ring longer than %d", name, fk, k.nrun)
					}
				}
				if n != k.nrun {
					return fmt.Errorf("queue %s key %s: runnable ring %d, nrun %d", name, fk, n, k.nrun)
				}
			} else if k.nrun == 0 && k.run != nil {
				return fmt.Errorf("queue %s key %s: empty ring with a head", name, fk)
			}
			if q.fair.active(k) != (k.nrun > 0) {
				return fmt.Errorf("queue %s key %s: active %v with %d runnable lanes", name, fk, q.fair.active(k), k.nrun)
			}
			if q.fair.active(k) {
				active++
			}
			if q.fair.stfq {
				if k.inLat == k.sflow.Active() && k.inLat {
					return fmt.Errorf("queue %s key %s: in both lanes", name, fk)
				}
				if k.inLat != (k.left > 0) {
					return fmt.Errorf("queue %s key %s: in the latency lane %v with %d of its budget left", name, fk, k.inLat, k.left)
				}
				if v := q.fair.kq(k).V(); k.sflow.Active() && int64(k.sflow.Tag()-v) < 0 {
					return fmt.Errorf("queue %s key %s: backlogged with tag %d behind the virtual time %d", name, fk, k.sflow.Tag(), v)
				}
				if sep := q.fair.sep; (k.ten == nil) != (sep == "") || k.ten != nil && (k.ten.name != TenantOf(fk, sep) || q.fair.tenants[k.ten.name] != k.ten) {
					return fmt.Errorf("queue %s key %s: tenant %v, separator %q", name, fk, k.ten, sep)
				}
				if k.flow.Active() || k.flow.Deficit() != 0 {
					return fmt.Errorf("queue %s key %s: DRR state in an stfq queue", name, fk)
				}
				continue
			}
			if k.sflow.Active() {
				return fmt.Errorf("queue %s key %s: stfq state in a drr queue", name, fk)
			}
			if k.pending == 0 && (k.backlogged || k.flow.Deficit() != 0) {
				return fmt.Errorf("queue %s key %s: idle with deficit %d", name, fk, k.flow.Deficit())
			}
			if max := int64(k.flow.Weight()) * q.fair.drr.Quantum(); k.flow.Deficit() > max {
				return fmt.Errorf("queue %s key %s: deficit %d above weight × quantum %d", name, fk, k.flow.Deficit(), max)
			}
			if k.flow.Deficit() < -int64(^uint32(0)) {
				return fmt.Errorf("queue %s key %s: deficit %d below one message", name, fk, k.flow.Deficit())
			}
		}
		nlat := 0
		for k := q.fair.lhead; k != nil; k = k.lnext {
			if !k.inLat || q.keys[k.name] != k || nlat > len(q.keys) {
				return fmt.Errorf("queue %s: key %s misfiled in the latency lane", name, k.name)
			}
			nlat++
		}
		if nlat != q.fair.nlat {
			return fmt.Errorf("queue %s: latency lane of %d keys, counted %d", name, nlat, q.fair.nlat)
		}
		if err := s.checkHeld(q); err != nil {
			return fmt.Errorf("queue %s: %w", name, err)
		}
		if err := checkTenantState(q); err != nil {
			return fmt.Errorf("queue %s: %w", name, err)
		}
		if held := q.fair.len(); active != held {
			return fmt.Errorf("queue %s: %d active keys, the %s scheduler holds %d", name, active, q.fair.name(), held)
		}
		// Subscriptions.
		for id, sb := range q.subs {
			if s.subs[id] != sb || sb.q != q || sb.closed {
				return fmt.Errorf("queue %s: subscription %d misfiled", name, id)
			}
			if sb.slot == 0 || s.slots[sb.slot] != sb {
				return fmt.Errorf("queue %s: subscription %d: slot %d does not name it", name, id, sb.slot)
			}
			if sb.held != heldBy[sb] {
				return fmt.Errorf("queue %s: subscription %d: held %d, leases naming it %d", name, id, sb.held, heldBy[sb])
			}
			// Its lease list holds exactly the leases naming it.
			var n uint32
			var prev mref
			for x := sb.lhead; x != 0 && n <= sb.held; x = s.msg(x).next {
				m := s.msg(x)
				if m.prev != prev || m.state != stLeased || s.ext(m).slot != sb.slot {
					return fmt.Errorf("queue %s: subscription %d: broken lease list at %s", name, id, formatID(m.id))
				}
				prev = x
				n++
			}
			if n != sb.held || prev != sb.ltail {
				return fmt.Errorf("queue %s: subscription %d: %d in its lease list, held %d", name, id, n, sb.held)
			}
			if sb.held > s.maxHeld {
				return fmt.Errorf("queue %s: subscription %d holds %d leases, above the cap %d", name, id, sb.held, s.maxHeld)
			}
			switch sb.state {
			case subIdle:
				if s.canTake(sb) && !sb.capped {
					return fmt.Errorf("queue %s: subscription %d idle with credit %d and %d leases held", name, id, sb.credit, sb.held)
				}
			case subEligible:
				if !s.canTake(sb) || sb.capped {
					return fmt.Errorf("queue %s: subscription %d eligible without credit %d or with %d leases held", name, id, sb.credit, sb.held)
				}
			case subParked:
				if sb.tb == nil || sb.tb.q != q {
					return fmt.Errorf("queue %s: subscription %d parked on nothing", name, id)
				}
			}
		}
		if q.elig != nil {
			n := 0
			for sb := q.elig; ; sb = sb.next {
				if sb.state != subEligible || sb.q != q {
					return fmt.Errorf("queue %s: foreign subscription %d in eligible ring", name, sb.id)
				}
				n++
				if sb.next == q.elig || n > len(q.subs) {
					break
				}
			}
			if n := q.fair.len(); pumped && !q.dirty && n > 0 {
				return fmt.Errorf("queue %s: pumped, with an eligible subscription and %d runnable keys", name, n)
			}
		}
		// A queue with idempotency keys or producers is in the expiry
		// heap at its first expiry.
		inHeap := q.dhidx >= 0 && int(q.dhidx) < len(s.expiry.a) && s.expiry.a[q.dhidx] == q
		if !q.dunsorted {
			next, ok := q.nextExpiry()
			if inHeap != ok || ok && next != q.dnext {
				return fmt.Errorf("queue %s: in expiry heap %v at %v; first expiry %v (%v)", name, inHeap, q.dnext, next, ok)
			}
			if err := checkProducers(s, q); err != nil {
				return fmt.Errorf("queue %s: %w", name, err)
			}
		}
	}
	for i, sb := range s.slots {
		if sb != nil && (s.subs[sb.id] != sb || sb.slot != uint32(i)) {
			return fmt.Errorf("slot %d names subscription %d, which is closed or elsewhere", i, sb.id)
		}
	}
	for name, b := range s.buckets {
		if b.name != name || b.q != nil {
			return fmt.Errorf("bucket %s misfiled", name)
		}
		if err := checkWaiters(s, b, pumped); err != nil {
			return err
		}
	}
	for name, q := range s.queues {
		for ln, b := range q.limits {
			if b.name != ln || b.q != q || b.nwait != 0 {
				return fmt.Errorf("queue %s: rate limit %s misfiled", name, ln)
			}
			if err := checkWaiters(s, b, pumped); err != nil {
				return err
			}
		}
	}
	reasons := 0
	for _, q := range s.queues {
		for x := range q.msgs.all() {
			if m := s.msg(x); m.flags&fReason != 0 {
				reasons++
				if s.reasons[x] == "" {
					return fmt.Errorf("message %s: reason flag without a reason", formatID(m.id))
				}
			}
		}
	}
	if reasons != len(s.reasons) {
		return fmt.Errorf("%d reasons for %d messages with one", len(s.reasons), reasons)
	}
	// Every record in use is a message's: none leaks.
	if s.recs.len() != nmsgs || s.exts.len() != nexts {
		return fmt.Errorf("%d message records and %d extension records in use, for %d messages with %d extensions", s.recs.len(), s.exts.len(), nmsgs, nexts)
	}
	for ts, t := range s.tsets {
		if t.canon != ts || t.refs <= 0 {
			return fmt.Errorf("throttle set %q: refs %d", ts, t.refs)
		}
	}
	return nil
}

func checkWaiters(s *Sched, b *tbucket, pumped bool) error {
	n := 0
	for l := b.whead; l != nil; l = l.next {
		if l.state != lsParked || l.tb != b {
			return fmt.Errorf("bucket %s: waiting lane not parked on it", b.name)
		}
		n++
	}
	if n != b.nwait {
		return fmt.Errorf("bucket %s: %d waiting, nwait %d", b.name, n, b.nwait)
	}
	for sb := b.subs; sb != nil; sb = sb.next {
		if sb.state != subParked || sb.tb != b {
			return fmt.Errorf("bucket %s: waiting subscription not parked on it", b.name)
		}
	}
	if b.nwait == 0 && b.subs == nil {
		return nil
	}
	if !b.limited {
		return fmt.Errorf("bucket %s: unlimited with waiters", b.name)
	}
	if pumped {
		now := int64(s.now)
		// A waiter must be woken when the bucket holds a token again:
		// its timer may trail the token by float rounding (nanoseconds),
		// never more.
		if b.b.Has(now, 1) && (b.hidx < 0 || b.wakeAt > s.now+Time(time.Microsecond)) {
			return fmt.Errorf("bucket %s: holds %.3f tokens with waiters after the pump, timer at %v", b.name, b.b.Tokens(now), b.wakeAt-s.now)
		}
		if b.b.Next(now, 1) != bucket.Never && (b.hidx < 0 || s.wakes.a[b.hidx] != b) {
			return fmt.Errorf("bucket %s: waiters and no timer", b.name)
		}
	}
	return nil
}

// checkProducers checks q's idempotent producers: listed once each, in
// order of expiry, none expired; each ring sorted, above the floor and
// within the bound; run marks on remembered sequences only, the highest
// marked.
func checkProducers(s *Sched, q *queue) error {
	n := 0
	var prev *producer
	for p := q.phead; p != nil; p = p.next {
		n++
		if q.prods[p.id] != p || p.q != q || p.prev != prev || p.touched != 0 {
			return fmt.Errorf("producer %s misfiled", idName(p.id))
		}
		if prev != nil && p.expires < prev.expires {
			return fmt.Errorf("producer %s expires %v, before %s (%v)", idName(p.id), p.expires, idName(prev.id), prev.expires)
		}
		if p.expires <= s.now {
			return fmt.Errorf("producer %s expired at %v, now %v", idName(p.id), p.expires, s.now)
		}
		if p.n > s.cfg.ProducerSeqs || p.n > len(p.ents) || len(p.ents)&(len(p.ents)-1) != 0 {
			return fmt.Errorf("producer %s: %d sequences in a ring of %d, bound %d", idName(p.id), p.n, len(p.ents), s.cfg.ProducerSeqs)
		}
		for i := 0; i < p.n; i++ {
			if e := p.at(i); e.seq < p.floor || i > 0 && e.seq <= p.at(i-1).seq {
				return fmt.Errorf("producer %s: sequence %d at %d, floor %d", idName(p.id), e.seq, i, p.floor)
			}
		}
		// Marks only on remembered sequences, the highest among them
		// (its run's key: runs are forgotten lowest first).
		marks := 0
		for _, w := range p.ends {
			marks -= bits.OnesCount64(w)
		}
		for i := 0; i < p.n; i++ {
			if p.endsRun(i) {
				marks++
			}
		}
		if marks != 0 || len(p.ends) != (len(p.ents)+63)/64 || p.runs != nil {
			return fmt.Errorf("producer %s: %d run marks outside the ring", idName(p.id), -marks)
		}
		if p.n > 0 && !p.endsRun(p.n-1) {
			return fmt.Errorf("producer %s: sequence %d in no run", idName(p.id), p.at(p.n-1).seq)
		}
		prev = p
	}
	if prev != q.ptail || n != len(q.prods) {
		return fmt.Errorf("%d producers listed of %d", n, len(q.prods))
	}
	if q.parent != nil && n > 0 {
		return fmt.Errorf("a dead-letter queue with producers")
	}
	return nil
}

// checkTenantState checks the tenants of q against its keys: their counts,
// the top scheduler holding exactly those with keys in the throughput
// lane, and at most one key of a tenant in the latency lane.
func checkTenantState(q *queue) error {
	f := &q.fair
	if f.sep == "" {
		if len(f.tenants) > 0 || f.top.Len() > 0 {
			return fmt.Errorf("%d tenants without a separator", len(f.tenants))
		}
		return nil
	}
	type count struct{ keys, back, lat int32 }
	n := make(map[*tenant]*count)
	for _, k := range q.keys {
		c := n[k.ten]
		if c == nil {
			c = &count{}
			n[k.ten] = c
		}
		c.keys++
		if k.backlogged {
			c.back++
		}
		if k.inLat {
			c.lat++
		}
	}
	if len(n) != len(f.tenants) {
		return fmt.Errorf("%d tenants, the keys name %d", len(f.tenants), len(n))
	}
	inTop := 0
	for name, t := range f.tenants {
		c := n[t]
		switch {
		case c == nil || t.name != name:
			return fmt.Errorf("tenant %s misfiled", name)
		case c.keys != t.nkeys || c.back != t.nback:
			return fmt.Errorf("tenant %s: %d keys, %d backlogged; counted %d, %d", name, t.nkeys, t.nback, c.keys, c.back)
		case c.lat > 1:
			return fmt.Errorf("tenant %s: %d keys in the latency lane", name, c.lat)
		case t.sflow.Active() != (t.keys.Len() > 0):
			return fmt.Errorf("tenant %s: in the top scheduler %v with %d keys in the throughput lane", name, t.sflow.Active(), t.keys.Len())
		case t.sflow.Active() && int64(t.sflow.Tag()-f.top.V()) < 0:
			return fmt.Errorf("tenant %s: tag %d behind the virtual time %d", name, t.sflow.Tag(), f.top.V())
		}
		if t.sflow.Active() {
			inTop++
		}
	}
	if inTop != f.top.Len() {
		return fmt.Errorf("top scheduler holds %d tenants, counted %d", f.top.Len(), inTop)
	}
	return nil
}

// checkPrioRings checks a fairness key's runnable rings by priority: each
// ring's lanes are runnable, of the key, of the ring's priority, and as
// many as it counts; the counts sum to nrun, and run is the position in
// the highest priority's ring.
func checkPrioRings(s *Sched, k *fkey) error {
	p := k.pr
	if p == nil {
		return nil
	}
	var total int32
	for r := range p.n {
		if p.n[r] == 0 {
			if p.pos[r] != nil {
				return fmt.Errorf("priority %d: empty ring with a position", r)
			}
			continue
		}
		var n int32
		for l := p.pos[r]; ; l = l.next {
			if l.state != lsRunnable || l.key != k || int(l.rank) != r || s.laneRank(l) != l.rank {
				return fmt.Errorf("priority %d: lane %q (rank %d, now %d, state %d) does not belong", r, l.okey, l.rank, s.laneRank(l), l.state)
			}
			n++
			if l.next == p.pos[r] || n > p.n[r] {
				break
			}
		}
		if n != p.n[r] {
			return fmt.Errorf("priority %d: ring of %d, counted %d", r, n, p.n[r])
		}
		total += n
	}
	if total != k.nrun {
		return fmt.Errorf("priority rings hold %d lanes, nrun %d", total, k.nrun)
	}
	if t := p.top(); t >= 0 && k.run.rank != uint8(t) || t < 0 && k.run != nil {
		return fmt.Errorf("run is not in the highest priority's ring")
	}
	return nil
}
