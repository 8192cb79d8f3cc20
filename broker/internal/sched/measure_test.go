package sched

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// The tests in this file measure the behaviour docs/concepts.md quotes
// (run with -v to see the figures) and assert the bounds it states.

// TestQuietKeyWaits measures how many deliveries a key that becomes
// backlogged waits for while K keys are in the middle of bursts of 1,000
// messages each, and compares it with DRR serving each key its whole
// quantum per visit (classic DRR), which would make it wait for every
// other key's full quantum.
func TestQuietKeyWaits(t *testing.T) {
	for _, k := range []int{1, 10, 100, 1000} {
		for _, size := range []uint32{100, 1000, 10_000} {
			p := newPropSched(Config{})
			p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q"})
			items := make([]EnqueueItem, 0, 200)
			for i := 0; i < k; i++ {
				items = items[:0]
				for j := 0; j < 200; j++ {
					p.next++
					items = append(items, EnqueueItem{Queue: "q", Msg: Message{ID: testID(p.next), FairnessKey: fmt.Sprintf("noisy-%d", i), PayloadSize: size}})
				}
				p.s.Enqueue(p.cmdRef(), items)
			}
			p.s.Subscribe(p.cmdRef(), 1, "q", 0, nil)
			// Mid-burst: a few rounds served already.
			p.s.AddCredit(1, uint32(3*k+7))
			for _, d := range p.drainT(t) {
				p.ack(d)
			}
			p.next++
			p.s.Enqueue(p.cmdRef(), []EnqueueItem{{Queue: "q", Msg: Message{ID: testID(p.next), FairnessKey: "quiet", PayloadSize: size}}})
			waited := 0
			for ; ; waited++ {
				p.s.AddCredit(1, 1)
				ds := p.drainT(t)
				if ds[0].FairnessKey == "quiet" {
					break
				}
				p.ack(ds...)
			}
			classic := (k) * int(max(1, 1000/int64(size)))
			t.Logf("K=%4d size=%5dB: quiet key served after %4d deliveries (classic DRR: up to %d)", k, size, waited, classic)
			if waited > k {
				t.Errorf("K=%d size=%d: quiet key waited %d deliveries; want at most %d", k, size, waited, k)
			}
		}
	}
}

// drainT is drain for a plain *testing.T.
func (p *propSched) drainT(t *testing.T) []Delivered {
	t.Helper()
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
	}
	return p.out[start:]
}

// TestWeightedShares measures the bandwidth shares of keys of weights 1,
// 2 and 3 with different message sizes, all backlogged.
func TestWeightedShares(t *testing.T) {
	p := newPropSched(Config{Policy: PolicyDRR})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q"})
	type key struct {
		name   string
		weight uint32
		size   uint32
	}
	keys := []key{{"w1-small", 1, 200}, {"w2-large", 2, 5000}, {"w3-mixed", 3, 0}}
	for _, k := range keys {
		items := make([]EnqueueItem, 0, 20000)
		for j := 0; j < 20000; j++ {
			size := k.size
			if size == 0 {
				size = uint32(100 + (j*7919)%3000)
			}
			p.next++
			items = append(items, EnqueueItem{Queue: "q", Msg: Message{ID: testID(p.next), FairnessKey: k.name, Weight: k.weight, PayloadSize: size}})
		}
		p.s.Enqueue(p.cmdRef(), items)
	}
	p.s.Subscribe(p.cmdRef(), 1, "q", 0, nil)
	bytes := map[string]float64{}
	msgs := map[string]int{}
	var total float64
	for i := 0; i < 100; i++ {
		p.s.AddCredit(1, 100)
		ds := p.drainT(t)
		for _, d := range ds {
			bytes[d.FairnessKey] += float64(d.PayloadSize)
			msgs[d.FairnessKey]++
			total += float64(d.PayloadSize)
		}
		p.ack(ds...)
	}
	for _, k := range keys {
		share := bytes[k.name] / total
		want := float64(k.weight) / 6
		t.Logf("%-9s weight %d: %5.2f%% of bytes (ideal %5.2f%%), %5d messages", k.name, k.weight, 100*share, 100*want, msgs[k.name])
		if math.Abs(share-want) > 0.01 {
			t.Errorf("%s: share %.4f; want %.4f ± 0.01", k.name, share, want)
		}
	}
}

// TestThrottleAccuracy measures deliveries through a token bucket over a
// minute with the shell ticking exactly at each Deadline.
func TestThrottleAccuracy(t *testing.T) {
	for _, c := range []struct{ rate, burst float64 }{{1, 1}, {10, 5}, {100, 200}, {1000, 100}} {
		// Nothing is acked: lift the cap on unsettled deliveries.
		p := newPropSched(Config{MaxUnsettled: math.MaxUint32})
		p.s.SetThrottle("api", c.rate, c.burst)
		p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q"})
		need := int(c.burst+c.rate*60) + 10
		items := make([]EnqueueItem, need)
		for i := range items {
			p.next++
			items[i] = EnqueueItem{Queue: "q", Msg: Message{ID: testID(p.next), FairnessKey: fmt.Sprint(i % 3), ThrottleKeys: []string{"api"}}}
		}
		p.s.Enqueue(p.cmdRef(), items)
		p.s.Subscribe(p.cmdRef(), 1, "q", math.MaxUint32, nil)
		end := t0 + Time(60*time.Second)
		n, wakes := 0, 0
		for {
			ds := p.drainT(t)
			n += len(ds)
			p.ack(ds...)
			next := p.s.deadline()
			if next == 0 || next > end {
				break
			}
			p.s.Tick(next)
			wakes++
		}
		want := c.burst + c.rate*60
		t.Logf("rate %6g burst %4g: %6d deliveries in 60s (burst + rate×60 = %g), %d wake-ups", c.rate, c.burst, n, want, wakes)
		if float64(n) > want+1e-6 || float64(n) < want-1 {
			t.Errorf("rate %g burst %g: %d deliveries; want %g", c.rate, c.burst, n, want)
		}
	}
}
