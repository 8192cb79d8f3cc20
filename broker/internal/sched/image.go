package sched

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched/bucket"
	"github.com/fila-mq/fila/broker/internal/sched/drr"
	"github.com/fila-mq/fila/broker/internal/sched/stfq"
)

// An image is the scheduler's whole in-memory state as bytes, taken at an
// entry boundary: a scheduler loaded from it (LoadImage) has the same
// Digest as the one imaged, and from then on, given the same calls, makes
// the same replies, deliveries, mutations and deadlines. A replicated
// queue stores one to compact its log. Unlike the records under Prefix,
// an image holds what storage does not: leases, deficits and virtual
// times, token buckets, subscriptions, timers. It holds no message body.
//
// Layout. Integers are uvarints (u) or zigzag varints (v) as in
// encoding/binary; a string (s) is a u length and the bytes; an ID is its
// 16 bytes; a float is its IEEE 754 bits, 8 bytes big-endian; a bool is
// one byte, 0 or 1. Times are Unix nanoseconds: now and lastDeadline as
// they are, the others as v offsets from now (from the previous message's
// enqueue time, for enqueue times, in the order messages are written),
// so the common ones take a few bytes; tseqs and lease tokens are u
// offsets below the scheduler's counters. A list ([x]) is a u count and
// its elements. Maps are written in key order, lists in their order,
// heaps in their array order. ErrBadImage names the byte a bad image
// fails at.
//
//	image    = version(1 to 3) now:v lease:u tseq:u lastDeadline:v ntimers:u
//	           [bucket] [tset] [queue] nsubs:u [freeSlot:u] sub*nsubs
//	           eligible*nqueues waiting*nbuckets [looseMsg]
//	           [wake] [expiry] [unsorted:queue] [dirty:queue]
//	bucket   = name:s limited:bool state            (throttle buckets)
//	state    = rate:float burst:float tokens:float last:v
//	tset     = [bucket:u]                           (by increasing name)
//	queue    = name:s spec body body                (a queue, then its DLQ)
//	spec     = vis:v maxAttempts:u backoffBase:v backoffMax:v dedupWindow:v
//	           onEnqueue:s onFailure:s policy:s latencyBudget:u latencyIdle:v
//	           (version 2 on: tenantSeparator:s costByTime:bool)
//	           (version 4 on: messageTTL:v expiredAction:s)
//	body     = vis:v maxAttempts:u backoffBase:v backoffMax:v window:v quantum:u
//	           (0 round:u target:u | 1 budget:u idle:v credit:v V:u seq:u)
//	           (stfq with a tenant separator: [tenant]; V and seq are then
//	           the top scheduler's)
//	           [key] (drr: [cur:key] [next:key] | stfq: [latency:key]
//	           [name:s at:v (version 3 on: tag:u)] (recent map)
//	           [name:s at:v] (recent queue)
//	           (cost by time: est:u [lease:u start:v est:u]))
//	           (queue, not DLQ: [idk] [pendingIdk] unsorted:bool [producer])
//	           [limit]
//	tenant   = name:s flags:1 weight:u tag:u seq:u V:u seq:u [idleSince:v]
//	key      = name:s flags:1 weight:u delivered:u
//	           (drr: deficit:v round:u | stfq: tag:u seq:u [idleSince:v] left:u
//	           (cost by time: est:u))
//	           [lane] [runnable:lane-in-key]      (the first lane is the default one)
//	lane     = (not the first: tset:u (0: none, else index+1) orderingKey:s
//	           (version 4 on: priority:u)) [msg]
//	idk      = key:s id expires:v
//	producer = id floor:u expires:v
//	           (sorted: [seqDelta:u id endsRun:bool] | unsorted: [seq:u id] [run:u])
//	limit    = name:s state                         (rate-limit buckets)
//	sub      = slot:u id:u queue:u credit:u [limit bucket:u] [lane:u msg]
//	eligible = [slot:u]                             (per queue, from its next turn)
//	waiting  = [lane:u] (throttle bucket) | [slot:u] (rate-limit bucket)
//	looseMsg = lane:u msg
//	wake     = bucket:u wakeAt:v
//	expiry   = queue:u dnext:v
//
// Queues are numbered in image order (a queue 2i, its DLQ 2i+1); buckets
// (throttle buckets, then every queue's rate limits), fairness keys within
// their queue, and lanes are numbered in the order they appear.
//
// A message record is
//
//	msg = header:1 id enq:v cost:u [weight:u] [attempts:u] [due:v] [reason:s]
//	      (delayed, leased: timerIndex:u tseq:u) (leased: lease:u)
//
// where the header holds the state (bits 0-1: ready, delayed, leased,
// deciding), whether a state record exists (bit 2), whether a reason,
// attempts, a due time follow (bits 3-5), whether the message is its
// ordered lane's in-flight one (bit 6), whether a weight other than 1
// follows (bit 7). From version 4 on, bit 7 says that more follows than a
// weight other than 1:
//
//	more = wx:u [ttl:u] [priority:u] (ready in the timer heap: timerIndex:u tseq:u)
//
// wx is the weight shifted left by 4, or'd with bits saying that a TTL
// follows (bit 0, in milliseconds), that a priority follows (bit 1, as
// Message.Priority), that a redrive took the message's TTL away (bit 2,
// fNoTTL), and that the message, ready, is in the timer heap (bit 3, its
// expiry). A message of weight 1 without any of these has no bit 7, as
// in version 3. A message appears once: in its lane's list (ready, or
// delayed in place in an ordered lane), in the lease list of the
// subscription holding it, or among the loose messages (delayed, leased
// to a closed subscription, deciding).
//
// Size: a ready message of unit weight, never failed, takes 19 bytes plus
// its enqueue time's distance from the previous message's (1 byte under
// 64 ns, 4 under 67 ms, 6 under 19 hours) and its payload size's varint
// (2 bytes under 16 KiB): 23 bytes in BenchmarkImage (100,000 messages in
// 1,000 keys, 100 enqueued a millisecond). A delayed message adds its due
// time, timer index and tseq (about 10 bytes), a leased one its lease
// token too, a failed one its attempts and reason. Keys, lanes, buckets,
// subscriptions and queues add tens of bytes each, and their names.
//
// Timers are rebuilt exactly: each delayed or leased message carries its
// index in the timer heap, so the heap's array, and the order equal
// deadlines pop in, are the original's. The other heaps are written in
// array order. An stfq queue's heap is rebuilt without the stale entries
// the original may hold; its flows come out in the same order, tags and
// sequences being a total order.
//
// Version 2 adds the tenant separator and cost by time to the spec, the
// tenants to an stfq queue that has a separator, and the estimates and
// open leases to one that charges by time. Version 3 counts the latency
// lane's credit in units of 1/creditUnit of a delivery, where versions 1
// and 2 counted half deliveries (an older image's credit is converted
// as it is read), and the start tag of each recently dropped key (an
// older image's keys take the virtual time). Version 4 adds TTLs and
// priorities: a queue's message TTL and expired action to its spec, a
// message's TTL, priority and fNoTTL to its record. Version 5 adds, at
// the end, the subscriptions' own lease lengths and the throttled
// redrives under way:
//
//	lifecycle = [subLease] [redrive]    (absent when both are empty)
//	subLease  = slot:u lease:v                     (subscriptions with one)
//	redrive   = queue:u rate:u key:s moved:u next:v [id]   (Sched.redrives order)
//
// Images are written as version 5; every version up to imageVersion is
// read.
const imageVersion = 5

// ErrBadImage is wrapped by LoadImage's errors. Their text names the
// byte of the image where decoding stopped and why, as in
// "bad scheduler image: byte 1234: message 0190...: zero or repeated".
var ErrBadImage = errors.New("bad scheduler image")

// Message record header bits.
const (
	imgStateMask = 3
	imgRecord    = 1 << 2 // fState
	imgReason    = 1 << 3
	imgAttempts  = 1 << 4
	imgDue       = 1 << 5
	imgInflight  = 1 << 6
	imgWeight    = 1 << 7 // from version 4 on: more follows
)

// Bits of a message record's more (version 4 on).
const (
	imgMoreTTL   = 1 << 0
	imgMorePrio  = 1 << 1
	imgMoreNoTTL = 1 << 2
	imgMoreTimed = 1 << 3
)

// Fairness key flags.
const (
	imgBacklogged = 1 << 0
	imgIdle       = 1 << 1 // stfq: idleSince follows
	imgHeap       = 1 << 2 // stfq: in the throughput lane's heap
)

// Tenant flags.
const (
	imgTenantHeap = 1 << 0 // in the top scheduler's heap
	imgTenantIdle = 1 << 1 // idleSince follows
)

