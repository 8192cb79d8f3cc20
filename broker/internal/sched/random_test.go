package sched

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"
)

var (
	seedFlag  = flag.Uint64("seed", 0, "seed for TestRandomized (0: from SEED, else the clock)")
	stepsFlag = flag.Int("steps", 0, "steps of TestRandomized (0: 20000, 2000 with -short)")
)

// TestRandomized runs random command sequences against the scheduler,
// checking its invariants after every step and its liveness after every
// Ready, and comparing against a model where the rules are simple enough
// to state: no message leased twice at once, queue counts equal the
// model's messages in each state, every acknowledged message gone for
// good (also across restarts), duplicates exactly within the dedup
// window, and a resent producer frame's messages duplicates exactly while
// their sequences are remembered. It prints its seed; rerun a failure
// with -seed=N (or SEED=N).
func TestRandomized(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		if v, err := strconv.ParseUint(os.Getenv("SEED"), 10, 64); err == nil {
			seed = v
		} else {
			seed = uint64(time.Now().UnixNano())
		}
	}
	steps := *stepsFlag
	if steps == 0 {
		steps = 20000
		if testing.Short() {
			steps = 2000
		}
	}
	t.Logf("seed %d (rerun with -seed=%d)", seed, seed)
	r := &randomRun{
		t:      t,
		rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		h:      newHarness(Config{Quantum: 500, MaxDeliveryBatch: 7, MaxUnsettled: 5, BackoffBase: 200 * time.Millisecond, BackoffMax: 3 * time.Second, ProducerSeqs: 6}),
		leases: make(map[[16]byte]Delivered),
		credit: make(map[SubID]int64),
		handed: make(map[uint64]SubID),
		acked:  make(map[[16]byte]bool),
		idem:   make(map[string]dedupModel),
		prods:  make(map[string]*producerModel),
		seqs:   make(map[uint64]uint64),
	}
	for i := 0; i < steps; i++ {
		r.step(i)
		if err := checkInvariants(r.h.s, false); err != nil {
			t.Fatalf("seed %d step %d (%s): invariant: %v", seed, i, r.last, err)
		}
	}
	t.Logf("%d steps: %d enqueued, %d delivered, %d acked, %d restarts", steps, r.enqueued, r.delivered, len(r.acked), r.restarts)
}

type dedupModel struct {
	id      [16]byte
	expires Time
}

// producerModel is what a queue remembers of a producer: the sequences
// it holds (at most Config.ProducerSeqs, the highest), the floor below
// which it forgot them, and when it forgets the producer.
type producerModel struct {
	seqs    map[uint64][16]byte
	floor   uint64
	expires Time
}

// sentFrame is a producer's frame, kept to be resent.
type sentFrame struct {
	producer uint64
	seq      uint64
	items    []EnqueueItem
}

type randomRun struct {
	t        *testing.T
	rng      *rand.Rand
	h        *harness
	leases   map[[16]byte]Delivered    // deliveries seen, by message
	acked    map[[16]byte]bool         // messages acked successfully
	idem     map[string]dedupModel     // queue + key → first accepted
	prods    map[string]*producerModel // queue + "/" + producer
	seqs     map[uint64]uint64         // producer → next sequence
	sent     []sentFrame               // recent producer frames
	failures []Failure
	last     string
	// The credit model: each open subscription's credit as the shell
	// sees it (granted, plus AddCredit, minus deliveries, plus reported
	// expiries), and the leases handed out and not yet ended, by
	// subscription.
	credit map[SubID]int64
	handed map[uint64]SubID
	// counters for the log
	enqueued, delivered, restarts int
}

var (
	randQueues    = []string{"a", "b", "c"}
	randKeys      = []string{"k1", "k2", "k3", "k4", "k5", "k6"}
	randThrottles = []string{"t1", "t2", "t3"}
	randOrders    = []string{"", "", "", "o1", "o2"}
)

func (r *randomRun) pick(n int) int { return r.rng.IntN(n) }

func (r *randomRun) dur(max time.Duration) time.Duration {
	return time.Duration(r.rng.Int64N(int64(max) + 1))
}

