package sched

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// fataler is what the image tests need of testing.TB and rapid.T.
type fataler interface {
	Helper()
	Fatalf(format string, args ...any)
}

// roundTrip images s at an entry boundary, loads the image, and checks
// the copy: the same image again, byte for byte, its invariants, and the
// same digest. It returns the copy and the image.
func roundTrip(t fataler, s *Sched) (*Sched, []byte) {
	t.Helper()
	img := s.AppendImage(nil)
	c, err := LoadImage(s.cfg, img)
	if err != nil {
		t.Fatalf("loading a %d-byte image: %v", len(img), err)
	}
	if again := c.AppendImage(nil); !bytes.Equal(again, img) {
		t.Fatalf("the loaded scheduler's image differs from the one it was loaded from: %s", imageDiff(img, again))
	}
	if err := checkInvariants(c, false); err != nil {
		t.Fatalf("loaded scheduler: invariant: %v", err)
	}
	// After the images: Digest takes in restored idempotency keys.
	if c.Digest() != s.Digest() {
		t.Fatalf("the loaded scheduler's digest differs")
	}
	return c, img
}

func imageDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	return fmt.Sprintf("lengths %d and %d, first difference at byte %d", len(a), len(b), i)
}

// chooser draws the random choices of a lockstep run: a *rand.Rand, or
// rapid's draws.
type chooser interface{ IntN(n int) int }

type rapidChooser struct{ t *rapid.T }

func (c rapidChooser) IntN(n int) int { return rapid.IntRange(0, n-1).Draw(c.t, "choice") }

// lockstep drives schedulers with the same random commands, the way the
// shell does, and checks that they stay indistinguishable: the same
// Readys, and after every command the same digest and the same image.
// Before split there is one scheduler; split images it and loads the
// copy.
type lockstep struct {
	t      fataler
	rnd    chooser
	ss     []*Sched
	ref    Ref
	next   uint64
	seqs   [3]uint64 // next sequence of idempotent producers 1 and 2
	leases []LeaseRef
	fails  []Failure
	last   string
}

var (
	lsQueues    = []string{"q0", "q1", "q2"}
	lsKeys      = []string{"k0", "k1", "k2", "k3", "t/a", "t/b", "u/a", "t"}
	lsThrottles = []string{"t0", "t1", "t2"}
	lsOrders    = []string{"", "", "o1", "o2"}
)

func (l *lockstep) pick(n int) int { return l.rnd.IntN(n) }

func (l *lockstep) dur(max time.Duration) time.Duration {
	return time.Duration(l.pick(int(max/time.Millisecond)+1)) * time.Millisecond
}

// do applies a command to every scheduler and compares them.
func (l *lockstep) do(name string, cmd func(s *Sched)) {
	l.t.Helper()
	l.last = name
	for _, s := range l.ss {
		cmd(s)
	}
	l.compare()
}

func (l *lockstep) compare() {
	l.t.Helper()
	if len(l.ss) < 2 {
		return
	}
	a, b := l.ss[0], l.ss[1]
	if a.Digest() != b.Digest() {
		l.t.Fatalf("after %s: digests differ", l.last)
	}
	if ia, ib := a.AppendImage(nil), b.AppendImage(nil); !bytes.Equal(ia, ib) {
		l.t.Fatalf("after %s: images differ: %s", l.last, imageDiff(ia, ib))
	}
}

// ready takes one Ready from each scheduler (all of them with drain),
// compares them, and records the deliveries and failures.
func (l *lockstep) ready(drain bool) {
	l.t.Helper()
	for {
		var more []bool
		for _, s := range l.ss {
			more = append(more, s.HasReady())
		}
		if slices.Contains(more, !more[0]) {
			l.t.Fatalf("after %s: HasReady %v", l.last, more)
		}
		if !more[0] {
			return
		}
		var out []string
		for i, s := range l.ss {
			rd := s.Ready()
			out = append(out, fmt.Sprintf("%+v", withoutWindow(rd)))
			if i == 0 {
				for _, d := range rd.Deliveries {
					for _, m := range d.Msgs {
						l.leases = append(l.leases, LeaseRef{Queue: m.Queue, ID: m.ID, Lease: m.Lease})
					}
				}
				l.fails = append(l.fails, rd.Failures...)
			}
			s.Advance(rd)
		}
		for _, o := range out[1:] {
			if o != out[0] {
				l.t.Fatalf("after %s: Readys differ:\n%s\n%s", l.last, out[0], o)
			}
		}
		if len(l.leases) > 40 {
			l.leases = slices.Delete(l.leases, 0, len(l.leases)-40)
		}
		if len(l.fails) > 20 {
			l.fails = slices.Delete(l.fails, 0, len(l.fails)-20)
		}
		l.compare()
		if !drain {
			return
		}
	}
}

// split images the first scheduler and adds the loaded copy, after
// taking the Readys: all of them, or with single one only (queues may be
// left to pump).
func (l *lockstep) split(single bool) {
	l.t.Helper()
	l.ready(!single)
	c, _ := roundTrip(l.t, l.ss[0])
	l.ss = append(l.ss[:1], c)
}

