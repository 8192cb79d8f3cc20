package sched

import (
	"fmt"
	"math"
	"testing"
	"time"
)

// stats runs QueueStats for the top keys and returns its reply.
func (p *propSched) stats(t *testing.T, queue string, top int) QueueStats {
	t.Helper()
	ref := p.cmdRef()
	p.s.QueueStats(ref, queue, top)
	rd := p.s.Ready()
	defer p.s.Advance(rd)
	for _, r := range rd.Replies {
		if r.Ref == ref {
			return r.Value.(QueueStats)
		}
	}
	t.Fatal("no reply to QueueStats")
	return QueueStats{}
}

// TestWindowStats: with two keys at weights 1:3 backlogged in an stfq
// queue, QueueStats gives each its entitled share (¼, ¾), the share of
// deliveries it got over the window (the same, within a message), its
// lane and lag, the dwell of its delivered messages, and Jain's index 1;
// the window forgets deliveries two epochs old.
func TestWindowStats(t *testing.T) {
	p := newPropSched(Config{LatencyBudget: -1, VisibilityTimeout: time.Hour})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ})
	for range 100 {
		p.enqueue(nil, "q", Message{FairnessKey: "light", Weight: 1, PayloadSize: 1})
		p.enqueue(nil, "q", Message{FairnessKey: "heavy", Weight: 3, PayloadSize: 1})
	}
	p.drain(nil)
	// The messages wait 3 s, then 40 go.
	now := t0.Add(3 * time.Second)
	p.s.Tick(now)
	p.s.Subscribe(p.cmdRef(), 1, "q", 40, nil)
	if n := len(p.drain(nil)); n != 40 {
		t.Fatalf("%d delivered; want 40", n)
	}
	st := p.stats(t, "q", 0)
	if st.BackloggedKeys != 2 || st.WindowDelivered != 40 || st.Window != 3*time.Second {
		t.Fatalf("queue: %d backlogged, %d delivered over %v; want 2, 40 over 3s (since the start)", st.BackloggedKeys, st.WindowDelivered, st.Window)
	}
	if math.Abs(st.JainIndex-1) > 0.01 {
		t.Fatalf("Jain's index %.4f; want 1 (each key got its entitled share)", st.JainIndex)
	}
	want := map[string]float64{"light": 0.25, "heavy": 0.75}
	for _, k := range st.FairnessKeys {
		if math.Abs(k.EntitledShare-want[k.Key]) > 1e-9 {
			t.Errorf("%s: entitled %.3f; want %.3f", k.Key, k.EntitledShare, want[k.Key])
		}
		if math.Abs(float64(k.WindowDelivered)-40*want[k.Key]) > 1 || math.Abs(k.WindowShare-float64(k.WindowDelivered)/40) > 1e-9 {
			t.Errorf("%s: %d delivered (share %.3f); want %.0f ± 1", k.Key, k.WindowDelivered, k.WindowShare, 40*want[k.Key])
		}
		if k.Lane != LaneFair {
			t.Errorf("%s: lane %q; want %q", k.Key, k.Lane, LaneFair)
		}
		if k.DwellP50 < 2*time.Second || k.DwellP50 > 4200*time.Millisecond || k.DwellP99 < k.DwellP50 {
			t.Errorf("%s: dwell p50 %v p99 %v; want about 3 s (power-of-two buckets: 2 s to 4.1 s)", k.Key, k.DwellP50, k.DwellP99)
		}
		if math.Abs(k.Lag) > 1 {
			t.Errorf("%s: lag %.2f; want within one message of the virtual time", k.Key, k.Lag)
		}
	}
	if st.FairnessKeys[0].Key != "light" || st.FairnessKeys[0].Pending < st.FairnessKeys[1].Pending {
		t.Errorf("keys not most pending first: %+v", st.FairnessKeys)
	}

	// Two epochs later, with no delivery since, the window is empty.
	p.s.Tick(now.Add(2 * statsEpoch))
	st = p.stats(t, "q", 0)
	if st.WindowDelivered != 0 || st.JainIndex != 0 {
		t.Fatalf("two epochs on: %d delivered, Jain %.3f; want 0, 0", st.WindowDelivered, st.JainIndex)
	}
	for _, k := range st.FairnessKeys {
		if k.WindowDelivered != 0 || k.DwellP99 != 0 {
			t.Errorf("%s two epochs on: %d delivered, dwell p99 %v; want none", k.Key, k.WindowDelivered, k.DwellP99)
		}
	}
}