func (r *randomRun) step(i int) {
	h := r.h
	s := h.s
	h.ref++
	ref := h.ref
	switch op := r.pick(100); {
	case op < 4:
		q := randQueues[r.pick(len(randQueues))]
		spec := QueueSpec{Name: q, VisibilityTimeout: r.dur(5 * time.Second), MaxAttempts: uint32(r.pick(4)), DedupWindow: r.dur(20 * time.Second)}
		if r.pick(3) == 0 {
			spec.OnFailure = "function on_failure(m) end"
		}
		if r.pick(3) == 0 {
			spec.MessageTTL = r.dur(6*time.Second) + time.Millisecond
			if r.pick(2) == 0 {
				spec.ExpiredAction = ExpireDrop
			}
		}
		r.last = "create-queue " + q
		s.CreateQueue(ref, spec)
	case op < 5:
		q := randQueues[r.pick(len(randQueues))]
		r.last = "delete-queue " + q
		s.DeleteQueue(ref, q)
		for id := range r.credit {
			if s.subs[id] == nil {
				delete(r.credit, id) // ended with the queue
			}
		}
		for k := range r.idem {
			if k[:1] == q {
				delete(r.idem, k)
			}
		}
		for k := range r.prods {
			if k[:1] == q {
				delete(r.prods, k)
			}
		}
	case op < 30:
		r.enqueue(ref)
	case op < 36:
		q := randQueues[r.pick(len(randQueues))]
		if r.pick(4) == 0 {
			q += DLQSuffix
		}
		id := SubID(r.pick(6) + 1)
		var limits []RateLimit
		if r.pick(3) == 0 {
			limits = []RateLimit{{Name: "l" + strconv.Itoa(r.pick(2)), Limit: uint32(r.pick(5) + 1), Period: time.Second}}
		}
		r.last = fmt.Sprintf("subscribe %d %s", id, q)
		s.Subscribe(ref, id, q, uint32(r.pick(8)), limits)
		if v, ok := s.cur.replies[len(s.cur.replies)-1].Value.(Subscribed); ok {
			r.credit[id] = int64(v.Credit)
		}
	case op < 40:
		id := SubID(r.pick(6) + 1)
		r.last = fmt.Sprintf("unsubscribe %d", id)
		s.Unsubscribe(ref, id, r.pick(2) == 0)
		delete(r.credit, id)
	case op < 50:
		id := SubID(r.pick(6) + 1)
		r.last = fmt.Sprintf("credit %d", id)
		n := r.pick(10)
		s.AddCredit(id, uint32(n))
		if _, open := r.credit[id]; open {
			r.credit[id] += int64(n)
		}
	case op < 66:
		r.settle(ref)
	case op < 69:
		if len(r.failures) == 0 {
			return
		}
		f := r.failures[0]
		r.failures = r.failures[1:]
		d := Retry(r.dur(2 * time.Second))
		if r.pick(3) == 0 {
			d = DeadLetter()
		}
		r.last = "decide " + idName(f.ID)
		s.Decide(f.Queue, f.ID, d)
	case op < 71:
		q := randQueues[r.pick(len(randQueues))] + DLQSuffix
		r.last = "redrive " + q
		s.Redrive(ref, q, uint64(r.pick(4)))
	case op < 74:
		k := randThrottles[r.pick(len(randThrottles))]
		r.last = "throttle " + k
		switch r.pick(4) {
		case 0:
			s.RemoveThrottle(k)
		case 1:
			s.SetThrottle(k, 0, 0)
		default:
			s.SetThrottle(k, float64(r.pick(20)), float64(r.pick(5)+1))
		}
	case op < 86:
		d := r.dur(2 * time.Second)
		if dl := s.deadline(); dl != 0 && r.pick(2) == 0 {
			d = time.Duration(dl - s.Now())
		}
		r.last = "tick " + d.String()
		s.Tick(s.Now().Add(d))
	case op < 88:
		r.last = "stats"
		s.QueueStats(ref, randQueues[r.pick(len(randQueues))], 0)
		s.ListQueues(ref)
	case op < 89:
		// Deliveries are decided here; commands may still come before
		// the Ready is taken (an unsubscribe undoes its deliveries).
		r.last = "has-ready"
		s.HasReady()
		if err := checkInvariants(s, true); err != nil {
			r.t.Fatalf("after has-ready: liveness: %v", err)
		}
	case op < 90:
		r.last = "restart"
		r.ready()
		h.restart(r.t)
		r.restarts++
		r.leases = make(map[[16]byte]Delivered)
		clear(r.credit)
		clear(r.handed)
		r.failures = nil
		for id := range r.acked {
			for _, q := range h.s.queues {
				if q.msgs.get(&h.s.recs, id) != 0 {
					r.t.Fatalf("step %d: acked message %s restored", i, idName(id))
				}
			}
		}
	default:
		r.last = "ready"
		r.ready()
	}
}