// step applies one random command.
func (l *lockstep) step() {
	l.t.Helper()
	l.ref++
	ref := l.ref
	switch op := l.pick(100); {
	case op < 4:
		spec := QueueSpec{Name: lsQueues[l.pick(len(lsQueues))], VisibilityTimeout: l.dur(3 * time.Second), MaxAttempts: uint32(l.pick(4)), DedupWindow: l.dur(10 * time.Second)}
		switch l.pick(3) {
		case 0:
			spec.Policy = PolicySTFQ
			spec.LatencyBudget = uint32(l.pick(4))
			spec.LatencyIdle = time.Duration(l.pick(3)) * 20 * time.Millisecond
			if l.pick(2) == 0 {
				spec.TenantSeparator = "/"
			}
			spec.CostByTime = l.pick(2) == 0
		case 1:
			spec.Policy = PolicyDRR
		}
		if l.pick(3) == 0 {
			spec.OnFailure = "function on_failure(m) end"
		}
		if l.pick(3) == 0 {
			spec.MessageTTL = l.dur(4*time.Second) + time.Millisecond
			if l.pick(2) == 0 {
				spec.ExpiredAction = ExpireDrop
			}
		}
		l.do("create-queue "+spec.Name, func(s *Sched) { s.CreateQueue(ref, spec) })
	case op < 5:
		q := lsQueues[l.pick(len(lsQueues))]
		l.do("delete-queue "+q, func(s *Sched) { s.DeleteQueue(ref, q) })
	case op < 32:
		l.enqueue(ref)
	case op < 38:
		q := lsQueues[l.pick(len(lsQueues))]
		if l.pick(4) == 0 {
			q += DLQSuffix
		}
		id := SubID(l.pick(5) + 1)
		var limits []RateLimit
		if l.pick(3) == 0 {
			limits = []RateLimit{{Name: "l" + strconv.Itoa(l.pick(2)), Limit: uint32(l.pick(4) + 1), Period: time.Second}}
		}
		credit := uint32(l.pick(8))
		l.do(fmt.Sprintf("subscribe %d %s", id, q), func(s *Sched) { s.Subscribe(ref, id, q, credit, limits) })
	case op < 41:
		id := SubID(l.pick(5) + 1)
		release := l.pick(2) == 0
		l.do(fmt.Sprintf("unsubscribe %d", id), func(s *Sched) { s.Unsubscribe(ref, id, release) })
	case op < 49:
		id := SubID(l.pick(5) + 1)
		n := uint32(l.pick(10))
		l.do(fmt.Sprintf("credit %d", id), func(s *Sched) { s.AddCredit(id, n) })
	case op < 64:
		l.settle(ref)
	case op < 67:
		if len(l.fails) == 0 {
			return
		}
		f := l.fails[0]
		l.fails = l.fails[1:]
		d := Retry(l.dur(time.Second))
		if l.pick(3) == 0 {
			d = DeadLetter()
		}
		l.do("decide", func(s *Sched) { s.Decide(f.Queue, f.ID, d) })
	case op < 69:
		q := lsQueues[l.pick(len(lsQueues))] + DLQSuffix
		n := uint64(l.pick(3))
		l.do("redrive "+q, func(s *Sched) { s.Redrive(ref, q, n) })
	case op < 73:
		k := lsThrottles[l.pick(len(lsThrottles))]
		switch l.pick(4) {
		case 0:
			l.do("remove-throttle "+k, func(s *Sched) { s.RemoveThrottle(k) })
		case 1:
			l.do("pause "+k, func(s *Sched) { s.SetThrottle(k, 0, 0) })
		default:
			rate, burst := float64(l.pick(20)), float64(l.pick(4)+1)
			l.do("throttle "+k, func(s *Sched) { s.SetThrottle(k, rate, burst) })
		}
	case op < 86:
		d := l.dur(time.Second)
		if dl := l.ss[0].deadline(); dl != 0 && l.pick(2) == 0 {
			d = max(time.Duration(dl-l.ss[0].Now()), 0)
		}
		l.do("tick "+d.String(), func(s *Sched) { s.Tick(s.Now().Add(d)) })
	case op < 88:
		q := lsQueues[l.pick(len(lsQueues))]
		l.do("stats "+q, func(s *Sched) { s.QueueStats(ref, q, 0); s.ListQueues(ref) })
	case op < 90:
		l.last = "has-ready"
		for _, s := range l.ss {
			s.HasReady()
		}
		l.compare()
	case op < 92:
		l.last = "one ready"
		l.ready(false)
	default:
		l.last = "ready"
		l.ready(true)
	}
}

func (l *lockstep) enqueue(ref Ref) {
	n := l.pick(4) + 1
	items := make([]EnqueueItem, n)
	var producer uint64
	if l.pick(3) == 0 {
		producer = uint64(l.pick(2) + 1)
	}
	for j := range items {
		l.next++
		m := Message{
			ID:          testID(l.next),
			FairnessKey: lsKeys[l.pick(len(lsKeys))],
			Weight:      uint32(l.pick(4)),
			OrderingKey: lsOrders[l.pick(len(lsOrders))],
			PayloadSize: uint32(l.pick(1500)),
			Body:        []byte("b"),
		}
		for k := l.pick(3); k > 0; k-- {
			m.ThrottleKeys = append(m.ThrottleKeys, lsThrottles[l.pick(len(lsThrottles))])
		}
		if l.pick(4) == 0 {
			m.Delay = l.dur(2 * time.Second)
		}
		if l.pick(4) == 0 {
			m.TTL = l.dur(3*time.Second) + time.Millisecond
		}
		if l.pick(3) == 0 {
			m.Priority = uint8(l.pick(MaxPriority + 2))
		}
		if l.pick(4) == 0 {
			m.IdempotencyKey = "i" + strconv.Itoa(l.pick(4))
		}
		if producer != 0 {
			m.ProducerID = testProducer(producer)
			if l.pick(5) == 0 && l.seqs[producer] > 3 {
				m.Sequence = l.seqs[producer] - uint64(l.pick(4)) - 1 // a resend
			} else {
				m.Sequence = l.seqs[producer] + uint64(l.pick(2))
				l.seqs[producer] = m.Sequence + 1
			}
		}
		items[j] = EnqueueItem{Queue: lsQueues[l.pick(len(lsQueues))], Msg: m}
	}
	l.do(fmt.Sprintf("enqueue %d", n), func(s *Sched) { s.Enqueue(ref, items) })
}