// AppendImage appends an exact image of the scheduler's whole state to b and returns the extended slice.
//
// Call it between commands once the shell has taken the Ready: after
// Ready (and Advance), or when HasReady reports false. The effects not
// yet taken (Persist, replies, deliveries decided in HasReady) are not
// part of the state and are not in the image; queues left to pump
// (subscriptions back from MaxDeliveryBatch) are. The format is described
// above imageVersion: about 23 bytes per ready message. It costs
// O(state): one pass over the queues, fairness keys, lanes,
// subscriptions and timers, plus sorting the names of queues, keys,
// lanes and buckets and the few messages waiting for an on_failure
// decision (6 to 7 ms for 100,000 ready messages, BenchmarkImage). It
// allocates nothing per message beyond b's growth. It changes nothing
// but scratch fields and, like every method, must be called from the
// goroutine that owns s.
func (s *Sched) AppendImage(b []byte) []byte {
	return s.appendImage(b, imageVersion)
}

// appendImage appends an image of the given version: imageVersion, or an
// older one for the tests that read it (version 1 holds no queue with
// tenants or cost by time).
func (s *Sched) appendImage(b []byte, version byte) []byte {
	w := imageWriter{s: s, b: b, prevEnq: s.now, version: version}
	w.image()
	clear(w.lanes)
	return w.b
}

type imageWriter struct {
	s        *Sched
	b        []byte
	prevEnq  Time
	nlanes   uint32
	nbuckets uint32
	lanes    []*lane    // scratch for sorting a key's lanes
	limits   []*tbucket // rate-limit buckets in image order
	version  byte
}

func (w *imageWriter) uint(v uint64)       { w.b = binary.AppendUvarint(w.b, v) }
func (w *imageWriter) int(v int64)         { w.b = binary.AppendVarint(w.b, v) }
func (w *imageWriter) byte(v byte)         { w.b = append(w.b, v) }
func (w *imageWriter) id(v [16]byte)       { w.b = append(w.b, v[:]...) }
func (w *imageWriter) str(v string)        { w.uint(uint64(len(v))); w.b = append(w.b, v...) }
func (w *imageWriter) time(t Time)         { w.int(int64(t - w.s.now)) }
func (w *imageWriter) dur(d time.Duration) { w.int(int64(d)) }
func (w *imageWriter) float(v float64)     { w.b = binary.BigEndian.AppendUint64(w.b, math.Float64bits(v)) }

func (w *imageWriter) bool(v bool) {
	if v {
		w.byte(1)
	} else {
		w.byte(0)
	}
}

func (w *imageWriter) bucket(b *bucket.Bucket) {
	tokens, last := b.State()
	w.float(b.Rate())
	w.float(b.Burst())
	w.float(tokens)
	w.int(last)
}

func (w *imageWriter) image() {
	s := w.s
	w.byte(w.version)
	w.int(int64(s.now))
	w.uint(s.lease)
	w.uint(s.tseq)
	w.int(int64(s.lastDeadline))
	w.uint(uint64(len(s.timers.a)))

	names := sortedKeys(s.buckets, strings.Compare)
	w.uint(uint64(len(names)))
	for _, name := range names {
		tb := s.buckets[name]
		tb.img = w.nbuckets
		w.nbuckets++
		w.str(name)
		w.bool(tb.limited)
		w.bucket(&tb.b)
	}
	throttles := names

	canons := sortedKeys(s.tsets, strings.Compare)
	w.uint(uint64(len(canons)))
	for i, c := range canons {
		ts := s.tsets[c]
		ts.img = uint32(i + 1)
		w.uint(uint64(len(ts.buckets)))
		for _, tb := range ts.buckets {
			w.uint(uint64(tb.img))
		}
	}

	var queues []*queue
	for _, name := range sortedKeys(s.queues, strings.Compare) {
		if q := s.queues[name]; q.parent == nil {
			q.img, q.dlq.img = uint32(len(queues)), uint32(len(queues)+1)
			queues = append(queues, q, q.dlq)
		}
	}
	w.uint(uint64(len(queues) / 2))
	for i := 0; i < len(queues); i += 2 {
		q := queues[i]
		w.str(q.name)
		w.spec(&q.spec)
		w.queue(q)
		w.queue(q.dlq)
	}

	ids := sortedKeys(s.subs, cmp.Compare)
	w.uint(uint64(len(ids)))
	w.uint(uint64(len(s.freeSlots)))
	for _, f := range s.freeSlots {
		w.uint(uint64(f))
	}
	for _, id := range ids {
		w.sub(s.subs[id])
	}

	for _, q := range queues {
		n := 0
		for sb := q.elig; sb != nil; sb = sb.next {
			if n++; sb.next == q.elig {
				break
			}
		}
		w.uint(uint64(n))
		for i, sb := 0, q.elig; i < n; i, sb = i+1, sb.next {
			w.uint(uint64(sb.slot))
		}
	}
	for _, name := range throttles {
		tb := s.buckets[name]
		w.uint(uint64(tb.nwait))
		for l := tb.whead; l != nil; l = l.next {
			w.uint(uint64(l.img))
		}
	}
	for _, lb := range w.limits {
		n := 0
		for sb := lb.subs; sb != nil; sb = sb.next {
			n++
		}
		w.uint(uint64(n))
		for sb := lb.subs; sb != nil; sb = sb.next {
			w.uint(uint64(sb.slot))
		}
	}

	w.loose(queues)

	w.uint(uint64(len(s.wakes.a)))
	for _, tb := range s.wakes.a {
		w.uint(uint64(tb.img))
		w.time(tb.wakeAt)
	}
	w.uint(uint64(len(s.expiry.a)))
	for _, q := range s.expiry.a {
		w.uint(uint64(q.img))
		w.time(q.dnext)
	}
	w.queueList(s.unsorted)
	w.queueList(s.dirty)
	if w.version >= 5 {
		w.lifecycle(ids)
	}
}

// lifecycle writes the subscriptions' own lease lengths, in the order of
// ids, and the throttled redrives.
func (w *imageWriter) lifecycle(ids []SubID) {
	s := w.s
	n := 0
	for _, id := range ids {
		if s.subs[id].lease != 0 {
			n++
		}
	}
	if n == 0 && len(s.redrives) == 0 {
		return // as images were before
	}
	w.uint(uint64(n))
	for _, id := range ids {
		if sb := s.subs[id]; sb.lease != 0 {
			w.uint(uint64(sb.slot))
			w.dur(sb.lease)
		}
	}
	w.uint(uint64(len(s.redrives)))
	for _, d := range s.redrives {
		r := d.redrive
		w.uint(uint64(d.img))
		w.uint(uint64(r.rate))
		w.str(r.key)
		w.uint(r.moved)
		w.time(r.next)
		w.uint(uint64(len(r.ids)))
		for _, id := range r.ids {
			w.id(id)
		}
	}
}

// queueList writes a list of queues, leaving out deleted ones (which
// Sched.unsorted and Sched.dirty may still name, and skip).
func (w *imageWriter) queueList(qs []*queue) {
	n := 0
	for _, q := range qs {
		if !q.deleted {
			n++
		}
	}
	w.uint(uint64(n))
	for _, q := range qs {
		if !q.deleted {
			w.uint(uint64(q.img))
		}
	}
}

func (w *imageWriter) spec(sp *QueueSpec) {
	w.dur(sp.VisibilityTimeout)
	w.uint(uint64(sp.MaxAttempts))
	w.dur(sp.BackoffBase)
	w.dur(sp.BackoffMax)
	w.dur(sp.DedupWindow)
	w.str(sp.OnEnqueue)
	w.str(sp.OnFailure)
	w.str(sp.Policy)
	w.uint(uint64(sp.LatencyBudget))
	w.dur(sp.LatencyIdle)
	if w.version >= 2 {
		w.str(sp.TenantSeparator)
		w.bool(sp.CostByTime)
	}
	if w.version >= 4 {
		w.dur(sp.MessageTTL)
		w.str(sp.ExpiredAction)
	}
}

