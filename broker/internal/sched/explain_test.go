package sched

import (
	"errors"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// explain runs Explain and returns its reply; it fails the test if
// Explain changed the scheduler's state (replicas answer it alone).
func (p *propSched) explain(t *testing.T, queue string, id [16]byte) (Explanation, error) {
	t.Helper()
	ref := p.cmdRef()
	before := p.s.Digest()
	p.s.Explain(ref, queue, id)
	if p.s.Digest() != before {
		t.Fatalf("Explain(%s) changed the scheduler's state", queue)
	}
	rd := p.s.Ready()
	defer p.s.Advance(rd)
	for _, r := range rd.Replies {
		if r.Ref == ref {
			if err, ok := r.Value.(error); ok {
				return Explanation{}, err
			}
			return r.Value.(Explanation), nil
		}
	}
	t.Fatal("no reply to Explain")
	return Explanation{}, nil
}

// TestExplain walks every answer Explain can give, and its errors.
func TestExplain(t *testing.T) {
	for _, policy := range []string{PolicyDRR, PolicySTFQ} {
		t.Run(policy, func(t *testing.T) {
			p := newPropSched(Config{VisibilityTimeout: time.Minute})
			p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: policy})
			p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "h", Policy: policy, OnFailure: "function on_failure(m) end"})
			p.drain(nil)
			want := func(what string, queue string, id [16]byte, reason string, check func(e Explanation) bool) {
				t.Helper()
				e, err := p.explain(t, queue, id)
				if err != nil || e.Reason != reason || (check != nil && !check(e)) {
					t.Fatalf("%s: %+v, %v; want reason %s", what, e, err, reason)
				}
			}

			// No subscription: the head of a key can go, nothing takes it.
			a1 := p.enqueue(nil, "q", Message{FairnessKey: "a", PayloadSize: 10}).ID
			a2 := p.enqueue(nil, "q", Message{FairnessKey: "a", PayloadSize: 10}).ID
			a3 := p.enqueue(nil, "q", Message{FairnessKey: "a", PayloadSize: 10}).ID
			want("head, no subscription", "q", a1, WhyNoCredit, nil)
			want("third of its key", "q", a3, WhyBehindKey, func(e Explanation) bool { return e.Ahead == 2 && e.FairnessKey == "a" })

			delayed := p.enqueue(nil, "q", Message{FairnessKey: "d", Delay: 10 * time.Second}).ID
			want("delayed", "q", delayed, WhyDelayed, func(e Explanation) bool { return e.Until == t0.Add(10*time.Second) })

			o1 := p.enqueue(nil, "q", Message{FairnessKey: "o", OrderingKey: "x"}).ID
			o2 := p.enqueue(nil, "q", Message{FairnessKey: "o", OrderingKey: "x"}).ID
			b1 := p.enqueue(nil, "q", Message{FairnessKey: "b"}).ID

			// One delivery: the first key's head is leased.
			p.s.Subscribe(p.cmdRef(), 1, "q", 1, nil)
			got := p.drain(nil)
			if len(got) != 1 {
				t.Fatalf("delivered %d, want 1", len(got))
			}
			want("delivered", "q", got[0].ID, WhyLeased, func(e Explanation) bool { return e.Until == got[0].LeaseDeadline })
			if got[0].ID == a1 {
				// Its key went to the back: the others' heads go first.
				want("the next of a", "q", a2, WhyKeyWaiting, func(e Explanation) bool { return e.Ahead == 2 })
			}
			// Other keys' heads wait in line behind the keys before them.
			want("b's head", "q", b1, WhyKeyWaiting, func(e Explanation) bool {
				return e.Ahead > 0 && e.Lane == map[string]string{PolicyDRR: "round", PolicySTFQ: "latency"}[policy]
			})

			// Deliver until o1 is leased: o2 then waits for it.
			for range 10 {
				if e, _ := p.explain(t, "q", o1); e.Reason == WhyLeased {
					break
				}
				p.ack(got...)
				p.s.AddCredit(1, 1)
				got = p.drain(nil)
			}
			want("behind its ordering key's message in flight", "q", o2, WhyOrdering, nil)

			// A throttled lane: its head waits for a token.
			p.s.SetThrottle("api", 1, 1)
			t1 := p.enqueue(nil, "q", Message{FairnessKey: "t", ThrottleKeys: []string{"api"}}).ID
			t2 := p.enqueue(nil, "q", Message{FairnessKey: "t", ThrottleKeys: []string{"api"}}).ID
			for range 20 {
				p.ack(got...)
				p.s.AddCredit(1, 1)
				got = p.drain(nil)
				if e, _ := p.explain(t, "q", t1); e.Reason == WhyLeased {
					break
				}
			}
			want("throttled", "q", t2, WhyThrottled, func(e Explanation) bool {
				return len(e.ThrottleKeys) == 1 && e.ThrottleKeys[0] == "api" && e.Until > t0
			})

			// A failure waiting for on_failure.
			h1 := p.enqueue(nil, "h", Message{FairnessKey: "a"}).ID
			p.s.Subscribe(p.cmdRef(), 2, "h", 1, nil)
			hd := p.drain(nil)
			if len(hd) != 1 {
				t.Fatalf("h: delivered %d", len(hd))
			}
			p.s.Nack(p.cmdRef(), []NackItem{{LeaseRef: LeaseRef{Queue: "h", ID: hd[0].ID, Lease: hd[0].Lease}, Reason: "boom"}})
			p.drain(nil)
			want("deciding", "h", h1, WhyDeciding, func(e Explanation) bool { return e.Attempts == 1 })

			// Errors.
			if _, err := p.explain(t, "nope", a1); !errors.Is(err, fault.ErrQueueNotFound) {
				t.Fatalf("unknown queue: %v", err)
			}
			if _, err := p.explain(t, "q", [16]byte{1}); !errors.Is(err, fault.ErrMessageNotFound) {
				t.Fatalf("unknown message: %v", err)
			}
		})
	}
}