func (l *lockstep) settle(ref Ref) {
	if len(l.leases) == 0 {
		return
	}
	i := l.pick(len(l.leases))
	lr := l.leases[i]
	switch l.pick(6) {
	case 0, 1:
		l.leases = slices.Delete(l.leases, i, i+1)
		l.do("ack", func(s *Sched) { s.Ack(ref, []LeaseRef{lr}) })
	case 2:
		l.leases = slices.Delete(l.leases, i, i+1)
		l.do("nack", func(s *Sched) { s.Nack(ref, []NackItem{{LeaseRef: lr, Reason: "nope"}}) })
	case 3:
		l.leases = slices.Delete(l.leases, i, i+1)
		d := l.dur(time.Second)
		l.do("retry", func(s *Sched) { s.RetryAfter(ref, []RetryItem{{LeaseRef: lr, Delay: d}}) })
	case 4:
		l.leases = slices.Delete(l.leases, i, i+1)
		l.do("release", func(s *Sched) { s.Release(ref, []LeaseRef{lr}) })
	default:
		d := l.dur(3 * time.Second)
		l.do("extend", func(s *Sched) { s.ExtendLease(ref, []ExtendItem{{LeaseRef: lr, Duration: d}}) })
	}
}

func lockstepConfig(policy string) Config {
	return Config{Policy: policy, Quantum: 300, MaxDeliveryBatch: 3, MaxUnsettled: 4, BackoffBase: 100 * time.Millisecond,
		BackoffMax: time.Second, ProducerSeqs: 4, LatencyBudget: 2, LatencyIdle: 50 * time.Millisecond}
}

// TestImageEquivalence: a scheduler loaded from an image taken at any
// entry boundary of a random command sequence, then given the rest of the
// sequence alongside the original, makes the same Readys (replies,
// mutations, deliveries, expiries, failures, deadlines), and has the
// same digest and image after every command.
func TestImageEquivalence(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		policy := rapid.SampledFrom([]string{PolicyDRR, PolicySTFQ}).Draw(t, "policy")
		cfg := lockstepConfig(policy)
		if rapid.Bool().Draw(t, "no latency lane by default") {
			cfg.LatencyBudget = -1
		}
		s := New(cfg)
		s.Tick(t0)
		l := &lockstep{t: t, rnd: rapidChooser{t}, ss: []*Sched{s}}
		steps := rapid.IntRange(1, 400).Draw(t, "steps")
		at := rapid.IntRange(0, steps).Draw(t, "image at")
		single := rapid.Bool().Draw(t, "after a single ready")
		for i := 0; i < steps; i++ {
			if i == at {
				l.split(single)
			}
			l.step()
		}
		if len(l.ss) == 1 {
			l.split(single)
		}
		l.ready(true)
	})
}

// TestImageLongRuns runs long lockstep sequences with a split every few
// hundred commands (the copy replacing the original), so that states
// grow rich: throttled lanes, ordered lanes in flight, latency lanes,
// producers, DLQs. It logs what the images held.
func TestImageLongRuns(t *testing.T) {
	steps := 6000
	if testing.Short() {
		steps = 1500
	}
	for _, policy := range []string{PolicyDRR, PolicySTFQ} {
		t.Run(policy, func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(uint64(len(policy)), 9))
			s := New(lockstepConfig(policy))
			s.Tick(t0)
			l := &lockstep{t: t, rnd: rnd, ss: []*Sched{s}}
			seen := make(map[string]int)
			for i := 0; i < steps; i++ {
				if i%300 == 150 {
					l.ss = l.ss[1:] // the copy carries on alone
					if len(l.ss) == 0 {
						l.ss = []*Sched{s}
					}
					l.split(i%600 == 150)
					for f, n := range features(l.ss[0]) {
						seen[f] += n
					}
				}
				l.step()
			}
			t.Logf("features over the images: %v", seen)
			if testing.Short() {
				return
			}
			for _, f := range []string{"parked lane", "in flight", "delayed", "leased", "deciding", "dead letter", "reason", "idempotency key", "producer", "free slot", "orphan lease", "parked sub", "wake", "expiry", "latency lane", "stfq heap", "drr round", "drr next round", "dirty"} {
				if seen[f] == 0 {
					t.Errorf("no image held: %s", f)
				}
			}
		})
	}
}