func (w *imageWriter) queue(q *queue) {
	w.dur(q.vis)
	w.uint(uint64(q.policy.MaxAttempts))
	w.dur(q.policy.BackoffBase)
	w.dur(q.policy.BackoffMax)
	w.dur(q.window)
	f := &q.fair
	w.uint(uint64(f.drr.Quantum()))
	if f.stfq {
		w.byte(1)
		w.uint(uint64(f.budget))
		w.dur(f.idle)
		if w.version < 3 {
			w.int(f.credit / (creditUnit / 2)) // in half deliveries
		} else {
			w.int(f.credit)
		}
		if f.sep != "" {
			w.uint(f.top.V())
			w.uint(f.top.Seq())
		} else {
			w.uint(f.fq.V())
			w.uint(f.fq.Seq())
		}
	} else {
		w.byte(0)
		w.uint(f.drr.Round())
		w.uint(f.drr.Target())
	}

	if f.sep != "" {
		w.tenants(f)
	}
	names := sortedKeys(q.keys, strings.Compare)
	w.uint(uint64(len(names)))
	for i, name := range names {
		k := q.keys[name]
		k.img = uint32(i)
		w.key(k)
	}
	if f.stfq {
		w.uint(uint64(f.nlat))
		for k := f.lhead; k != nil; k = k.lnext {
			w.uint(uint64(k.img))
		}
		recent := sortedKeys(f.recent, strings.Compare)
		w.uint(uint64(len(recent)))
		for _, name := range recent {
			w.str(name)
			w.time(f.recent[name].at)
			if w.version >= 3 {
				w.uint(f.recent[name].tag)
			}
		}
		w.uint(uint64(len(f.recentQ) - f.rhead))
		for _, e := range f.recentQ[f.rhead:] {
			w.str(e.name)
			w.time(e.at)
		}
		if f.byTime {
			w.uint(uint64(f.est))
			leases := sortedKeys(f.held, cmp.Compare)
			w.uint(uint64(len(leases)))
			for _, l := range leases {
				h := f.held[l]
				w.uint(l)
				w.time(h.start)
				w.uint(uint64(h.est))
			}
		}
	} else {
		var n [2]int
		f.drr.Each(func(_ *fkey, next bool) { n[b2i(next)]++ })
		for i, next := range [2]bool{false, true} {
			w.uint(uint64(n[i]))
			f.drr.Each(func(k *fkey, nx bool) {
				if nx == next {
					w.uint(uint64(k.img))
				}
			})
		}
	}

	if q.parent == nil {
		w.dedup(q)
		w.producers(q)
	}

	lims := sortedKeys(q.limits, strings.Compare)
	w.uint(uint64(len(lims)))
	for _, name := range lims {
		lb := q.limits[name]
		lb.img = w.nbuckets
		w.nbuckets++
		w.limits = append(w.limits, lb)
		w.str(name)
		w.bucket(&lb.b)
	}
}

func b2i(v bool) int {
	if v {
		return 1
	}
	return 0
}

func (w *imageWriter) dedup(q *queue) {
	n := 0
	q.dedup.Each(func([]byte, [16]byte, int64) { n++ })
	w.uint(uint64(n))
	q.dedup.Each(func(key []byte, id [16]byte, expires int64) {
		w.uint(uint64(len(key)))
		w.b = append(w.b, key...)
		w.id(id)
		w.time(Time(expires))
	})
	n = 0
	q.dedup.Pending(func(string, [16]byte, int64) { n++ })
	w.uint(uint64(n))
	q.dedup.Pending(func(key string, id [16]byte, expires int64) {
		w.str(key)
		w.id(id)
		w.time(Time(expires))
	})
}

func (w *imageWriter) producers(q *queue) {
	w.bool(q.dunsorted)
	n := 0
	for p := q.phead; p != nil; p = p.next {
		n++
	}
	w.uint(uint64(n))
	for p := q.phead; p != nil; p = p.next {
		w.id(p.id)
		w.uint(p.floor)
		w.time(p.expires)
		if q.dunsorted {
			// As Restore left it: entries and run keys in record order,
			// for sortProducers.
			ents := p.ents[:min(p.n, len(p.ents))]
			w.uint(uint64(len(ents)))
			for _, e := range ents {
				w.uint(e.seq)
				w.id(e.id)
			}
			w.uint(uint64(len(p.runs)))
			for _, r := range p.runs {
				w.uint(r)
			}
			continue
		}
		w.uint(uint64(p.n))
		var prev uint64
		for i := 0; i < p.n; i++ {
			e := p.at(i)
			w.uint(e.seq - prev)
			prev = e.seq
			w.id(e.id)
			w.bool(p.endsRun(i))
		}
	}
}

func (w *imageWriter) tenants(f *fair) {
	names := sortedKeys(f.tenants, strings.Compare)
	w.uint(uint64(len(names)))
	for _, name := range names {
		t := f.tenants[name]
		var flags byte
		if t.sflow.Active() {
			flags |= imgTenantHeap
		}
		if t.idleSince != 0 {
			flags |= imgTenantIdle
		}
		st := t.sflow.State()
		w.str(name)
		w.byte(flags)
		w.uint(uint64(st.Weight))
		w.uint(st.Tag)
		w.uint(st.Seq)
		w.uint(t.keys.V())
		w.uint(t.keys.Seq())
		if t.idleSince != 0 {
			w.time(t.idleSince)
		}
	}
}

func (w *imageWriter) key(k *fkey) {
	f := &k.q.fair
	var flags byte
	if k.backlogged {
		flags |= imgBacklogged
	}
	if f.stfq && k.idleSince != 0 {
		flags |= imgIdle
	}
	if f.stfq && k.sflow.Active() {
		flags |= imgHeap
	}
	w.str(k.name)
	w.byte(flags)
	w.uint(uint64(k.flow.State().Weight))
	w.uint(k.delivered)
	if f.stfq {
		st := k.sflow.State()
		w.uint(st.Tag)
		w.uint(st.Seq)
		if flags&imgIdle != 0 {
			w.time(k.idleSince)
		}
		w.uint(uint64(k.left))
		if f.byTime {
			w.uint(uint64(k.est))
		}
	} else {
		st := k.flow.State()
		w.int(st.Deficit)
		w.uint(st.Round)
	}

	lanes := w.lanes[:0]
	for _, l := range k.lanes {
		lanes = append(lanes, l)
	}
	slices.SortFunc(lanes, func(a, b *lane) int {
		return cmp.Or(strings.Compare(canon(a.ts), canon(b.ts)), strings.Compare(a.okey, b.okey), cmp.Compare(a.prio, b.prio))
	})
	w.lanes = lanes
	base := w.nlanes
	w.uint(uint64(1 + len(lanes)))
	k.dflt.img = w.nlanes
	w.nlanes++
	w.list(&k.dflt)
	for _, l := range lanes {
		l.img = w.nlanes
		w.nlanes++
		var ts uint32
		if l.ts != nil {
			ts = l.ts.img
		}
		w.uint(uint64(ts))
		w.str(l.okey)
		if w.version >= 4 {
			w.uint(uint64(l.prio))
		}
		w.list(l)
	}
	w.uint(uint64(k.nrun))
	k.eachRunnable(func(l *lane) { w.uint(uint64(l.img - base)) })
}

func (w *imageWriter) list(l *lane) {
	w.uint(uint64(l.n))
	for x := l.head; x != 0; x = w.s.msg(x).next {
		w.msg(x)
	}
}

func (w *imageWriter) msg(x mref) {
	s := w.s
	m := s.msg(x)
	e := s.ext(m)
	weight := s.weightOf(m)
	h := byte(m.state) & imgStateMask
	if m.flags&fState != 0 {
		h |= imgRecord
	}
	reason := s.reason(x, m)
	if reason != "" {
		h |= imgReason
	}
	if e.attempts != 0 {
		h |= imgAttempts
	}
	if e.due != 0 {
		h |= imgDue
	}
	if s.laneOf(m).inflight == x {
		h |= imgInflight
	}
	var more uint64
	if w.version >= 4 {
		if e.ttl != 0 {
			more |= imgMoreTTL
		}
		if p := s.prioOf(m); p != 0 {
			more |= imgMorePrio
		}
		if m.flags&fNoTTL != 0 {
			more |= imgMoreNoTTL
		}
		if m.state == stReady && e.heap != 0 {
			more |= imgMoreTimed
		}
	}
	if weight != 1 || more != 0 {
		h |= imgWeight
	}
	w.byte(h)
	w.id(m.id)
	w.int(int64(m.enq - w.prevEnq))
	w.prevEnq = m.enq
	w.uint(uint64(m.cost))
	if h&imgWeight != 0 {
		if w.version >= 4 {
			w.uint(uint64(weight)<<4 | more)
			if more&imgMoreTTL != 0 {
				w.uint(uint64(e.ttl))
			}
			if more&imgMorePrio != 0 {
				w.uint(uint64(s.prioOf(m)))
			}
		} else {
			w.uint(uint64(weight))
		}
	}
	if h&imgAttempts != 0 {
		w.uint(uint64(e.attempts))
	}
	if h&imgDue != 0 {
		w.time(e.due)
	}
	if h&imgReason != 0 {
		w.str(reason)
	}
	if m.state == stDelayed || m.state == stLeased || more&imgMoreTimed != 0 {
		w.uint(uint64(e.heap - 1))
		w.uint(s.tseq - e.tseq)
	}
	if m.state == stLeased {
		w.uint(s.lease - e.lease)
	}
}

func (w *imageWriter) sub(sb *sub) {
	w.uint(uint64(sb.slot))
	w.uint(uint64(sb.id))
	w.uint(uint64(sb.q.img))
	w.uint(uint64(sb.credit))
	w.uint(uint64(len(sb.limits)))
	for _, lb := range sb.limits {
		w.uint(uint64(lb.img))
	}
	n := 0
	for x := sb.lhead; x != 0; x = w.s.msg(x).next {
		n++
	}
	w.uint(uint64(n))
	for x := sb.lhead; x != 0; x = w.s.msg(x).next {
		w.uint(uint64(w.s.laneOf(w.s.msg(x)).img))
		w.msg(x)
	}
}

