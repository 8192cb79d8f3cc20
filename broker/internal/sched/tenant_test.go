package sched

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"pgregory.net/rapid"
)

// tenantShares backlogs tenant "sybil" over keys fairness keys and tenant
// "honest" over one, in an stfq queue with tenant separator sep (none if
// ""), then delivers n messages one at a time and returns the share that
// went to sybil.
func tenantShares(t *testing.T, sep string, keys, n int, wSybil, wHonest uint32) float64 {
	t.Helper()
	p := newPropSched(Config{LatencyBudget: -1, MaxUnsettled: 1})
	p.checkEvery = 1 << 30
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ, TenantSeparator: sep})
	var items []EnqueueItem
	add := func(fk string, w uint32) {
		p.next++
		items = append(items, EnqueueItem{Queue: "q", Msg: Message{ID: testID(p.next), FairnessKey: fk, Weight: w, PayloadSize: 100}})
	}
	for i := range n {
		add(fmt.Sprintf("sybil/%d", i%keys), wSybil)
		add("honest", wHonest)
	}
	p.s.Enqueue(p.cmdRef(), items)
	p.drain(nil)
	p.s.Subscribe(p.cmdRef(), 1, "q", 1, nil)
	sybil := 0
	for range n {
		got := p.drain(nil)
		if len(got) != 1 {
			t.Fatalf("%d deliveries at once", len(got))
		}
		if got[0].FairnessKey != "honest" {
			sybil++
		}
		p.ack(got[0])
		p.s.AddCredit(1, 1)
	}
	return float64(sybil) / float64(n)
}

// TestTenantSybil: with a tenant separator, a tenant that spreads its
// backlog over 1,000 fairness keys gets its single share, within 1%,
// against a tenant using one key: at equal weights, and at 3:1 either
// way. Without one, each of its keys counts as a tenant and it takes
// nearly everything.
func TestTenantSybil(t *testing.T) {
	for _, c := range []struct{ ws, wh uint32 }{{1, 1}, {3, 1}, {1, 3}} {
		want := float64(c.ws) / float64(c.ws+c.wh)
		got := tenantShares(t, "/", 1000, 20_000, c.ws, c.wh)
		t.Logf("weights %d:%d: the 1,000-key tenant got %.4f of 20,000 deliveries, entitled %.4f", c.ws, c.wh, got, want)
		if math.Abs(got-want) > 0.01 {
			t.Errorf("weights %d:%d: the 1,000-key tenant got %.4f; want %.4f ± 0.01", c.ws, c.wh, got, want)
		}
	}
	flat := tenantShares(t, "", 1000, 20_000, 1, 1)
	t.Logf("without a separator the 1,000-key tenant got %.4f", flat)
	if flat < 0.99 {
		t.Errorf("without a separator the 1,000-key tenant got %.4f; want nearly all (its 1,000 shares against 1)", flat)
	}
}

// TestTenantSplit: a tenant's keys share its share evenly, and the top
// level holds shares at every time scale: over every window of 60
// deliveries, tenants of weights 1 and 2 get 20 and 40 within ±2, and the
// weight-2 tenant's three keys about a third of its 40 each.
func TestTenantSplit(t *testing.T) {
	p := newPropSched(Config{LatencyBudget: -1, MaxUnsettled: 1})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ, TenantSeparator: ":"})
	for range 400 {
		p.enqueue(nil, "q", Message{FairnessKey: "a", Weight: 1})
		for _, k := range []string{"b:1", "b:2", "b:3"} {
			p.enqueue(nil, "q", Message{FairnessKey: k, Weight: 2})
		}
	}
	p.drain(nil)
	p.s.Subscribe(p.cmdRef(), 1, "q", 1, nil)
	var order []string
	for range 600 {
		got := p.drain(nil)
		order = append(order, got[0].FairnessKey)
		p.ack(got[0])
		p.s.AddCredit(1, 1)
	}
	for start := 0; start+60 <= len(order); start++ {
		count := map[string]int{}
		for _, k := range order[start : start+60] {
			count[k]++
		}
		if a := count["a"]; a < 18 || a > 22 {
			t.Fatalf("window at %d: tenant a served %d of 60; want 20 ± 2", start, a)
		}
		for _, k := range []string{"b:1", "b:2", "b:3"} {
			if c := count[k]; c < 11 || c > 15 {
				t.Fatalf("window at %d: key %s served %d of 60; want 13.3 ± 2", start, k, c)
			}
		}
	}
	st := p.stats(t, "q", 10)
	for _, k := range st.FairnessKeys {
		want := map[bool]float64{true: 1.0 / 3, false: 2.0 / 9}[k.Key == "a"]
		if math.Abs(k.EntitledShare-want) > 1e-9 || k.Weight != map[bool]uint32{true: 1, false: 2}[k.Key == "a"] {
			t.Errorf("key %s: entitled %.4f, weight %d; want %.4f", k.Key, k.EntitledShare, k.Weight, want)
		}
	}
	if st.TenantSeparator != ":" {
		t.Errorf("stats: tenant separator %q", st.TenantSeparator)
	}
}