// features counts what a state holds, to check that the tests image rich
// states.
func features(s *Sched) map[string]int {
	f := make(map[string]int)
	for _, q := range s.queues {
		for x := range q.msgs.all() {
			m := s.msg(x)
			switch m.state {
			case stDelayed:
				f["delayed"]++
			case stLeased:
				f["leased"]++
				if s.ext(m).slot == 0 {
					f["orphan lease"]++
				}
			case stDeciding:
				f["deciding"]++
			}
			if m.flags&fDead != 0 {
				f["dead letter"]++
			}
			if m.flags&fReason != 0 {
				f["reason"]++
			}
		}
		for _, k := range q.keys {
			if k.inLat {
				f["latency lane"]++
			}
			if k.sflow.Active() {
				f["stfq heap"]++
			}
			if k.flow.Active() {
				f["drr round"]++
			}
			for l := range k.allLanes() {
				if l.state == lsParked {
					f["parked lane"]++
				}
				if l.inflight != 0 {
					f["in flight"]++
				}
			}
		}
		q.fair.drr.Each(func(_ *fkey, next bool) {
			if next {
				f["drr next round"]++
			}
		})
		f["idempotency key"] += q.dedup.Len()
		f["producer"] += len(q.prods)
		f["recent key"] += len(q.fair.recentQ) - q.fair.rhead
		if q.dirty {
			f["dirty"]++
		}
	}
	for _, sb := range s.subs {
		if sb.state == subParked {
			f["parked sub"]++
		}
	}
	f["free slot"] = len(s.freeSlots)
	f["wake"] = len(s.wakes.a)
	f["expiry"] = len(s.expiry.a)
	return f
}

// TestImageRandomized images the randomized test's scheduler every 97
// steps and carries on with the loaded copy: its model checks (no
// message leased twice, counts, acked messages gone, duplicates exactly
// within the window, credit as the shell counts it) hold across the
// swaps, with either policy.
func TestImageRandomized(t *testing.T) {
	steps := 5000
	if testing.Short() {
		steps = 1000
	}
	for _, policy := range []string{PolicyDRR, PolicySTFQ} {
		t.Run(policy, func(t *testing.T) {
			seed := uint64(len(policy)) * 1000003
			r := &randomRun{
				t:      t,
				rng:    rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
				h:      newHarness(Config{Policy: policy, LatencyBudget: 3, LatencyIdle: 100 * time.Millisecond, Quantum: 500, MaxDeliveryBatch: 7, MaxUnsettled: 5, BackoffBase: 200 * time.Millisecond, BackoffMax: 3 * time.Second, ProducerSeqs: 6}),
				leases: make(map[[16]byte]Delivered),
				credit: make(map[SubID]int64),
				handed: make(map[uint64]SubID),
				acked:  make(map[[16]byte]bool),
				idem:   make(map[string]dedupModel),
				prods:  make(map[string]*producerModel),
				seqs:   make(map[uint64]uint64),
			}
			swaps := 0
			for i := 0; i < steps; i++ {
				r.step(i)
				if err := checkInvariants(r.h.s, false); err != nil {
					t.Fatalf("step %d (%s): invariant: %v", i, r.last, err)
				}
				if i%97 == 96 {
					r.ready()
					r.h.s, _ = roundTrip(t, r.h.s)
					swaps++
				}
			}
			t.Logf("%d swaps: %d enqueued, %d delivered, %d acked, %d restarts", swaps, r.enqueued, r.delivered, len(r.acked), r.restarts)
		})
	}
}