// loose writes the messages in no list or ring: those in the timer heap
// (in its order), then those waiting for a decision (by queue and ID).
func (w *imageWriter) loose(queues []*queue) {
	s := w.s
	// isLoose reports whether the message of timer t is in no list.
	isLoose := func(t xref) bool {
		e := s.exts.at(uint32(t))
		m := s.msg(e.msg)
		return m.flags&fListed == 0 && (m.state != stLeased || e.slot == 0)
	}
	n := 0
	deciding := 0
	for _, q := range queues {
		deciding += int(q.delayed)
	}
	for _, t := range s.timers.a {
		if isLoose(t) {
			n++
		}
		if s.msg(s.exts.at(uint32(t)).msg).state == stDelayed {
			deciding--
		}
	}
	var dec []mref
	if deciding > 0 {
		for _, q := range queues {
			if q.delayed == 0 {
				continue
			}
			start := len(dec)
			for x := range q.msgs.all() {
				if s.msg(x).state == stDeciding {
					dec = append(dec, x)
				}
			}
			s.sortByID(dec[start:])
		}
	}
	w.uint(uint64(n + len(dec)))
	for _, t := range s.timers.a {
		if isLoose(t) {
			x := s.exts.at(uint32(t)).msg
			w.uint(uint64(s.laneOf(s.msg(x)).img))
			w.msg(x)
		}
	}
	for _, x := range dec {
		w.uint(uint64(s.laneOf(s.msg(x)).img))
		w.msg(x)
	}
}

// LoadImage returns a scheduler with cfg whose state is the image's.
//
// cfg should be the Config of the scheduler imaged: the queues keep the
// settings they resolved from it when they were created (they are in the
// image), but later queues, subscriptions and deliveries follow cfg.
// cfg.LeaseBase is ignored: the image's lease counter is kept. The
// scheduler's first Ready is empty unless the image was taken with queues
// left to pump.
//
// LoadImage fails with an error wrapping ErrBadImage if b is not an image
// of this version: truncated, with trailing bytes, or with parts that do
// not fit together (a reference to nothing, a message in two places or in
// a place its state forbids, a list, ring or heap out of order, counts
// that disagree). It checks what the scheduler relies on to run, so that
// what it returns never panics; it does not check every invariant the
// commands keep (that producers are listed by expiry, for instance). It
// never panics itself, and allocates in proportion to len(b): the counts
// it reads are checked against the bytes left before anything is
// allocated for them, and what it builds takes at most about 60 bytes of
// memory per byte of image (for images crafted for it, of fairness keys,
// lanes or subscriptions without messages), 5 to 12 for real ones.
// Loading 100,000 ready messages takes 25 to 55 ms, mostly allocating
// them (BenchmarkImage).
func LoadImage(cfg Config, b []byte) (*Sched, error) {
	s := New(cfg)
	r := imageReader{s: s, b: b, prevEnq: 0}
	r.image()
	if r.err != nil {
		return nil, r.err
	}
	return s, nil
}

// Smallest encodings, in bytes, for checking counts against what is left.
const (
	minMsg     = 1 + 16 + 1 + 1  // header, ID, enqueue time, cost
	minTimed   = minMsg + 2      // and timer index, tseq
	minBucket  = 1 + 1 + 3*8 + 1 // name (empty), limited, rate, burst, tokens, last
	minQueue   = 2 + 10 + 2*14
	minKey     = 1 + 1 + 1 + 1 + 2 + 1 + 1 + 1
	minSub     = 6
	minIdk     = 1 + 16 + 1
	minPentry  = 1 + 16
	minProd    = 16 + 1 + 1 + 1
	maxRound   = 1 << 62     // far beyond any DRR round a scheduler reaches
	imgMaxName = math.MaxInt // names are bounded by the bytes left
)

type imageReader struct {
	s         *Sched
	b         []byte
	off       int
	err       error
	prevEnq   Time
	buckets   []*tbucket // throttle buckets, then rate-limit buckets
	nthrottle int
	tsets     []*tset
	queues    []*queue
	lanes     []*lane
	keys      []*fkey // the keys of the queue being read
	timers    []xref
	version   byte
}

func (r *imageReader) fail(format string, args ...any) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: byte %d: %s", ErrBadImage, r.off, fmt.Sprintf(format, args...))
	}
}

func (r *imageReader) take(n uint64, what string) []byte {
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)-r.off) {
		r.fail("%s: need %d bytes, have %d", what, n, len(r.b)-r.off)
		return nil
	}
	p := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return p
}

func (r *imageReader) byte(what string) byte {
	if p := r.take(1, what); p != nil {
		return p[0]
	}
	return 0
}

func (r *imageReader) uint(what string) uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.fail("%s: bad uvarint", what)
		return 0
	}
	r.off += n
	return v
}

func (r *imageReader) int(what string) int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.fail("%s: bad varint", what)
		return 0
	}
	r.off += n
	return v
}

func (r *imageReader) u32(what string) uint32 {
	v := r.uint(what)
	if v > math.MaxUint32 {
		r.fail("%s: %d above 2^32-1", what, v)
		return 0
	}
	return uint32(v)
}

// count reads a list's length, each element at least min bytes.
func (r *imageReader) count(what string, min int) int {
	v := r.uint(what)
	if r.err == nil && v > uint64((len(r.b)-r.off)/min) {
		r.fail("%s: %d, more than the %d bytes left hold", what, v, len(r.b)-r.off)
		return 0
	}
	return int(v)
}

// ref reads an index below n; ok is false (and the error set) otherwise.
func (r *imageReader) ref(what string, n int) (int, bool) {
	v := r.uint(what)
	if r.err != nil {
		return 0, false
	}
	if v >= uint64(n) {
		r.fail("%s %d: out of range (%d)", what, v, n)
		return 0, false
	}
	return int(v), true
}

func (r *imageReader) str(what string, max int) string {
	n := r.uint(what)
	if r.err == nil && n > uint64(max) {
		r.fail("%s: %d bytes, at most %d", what, n, max)
		return ""
	}
	return string(r.take(n, what))
}

func (r *imageReader) id(what string) (id [16]byte) {
	copy(id[:], r.take(16, what))
	return id
}

func (r *imageReader) bool(what string) bool {
	v := r.byte(what)
	if v > 1 {
		r.off--
		r.fail("%s: %d, want 0 or 1", what, v)
	}
	return v == 1
}

func (r *imageReader) time(what string) Time { return r.s.now + Time(r.int(what)) }

func (r *imageReader) dur(what string) time.Duration {
	v := r.int(what)
	if v < 0 {
		r.fail("%s: negative duration %d", what, v)
		return 0
	}
	return time.Duration(v)
}

// positive reads a duration above 0.
func (r *imageReader) positive(what string) time.Duration {
	d := r.dur(what)
	if r.err == nil && d <= 0 {
		r.fail("%s: %d, want a positive duration", what, d)
	}
	return d
}

func (r *imageReader) float(what string) float64 {
	if p := r.take(8, what); p != nil {
		return math.Float64frombits(binary.BigEndian.Uint64(p))
	}
	return 0
}

// bucket reads a token bucket's state: rate and burst finite and not
// negative, tokens finite.
func (r *imageReader) bucket(what string) bucket.Bucket {
	rate, burst, tokens := r.float(what), r.float(what), r.float(what)
	last := r.int(what)
	if r.err == nil && !(rate >= 0 && rate <= math.MaxFloat64 && burst >= 0 && burst <= math.MaxFloat64 &&
		tokens >= -math.MaxFloat64 && tokens <= math.MaxFloat64) {
		r.fail("%s: rate %v, burst %v, tokens %v", what, rate, burst, tokens)
	}
	return bucket.Restore(rate, burst, tokens, last)
}

func (r *imageReader) image() {
	s := r.s
	if r.version = r.byte("version"); r.err == nil && (r.version < 1 || r.version > imageVersion) {
		r.off--
		r.fail("unknown version %d", r.version)
	}
	s.now = Time(r.int("now"))
	s.lease = r.uint("lease")
	s.tseq = r.uint("tseq")
	s.lastDeadline = Time(r.int("last deadline"))
	r.prevEnq = s.now
	nt := r.count("timers", minTimed)
	if r.err == nil && nt > math.MaxInt32 {
		r.fail("%d timers", nt)
	}
	if r.err != nil {
		return
	}
	r.timers = make([]xref, nt)
	for _, step := range []func(){
		r.throttles, r.tsetList, r.queueList, r.subs, r.eligible, r.waiting, r.loose,
		r.timerHeap, r.wakes, r.expiry, r.unsorted, r.dirty, r.lifecycle,
	} {
		if step(); r.err != nil {
			return
		}
	}
	if r.off != len(r.b) {
		r.fail("%d trailing bytes", len(r.b)-r.off)
		return
	}
	r.check()
}