// TestWindowStatsUnfair: a key whose messages all wait for throttle
// tokens is blocked, gets none of the deliveries its weight entitles it
// to, and Jain's index falls below 1; a key just back from idle in an
// stfq queue with a latency lane is in that lane.
func TestWindowStatsUnfair(t *testing.T) {
	p := newPropSched(Config{VisibilityTimeout: time.Hour, LatencyBudget: 5, LatencyIdle: time.Second})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: PolicySTFQ})
	p.s.SetThrottle("slow", 0.001, 1)
	for range 20 {
		p.enqueue(nil, "q", Message{FairnessKey: "a", PayloadSize: 1})
		p.enqueue(nil, "q", Message{FairnessKey: "b", PayloadSize: 1})
		p.enqueue(nil, "q", Message{FairnessKey: "t", PayloadSize: 1, ThrottleKeys: []string{"slow"}})
	}
	p.drain(nil)
	p.s.Subscribe(p.cmdRef(), 1, "q", 30, nil)
	p.drain(nil)
	st := p.stats(t, "q", 0)
	lanes := map[string]string{}
	for _, k := range st.FairnessKeys {
		lanes[k.Key] = k.Lane
	}
	if lanes["t"] != LaneBlocked {
		t.Fatalf("throttled key's lane %q; want %q (%+v)", lanes["t"], LaneBlocked, st.FairnessKeys)
	}
	// a and b share the deliveries; t got one: x = 1.45, 1.45, 0.15.
	if st.JainIndex <= 0.5 || st.JainIndex >= 0.9 {
		t.Fatalf("Jain's index %.3f; want well below 1 with one key of three starved", st.JainIndex)
	}

	// A key that was never seen enters the latency lane.
	p.enqueue(nil, "q", Message{FairnessKey: "new", PayloadSize: 1})
	p.drain(nil)
	for _, k := range p.stats(t, "q", 0).FairnessKeys {
		if k.Key == "new" && k.Lane != LaneLatency {
			t.Fatalf("a new key's lane %q; want %q", k.Lane, LaneLatency)
		}
	}
}

// TestWindowStatsTop: QueueStats lists the top most pending keys, ties by
// key, and counts them all.
func TestWindowStatsTop(t *testing.T) {
	p := newPropSched(Config{})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q"})
	for i := range 50 {
		for range i%7 + 1 {
			p.enqueue(nil, "q", Message{FairnessKey: fmt.Sprintf("k%02d", i), PayloadSize: 1})
		}
	}
	p.drain(nil)
	st := p.stats(t, "q", 5)
	if st.BackloggedKeys != 50 || len(st.FairnessKeys) != 5 {
		t.Fatalf("%d backlogged, %d listed; want 50, 5", st.BackloggedKeys, len(st.FairnessKeys))
	}
	// Pending 7: keys 6, 13, 20, 27, 34, 41, 48; the first five by key.
	for i, want := range []string{"k06", "k13", "k20", "k27", "k34"} {
		if k := st.FairnessKeys[i]; k.Key != want || k.Pending != 7 {
			t.Fatalf("key %d: %s with %d pending; want %s with 7", i, k.Key, k.Pending, want)
		}
	}
	if st := p.stats(t, "q", 0); len(st.FairnessKeys) != 50 {
		t.Fatalf("top 0 listed %d; want all 50", len(st.FairnessKeys))
	}
}

func TestPercentile(t *testing.T) {
	var h [dwellBuckets]uint32
	for _, d := range []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 3 * time.Millisecond, time.Second, 10 * time.Hour} {
		b := dwellBucket(d)
		h[b]++
		lo, hi := time.Duration(0), time.Millisecond
		if b > 0 {
			lo, hi = time.Millisecond<<(b-1), time.Millisecond<<b
		}
		if b < dwellBuckets-1 && (d < lo || d >= hi) {
			t.Errorf("%v in bucket %d: [%v, %v)", d, b, lo, hi)
		}
	}
	if got := percentile(&h, 6, 0.5); got < 2*time.Millisecond || got > 4*time.Millisecond {
		t.Errorf("median of 0, 0.5 ms, 1 ms, 3 ms, 1 s, 10 h: %v; want in 3 ms's bucket [2 ms, 4 ms)", got)
	}
	if got := percentile(&h, 0, 0.99); got != 0 {
		t.Errorf("percentile of nothing: %v", got)
	}
}