// richState builds a state with a bit of everything: both policies, the
// latency lane in use, throttled lanes waiting, ordered lanes in flight,
// delayed messages, leases held by several subscriptions and by closed
// ones, a subscription waiting for its rate limit, messages waiting for
// an on_failure decision, a DLQ with messages, failure reasons,
// idempotency keys, idempotent producers, a deleted queue.
func richState(t fataler) *harness {
	t.Helper()
	h := newHarness(Config{MaxDeliveryBatch: 3, MaxUnsettled: 50, ProducerSeqs: 4, LatencyIdle: 10 * time.Millisecond})
	s := h.s
	s.CreateQueue(1, QueueSpec{Name: "d", Policy: PolicyDRR, DedupWindow: time.Minute, MaxAttempts: 2})
	s.CreateQueue(2, QueueSpec{Name: "f", Policy: PolicySTFQ, LatencyBudget: 3})
	s.CreateQueue(3, QueueSpec{Name: "h", OnFailure: "function on_failure(m) end"})
	s.CreateQueue(4, QueueSpec{Name: "gone"})
	s.CreateQueue(5, QueueSpec{Name: "ten", Policy: PolicySTFQ, LatencyBudget: 2, TenantSeparator: "/", CostByTime: true})
	s.SetThrottle("slow", 1, 1)
	s.SetThrottle("fast", 1000, 10)
	enq := func(queue string, ms ...Message) {
		items := make([]EnqueueItem, len(ms))
		for i, m := range ms {
			h.next++
			m.ID = testID(h.next)
			m.Body = []byte("body-" + idName(m.ID))
			items[i] = EnqueueItem{Queue: queue, Msg: m}
		}
		h.ref++
		s.Enqueue(h.ref, items)
	}
	drain := func() {
		for h.s.HasReady() {
			h.ready(false)
		}
	}
	// leased returns the lease of queue's leased message (of an open
	// subscription) with the lowest ID that pred accepts.
	leased := func(queue string, pred func(m *msg) bool) LeaseRef {
		var best *msg
		for x := range s.queues[queue].msgs.all() {
			m := s.msg(x)
			if m.state == stLeased && s.ext(m).slot != 0 && pred(m) && (best == nil || bytes.Compare(m.id[:], best.id[:]) < 0) {
				best = m
			}
		}
		if best == nil {
			t.Fatalf("no leased message of %s to settle", queue)
		}
		return LeaseRef{Queue: queue, ID: best.id, Lease: s.leaseOf(best)}
	}
	nack := func(lr LeaseRef) {
		h.ref++
		s.Nack(h.ref, []NackItem{{LeaseRef: lr, Reason: "failed " + idName(lr.ID)}})
	}
	anyMsg := func(*msg) bool { return true }
	for i := range 6 {
		enq("d",
			Message{FairnessKey: "a", Weight: 2, PayloadSize: 300, ThrottleKeys: []string{"slow"}},
			Message{FairnessKey: "a", PayloadSize: 700, OrderingKey: "o"},
			Message{FairnessKey: "b", PayloadSize: 1200, IdempotencyKey: "idem-" + strconv.Itoa(i), ProducerID: testProducer(1), Sequence: uint64(10 + i)},
			Message{FairnessKey: "c", Weight: 3, PayloadSize: 50, ThrottleKeys: []string{"fast", "slow"}},
		)
	}
	enq("d", Message{FairnessKey: "b", Delay: time.Hour, PayloadSize: 5})
	enq("d", Message{FairnessKey: "a", Delay: time.Minute, OrderingKey: "p"}, Message{FairnessKey: "a", OrderingKey: "p"})
	for range 6 {
		enq("f", Message{FairnessKey: "x"}, Message{FairnessKey: "y", Weight: 2})
	}
	enq("f", Message{FairnessKey: "early"})
	enq("h", Message{FairnessKey: "a"}, Message{FairnessKey: "b"}, Message{FairnessKey: "c"})
	enq("gone", Message{FairnessKey: "a"}, Message{FairnessKey: "a"})
	for i := range 4 {
		enq("ten", Message{FairnessKey: "acme/" + strconv.Itoa(i%3), Weight: 2}, Message{FairnessKey: "solo"},
			Message{FairnessKey: "beta/x", ThrottleKeys: []string{"slow"}})
	}
	drain()

	for _, sb := range []struct {
		id     SubID
		queue  string
		credit uint32
		limits []RateLimit
	}{
		{1, "d", 5, nil}, {2, "d", 4, []RateLimit{{Name: "l1", Limit: 1, Period: time.Hour}}}, {3, "f", 9, nil},
		{4, "h", 3, nil}, {5, "gone", 1, nil}, {6, "d", 2, nil}, {9, "ten", 5, nil},
	} {
		h.ref++
		s.Subscribe(h.ref, sb.id, sb.queue, sb.credit, sb.limits)
	}
	drain()

	// Failures: two waiting for a decision in h; in d, the head of the
	// ordered lane o retried (it keeps its place) and a message of key b.
	nack(leased("h", anyMsg))
	nack(leased("h", anyMsg))
	nack(leased("d", func(m *msg) bool { return s.laneOf(m).okey == "o" }))
	nack(leased("d", func(m *msg) bool { return s.laneOf(m).key.name == "b" }))
	drain()
	s.AddCredit(6, 20)
	s.Tick(s.Now().Add(2 * time.Second))
	drain()
	// The retried head of lane o fails again: dead-lettered; the next
	// message of the lane goes in flight.
	nack(leased("d", func(m *msg) bool { return s.laneOf(m).okey == "o" && s.attempts(m) == 1 }))
	drain()
	h.ref++
	s.Subscribe(h.ref, 7, "d.dlq", 2, nil)
	drain()
	nack(leased("d.dlq", anyMsg))
	enq("d", Message{FairnessKey: "b", IdempotencyKey: "idem-1"}, Message{FairnessKey: "b", ProducerID: testProducer(2), Sequence: 1})
	// Closed subscriptions: one leaving its leases running, one
	// releasing them.
	h.ref++
	s.Unsubscribe(h.ref, 1, false)
	h.ref++
	s.Unsubscribe(h.ref, 6, true)
	h.ref++
	s.DeleteQueue(h.ref, "gone")
	drain()
	// A new subscription takes the head of lane o: in flight.
	h.ref++
	s.Subscribe(h.ref, 8, "d", 4, nil)
	drain()
	// New stfq keys enter the latency lane, behind x and y, which stay
	// in it (at most a budget pending, within a budget of their share);
	// the lane's keys take turns, and one of the new keys is served its
	// one message and leaves: it is recent.
	enq("f", Message{FairnessKey: "z"}, Message{FairnessKey: "z"})
	enq("f", Message{FairnessKey: "gone-soon"})
	s.AddCredit(3, 4)
	drain()
	h.ref++
	s.Ack(h.ref, []LeaseRef{leased("f", func(m *msg) bool { return s.laneOf(m).key.name == "gone-soon" })})
	// Keys of d waiting for credit in the round.
	enq("d", Message{FairnessKey: "e"}, Message{FairnessKey: "g", Weight: 4})
	s.Tick(s.Now().Add(5 * time.Millisecond))
	drain()
	return h
}