// TestExplainETA: behind messages of its key or keys of its queue, a
// message's estimated delivery follows the pace of the stats window: a
// consumer that took 10 messages a second, one key of two at equal
// weights, delivers the 5th message of a key in about 1 s and the next of
// a waiting key in about 0.2 s. Delayed and throttled messages go at the
// earliest at Until; without deliveries in the window there is no
// estimate.
func TestExplainETA(t *testing.T) {
	p := newPropSched(Config{VisibilityTimeout: time.Hour, LatencyBudget: -1})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ})
	var a, b [][16]byte
	for range 100 {
		a = append(a, p.enqueue(nil, "q", Message{FairnessKey: "a", PayloadSize: 1}).ID)
		b = append(b, p.enqueue(nil, "q", Message{FairnessKey: "b", PayloadSize: 1}).ID)
	}
	p.drain(nil)
	if e, _ := p.explain(t, "q", a[5]); e.Reason != WhyBehindKey || e.ETA != 0 {
		t.Fatalf("before any delivery: %+v; want behind-key, no estimate", e)
	}
	// 10 deliveries a second for 10 s.
	p.s.Subscribe(p.cmdRef(), 1, "q", 0, nil)
	now := t0
	for range 100 {
		now = now.Add(100 * time.Millisecond)
		p.s.Tick(now)
		p.s.AddCredit(1, 1)
		p.ack(p.drain(nil)...)
	}
	p.drain(nil)
	e, _ := p.explain(t, "q", a[54])
	if e.Reason != WhyBehindKey || e.Ahead != 4 {
		t.Fatalf("a's 5th pending: %+v; want behind 4 of its key", e)
	}
	// 5 more of a, at a's 5 a second: 1 s.
	if d := time.Duration(e.ETA - now); d < 900*time.Millisecond || d > 1100*time.Millisecond {
		t.Fatalf("a's 5th pending expected in %v; want about 1 s", d)
	}
	// The next of whichever key goes second: one key ahead, at 10 a
	// second, 0.2 s.
	next := a[50]
	if e, _ := p.explain(t, "q", next); e.Reason != WhyKeyWaiting {
		next = b[50]
	}
	e, _ = p.explain(t, "q", next)
	if d := time.Duration(e.ETA - now); e.Reason != WhyKeyWaiting || d < 150*time.Millisecond || d > 250*time.Millisecond {
		t.Fatalf("the waiting key's next: %+v, expected in %v; want key-waiting, about 0.2 s", e, d)
	}
	delayed := p.enqueue(nil, "q", Message{FairnessKey: "d", Delay: time.Minute}).ID
	if e, _ := p.explain(t, "q", delayed); e.ETA != e.Until || e.Until != now.Add(time.Minute) {
		t.Fatalf("delayed: %+v; want ETA = Until, a minute on", e)
	}
}