func (r *imageReader) throttles() {
	s := r.s
	n := r.count("throttle buckets", minBucket)
	for range n {
		name := r.str("throttle key", imgMaxName)
		limited := r.bool("limited")
		b := r.bucket("throttle bucket " + name)
		if r.err != nil {
			return
		}
		if s.buckets[name] != nil {
			r.fail("throttle key %q repeated", name)
			return
		}
		tb := &tbucket{name: name, b: b, limited: limited, hidx: -1}
		s.buckets[name] = tb
		r.buckets = append(r.buckets, tb)
	}
	r.nthrottle = len(r.buckets)
}

func (r *imageReader) tsetList() {
	s := r.s
	n := r.count("throttle key sets", 2)
	for range n {
		k := r.count("throttle key set", 1)
		if r.err == nil && (k == 0 || k > MaxThrottleKeys) {
			r.fail("throttle key set of %d keys", k)
		}
		if r.err != nil {
			return
		}
		ts := &tset{names: make([]string, k), buckets: make([]*tbucket, k)}
		var c []byte
		for j := range k {
			i, ok := r.ref("throttle bucket", r.nthrottle)
			if !ok {
				return
			}
			tb := r.buckets[i]
			if j > 0 && tb.name <= ts.names[j-1] {
				r.fail("throttle key set: %q after %q", tb.name, ts.names[j-1])
				return
			}
			ts.names[j], ts.buckets[j] = tb.name, tb
			c = binary.AppendUvarint(c, uint64(len(tb.name)))
			c = append(c, tb.name...)
		}
		ts.canon = string(c)
		if s.tsets[ts.canon] != nil {
			r.fail("throttle key set %v repeated", ts.names)
			return
		}
		s.tsets[ts.canon] = ts
		for _, tb := range ts.buckets {
			tb.refs++
		}
		r.tsets = append(r.tsets, ts)
	}
}

func (r *imageReader) queueList() {
	s := r.s
	n := r.count("queues", minQueue)
	for range n {
		name := r.str("queue name", MaxQueueName)
		spec := QueueSpec{Name: name}
		spec.VisibilityTimeout = r.dur("visibility timeout")
		spec.MaxAttempts = r.u32("max attempts")
		spec.BackoffBase = r.dur("backoff base")
		spec.BackoffMax = r.dur("backoff max")
		spec.DedupWindow = r.dur("dedup window")
		spec.OnEnqueue = r.str("on_enqueue", math.MaxInt)
		spec.OnFailure = r.str("on_failure", math.MaxInt)
		spec.Policy = r.str("policy", 16)
		spec.LatencyBudget = r.u32("latency budget")
		spec.LatencyIdle = r.dur("latency idle")
		if r.version >= 2 {
			spec.TenantSeparator = r.str("tenant separator", MaxTenantSeparator)
			spec.CostByTime = r.bool("cost by time")
		}
		if r.version >= 4 {
			spec.MessageTTL = r.dur("message ttl")
			spec.ExpiredAction = r.str("expired action", 16)
		}
		if r.err != nil {
			return
		}
		if e := checkTTL(&spec); e != nil {
			r.fail("queue %s: %v", name, e)
			return
		}
		if err := validateName(name); err != nil {
			r.fail("%v", err)
			return
		}
		if e := CheckPolicy(spec.Policy); e != nil {
			r.fail("queue %s: %v", name, e)
			return
		}
		if e := checkLatency(&spec); e != nil {
			r.fail("queue %s: %v", name, e)
			return
		}
		if e := checkTenants(&spec, spec.Policy); e != nil {
			r.fail("queue %s: %v", name, e)
			return
		}
		if s.queues[name] != nil {
			r.fail("queue %s repeated", name)
			return
		}
		q := r.newQueue(spec)
		d := r.newQueue(dlqSpec(&spec))
		q.dlq, d.parent = d, q
		r.queues = append(r.queues, q, d)
		if r.queue(q); r.err != nil {
			return
		}
		if r.queue(d); r.err != nil {
			return
		}
	}
}

func (r *imageReader) newQueue(spec QueueSpec) *queue {
	q := &queue{
		name:   spec.Name,
		spec:   spec,
		keys:   make(map[string]*fkey),
		subs:   make(map[SubID]*sub),
		dhidx:  -1,
		limits: make(map[string]*tbucket),
	}
	r.s.queues[q.name] = q
	return q
}

func (r *imageReader) queue(q *queue) {
	q.vis = r.positive("visibility timeout")
	q.policy.MaxAttempts = r.u32("max attempts")
	q.policy.BackoffBase = r.positive("backoff base")
	q.policy.BackoffMax = r.dur("backoff max")
	q.window = r.positive("dedup window")
	quantum := r.uint("quantum")
	policy := r.byte("policy")
	if r.err != nil {
		return
	}
	switch {
	case q.policy.MaxAttempts == 0 || q.policy.BackoffMax < q.policy.BackoffBase:
		r.fail("queue %s: retry policy %+v", q.name, q.policy)
	case quantum < 1 || quantum > drr.MaxQuantum:
		r.fail("queue %s: quantum %d", q.name, quantum)
	case policy > 1:
		r.fail("queue %s: policy %d", q.name, policy)
	}
	f := &q.fair
	f.stfq = policy == 1
	if f.stfq {
		f.drr.Init(int64(quantum))
		f.budget = r.u32("latency budget")
		f.idle = r.dur("latency idle")
		f.credit = r.int("latency credit")
		f.creditMax = latencyBurst * int64(f.budget) * creditUnit
		if r.version < 3 {
			f.credit *= creditUnit / 2 // from half deliveries
		}
		if r.err == nil && (f.credit > f.creditMax || f.credit < -f.creditMax) {
			r.fail("queue %s: latency credit %d out of ±%d", q.name, f.credit, f.creditMax)
		}
		v, seq := r.uint("virtual time"), r.uint("stfq sequence")
		f.setByTime(q.spec.CostByTime)
		if f.setSep(q.spec.TenantSeparator); f.sep != "" {
			f.top.Load(v, seq)
			r.tenants(q)
		} else {
			f.fq.Load(v, seq)
		}
	} else {
		round, target := r.uint("round"), r.uint("skip target")
		if r.err == nil && (round >= maxRound || target >= maxRound) {
			r.fail("queue %s: round %d, target %d", q.name, round, target)
		}
		f.drr.Load(int64(quantum), round, target)
	}

	nk := r.count("fairness keys", minKey)
	r.keys = r.keys[:0]
	for range nk {
		if r.key(q); r.err != nil {
			return
		}
	}
	if f.sep != "" {
		if r.tenantHeap(q); r.err != nil {
			return
		}
	}
	if f.stfq {
		n := r.count("latency lane", 1)
		for range n {
			i, ok := r.ref("fairness key", len(r.keys))
			if !ok {
				return
			}
			k := r.keys[i]
			if k.inLat || k.sflow.Active() {
				r.fail("queue %s: key %q in the latency lane twice, or in both lanes", q.name, k.name)
				return
			}
			f.latPush(k)
		}
		n = r.count("recent keys", 2)
		for range n {
			name := r.str("recent key", imgMaxName)
			at := r.time("recent key idle since")
			tag := f.fq.V() // before version 3: none, so the virtual time
			if f.sep != "" {
				tag = f.top.V()
			}
			if r.version >= 3 {
				tag = r.uint("recent key tag")
			}
			if r.err != nil {
				return
			}
			if f.recent == nil {
				f.recent = make(map[string]recalled)
			}
			if _, dup := f.recent[name]; dup {
				r.fail("queue %s: recent key %q repeated", q.name, name)
				return
			}
			f.recent[name] = recalled{at, tag}
		}
		n = r.count("recent queue", 2)
		for range n {
			name := r.str("recent key", imgMaxName)
			at := r.time("recent key idle since")
			f.recentQ = append(f.recentQ, recentKey{name, at})
		}
		if f.byTime {
			f.est = r.u32("cost estimate")
			n = r.count("open leases", 3)
			for range n {
				lease, start, est := r.uint("lease"), r.time("lease start"), r.u32("lease charge")
				if r.err != nil {
					return
				}
				if _, dup := f.held[lease]; dup || lease == 0 || lease > r.s.lease {
					r.fail("queue %s: open lease %d repeated or not given", q.name, lease)
					return
				}
				f.held[lease] = heldLease{start: start, est: est}
			}
		}
	} else {
		for _, next := range [2]bool{false, true} {
			n := r.count("round", 1)
			for range n {
				i, ok := r.ref("fairness key", len(r.keys))
				if !ok {
					return
				}
				k := r.keys[i]
				if k.flow.Active() || k.flow.State().Round > f.drr.Round() {
					r.fail("queue %s: key %q listed twice, or ahead of the round", q.name, k.name)
					return
				}
				f.drr.Append(k, next)
			}
		}
	}
	if r.err != nil {
		return
	}
	if q.parent == nil {
		r.dedup(q)
		r.producers(q)
	}
	r.limits(q)
}