// TestImageRichState images the rich state, checks the copy, and runs
// both on through timers, settles and new messages in lockstep.
func TestImageRichState(t *testing.T) {
	h := richState(t)
	f := features(h.s)
	t.Logf("features: %v", f)
	for _, want := range []string{"latency lane", "stfq heap", "drr round", "parked lane", "in flight", "delayed", "leased", "orphan lease", "deciding", "dead letter", "reason", "idempotency key", "producer", "free slot", "parked sub", "wake", "expiry", "recent key"} {
		if f[want] == 0 {
			t.Errorf("the rich state has no %s", want)
		}
	}
	c, img := roundTrip(t, h.s)
	t.Logf("image: %d bytes for %d messages", len(img), countMsgs(h.s))
	l := &lockstep{t: t, rnd: rand.New(rand.NewPCG(1, 2)), ss: []*Sched{h.s, c}, ref: h.ref, next: h.next}
	for id, lease := range h.lease {
		for _, q := range h.s.queues {
			if x := q.msgs.get(&h.s.recs, id); x != 0 && h.s.holds(x, lease) {
				l.leases = append(l.leases, LeaseRef{Queue: q.name, ID: id, Lease: lease})
			}
		}
	}
	slices.SortFunc(l.leases, func(a, b LeaseRef) int { return bytes.Compare(a.ID[:], b.ID[:]) })
	for range 2000 {
		l.step()
	}
	l.ready(true)
}

func countMsgs(s *Sched) int {
	n := 0
	for _, q := range s.queues {
		n += q.msgs.len()
	}
	return n
}

// TestImageQueuesLeftToPump: an image taken right after a Ready that cut
// a subscription's batch at MaxDeliveryBatch holds the queue left to
// pump, and the copy delivers the rest as the original does.
func TestImageQueuesLeftToPump(t *testing.T) {
	s := New(Config{MaxDeliveryBatch: 2})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q"})
	for i := range 5 {
		s.Enqueue(2, []EnqueueItem{{Queue: "q", Msg: Message{ID: testID(uint64(i + 1))}}})
	}
	s.Subscribe(3, 1, "q", 10, nil)
	s.Advance(s.Ready())
	if len(s.dirty) == 0 {
		t.Fatal("no queue left to pump after the Ready; the test needs one")
	}
	c, _ := roundTrip(t, s)
	l := &lockstep{t: t, rnd: rand.New(rand.NewPCG(3, 4)), ss: []*Sched{s, c}}
	l.ready(true)
	if len(l.leases) != 3 {
		t.Fatalf("%d deliveries after the image; want 3", len(l.leases))
	}
}

// TestImageAfterRestore: an image taken after Restore and before the
// first Tick holds the restored idempotency keys and producers not yet
// sorted, and the copy sorts them as the original does.
func TestImageAfterRestore(t *testing.T) {
	recs := sampleRecords()
	s := New(Config{})
	for _, r := range recs {
		if err := s.Restore(r[0], r[1]); err != nil {
			t.Fatal(err)
		}
	}
	if len(s.unsorted) == 0 {
		t.Fatal("nothing unsorted after Restore; the test needs it")
	}
	img := s.AppendImage(nil)
	c, err := LoadImage(s.cfg, img)
	if err != nil {
		t.Fatal(err)
	}
	if again := c.AppendImage(nil); !bytes.Equal(again, img) {
		t.Fatalf("re-imaged: %s", imageDiff(img, again))
	}
	l := &lockstep{t: t, rnd: rand.New(rand.NewPCG(5, 6)), ss: []*Sched{s, c}, next: 100}
	l.ready(true)
	l.do("tick", func(s *Sched) { s.Tick(t0) })
	for range 500 {
		l.step()
	}
	l.ready(true)
}

// TestImageOddNames: names at and beyond what commands check (an empty
// throttle key from the runtime config, a rate limit's long name,
// fairness and ordering keys of 64 KiB) image and load.
func TestImageOddNames(t *testing.T) {
	long := string(bytes.Repeat([]byte("k"), 1<<16-1))
	s := New(Config{})
	s.Tick(t0)
	s.SetThrottle("", 1, 1)
	s.CreateQueue(1, QueueSpec{Name: "q"})
	s.Enqueue(2, []EnqueueItem{{Queue: "q", Msg: Message{ID: testID(1), FairnessKey: long, OrderingKey: long, ThrottleKeys: []string{long}, IdempotencyKey: long}}})
	s.Subscribe(3, 1, "q", 1, []RateLimit{{Name: long + long, Limit: 1, Period: time.Second}})
	for s.HasReady() {
		s.Advance(s.Ready())
	}
	roundTrip(t, s)
}

// TestImageEmpty: a new scheduler's image loads as one.
func TestImageEmpty(t *testing.T) {
	s := New(Config{LeaseBase: 77})
	c, img := roundTrip(t, s)
	if c.lease != 77 || len(img) > 16 {
		t.Fatalf("lease %d, image of %d bytes", c.lease, len(img))
	}
}

// TestLoadImageErrors: truncations and corruptions of a real image fail
// with ErrBadImage, and what loads from a corruption images and loads
// again.
func TestLoadImageErrors(t *testing.T) {
	img := richState(t).s.AppendImage(nil)
	for n := range len(img) {
		if _, err := LoadImage(Config{}, img[:n]); !errors.Is(err, ErrBadImage) {
			t.Fatalf("truncated to %d bytes: error %v; want ErrBadImage", n, err)
		}
	}
	if _, err := LoadImage(Config{}, append(slices.Clone(img), 0)); !errors.Is(err, ErrBadImage) {
		t.Fatalf("a trailing byte: error %v", err)
	}
	bad := slices.Clone(img)
	bad[0] = imageVersion + 1
	if _, err := LoadImage(Config{}, bad); err == nil || err.Error() != fmt.Sprintf("bad scheduler image: byte 0: unknown version %d", imageVersion+1) {
		t.Fatalf("version %d: error %v", imageVersion+1, err)
	}
	rng := rand.New(rand.NewPCG(8, 9))
	loaded := 0
	for range 3000 {
		bad := slices.Clone(img)
		for range 1 + rng.IntN(3) {
			bad[rng.IntN(len(bad))] ^= byte(1 + rng.IntN(255))
		}
		if checkLoaded(t, bad) {
			loaded++
		}
	}
	t.Logf("%d of 3000 corrupted images loaded", loaded)
}

