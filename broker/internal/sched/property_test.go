package sched

import (
	"fmt"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// propSched is a scheduler driven the way the shell drives it, for
// property tests: every Ready is taken, its deliveries recorded.
type propSched struct {
	s    *Sched
	ref  Ref
	next uint64
	out  []Delivered // deliveries in order (copied)
	// checkEvery > 1 checks the invariants (O(messages)) only every
	// checkEvery Readys, for long runs.
	checkEvery int
	readys     int
}

func newPropSched(cfg Config) *propSched {
	p := &propSched{s: New(cfg)}
	p.s.Tick(t0)
	return p
}

func (p *propSched) cmdRef() Ref { p.ref++; return p.ref }

func (p *propSched) enqueue(t *rapid.T, queue string, m Message) EnqueueResult {
	p.next++
	m.ID = testID(p.next)
	ref := p.cmdRef()
	p.s.Enqueue(ref, []EnqueueItem{{Queue: queue, Msg: m}})
	r := p.s.cur.replies[len(p.s.cur.replies)-1]
	if r.Ref != ref {
		t.Fatalf("no reply to enqueue")
	}
	return r.Value.([]EnqueueResult)[0]
}

// drain takes Readys until there are none, recording deliveries.
func (p *propSched) drain(t *rapid.T) []Delivered {
	start := len(p.out)
	for p.s.HasReady() {
		rd := p.s.Ready()
		for _, d := range rd.Deliveries {
			for _, m := range d.Msgs {
				m.Key = nil
				p.out = append(p.out, m)
			}
		}
		p.s.Advance(rd)
		if p.readys++; p.checkEvery <= 1 || p.readys%p.checkEvery == 0 {
			if err := checkInvariants(p.s, true); err != nil {
				t.Fatalf("invariant: %v", err)
			}
		}
	}
	return p.out[start:]
}

func (p *propSched) ack(ms ...Delivered) {
	items := make([]LeaseRef, len(ms))
	for i, m := range ms {
		items[i] = LeaseRef{Queue: m.Queue, ID: m.ID, Lease: m.Lease}
	}
	p.s.Ack(p.cmdRef(), items)
}

// TestPropertyFairShare checks DRR through the whole scheduler: with all
// keys backlogged, over any window of whole rounds each key's share in
// bytes differs from weight/Σweights of the total by at most quantum ×
// max weight (messages of at most half the quantum), and is within one
// message of rounds × weight × quantum (any sizes).
func TestPropertyFairShare(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		quantum := rapid.Int64Range(10, 4000).Draw(t, "quantum")
		small := rapid.Bool().Draw(t, "small")
		maxSize := 3 * quantum
		if small {
			maxSize = quantum / 2
		}
		p := newPropSched(Config{Quantum: quantum})
		p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q"})
		nkeys := rapid.IntRange(1, 10).Draw(t, "keys")
		weights := make(map[string]int64)
		var wsum, wmax int64
		for k := 0; k < nkeys; k++ {
			key := fmt.Sprintf("k%d", k)
			w := rapid.Uint32Range(1, 6).Draw(t, "weight")
			weights[key] = int64(w)
			wsum += int64(w)
			wmax = max(wmax, int64(w))
			for i := 0; i < 300; i++ {
				p.enqueue(t, "q", Message{FairnessKey: key, Weight: w, PayloadSize: uint32(rapid.Int64Range(1, maxSize).Draw(t, "size"))})
			}
		}
		p.drain(t)
		p.s.Subscribe(p.cmdRef(), 1, "q", 0, nil)
		q := p.s.queues["q"]
		type snap struct {
			round  uint64
			served map[string]int64
		}
		served := make(map[string]int64)
		var snaps []snap
		last := uint64(0)
		steps := rapid.IntRange(1, 250).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			// Snapshot at the start of each round, before its first
			// delivery.
			if _, ok := q.fair.drr.Next(); ok && q.fair.drr.Round() != last {
				last = q.fair.drr.Round()
				cp := make(map[string]int64, len(served))
				for k, v := range served {
					cp[k] = v
				}
				snaps = append(snaps, snap{last, cp})
			}
			p.s.AddCredit(1, 1)
			ds := p.drain(t)
			if len(ds) != 1 {
				t.Fatalf("step %d: %d deliveries; want 1", i, len(ds))
			}
			served[ds[0].FairnessKey] += int64(max(ds[0].PayloadSize, 1))
			p.ack(ds...)
			for _, k := range q.keys {
				if k.pending == 0 {
					t.Fatalf("key %s emptied; the test needs more messages", k.name)
				}
			}
		}
		for a := 0; a < len(snaps); a++ {
			for b := a + 1; b < len(snaps); b++ {
				n := int64(snaps[b].round - snaps[a].round)
				var total int64
				for k := range weights {
					total += snaps[b].served[k] - snaps[a].served[k]
				}
				for k, w := range weights {
					got := snaps[b].served[k] - snaps[a].served[k]
					if d := got - n*w*quantum; d <= -maxSize || d >= maxSize {
						t.Fatalf("key %s over rounds [%d,%d): %d bytes; want %d ± %d", k, snaps[a].round, snaps[b].round, got, n*w*quantum, maxSize)
					}
					if small {
						ideal := float64(total) * float64(w) / float64(wsum)
						if d := math.Abs(float64(got) - ideal); d > float64(quantum*wmax) {
							t.Fatalf("key %s over rounds [%d,%d): %d of %d bytes; want %.1f ± %d", k, snaps[a].round, snaps[b].round, got, total, ideal, quantum*wmax)
						}
					}
				}
			}
		}
	})
}