// tenants reads the tenants of q, a queue with a tenant separator, and
// loads their schedulers; their keys follow.
func (r *imageReader) tenants(q *queue) {
	f := &q.fair
	n := r.count("tenants", 7)
	for range n {
		name := r.str("tenant", imgMaxName)
		flags := r.byte("tenant flags")
		weight := r.u32("tenant weight")
		tag, seq := r.uint("tenant tag"), r.uint("tenant sequence")
		v, kseq := r.uint("tenant virtual time"), r.uint("tenant sequence")
		t := &tenant{name: name}
		if flags&imgTenantIdle != 0 {
			t.idleSince = r.time("tenant idle since")
		}
		if r.err != nil {
			return
		}
		if f.tenants[name] != nil || flags&^(imgTenantHeap|imgTenantIdle) != 0 {
			r.fail("queue %s: tenant %q repeated, or flags %#x", q.name, name, flags)
			return
		}
		t.sflow.SetState(stfq.FlowState{Tag: tag, Seq: seq, Weight: weight})
		t.keys.Load(v, kseq)
		t.img = uint32(flags & imgTenantHeap) // read back by tenantHeap
		f.tenants[name] = t
	}
}

// tenantHeap checks the tenants of q against their keys, now read, and
// puts those the image had in the top scheduler back in it.
func (r *imageReader) tenantHeap(q *queue) {
	f := &q.fair
	for _, name := range sortedKeys(f.tenants, strings.Compare) {
		t := f.tenants[name]
		heap := t.img&imgTenantHeap != 0
		switch {
		case t.nkeys == 0:
			r.fail("queue %s: tenant %q without keys", q.name, name)
		case heap != (t.keys.Len() > 0):
			r.fail("queue %s: tenant %q scheduled %v with %d keys in the throughput lane", q.name, name, heap, t.keys.Len())
		case heap && int64(t.sflow.Tag()-f.top.V()) < 0:
			r.fail("queue %s: tenant %q: tag %d behind the virtual time %d", q.name, name, t.sflow.Tag(), f.top.V())
		}
		if r.err != nil {
			return
		}
		t.img = 0
		if heap {
			f.top.Insert(t)
		}
	}
}

func (r *imageReader) key(q *queue) {
	f := &q.fair
	name := r.str("fairness key", imgMaxName)
	flags := r.byte("key flags")
	weight := r.u32("weight")
	delivered := r.uint("delivered")
	if r.err != nil {
		return
	}
	if q.keys[name] != nil {
		r.fail("queue %s: key %q repeated", q.name, name)
		return
	}
	if allowed := byte(imgBacklogged); f.stfq && flags&^(allowed|imgIdle|imgHeap) != 0 || !f.stfq && flags&^allowed != 0 {
		r.fail("queue %s: key %q: flags %#x", q.name, name, flags)
		return
	}
	k := &fkey{q: q, name: name, backlogged: flags&imgBacklogged != 0, delivered: delivered}
	k.dflt.key = k
	r.s.addLane(&k.dflt)
	if f.stfq {
		tag, seq := r.uint("tag"), r.uint("sequence")
		if flags&imgIdle != 0 {
			k.idleSince = r.time("idle since")
		}
		k.left = r.u32("latency budget left")
		if f.byTime {
			k.est = r.u32("cost estimate")
		}
		kw := weight
		if f.sep != "" {
			// Its tenant's keys share at equal weights.
			if k.ten, kw = f.tenants[TenantOf(name, f.sep)], 0; k.ten == nil {
				r.fail("queue %s: key %q of no tenant", q.name, name)
				return
			}
			k.ten.nkeys++
			if k.backlogged {
				k.ten.nback++
			}
		}
		k.sflow.SetState(stfq.FlowState{Tag: tag, Seq: seq, Weight: kw})
		k.flow.SetState(drr.FlowState{Weight: weight})
		if flags&imgHeap != 0 {
			kq := f.kq(k)
			if int64(tag-kq.V()) < 0 {
				r.fail("queue %s: key %q: tag %d behind the virtual time %d", q.name, name, tag, kq.V())
				return
			}
			kq.Insert(k)
		}
	} else {
		deficit, round := r.int("deficit"), r.uint("round")
		k.flow.SetState(drr.FlowState{Deficit: deficit, Round: round, Weight: weight})
		k.sflow.SetState(stfq.FlowState{Weight: weight})
		if max := int64(k.flow.Weight()) * f.drr.Quantum(); deficit > max || deficit < -math.MaxUint32 {
			r.fail("queue %s: key %q: deficit %d out of (-2^32, %d]", q.name, name, deficit, max)
			return
		}
	}
	q.keys[name] = k
	r.keys = append(r.keys, k)

	nl := r.count("lanes", 3)
	if r.err == nil && nl == 0 {
		r.fail("queue %s: key %q without its default lane", q.name, name)
	}
	base := len(r.lanes)
	for i := range nl {
		l := &k.dflt
		if i > 0 {
			t, _ := r.ref("throttle key set", len(r.tsets)+1)
			okey := r.str("ordering key", imgMaxName)
			var prio uint8
			if r.version >= 4 {
				prio = uint8(min(r.uint("lane priority"), 255))
			}
			if r.err != nil {
				return
			}
			var ts *tset
			if t > 0 {
				ts = r.tsets[t-1]
			}
			id := laneID{ts: ts, okey: okey, prio: prio}
			if ts == nil && okey == "" && prio == 0 || k.lanes[id] != nil || prio > MaxPriority+1 || prio == DefaultPriority+1 || okey != "" && prio != 0 {
				r.fail("queue %s: key %q: lane (%q, %q, %d) repeated or bad", q.name, name, canon(ts), okey, prio)
				return
			}
			l = &lane{key: k, ts: ts, okey: okey, prio: prio}
			if k.lanes == nil {
				k.lanes = make(map[laneID]*lane)
			}
			k.lanes[id] = l
			r.s.addLane(l)
			if ts != nil {
				ts.refs++
			}
		}
		r.lanes = append(r.lanes, l)
		n := r.count("listed messages", minMsg)
		for range n {
			x := r.msg(l, placeList)
			if x == 0 {
				return
			}
			m := r.s.msg(x)
			r.s.pushBack(l, x, m)
			m.flags |= fListed
		}
	}
	n := r.count("runnable lanes", 1)
	for range n {
		i, ok := r.ref("lane", nl)
		if !ok {
			return
		}
		l := r.lanes[base+i]
		if l.state != lsIdle {
			r.fail("queue %s: key %q: lane in the runnable ring twice", q.name, name)
			return
		}
		r.s.ringAdd(l)
	}
}

// Where a message record is.
const (
	placeList  = iota // in its lane's list
	placeRing         // in a subscription's lease list
	placeLoose        // elsewhere
)