// checkLoaded loads b: it must fail with ErrBadImage, or load into a
// scheduler whose image loads again into the same image, and that runs
// without panicking. It reports whether b loaded.
func checkLoaded(t *testing.T, b []byte) bool {
	t.Helper()
	s, err := LoadImage(Config{}, b)
	if err != nil {
		if !errors.Is(err, ErrBadImage) {
			t.Fatalf("error %v does not wrap ErrBadImage", err)
		}
		return false
	}
	img := s.AppendImage(nil)
	c, err := LoadImage(Config{}, img)
	if err != nil {
		t.Fatalf("the image of a loaded scheduler does not load: %v", err)
	}
	if again := c.AppendImage(nil); !bytes.Equal(again, img) {
		t.Fatalf("the image of a loaded scheduler is not a fixed point: %s", imageDiff(img, again))
	}
	s.Digest()
	exercise(s)
	return true
}

// exercise runs a loaded scheduler through the commands of its life: its
// queues subscribed to, delivered, settled, fed, ticked, deleted.
func exercise(s *Sched) {
	drain := func() []Delivered {
		var out []Delivered
		for i := 0; i < 20 && s.HasReady(); i++ {
			rd := s.Ready()
			for _, d := range rd.Deliveries {
				out = append(out, d.Msgs...)
			}
			for _, f := range rd.Failures {
				s.Decide(f.Queue, f.ID, Retry(time.Second))
			}
			s.Advance(rd)
		}
		return out
	}
	names := sortedKeys(s.queues, func(a, b string) int { return bytes.Compare([]byte(a), []byte(b)) })
	drain()
	for i, name := range names {
		s.Subscribe(1, SubID(1000+i), name, 5, []RateLimit{{Name: "x", Limit: 3, Period: time.Second}})
		s.Enqueue(2, []EnqueueItem{{Queue: name, Msg: Message{ID: testID(uint64(1 << 40)), FairnessKey: "new", ThrottleKeys: []string{"slow"}, OrderingKey: "o"}}})
		s.QueueStats(3, name, 0)
		for x := range s.queues[name].msgs.all() {
			s.Explain(4, name, s.msg(x).id)
			break
		}
	}
	for _, id := range s.Subs() {
		s.AddCredit(id, 3)
	}
	for round := range 4 {
		ds := drain()
		for i, d := range ds {
			lr := LeaseRef{Queue: d.Queue, ID: d.ID, Lease: d.Lease}
			switch i % 4 {
			case 0:
				s.Ack(5, []LeaseRef{lr})
			case 1:
				s.Nack(5, []NackItem{{LeaseRef: lr, Reason: "r"}})
			case 2:
				s.Release(5, []LeaseRef{lr})
			default:
				s.RetryAfter(5, []RetryItem{{LeaseRef: lr, Delay: time.Second}})
			}
		}
		if round == 1 {
			for _, name := range names {
				s.Redrive(6, name, 0)
			}
			s.SetThrottle("slow", 5, 2)
			s.RemoveThrottle("fast")
		}
		s.Tick(s.Now().Add(time.Minute))
	}
	for _, id := range s.Subs() {
		s.Unsubscribe(7, id, id%2 == 0)
	}
	for _, name := range names {
		s.DeleteQueue(8, name)
	}
	drain()
	runtime.KeepAlive(s)
}

// FuzzLoadImage feeds arbitrary bytes to LoadImage, seeded with real
// images of varied states: it fails with ErrBadImage or loads a scheduler that images to bytes that
// load again into the same image, and that runs without panicking.
func FuzzLoadImage(f *testing.F) {
	f.Add(New(Config{}).AppendImage(nil))
	f.Add(richState(f).s.AppendImage(nil))
	s := New(Config{})
	for _, r := range sampleRecords() {
		s.Restore(r[0], r[1])
	}
	f.Add(s.AppendImage(nil))
	for _, policy := range []string{PolicyDRR, PolicySTFQ} {
		s := New(lockstepConfig(policy))
		s.Tick(t0)
		l := &lockstep{t: f, rnd: rand.New(rand.NewPCG(11, uint64(len(policy)))), ss: []*Sched{s}}
		for i := range 400 {
			l.step()
			if i%100 == 99 {
				l.ready(true)
				f.Add(s.AppendImage(nil))
			}
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		checkLoaded(t, b)
	})
}

