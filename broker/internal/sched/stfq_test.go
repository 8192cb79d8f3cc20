package sched

import (
	"fmt"
	"math"
	"testing"

	"pgregory.net/rapid"
)

// TestSTFQShortWindowShares: an stfq queue at weights 1:2:3:4:5, every key
// backlogged, delivers to one consumer one message at a time; every window
// of 100 consecutive deliveries gives each key 100 × w / 15 messages
// within ±2, whatever the payload sizes (shares are in messages).
func TestSTFQShortWindowShares(t *testing.T) {
	p := newPropSched(Config{})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ})
	// 400 × w messages per key: more than 2,000 deliveries take from it.
	for i := range 400 {
		for w := uint32(1); w <= 5; w++ {
			for range w {
				p.enqueue(nil, "q", Message{FairnessKey: fmt.Sprint("k", w), Weight: w, PayloadSize: uint32(1 + i%7*1000)})
			}
		}
	}
	p.drain(nil)
	p.s.Subscribe(p.cmdRef(), 1, "q", 0, nil)
	var order []uint32
	for len(order) < 2000 {
		p.s.AddCredit(1, 1)
		for _, d := range p.drain(nil) {
			order = append(order, d.Weight)
			p.ack(d)
		}
	}
	worst := 0.0
	for start := 0; start+100 <= len(order); start++ {
		var count [6]int
		for _, w := range order[start : start+100] {
			count[w]++
		}
		for w := 1; w <= 5; w++ {
			e := math.Abs(float64(count[w]) - 100*float64(w)/15)
			worst = max(worst, e)
			if e > 2 {
				t.Fatalf("window at delivery %d: weight %d served %d of 100, entitled %.1f", start, w, count[w], 100*float64(w)/15)
			}
		}
	}
	t.Logf("largest error over every window of 100 deliveries: %.2f messages", worst)
}

// TestPropertySTFQNoStarvation: in an stfq queue, whatever the weights
// (1 to 10), payloads, throttle-free keys and the order of enqueues, a key
// that is backlogged is served within Σ_j ceil(w_j / w_i) + n deliveries,
// n the number of keys, of becoming backlogged or of its last delivery:
// no key starves, and a light key waits for at most about one message of
// each heavier key per unit of its own weight.
func TestPropertySTFQNoStarvation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := newPropSched(Config{})
		p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ})
		n := rapid.IntRange(1, 8).Draw(t, "keys")
		weights := make([]uint32, n)
		for i := range weights {
			weights[i] = rapid.Uint32Range(1, 10).Draw(t, "weight")
		}
		pending := make([]int, n)
		for range rapid.IntRange(n, 400).Draw(t, "messages") {
			i := rapid.IntRange(0, n-1).Draw(t, "key")
			p.enqueue(t, "q", Message{FairnessKey: fmt.Sprint("k", i), Weight: weights[i], PayloadSize: rapid.Uint32Range(1, 5000).Draw(t, "size")})
			pending[i]++
		}
		p.drain(t)
		p.s.Subscribe(p.cmdRef(), 1, "q", 0, nil)
		waited := make([]int, n)
		for d := 0; ; d++ {
			p.s.AddCredit(1, 1)
			got := p.drain(t)
			if len(got) == 0 {
				break
			}
			var k int
			fmt.Sscan(got[0].FairnessKey[1:], &k)
			pending[k]--
			p.ack(got...)
			for i := range waited {
				if i == k {
					waited[i] = 0
					continue
				}
				if pending[i] == 0 {
					continue
				}
				waited[i]++
				bound := n
				for j := range weights {
					bound += int((weights[j] + weights[i] - 1) / weights[i])
				}
				if waited[i] > bound {
					t.Fatalf("delivery %d: key %d (weight %d) backlogged and unserved for %d deliveries; bound %d", d, i, weights[i], waited[i], bound)
				}
			}
		}
		for i, c := range pending {
			if c != 0 {
				t.Fatalf("key %d: %d messages never delivered", i, c)
			}
		}
	})
}

// TestSTFQPolicyRecorded: a queue's policy is stored with it and restored,
// and QueueStats reports it; a queue without one follows Config.Policy;
// an unknown policy is refused.
func TestSTFQPolicyRecorded(t *testing.T) {
	p := newPropSched(Config{})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "fair", Policy: PolicySTFQ})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "plain"})
	ref := p.cmdRef()
	p.s.CreateQueue(ref, QueueSpec{Name: "odd", Policy: "fifo"})
	rd := p.s.Ready()
	var refused error
	for _, r := range rd.Replies {
		if r.Ref == ref {
			refused, _ = r.Value.(error)
		}
	}
	if refused == nil {
		t.Fatal("a queue with policy \"fifo\" was created")
	}
	restored := New(Config{Policy: PolicySTFQ})
	for _, m := range rd.Persist {
		if err := restored.Restore(m.Key, m.Value); err != nil {
			t.Fatal(err)
		}
	}
	p.s.Advance(rd)
	for _, c := range []struct {
		s          *Sched
		queue, dlq string
		want       string
	}{
		{p.s, "fair", "fair.dlq", PolicySTFQ},
		{p.s, "plain", "plain.dlq", PolicyDRR},
		{restored, "fair", "fair.dlq", PolicySTFQ},
		{restored, "plain", "plain.dlq", PolicySTFQ}, // follows the new default
	} {
		for _, name := range []string{c.queue, c.dlq} {
			if got := c.s.queues[name].fair.name(); got != c.want {
				t.Errorf("queue %s: policy %s, want %s", name, got, c.want)
			}
		}
	}
}