// TestPropertyQuietKey checks that a key that becomes backlogged while K
// others are is delivered within K deliveries, whatever their weights,
// sizes, bursts and throttled lanes.
func TestPropertyQuietKey(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		quantum := rapid.Int64Range(1, 5000).Draw(t, "quantum")
		p := newPropSched(Config{Quantum: quantum, Policy: PolicyDRR})
		p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q"})
		p.s.SetThrottle("slow", 1, 1)
		nkeys := rapid.IntRange(1, 40).Draw(t, "keys")
		for k := 0; k < nkeys; k++ {
			w := rapid.Uint32Range(1, 100).Draw(t, "weight")
			burst := rapid.IntRange(1, 200).Draw(t, "burst")
			for i := 0; i < burst; i++ {
				m := Message{FairnessKey: fmt.Sprintf("k%d", k), Weight: w, PayloadSize: uint32(rapid.Int64Range(1, 3*quantum).Draw(t, "size"))}
				if rapid.IntRange(0, 9).Draw(t, "throttled") == 0 {
					m.ThrottleKeys = []string{"slow"}
				}
				p.enqueue(t, "q", m)
			}
		}
		p.drain(t)
		p.s.Subscribe(p.cmdRef(), 1, "q", 0, nil)
		q := p.s.queues["q"]
		warm := rapid.IntRange(0, 300).Draw(t, "warm")
		for i := 0; i < warm; i++ {
			p.s.AddCredit(1, 1)
			p.ack(p.drain(t)...)
		}
		active := q.fair.drr.Len()
		p.enqueue(t, "q", Message{FairnessKey: "quiet", Weight: rapid.Uint32Range(1, 100).Draw(t, "quietWeight"), PayloadSize: uint32(rapid.Int64Range(1, 3*quantum).Draw(t, "quietSize"))})
		for n := 0; ; n++ {
			p.s.AddCredit(1, 1)
			ds := p.drain(t)
			if len(ds) != 1 {
				t.Fatalf("delivery %d: got %d messages; want 1", n, len(ds))
			}
			if ds[0].FairnessKey == "quiet" {
				if n > active {
					t.Fatalf("quiet key served after %d deliveries; want at most %d (backlogged keys)", n, active)
				}
				return
			}
			p.ack(ds...)
		}
	})
}