// BenchmarkImage measures AppendImage and LoadImage on 100,000 ready
// messages in 1,000 fairness keys, enqueued 100 a millisecond, of 100 to
// 1,099 bytes, under each policy, and reports the image's bytes per
// message.
func BenchmarkImage(b *testing.B) {
	const n = 100_000
	for _, policy := range []string{PolicyDRR, PolicySTFQ} {
		s := New(Config{Policy: policy})
		s.Tick(t0)
		s.CreateQueue(1, QueueSpec{Name: "q"})
		keys := benchKeys(1000)
		items := make([]EnqueueItem, 0, 100)
		for i := range n {
			items = append(items, EnqueueItem{Queue: "q", Msg: Message{ID: testID(uint64(i + 1)), FairnessKey: keys[i%len(keys)], PayloadSize: uint32(100 + i*7%1000)}})
			if len(items) == cap(items) {
				s.Enqueue(2, items)
				s.Advance(s.Ready())
				items = items[:0]
				s.Tick(s.Now().Add(time.Millisecond))
			}
		}
		for s.HasReady() {
			s.Advance(s.Ready())
		}
		img := s.AppendImage(nil)
		b.Run(policy+"/append", func(b *testing.B) {
			buf := make([]byte, 0, len(img))
			b.ReportAllocs()
			for range b.N {
				buf = s.AppendImage(buf[:0])
			}
			b.ReportMetric(float64(len(img))/n, "B/msg")
		})
		b.Run(policy+"/load", func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				if _, err := LoadImage(s.cfg, img); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(img))/n, "B/msg")
		})
	}
}

// TestLoadImageMemory: LoadImage allocates in proportion to the image,
// however it is made: real images, and images crafted to be as small as
// possible for what they make LoadImage build (keys, lanes,
// subscriptions, queues), which it then refuses.
func TestLoadImageMemory(t *testing.T) {
	// crafted returns an image of one queue whose body is body, with
	// nsubs subscriptions, each with a free slot.
	crafted := func(keys func(b []byte) []byte, nsubs int) []byte {
		b := []byte{imageVersion, 0, 0, 0, 0, 0, 0, 0, 1, 1, 'q', 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		body := func(b []byte, keys func([]byte) []byte, main bool) []byte {
			b = append(b, 2, 1, 2, 2, 2, 1, 0, 1, 0) // settings, quantum, drr, round, target
			b = keys(b)
			b = append(b, 0, 0) // rounds
			if main {
				b = append(b, 0, 0, 0, 0) // idempotency keys, unsorted, producers
			}
			return append(b, 0) // limits
		}
		b = body(b, keys, true)
		b = body(b, func(b []byte) []byte { return append(b, 0) }, false)
		b = binary.AppendUvarint(b, uint64(nsubs))
		b = append(b, 0) // free slots
		for i := range nsubs {
			b = binary.AppendUvarint(b, uint64(i+1))
			b = binary.AppendUvarint(b, uint64(i))
			b = append(b, 0, 1, 0, 0) // queue, credit, limits, leases
		}
		return append(b, 0, 0, 0, 0, 0, 0, 0) // eligible ×2, loose, wakes, expiry, unsorted, dirty
	}
	const n = 20000
	cases := []struct {
		name string
		img  []byte
	}{
		{"rich", richState(t).s.AppendImage(nil)},
		{"keys", crafted(func(b []byte) []byte {
			b = binary.AppendUvarint(b, n)
			for i := range n {
				b = append(b, 2, byte(i>>8), byte(i), 0, 1, 0, 0, 0, 1, 0, 0)
			}
			return b
		}, 0)},
		{"lanes", crafted(func(b []byte) []byte {
			b = append(b, 1, 1, 'k', 0, 1, 0, 0, 0)
			b = binary.AppendUvarint(b, n+1)
			b = append(b, 0)
			for i := range n {
				b = append(b, 0, 2, byte(i>>8), byte(i), 0)
			}
			return append(b, 0)
		}, 0)},
		{"subscriptions", crafted(func(b []byte) []byte { return append(b, 0) }, n)},
	}
	for _, c := range cases {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		_, err := LoadImage(Config{}, c.img)
		runtime.ReadMemStats(&after)
		ratio := float64(after.TotalAlloc-before.TotalAlloc) / float64(len(c.img))
		t.Logf("%s: %d bytes, %.1f bytes allocated per byte (%v)", c.name, len(c.img), ratio, err)
		if c.name != "rich" && c.name != "subscriptions" && err == nil {
			t.Errorf("%s: loaded", c.name)
		}
		if ratio > 64 {
			t.Errorf("%s: %.1f bytes allocated per byte of image", c.name, ratio)
		}
	}
}

// withoutWindow returns rd with what a scheduler loaded from an image does
// not carry zeroed in its QueueStats replies: the stats window's figures
// (window.go) and the event counts since start, which it counts from then on.
func withoutWindow(rd Ready) Ready {
	rd.Replies = slices.Clone(rd.Replies)
	for i, r := range rd.Replies {
		st, ok := r.Value.(QueueStats)
		if !ok {
			continue
		}
		st.Window, st.WindowDelivered, st.JainIndex = 0, 0, 0
		st.Counts = QueueCounts{}
		st.ThrottleKeys = slices.Clone(st.ThrottleKeys)
		for j := range st.ThrottleKeys {
			st.ThrottleKeys[j].HeldBack = 0
		}
		st.FairnessKeys = slices.Clone(st.FairnessKeys)
		for j := range st.FairnessKeys {
			k := &st.FairnessKeys[j]
			k.WindowDelivered, k.WindowShare, k.DwellP50, k.DwellP99 = 0, 0, 0, 0
		}
		rd.Replies[i].Value = st
	}
	return rd
}