// TestTenantLatencyLane: the latency lane is the tenant's. A tenant that
// comes back after the idle time with a burst over 50 new keys has one of
// them in the lane, for one budget, not 50 budgets; a key of a tenant
// that has others backlogged goes to the throughput lane even if the key
// is new; after the tenant's last key is dropped, it is remembered for
// the idle time.
func TestTenantLatencyLane(t *testing.T) {
	p := newPropSched(Config{LatencyBudget: 3, LatencyIdle: 100 * time.Millisecond, MaxUnsettled: 1})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ, TenantSeparator: "/"})
	for range 100 {
		p.enqueue(nil, "q", Message{FairnessKey: "noisy"})
	}
	p.drain(nil)
	q := p.s.queues["q"]
	p.s.Tick(p.s.now.Add(time.Second))
	for i := range 50 {
		p.enqueue(nil, "q", Message{FairnessKey: fmt.Sprint("burst/", i)})
	}
	p.drain(nil)
	if q.fair.nlat != 2 { // noisy (new) and the first of burst
		t.Fatalf("latency lane holds %d keys; want 2 (noisy, burst/0)", q.fair.nlat)
	}
	if k := q.keys["burst/0"]; !k.inLat || k.left != 3 {
		t.Fatalf("burst/0: in the lane %v with %d left", k.inLat, k.left)
	}
	if k := q.keys["burst/7"]; k.inLat || !k.sflow.Active() {
		t.Fatalf("burst/7: in the lane %v, in the throughput lane %v", k.inLat, k.sflow.Active())
	}
	// Serve everything of burst; the tenant goes away and comes back at
	// once: not new.
	p.s.Subscribe(p.cmdRef(), 1, "q", 1, nil)
	for q.tenantOf("burst") != nil {
		got := p.drain(nil)
		p.ack(got...)
		p.s.AddCredit(1, 1)
	}
	p.enqueue(nil, "q", Message{FairnessKey: "burst/new"})
	p.drain(nil)
	if k := q.keys["burst/new"]; k == nil || k.inLat {
		t.Fatalf("burst/new, back within the idle time: %+v; want it in the throughput lane", k)
	}
}

// tenantOf returns the tenant name of q, or nil.
func (q *queue) tenantOf(name string) *tenant { return q.fair.tenants[name] }

// TestTenantWeightLive: a tenant's weight is that of its last enqueued
// message, applied to its backlog at once.
func TestTenantWeightLive(t *testing.T) {
	got := func(wb uint32) float64 {
		p := newPropSched(Config{LatencyBudget: -1, MaxUnsettled: 1})
		p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ, TenantSeparator: "/"})
		for range 300 {
			p.enqueue(nil, "q", Message{FairnessKey: "a/1"})
			p.enqueue(nil, "q", Message{FairnessKey: "b/1"})
		}
		p.enqueue(nil, "q", Message{FairnessKey: "b/2", Weight: wb}) // b's weight now wb
		p.drain(nil)
		p.s.Subscribe(p.cmdRef(), 1, "q", 1, nil)
		b := 0
		for range 200 {
			d := p.drain(nil)
			if d[0].FairnessKey != "a/1" {
				b++
			}
			p.ack(d...)
			p.s.AddCredit(1, 1)
		}
		return float64(b) / 200
	}
	if b := got(3); math.Abs(b-0.75) > 0.02 {
		t.Errorf("tenant b at weight 3 got %.3f of the deliveries; want 0.75", b)
	}
	if b := got(1); math.Abs(b-0.5) > 0.02 {
		t.Errorf("tenant b at weight 1 got %.3f of the deliveries; want 0.5", b)
	}
}