// TestPropertyThrottleRate checks a throttle key shared by several
// fairness keys and queues, with the shell ticking at each Deadline (a
// little late, as timers are): in any interval of t seconds at most
// burst + rate·t deliveries, and at least 0.98·rate·t over t ≥ 10 s of
// backlog.
func TestPropertyThrottleRate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := rapid.Float64Range(0.5, 300).Draw(t, "rate")
		burst := math.Floor(rapid.Float64Range(1, 50).Draw(t, "burst"))
		secs := rapid.IntRange(10, 15).Draw(t, "seconds")
		dur := Time(secs) * Time(time.Second)
		maxLag := min(int64(float64(time.Second)/rate/100), int64(time.Millisecond))
		lag := rapid.Int64Range(0, max(maxLag, 0)).Draw(t, "lag")
		// Nothing is acked: lift the cap on unsettled deliveries.
		p := newPropSched(Config{MaxUnsettled: math.MaxUint32})
		p.checkEvery = 500
		p.s.SetThrottle("api", rate, burst)
		need := int((burst+rate*float64(secs))*7/6) + 20 // 6 in 7 throttled
		nq := rapid.IntRange(1, 3).Draw(t, "queues")
		for i := 0; i < nq; i++ {
			name := fmt.Sprintf("q%d", i)
			p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: name})
			p.s.Subscribe(p.cmdRef(), SubID(i+1), name, math.MaxUint32, nil)
			for j := 0; j < need; j++ {
				keys := []string{"api"}
				if j%7 == 3 {
					keys = nil // unthrottled messages interleave freely
				}
				p.enqueue(t, name, Message{FairnessKey: fmt.Sprintf("k%d", j%5), ThrottleKeys: keys})
			}
		}
		var at []Time
		for {
			for _, d := range p.drain(t) {
				if len(d.ThrottleKeys) > 0 {
					at = append(at, p.s.Now())
				}
				p.ack(d)
			}
			next := p.s.deadline()
			if next == 0 || next > t0+dur {
				break
			}
			p.s.Tick(next + Time(lag))
		}
		for _, q := range p.s.queues {
			if q.parent == nil && q.ready == 0 {
				t.Fatalf("queue %s ran out of messages; the test needs more", q.name)
			}
		}
		var n int
		for _, x := range at {
			if x <= t0+dur {
				n++
			}
		}
		if float64(n) < 0.98*rate*float64(secs) {
			t.Fatalf("%d deliveries in %ds at rate %v; want at least %.1f", n, secs, rate, 0.98*rate*float64(secs))
		}
		lo := math.Inf(1)
		for j, x := range at {
			el := float64(x-t0) / 1e9
			lo = math.Min(lo, float64(j)-rate*el)
			if excess := float64(j+1) - rate*el - lo; excess > burst+1e-6*float64(j+1) {
				t.Fatalf("%.1f deliveries above rate × t ending at %s; want at most burst %v", excess, rel(x), burst)
			}
		}
	})
}

// TestPropertyOrdering drives random enqueues, deliveries, acks, nacks,
// retries and lease expiries on ordering keys and checks that a
// delivered message of an ordering key never has an earlier message of
// that key still in the queue, and never two of a key in flight.
func TestPropertyOrdering(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := newPropSched(Config{VisibilityTimeout: 5 * time.Second, BackoffBase: 100 * time.Millisecond})
		p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", MaxAttempts: uint32(rapid.IntRange(1, 4).Draw(t, "maxAttempts"))})
		p.s.Subscribe(p.cmdRef(), 1, "q", 0, nil)
		p.s.Subscribe(p.cmdRef(), 2, "q", 0, nil)
		leased := make(map[[16]byte]Delivered)
		order := make(map[[16]byte]string)
		q := p.s.queues["q"]
		check := func(ds []Delivered) {
			for _, d := range ds {
				leased[d.ID] = d
				if d.OrderingKey == "" {
					continue
				}
				for x := range q.msgs.all() {
					m := p.s.msg(x)
					id := m.id
					if order[id] == d.OrderingKey && p.s.laneOf(m).key.name == d.FairnessKey && string(id[:]) < string(d.ID[:]) {
						t.Fatalf("%s of %s delivered while earlier %s is in state %v", idName(d.ID), d.OrderingKey, idName(id), m.state)
					}
				}
			}
			for _, k := range q.keys {
				for l := range k.allLanes() {
					if !l.ordered() {
						continue
					}
					inflight := 0
					for x := range q.msgs.all() {
						if m := p.s.msg(x); p.s.laneOf(m) == l && (m.state == stLeased || m.state == stDeciding || m.state == stDelayed && m.flags&fListed == 0) {
							inflight++
						}
					}
					if inflight > 1 {
						t.Fatalf("ordering key %s: %d in flight", l.okey, inflight)
					}
				}
			}
		}
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0:
				ok := rapid.SampledFrom([]string{"", "o1", "o2"}).Draw(t, "order")
				m := Message{FairnessKey: rapid.SampledFrom([]string{"a", "b"}).Draw(t, "key"), OrderingKey: ok}
				if rapid.IntRange(0, 4).Draw(t, "delayed") == 0 {
					m.Delay = time.Duration(rapid.IntRange(1, 2000).Draw(t, "delay")) * time.Millisecond
				}
				r := p.enqueue(t, "q", m)
				order[r.ID] = ok
			case 1:
				p.s.AddCredit(SubID(rapid.IntRange(1, 2).Draw(t, "sub")), uint32(rapid.IntRange(1, 5).Draw(t, "credit")))
			case 2, 3:
				if len(leased) == 0 {
					continue
				}
				ids := make([][16]byte, 0, len(leased))
				for id := range leased {
					ids = append(ids, id)
				}
				slicesSortIDs(ids)
				d := leased[rapid.SampledFrom(ids).Draw(t, "lease")]
				delete(leased, d.ID)
				ref := LeaseRef{Queue: "q", ID: d.ID, Lease: d.Lease}
				switch rapid.IntRange(0, 2).Draw(t, "settle") {
				case 0:
					p.s.Ack(p.cmdRef(), []LeaseRef{ref})
				case 1:
					p.s.Nack(p.cmdRef(), []NackItem{{LeaseRef: ref, Reason: "x"}})
				case 2:
					p.s.RetryAfter(p.cmdRef(), []RetryItem{{LeaseRef: ref, Delay: time.Duration(rapid.IntRange(0, 1000).Draw(t, "retry")) * time.Millisecond}})
				}
			case 4:
				p.s.Tick(p.s.Now().Add(time.Duration(rapid.IntRange(1, 6000).Draw(t, "tick")) * time.Millisecond))
			case 5:
				// A consumer disconnects: its leases are released.
				p.s.Unsubscribe(p.cmdRef(), 2, true)
				p.s.Subscribe(p.cmdRef(), 2, "q", 0, nil)
			}
			check(p.drain(t))
		}
	})
}