func (r *randomRun) enqueue(ref Ref) {
	n := r.pick(4) + 1
	items := make([]EnqueueItem, n)
	for j := range items {
		r.h.next++
		m := Message{
			ID:          testID(r.h.next),
			FairnessKey: randKeys[r.pick(len(randKeys))],
			Weight:      uint32(r.pick(4)),
			OrderingKey: randOrders[r.pick(len(randOrders))],
			PayloadSize: uint32(r.pick(1500)),
			Body:        []byte("body-" + idName(testID(r.h.next))),
		}
		for k := r.pick(3); k > 0; k-- {
			m.ThrottleKeys = append(m.ThrottleKeys, randThrottles[r.pick(len(randThrottles))])
		}
		if r.pick(4) == 0 {
			m.Delay = r.dur(3 * time.Second)
		}
		if r.pick(4) == 0 {
			m.TTL = r.dur(4*time.Second) + time.Millisecond
		}
		if r.pick(3) == 0 {
			m.Priority = uint8(r.pick(MaxPriority + 2))
		}
		if r.pick(4) == 0 {
			m.IdempotencyKey = "i" + strconv.Itoa(r.pick(5))
		}
		items[j] = EnqueueItem{Queue: randQueues[r.pick(len(randQueues))], Msg: m}
	}
	// A third of the frames come from one of two idempotent producers;
	// some of those are an earlier frame resent, with new IDs.
	var producer, seq uint64
	switch r.pick(6) {
	case 0, 1:
		producer = uint64(r.pick(2) + 1)
		seq = r.seqs[producer] + uint64(r.pick(3)) // gaps: frames to other shards
		r.seqs[producer] = seq + uint64(n)
		r.sent = append(r.sent, sentFrame{producer: producer, seq: seq, items: items})
		if len(r.sent) > 30 {
			r.sent = r.sent[1:]
		}
	case 2:
		if len(r.sent) == 0 {
			break
		}
		f := r.sent[r.pick(len(r.sent))]
		producer, seq = f.producer, f.seq
		items = slices.Clone(f.items)
		for j := range items {
			r.h.next++
			items[j].Msg.ID = testID(r.h.next)
		}
	}
	for j := range items {
		if producer != 0 {
			items[j].Msg.ProducerID = testProducer(producer)
			items[j].Msg.Sequence = seq + uint64(j)
		}
	}
	r.last = fmt.Sprintf("enqueue %d producer %d seq %d", len(items), producer, seq)
	s := r.h.s
	s.Enqueue(ref, items)
	res := s.cur.replies[len(s.cur.replies)-1].Value.([]EnqueueResult)
	for j, it := range items {
		q := s.queues[it.Queue]
		var pm *producerModel
		if q != nil && producer != 0 {
			pkey := it.Queue + "/" + strconv.FormatUint(producer, 10)
			pm = r.prods[pkey]
			if pm != nil && s.Now() >= pm.expires {
				pm = nil
			}
			sq := it.Msg.Sequence
			first, remembered := [16]byte{}, false
			if pm != nil {
				first, remembered = pm.seqs[sq]
			}
			switch {
			case remembered:
				if !res[j].Duplicate || res[j].ID != first {
					r.t.Fatalf("enqueue %s seq %d: %s duplicate=%v err=%v; want duplicate of %s", pkey, sq, idName(res[j].ID), res[j].Duplicate, res[j].Err, idName(first))
				}
				continue
			case pm != nil && sq < pm.floor:
				if res[j].Err == nil {
					r.t.Fatalf("enqueue %s seq %d below floor %d: %s; want an error", pkey, sq, pm.floor, idName(res[j].ID))
				}
				continue
			case res[j].Err != nil:
				r.t.Fatalf("enqueue %s seq %d: %v", pkey, sq, res[j].Err)
			}
			if pm == nil {
				pm = &producerModel{seqs: make(map[uint64][16]byte)}
				r.prods[pkey] = pm
			}
			pm.seqs[sq] = res[j].ID
			pm.expires = s.Now().Add(q.window)
			if len(pm.seqs) > r.h.s.cfg.ProducerSeqs {
				low := slices.Min(slices.Collect(maps.Keys(pm.seqs)))
				delete(pm.seqs, low)
				pm.floor = max(pm.floor, low+1)
			}
		}
		if q == nil || it.Msg.IdempotencyKey == "" || res[j].Err != nil {
			if res[j].Err == nil {
				r.enqueued++
			}
			continue
		}
		key := it.Queue + "/" + it.Msg.IdempotencyKey
		m, seen := r.idem[key]
		live := seen && s.Now() < m.expires
		switch {
		case live && (!res[j].Duplicate || res[j].ID != m.id):
			r.t.Fatalf("enqueue %s: %s duplicate=%v; want duplicate of %s", key, idName(res[j].ID), res[j].Duplicate, idName(m.id))
		case !live && res[j].Duplicate:
			r.t.Fatalf("enqueue %s: duplicate of %s after the window", key, idName(res[j].ID))
		case !live:
			r.idem[key] = dedupModel{id: it.Msg.ID, expires: s.Now().Add(q.window)}
			r.enqueued++
		}
	}
}