// TestTenantSeparatorChecked: a separator needs stfq and at most 16
// bytes; a queue created with one and no policy is stfq whatever the
// broker's default, and keeps it across a restart.
func TestTenantSeparatorChecked(t *testing.T) {
	s := New(Config{Policy: PolicyDRR})
	for _, c := range []struct {
		spec QueueSpec
		want string
	}{
		{QueueSpec{Name: "a", Policy: PolicyDRR, TenantSeparator: "/"}, `tenant_separator "/"`},
		{QueueSpec{Name: "a", Policy: PolicySTFQ, TenantSeparator: "12345678901234567"}, "at most 16 bytes"},
	} {
		err := s.CheckSpec(c.spec)
		var se *SettingError
		if !errors.Is(err, fault.ErrInvalidArgument) || !errors.As(err, &se) || se.Setting != "tenant_separator" {
			t.Errorf("%+v: error %v; want a tenant_separator SettingError (%s)", c.spec, err, c.want)
		}
	}
	if err := s.CheckSpec(QueueSpec{Name: "a", TenantSeparator: "/"}); err == nil {
		t.Errorf("a separator on a queue of the default policy drr: no error")
	}
	s = New(Config{})
	spec := QueueSpec{Name: "a", TenantSeparator: "::"}
	if err := s.CheckSpec(spec); err != nil {
		t.Fatal(err)
	}
	rec := appendQueueRecord(nil, &QueueSpec{Name: "a", Policy: PolicySTFQ, TenantSeparator: "::"})
	back, err := decodeQueueRecord("a", rec)
	if err != nil || back.TenantSeparator != "::" || back.Policy != PolicySTFQ {
		t.Fatalf("queue record round trip: %+v, %v", back, err)
	}
	old := appendQueueRecord(nil, &QueueSpec{Name: "a", Policy: PolicySTFQ, LatencyBudget: 4})
	if back, err := decodeQueueRecord("a", old); err != nil || back.TenantSeparator != "" || back.LatencyBudget != 4 {
		t.Fatalf("a record without a separator: %+v, %v", back, err)
	}
}

// TestImageVersion: images are written as version 3; versions 1 and 2
// are still read, their latency lane credit (in half deliveries) converted
// to the units of version 3, and version 2's tenant separator kept.
func TestImageVersion(t *testing.T) {
	s := New(Config{LatencyBudget: 2})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "a", Policy: PolicySTFQ})
	s.CreateQueue(2, QueueSpec{Name: "b", Policy: PolicySTFQ, TenantSeparator: "/"})
	for i := range 3 {
		s.Enqueue(3, []EnqueueItem{{Queue: "a", Msg: Message{ID: testID(uint64(i + 1)), FairnessKey: "k"}}})
	}
	s.Subscribe(4, 1, "a", 3, nil)
	for s.HasReady() {
		s.Advance(s.Ready())
	}
	credit := s.queues["a"].fair.credit
	if credit%(creditUnit/2) != 0 || credit == s.queues["a"].fair.creditMax {
		t.Fatalf("credit %d: want a whole number of half deliveries, below the ceiling", credit)
	}
	if v := s.AppendImage(nil)[0]; v != imageVersion {
		t.Fatalf("written as version %d; want %d", v, imageVersion)
	}
	for _, v := range []byte{2, 3, 4} {
		img := s.appendImage(nil, v)
		c, err := LoadImage(Config{}, img)
		if err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		if got := c.queues["a"].fair.credit; got != credit {
			t.Errorf("version %d: credit %d; want %d", v, got, credit)
		}
		if st := c.queues["b"]; st.fair.sep != "/" || st.dlq.fair.sep != "/" {
			t.Errorf("version %d: separators %q, %q", v, st.fair.sep, st.dlq.fair.sep)
		}
		if !bytes.Equal(c.AppendImage(nil), s.AppendImage(nil)) {
			t.Errorf("version %d: loaded and written again, the image differs", v)
		}
	}
	s.DeleteQueue(5, "b")
	if _, err := LoadImage(Config{}, s.appendImage(nil, 1)); err != nil {
		t.Fatalf("version 1: %v", err)
	}
}