func slicesSortIDs(ids [][16]byte) {
	for i := 1; i < len(ids); i++ {
		for j := i; j > 0 && string(ids[j][:]) < string(ids[j-1][:]); j-- {
			ids[j], ids[j-1] = ids[j-1], ids[j]
		}
	}
}

// TestPropertyDedup enqueues messages with idempotency keys at random
// times, across restarts, and checks that per key at most one message is
// accepted per window: a duplicate exactly while the first is remembered,
// and then the first's ID.
func TestPropertyDedup(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		window := time.Duration(rapid.IntRange(1, 100).Draw(t, "window")) * time.Second
		h := newHarness(Config{})
		h.s.CreateQueue(1, QueueSpec{Name: "q", DedupWindow: window})
		type accepted struct {
			id [16]byte
			at Time
		}
		model := make(map[string]accepted)
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for i := 0; i < steps; i++ {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0, 1, 2:
				h.s.Tick(h.s.Now().Add(time.Duration(rapid.IntRange(0, 30_000).Draw(t, "tick")) * time.Millisecond))
			case 3:
				h.ready(true)
				h.restart(nil)
			default:
				key := rapid.SampledFrom([]string{"k1", "k2", "k3", "k4"}).Draw(t, "key")
				h.next++
				id := testID(h.next)
				h.ref++
				h.s.Enqueue(h.ref, []EnqueueItem{{Queue: "q", Msg: Message{ID: id, IdempotencyKey: key}}})
				r := h.s.cur.replies[len(h.s.cur.replies)-1].Value.([]EnqueueResult)[0]
				now := h.s.Now()
				a, seen := model[key]
				live := seen && now < a.at.Add(window)
				switch {
				case r.Err != nil:
					t.Fatalf("enqueue: %v", r.Err)
				case live && (!r.Duplicate || r.ID != a.id):
					t.Fatalf("key %s at %s: got %s duplicate=%v; want duplicate of %s accepted at %s", key, rel(now), idName(r.ID), r.Duplicate, idName(a.id), rel(a.at))
				case !live && r.Duplicate:
					t.Fatalf("key %s at %s: duplicate of %s; want accepted (window %v)", key, rel(now), idName(r.ID), window)
				case !live:
					model[key] = accepted{id: id, at: now}
				}
			}
			if err := checkInvariants(h.s, false); err != nil {
				t.Fatalf("invariant: %v", err)
			}
		}
	})
}