func (r *randomRun) settle(ref Ref) {
	if len(r.leases) == 0 {
		return
	}
	ids := slices.SortedFunc(mapKeys(r.leases), func(a, b [16]byte) int { return slices.Compare(a[:], b[:]) })
	d := r.leases[ids[r.pick(len(ids))]]
	lr := LeaseRef{Queue: d.Queue, ID: d.ID, Lease: d.Lease}
	s := r.h.s
	ended := func() {
		delete(r.leases, d.ID)
		if err := s.cur.replies[len(s.cur.replies)-1].Value.([]error)[0]; err == nil {
			delete(r.handed, d.Lease)
		}
	}
	switch r.pick(6) {
	case 0, 1:
		r.last = "ack " + idName(d.ID)
		s.Ack(ref, []LeaseRef{lr})
		if err := s.cur.replies[len(s.cur.replies)-1].Value.([]error)[0]; err == nil {
			r.acked[d.ID] = true
		}
		ended()
	case 2:
		r.last = "nack " + idName(d.ID)
		s.Nack(ref, []NackItem{{LeaseRef: lr, Reason: "r"}})
		ended()
	case 3:
		r.last = "retry " + idName(d.ID)
		s.RetryAfter(ref, []RetryItem{{LeaseRef: lr, Delay: r.dur(time.Second)}})
		ended()
	case 5:
		r.last = "release " + idName(d.ID)
		s.Release(ref, []LeaseRef{lr})
		ended()
	case 4:
		r.last = "extend " + idName(d.ID)
		s.ExtendLease(ref, []ExtendItem{{LeaseRef: lr, Duration: r.dur(5 * time.Second)}})
	}
}

// ready takes Readys until there are none, applying Persist and checking
// liveness and the deliveries.
func (r *randomRun) ready() {
	s := r.h.s
	for s.HasReady() {
		if err := checkInvariants(s, true); err != nil {
			r.t.Fatalf("after %s: liveness: %v", r.last, err)
		}
		rd := s.Ready()
		applyPersist(r.h.kv, rd.Persist)
		for _, e := range rd.Expired {
			if _, open := r.credit[e.Sub]; !open {
				r.t.Fatalf("expiry reported to closed subscription %d", e.Sub)
			}
			for _, l := range e.Leases {
				if sub, ok := r.handed[l.Lease]; !ok || sub != e.Sub {
					r.t.Fatalf("expiry of %s lease %d reported to subscription %d; handed to %d (%v)", idName(l.ID), l.Lease, e.Sub, sub, ok)
				}
				delete(r.handed, l.Lease)
				r.credit[e.Sub]++
			}
		}
		seen := make(map[[16]byte]bool)
		for _, d := range rd.Deliveries {
			if s.subs[d.Sub] == nil {
				r.t.Fatalf("delivery to closed subscription %d", d.Sub)
			}
			for _, m := range d.Msgs {
				if seen[m.ID] {
					r.t.Fatalf("%s delivered twice in one Ready", idName(m.ID))
				}
				seen[m.ID] = true
				if r.acked[m.ID] {
					r.t.Fatalf("acked message %s delivered again", idName(m.ID))
				}
				if _, ok := r.h.kv[string(m.Key)]; !ok {
					r.t.Fatalf("%s delivered without a stored record", idName(m.ID))
				}
				m.Key = nil
				r.leases[m.ID] = m
				r.handed[m.Lease] = d.Sub
				r.credit[d.Sub]--
				r.delivered++
			}
		}
		r.failures = append(r.failures, rd.Failures...)
		for id, want := range r.credit {
			sb := s.subs[id]
			if sb == nil {
				r.t.Fatalf("subscription %d: closed; the shell counts it open", id)
			}
			if int64(sb.credit) != want {
				r.t.Fatalf("subscription %d: credit %d; the shell counts %d", id, sb.credit, want)
			}
		}
		s.Advance(rd)
	}
}
