package sched

import (
	"math"
	"slices"
	"testing"
	"time"
)

// consumerTime simulates consumers slots in parallel on a fake clock,
// each taking one delivery at a time and acking it after its key's job
// time, over span of simulated time, with two keys backlogged
// throughout; it returns the share of consumer time each key got after
// the first tenth of the span.
func consumerTime(t *testing.T, spec QueueSpec, jobs map[string]time.Duration, slots int, span time.Duration) map[string]float64 {
	t.Helper()
	p := newPropSched(Config{LatencyBudget: -1})
	p.checkEvery = 64
	spec.Name = "q"
	p.s.CreateQueue(p.cmdRef(), spec)
	keys := make([]string, 0, len(jobs))
	for k := range jobs {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	refill := func() {
		var items []EnqueueItem
		for _, k := range keys {
			if fk := p.s.queues["q"].keys[k]; fk != nil && fk.pending >= 100 {
				continue
			}
			for range 200 {
				p.next++
				items = append(items, EnqueueItem{Queue: "q", Msg: Message{ID: testID(p.next), FairnessKey: k, PayloadSize: 10}})
			}
		}
		p.s.Enqueue(p.cmdRef(), items)
	}
	refill()
	p.drain(nil)
	p.s.Subscribe(p.cmdRef(), 1, "q", uint32(slots), nil)
	type running struct {
		d   Delivered
		end Time
	}
	var busy []running
	used := map[string]time.Duration{}
	start := p.s.now
	for p.s.now < start.Add(span) {
		for _, d := range p.drain(nil) {
			busy = append(busy, running{d, p.s.now.Add(jobs[d.FairnessKey])})
		}
		if len(busy) == 0 {
			t.Fatal("no consumer busy")
		}
		i := 0
		for j := range busy {
			if busy[j].end < busy[i].end || busy[j].end == busy[i].end && busy[j].d.Lease < busy[i].d.Lease {
				i = j
			}
		}
		r := busy[i]
		busy = slices.Delete(busy, i, i+1)
		p.s.Tick(r.end)
		p.ack(r.d)
		if r.end >= start.Add(span/10) {
			used[r.d.FairnessKey] += jobs[r.d.FairnessKey]
		}
		p.s.AddCredit(1, 1)
		refill() // every key keeps a backlog
	}
	var total time.Duration
	for _, d := range used {
		total += d
	}
	shares := map[string]float64{}
	for k, d := range used {
		shares[k] = float64(d) / float64(total)
	}
	return shares
}

// TestCostByTime: two tenants with jobs of 10 ms and 100 ms at equal
// weights, four consumers: charged by consumer time, each gets 50% ± 2%
// of it; charged per delivery (the default), the slow one takes about
// ten times the other's consumer time. With the tenant hierarchy on, the
// same holds for tenants.
func TestCostByTime(t *testing.T) {
	jobs := map[string]time.Duration{"fast": 10 * time.Millisecond, "slow": 100 * time.Millisecond}
	for _, c := range []struct {
		name string
		spec QueueSpec
	}{
		{"cost by time", QueueSpec{Policy: PolicySTFQ, CostByTime: true}},
		{"cost by time, tenants", QueueSpec{Policy: PolicySTFQ, CostByTime: true, TenantSeparator: "/"}},
	} {
		got := consumerTime(t, c.spec, jobs, 4, 10*time.Minute)
		t.Logf("%s: consumer time fast %.4f, slow %.4f", c.name, got["fast"], got["slow"])
		if math.Abs(got["fast"]-0.5) > 0.02 || math.Abs(got["slow"]-0.5) > 0.02 {
			t.Errorf("%s: consumer time fast %.4f, slow %.4f; want 0.5 ± 0.02 each", c.name, got["fast"], got["slow"])
		}
	}
	got := consumerTime(t, QueueSpec{Policy: PolicySTFQ}, jobs, 4, 10*time.Minute)
	t.Logf("per delivery: consumer time fast %.4f, slow %.4f", got["fast"], got["slow"])
	if got["slow"] < 0.85 {
		t.Errorf("per delivery: the slow key got %.4f of consumer time; want about 10/11", got["slow"])
	}
}

// TestCostByTimeSettles: the charge is corrected at ack, nack, release
// and expiry alike, each lease's start is forgotten when it ends, and a
// key's estimate learns its lease time (the first time held taken whole,
// then an eighth of the way each time).
func TestCostByTimeSettles(t *testing.T) {
	p := newPropSched(Config{LatencyBudget: -1, VisibilityTimeout: time.Second, MaxAttempts: 100})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ, CostByTime: true})
	for range 10 {
		p.enqueue(nil, "q", Message{FairnessKey: "k"})
	}
	p.drain(nil)
	q := p.s.queues["q"]
	k := q.keys["k"]
	p.s.Subscribe(p.cmdRef(), 1, "q", 1, nil)
	take := func() Delivered {
		t.Helper()
		got := p.drain(nil)
		if len(got) != 1 {
			t.Fatalf("%d deliveries; want 1", len(got))
		}
		if _, ok := q.fair.held[got[0].Lease]; !ok || len(q.fair.held) != 1 {
			t.Fatalf("lease %d: start not recorded (%d recorded)", got[0].Lease, len(q.fair.held))
		}
		return got[0]
	}
	settle := []struct {
		name string
		held time.Duration
		end  func(d Delivered)
	}{
		{"ack", 80 * time.Millisecond, func(d Delivered) { p.ack(d) }},
		{"nack", 160 * time.Millisecond, func(d Delivered) {
			p.s.Nack(p.cmdRef(), []NackItem{{LeaseRef: LeaseRef{Queue: "q", ID: d.ID, Lease: d.Lease}, Reason: "x"}})
		}},
		{"release", 240 * time.Millisecond, func(d Delivered) {
			p.s.Release(p.cmdRef(), []LeaseRef{{Queue: "q", ID: d.ID, Lease: d.Lease}})
		}},
		{"expiry", time.Second, func(Delivered) {}},
	}
	want := uint32(0)
	for _, st := range settle {
		d := take()
		tag := k.sflow.Tag()
		charged := q.fair.held[d.Lease].est
		p.s.Tick(p.s.now.Add(st.held))
		st.end(d)
		again := p.drain(nil) // an expiry gives the credit back: the next goes at once
		if _, ok := q.fair.held[d.Lease]; ok {
			t.Fatalf("%s: lease start kept after the lease ended", st.name)
		}
		ms := uint32(st.held / time.Millisecond)
		next := int64(0)
		for _, n := range again {
			next += int64(q.fair.held[n.Lease].est)
		}
		if got := int64(k.sflow.Tag() - tag); got != (int64(ms)-int64(charged)+next)*1<<20 {
			t.Errorf("%s: tag moved %d; want (%d ms held − %d charged) × 2^20", st.name, got, ms, charged)
		}
		want = ewma(want, ms)
		if k.est != want {
			t.Errorf("%s: estimate %d ms; want %d", st.name, k.est, want)
		}
		p.s.AddCredit(1, 1)
		p.s.Tick(p.s.now.Add(10 * time.Second)) // retries come due
	}
}