// msg reads a message record of lane l and adds the message to its lane
// and queue (not to its lane's list, nor to a lease list); it returns 0
// with the error set if the record is bad or does not fit where it is.
func (r *imageReader) msg(l *lane, where int) mref {
	s := r.s
	q := l.key.q
	h := r.byte("message header")
	id := r.id("message id")
	enq := r.prevEnq + Time(r.int("enqueued at"))
	cost := r.u32("cost")
	weight := uint32(1)
	var more uint64
	var ttl uint32
	var prio uint8
	if h&imgWeight != 0 {
		if r.version >= 4 {
			wx := r.uint("weight")
			more = wx & 15
			if wx>>4 > math.MaxUint32 {
				r.fail("weight %d", wx>>4)
			}
			weight = uint32(wx >> 4)
			if more&imgMoreTTL != 0 {
				ttl = r.u32("ttl")
			}
			if more&imgMorePrio != 0 {
				prio = uint8(min(r.uint("priority"), 255))
			}
		} else {
			weight = r.u32("weight")
		}
	}
	var attempts uint32
	if h&imgAttempts != 0 {
		attempts = r.u32("attempts")
	}
	var due Time
	if h&imgDue != 0 {
		due = r.time("due")
	}
	var reason string
	if h&imgReason != 0 {
		reason = r.str("reason", MaxReasonLen)
	}
	st := msgState(h & imgStateMask)
	timed := st == stDelayed || st == stLeased || more&imgMoreTimed != 0
	var hidx, tseq, lease uint64
	if timed {
		hidx = r.uint("timer index")
		tseq = s.tseq - r.uint("tseq")
	}
	if st == stLeased {
		lease = s.lease - r.uint("lease")
	}
	if r.err != nil {
		return 0
	}
	r.prevEnq = enq
	inflight := h&imgInflight != 0
	var fits bool
	switch where {
	case placeList:
		fits = !inflight && (st == stReady || st == stDelayed && l.ordered())
	case placeRing:
		fits = st == stLeased && inflight == l.ordered()
	default:
		fits = st != stReady && inflight == l.ordered()
	}
	other := q.dlq
	if q.parent != nil {
		other = q.parent
	}
	switch {
	case !fits:
		r.fail("message %s: %v (in flight %v) cannot be where it is", formatID(id), st, inflight)
	case id == [16]byte{} || q.msgs.get(&s.recs, id) != 0 || other.msgs.get(&s.recs, id) != 0:
		r.fail("message %s: zero or repeated", formatID(id))
	case weight == 0 || h&imgReason != 0 && reason == "":
		r.fail("message %s: weight 0 or empty reason", formatID(id))
	case more&imgMoreTimed != 0 && (st != stReady || ttl == 0) || more&imgMoreTTL != 0 && (ttl == 0 || ttl > ttlMillis(MaxTTL)) ||
		more&imgMorePrio != 0 && (prio == 0 || prio > MaxPriority+1 || prio == DefaultPriority+1) || l.okey == "" && l.prio != prio:
		r.fail("message %s: ttl %d, priority %d or flags %#x do not fit", formatID(id), ttl, prio, more)
	case timed && (hidx >= uint64(len(r.timers)) || r.timers[hidx] != 0):
		r.fail("message %s: timer %d out of range or taken", formatID(id), hidx)
	case inflight && l.inflight != 0:
		r.fail("message %s: a second message in flight in its lane", formatID(id))
	}
	if r.err != nil {
		return 0
	}
	x, m := s.newMsg()
	m.id, m.enq, m.cost = id, enq, cost
	s.setWeight(x, m, weight)
	s.setPrio(x, m, prio)
	if due != 0 || lease != 0 || attempts != 0 || timed || ttl != 0 {
		e := s.extFor(x, m)
		e.due, e.lease, e.tseq, e.attempts, e.ttl = due, lease, tseq, attempts, ttl
	}
	if ttl != 0 && q.parent == nil {
		q.ttls = true
	}
	if more&imgMoreNoTTL != 0 {
		m.flags |= fNoTTL
	}
	s.attach(q, x, m, l)
	m.state = st
	switch st {
	case stReady:
		q.ready++
		l.key.pending++
	case stDelayed, stDeciding:
		q.delayed++
	case stLeased:
		q.leased++
	}
	if timed {
		s.exts.at(uint32(m.ext)).heap = uint32(hidx) + 1
		r.timers[hidx] = m.ext
	}
	if h&imgRecord != 0 {
		m.flags |= fState
	}
	if q.parent != nil {
		m.flags |= fDead
	}
	s.setReason(x, m, reason)
	if inflight {
		l.inflight = x
	}
	return x
}

func (r *imageReader) dedup(q *queue) {
	n := r.count("idempotency keys", minIdk)
	for range n {
		key := r.str("idempotency key", math.MaxInt)
		id := r.id("idempotency key id")
		expires := r.time("idempotency key expiry")
		if r.err != nil {
			return
		}
		if !q.dedup.Append(key, id, int64(expires)) {
			r.fail("queue %s: idempotency key %q repeated", q.name, key)
			return
		}
	}
	n = r.count("restored idempotency keys", minIdk)
	for range n {
		key := r.str("idempotency key", math.MaxInt)
		id := r.id("idempotency key id")
		expires := r.time("idempotency key expiry")
		q.dedup.Restore(key, id, int64(expires))
	}
}

func (r *imageReader) producers(q *queue) {
	q.dunsorted = r.bool("unsorted")
	n := r.count("producers", minProd)
	for range n {
		pid := r.id("producer")
		floor := r.uint("floor")
		expires := r.time("producer expiry")
		if r.err != nil {
			return
		}
		if pid == [16]byte{} || q.prods[pid] != nil {
			r.fail("queue %s: producer %s zero or repeated", q.name, formatID(pid))
			return
		}
		p := &producer{id: pid, q: q, floor: floor, expires: expires}
		if q.prods == nil {
			q.prods = make(map[[16]byte]*producer)
		}
		q.prods[pid] = p
		q.appendProducer(p)
		if q.dunsorted {
			ne := r.count("sequences", minPentry)
			if ne > 0 {
				p.ents = make([]pentry, ne)
			}
			for i := range ne {
				p.ents[i].seq = r.uint("sequence")
				p.ents[i].id = r.id("sequence id")
			}
			p.n = ne
			nr := r.count("runs", 1)
			if nr > 0 {
				p.runs = make([]uint64, nr)
			}
			for i := range nr {
				p.runs[i] = r.uint("run")
			}
			continue
		}
		ne := r.count("sequences", minPentry+1)
		if ne > 0 {
			size := 4
			for size < ne {
				size *= 2
			}
			p.ents, p.ends = make([]pentry, size), make([]uint64, (size+63)/64)
		}
		var prev uint64
		for i := range ne {
			d := r.uint("sequence")
			seq := prev + d
			id := r.id("sequence id")
			end := r.bool("ends run")
			if r.err != nil {
				return
			}
			if i > 0 && (d == 0 || seq < prev) {
				r.fail("queue %s: producer %s: sequence %d after %d", q.name, formatID(pid), seq, prev)
				return
			}
			p.ents[i] = pentry{seq: seq, id: id}
			p.mark(i, end)
			prev = seq
		}
		p.n = ne
	}
}

func (r *imageReader) limits(q *queue) {
	n := r.count("rate limits", minBucket-1)
	for range n {
		name := r.str("rate limit", imgMaxName)
		b := r.bucket("rate limit " + name)
		if r.err != nil {
			return
		}
		if q.limits[name] != nil {
			r.fail("queue %s: rate limit %q repeated", q.name, name)
			return
		}
		lb := &tbucket{name: name, q: q, b: b, limited: true, hidx: -1}
		q.limits[name] = lb
		r.buckets = append(r.buckets, lb)
	}
}

// freeSlot marks the free slots while the subscriptions are placed.
var freeSlot sub

func (r *imageReader) subs() {
	s := r.s
	ns := r.count("subscriptions", minSub)
	nf := r.count("free slots", 1)
	if r.err != nil {
		return
	}
	if uint64(ns)+uint64(nf) > math.MaxUint32 {
		r.fail("%d slots", ns+nf)
		return
	}
	s.slots = make([]*sub, 1+ns+nf)
	s.freeSlots = make([]uint32, 0, nf)
	defer func() {
		for _, f := range s.freeSlots {
			if s.slots[f] == &freeSlot {
				s.slots[f] = nil
			}
		}
	}()
	for range nf {
		f, ok := r.ref("free slot", len(s.slots))
		if !ok {
			return
		}
		if f == 0 || s.slots[f] != nil {
			r.fail("free slot %d repeated", f)
			return
		}
		s.slots[f] = &freeSlot
		s.freeSlots = append(s.freeSlots, uint32(f))
	}
	for range ns {
		if r.sub(); r.err != nil {
			return
		}
	}
}

func (r *imageReader) sub() {
	s := r.s
	slot, _ := r.ref("slot", len(s.slots))
	id := SubID(r.uint("subscription"))
	qi, _ := r.ref("queue", len(r.queues))
	credit := r.u32("credit")
	if r.err != nil {
		return
	}
	if slot == 0 || s.slots[slot] != nil || s.subs[id] != nil {
		r.fail("subscription %d: slot %d taken, or subscription repeated", id, slot)
		return
	}
	q := r.queues[qi]
	sb := &sub{id: id, q: q, credit: credit, slot: uint32(slot), group: -1, egroup: -1}
	s.slots[slot] = sb
	s.subs[id] = sb
	q.subs[id] = sb
	n := r.count("rate limits", 1)
	if r.err == nil && n > MaxRateLimits {
		r.fail("subscription %d: %d rate limits", id, n)
	}
	for range n {
		i, ok := r.ref("rate limit", len(r.buckets))
		if !ok {
			return
		}
		lb := r.buckets[i]
		if lb.q != q || slices.Contains(sb.limits, lb) {
			r.fail("subscription %d: rate limit %q of another queue or repeated", id, lb.name)
			return
		}
		lb.refs++
		sb.limits = append(sb.limits, lb)
	}
	n = r.count("leases", 1+minTimed+1)
	for range n {
		i, ok := r.ref("lane", len(r.lanes))
		if !ok {
			return
		}
		l := r.lanes[i]
		if l.key.q != q {
			r.fail("subscription %d: a lease of another queue", id)
			return
		}
		x := r.msg(l, placeRing)
		if x == 0 {
			return
		}
		m := s.msg(x)
		s.leaseLink(sb, x, m)
		s.exts.at(uint32(m.ext)).slot = sb.slot
		sb.held++
	}
}

// subRef reads the slot of an open subscription.
func (r *imageReader) subRef() *sub {
	i, ok := r.ref("slot", len(r.s.slots))
	if !ok {
		return nil
	}
	sb := r.s.slots[i]
	if sb == nil {
		r.fail("slot %d: no subscription", i)
	}
	return sb
}