// TestPropertyTenantNoStarvation: whatever the tenants, keys, weights and
// order of enqueues, with or without a latency lane, every message of a
// queue with tenants is delivered, and the invariants (tenant counts, the
// top scheduler holding exactly the tenants with keys in the throughput
// lane) hold after every step (newPropSched checks them).
func TestPropertyTenantNoStarvation(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		budget := rapid.SampledFrom([]int{-1, 1, 3}).Draw(t, "latency budget")
		p := newPropSched(Config{LatencyBudget: budget, LatencyIdle: 10 * time.Millisecond})
		p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ, TenantSeparator: "/"})
		keys := []string{"a/1", "a/2", "a/3", "b/1", "b", "c/x/y"}
		pending := 0
		p.s.Subscribe(p.cmdRef(), 1, "q", 0, nil)
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			switch rapid.IntRange(0, 3).Draw(t, "op") {
			case 0, 1:
				k := rapid.SampledFrom(keys).Draw(t, "key")
				p.enqueue(t, "q", Message{FairnessKey: k, Weight: rapid.Uint32Range(1, 5).Draw(t, "weight")})
				pending++
			case 2:
				p.s.AddCredit(1, uint32(rapid.IntRange(1, 5).Draw(t, "credit")))
				got := p.drain(t)
				pending -= len(got)
				p.ack(got...)
			case 3:
				p.s.Tick(p.s.now.Add(time.Duration(rapid.IntRange(0, 30).Draw(t, "ms")) * time.Millisecond))
			}
		}
		for pending > 0 {
			p.s.AddCredit(1, 10)
			got := p.drain(t)
			if len(got) == 0 {
				t.Fatalf("%d messages pending, none delivered", pending)
			}
			pending -= len(got)
			p.ack(got...)
		}
		if n := len(p.s.queues["q"].fair.tenants); n != 0 {
			t.Fatalf("%d tenants left with nothing enqueued", n)
		}
	})
}

// TestTenantExplain: in a queue with tenants, a message whose key waits
// in the throughput lane is explained as waiting behind the turns that go
// first: the tenants ahead of its own, then its own tenant's keys ahead
// of it.
func TestTenantExplain(t *testing.T) {
	p := newPropSched(Config{LatencyBudget: -1, MaxUnsettled: 1})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ, TenantSeparator: "/"})
	for _, k := range []string{"a/1", "b/1", "b/2", "c/1"} {
		p.enqueue(nil, "q", Message{FairnessKey: k})
		p.enqueue(nil, "q", Message{FairnessKey: k})
	}
	// A subscription with no credit left: one delivery taken and held.
	p.s.Subscribe(p.cmdRef(), 1, "q", 1, nil)
	first := p.drain(nil)
	if len(first) != 1 || first[0].FairnessKey != "a/1" {
		t.Fatalf("first delivery %+v; want a/1's", first)
	}
	p.s.AddCredit(1, 1)
	// b/2's head: tenant c is not ahead of b; a has been served, so b
	// goes first among tenants, and b/1 before b/2 within b.
	var head [16]byte
	for x := range p.s.queues["q"].msgs.all() {
		if m := p.s.msg(x); p.s.laneOf(m).key.name == "b/2" && p.s.laneOf(m).head == x {
			head = m.id
		}
	}
	e, err := p.explain(t, "q", head)
	if err != nil || e.Reason != WhyKeyWaiting || e.Lane != "throughput" || e.Ahead != 1 {
		t.Fatalf("b/2's head: %+v, %v; want key waiting in the throughput lane behind 1", e, err)
	}
}