func (r *imageReader) eligible() {
	for _, q := range r.queues {
		n := r.count("eligible subscriptions", 1)
		for range n {
			sb := r.subRef()
			if sb == nil {
				return
			}
			if sb.q != q || sb.state != subIdle || sb.credit == 0 {
				r.fail("queue %s: subscription %d cannot be eligible (queue %s, state %d, credit %d)", q.name, sb.id, sb.q.name, sb.state, sb.credit)
				return
			}
			r.s.subIn(sb)
		}
	}
}

func (r *imageReader) waiting() {
	for _, tb := range r.buckets[:r.nthrottle] {
		n := r.count("waiting lanes", 1)
		for range n {
			i, ok := r.ref("lane", len(r.lanes))
			if !ok {
				return
			}
			l := r.lanes[i]
			if !tb.limited || l.state != lsIdle || l.ts == nil || l.key.q.parent != nil || !slices.Contains(l.ts.buckets, tb) {
				r.fail("throttle bucket %q: lane of key %q cannot wait for it", tb.name, l.key.name)
				return
			}
			l.state = lsParked
			l.tb = tb
			tb.addWaiter(l)
		}
	}
	for _, lb := range r.buckets[r.nthrottle:] {
		n := r.count("waiting subscriptions", 1)
		var tail *sub
		for range n {
			sb := r.subRef()
			if sb == nil {
				return
			}
			if sb.q != lb.q || sb.state != subIdle || !slices.Contains(sb.limits, lb) {
				r.fail("rate limit %q: subscription %d cannot wait for it", lb.name, sb.id)
				return
			}
			sb.state = subParked
			sb.tb = lb
			sb.prev = tail
			if tail == nil {
				lb.subs = sb
			} else {
				tail.next = sb
			}
			tail = sb
		}
	}
}

func (r *imageReader) loose() {
	n := r.count("loose messages", 1+minMsg)
	for range n {
		i, ok := r.ref("lane", len(r.lanes))
		if !ok || r.msg(r.lanes[i], placeLoose) == 0 {
			return
		}
	}
}

func (r *imageReader) timerHeap() {
	o := r.s.timers.o
	for i, t := range r.timers {
		if t == 0 {
			r.fail("timer %d: no message", i)
			return
		}
		if i > 0 && o.before(t, r.timers[(i-1)/2]) {
			r.fail("timer %d: before its parent", i)
			return
		}
	}
	r.s.timers.a = r.timers
}

func (r *imageReader) wakes() {
	r.s.wakes.a = readHeap(r, "bucket timer", r.buckets, func(tb *tbucket, at Time, i int32) bool {
		if tb.hidx >= 0 {
			return false
		}
		tb.wakeAt, tb.hidx = at, i
		return true
	})
}

func (r *imageReader) expiry() {
	r.s.expiry.a = readHeap(r, "expiry timer", r.queues, func(q *queue, at Time, i int32) bool {
		if q.dhidx >= 0 {
			return false
		}
		q.dnext, q.dhidx = at, i
		return true
	})
}

// readHeap reads a heap's array, written in array order as (item number
// in items, time) pairs, and checks the heap's order. place gives an item
// its time and heap index, and returns false when it already has one.
func readHeap[T interface{ before(T) bool }](r *imageReader, what string, items []T, place func(T, Time, int32) bool) []T {
	n := r.count(what+"s", 2)
	if r.err != nil {
		return nil
	}
	a := make([]T, 0, n)
	for i := range n {
		j, ok := r.ref(what, len(items))
		at := r.time(what)
		if !ok || r.err != nil {
			return a
		}
		it := items[j]
		if !place(it, at, int32(i)) {
			r.fail("%s %d: an item with two timers", what, i)
			return a
		}
		a = append(a, it)
		if i > 0 && it.before(a[(i-1)/2]) {
			r.fail("%s %d: before its parent", what, i)
			return a
		}
	}
	return a
}

func (r *imageReader) unsorted() {
	s := r.s
	n := r.count("unsorted queues", 1)
	for range n {
		j, ok := r.ref("queue", len(r.queues))
		if !ok {
			return
		}
		q := r.queues[j]
		if !q.dunsorted || q.img != 0 {
			r.fail("queue %s: listed unsorted twice, or sorted", q.name)
			return
		}
		q.img = 1
		s.unsorted = append(s.unsorted, q)
	}
	for _, q := range r.queues {
		if q.dunsorted != (q.img == 1) {
			r.fail("queue %s: unsorted and not listed", q.name)
			return
		}
		q.img = 0
	}
}

func (r *imageReader) dirty() {
	s := r.s
	n := r.count("dirty queues", 1)
	for range n {
		j, ok := r.ref("queue", len(r.queues))
		if !ok {
			return
		}
		q := r.queues[j]
		if q.dirty {
			r.fail("queue %s: dirty twice", q.name)
			return
		}
		s.markDirty(q)
	}
}

// lifecycle reads what lifecycle wrote (version 5 on).
func (r *imageReader) lifecycle() {
	if r.version < 5 || r.off == len(r.b) {
		return
	}
	s := r.s
	n := r.count("subscription leases", 2)
	for range n {
		i, ok := r.ref("subscription slot", len(s.slots))
		if !ok {
			return
		}
		lease := r.dur("subscription lease")
		if r.err != nil {
			return
		}
		sb := s.slots[i]
		if sb == nil || sb.lease != 0 || lease <= 0 {
			r.fail("subscription slot %d: lease %v: no such subscription, repeated or not positive", i, lease)
			return
		}
		sb.lease = lease
	}
	n = r.count("redrives", 5)
	for range n {
		j, ok := r.ref("queue", len(r.queues))
		if !ok {
			return
		}
		d := r.queues[j]
		rd := &redrive{rate: uint32(r.uint("redrive rate")), key: r.str("redrive key", imgMaxName), moved: r.uint("redrive moved"), next: r.time("redrive next")}
		k := r.count("redrive IDs", 16)
		if r.err != nil {
			return
		}
		if d.parent == nil || d.redrive != nil || rd.rate == 0 || rd.rate > MaxRedriveRate || k == 0 {
			r.fail("queue %s: redrive at %d/s of %d messages: not a DLQ, repeated or empty", d.name, rd.rate, k)
			return
		}
		rd.interval = time.Second / time.Duration(rd.rate)
		rd.ids = make([][16]byte, k)
		for i := range rd.ids {
			rd.ids[i] = r.id("redrive ID")
		}
		d.redrive = rd
		s.redrives = append(s.redrives, d)
	}
}

// check checks what the parts read so far do not: that lanes are where
// their contents say, and keys where their lanes say.
func (r *imageReader) check() {
	for _, l := range r.lanes {
		k := l.key
		if l != &k.dflt && l.refs == 0 {
			r.fail("queue %s: key %q: lane (%q, %q) without messages", k.q.name, k.name, canon(l.ts), l.okey)
			return
		}
		if (l.state == lsIdle) == r.s.canRun(l) {
			r.fail("queue %s: key %q: lane (%q, %q) in state %d, can run %v", k.q.name, k.name, canon(l.ts), l.okey, l.state, r.s.canRun(l))
			return
		}
		if l != &k.dflt {
			continue
		}
		f := &k.q.fair
		switch {
		case k.refs == 0:
			r.fail("queue %s: key %q without messages", k.q.name, k.name)
		case f.active(k) != (k.nrun > 0) || f.active(k) && !k.backlogged:
			r.fail("queue %s: key %q: scheduled %v with %d runnable lanes, backlogged %v", k.q.name, k.name, f.active(k), k.nrun, k.backlogged)
		case f.stfq && k.inLat != (k.left > 0):
			r.fail("queue %s: key %q: in the latency lane %v with %d left", k.q.name, k.name, k.inLat, k.left)
		case !f.stfq && k.pending == 0 && (k.backlogged || k.flow.Deficit() != 0):
			r.fail("queue %s: key %q: nothing pending, deficit %d", k.q.name, k.name, k.flow.Deficit())
		}
		if r.err != nil {
			return
		}
	}
	for _, ts := range r.tsets {
		if ts.refs == 0 {
			r.fail("throttle key set %v: used by no lane", ts.names)
			return
		}
	}
	for _, q := range r.queues {
		if err := r.s.checkHeld(q); err != nil {
			r.fail("queue %s: %v", q.name, err)
			return
		}
	}
}

// checkHeld checks that a queue charging by time knows the start of
// every open lease of its messages, and of nothing else.
func (s *Sched) checkHeld(q *queue) error {
	if !q.fair.byTime {
		return nil
	}
	n := 0
	for x := range q.msgs.all() {
		m := s.msg(x)
		if m.state != stLeased {
			continue
		}
		if _, ok := q.fair.held[s.leaseOf(m)]; !ok {
			return fmt.Errorf("lease %d of message %x: no start", s.leaseOf(m), m.id)
		}
		n++
	}
	if n != len(q.fair.held) {
		return fmt.Errorf("%d lease starts for %d open leases", len(q.fair.held), n)
	}
	return nil
}
