package core

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"testing"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// fnv1a32 is the 32-bit FNV-1a hash, written out.
func fnv1a32(s string) uint32 {
	h := uint32(0x811c9dc5)
	for i := 0; i < len(s); i++ {
		h ^= uint32(s[i])
		h *= 0x01000193
	}
	return h
}

func TestShardOf(t *testing.T) {
	// Published FNV-1a 32-bit vectors.
	for s, want := range map[string]uint32{"": 0x811c9dc5, "a": 0xe40c292c, "foobar": 0xbf9cf968} {
		if got := fnv1a32(s); got != want {
			t.Fatalf("fnv1a32(%q) = %#x; want %#x", s, got, want)
		}
	}
	vectors := []struct {
		key, sep string
		shards   int
		want     int
	}{
		{"foobar", "", 7, int(0xbf9cf968 % 7)},
		{"foobar", "", 256, int(0xbf9cf968 % 256)},
		{"a", "", 3, int(0xe40c292c % 3)},
		{"", "", 5, int(fnv1a32("default") % 5)},       // an empty key is the broker's "default"
		{"foobar/x", "/", 7, int(0xbf9cf968 % 7)},      // up to the separator
		{"foobar", "/", 7, int(0xbf9cf968 % 7)},        // no separator: all of it
		{"foobar::x::y", "::", 7, int(0xbf9cf968 % 7)}, // a separator of several bytes, its first
		{"/foobar", "/", 5, int(0x811c9dc5 % 5)},       // separator first: ""
		{"a.b", ".", 3, int(0xe40c292c % 3)},           // the tenant a
		{"a.b", "", 3, int(fnv1a32("a.b") % 3)},        // no separator: the whole key
		{"foobar", "", 1, 0}, {"foobar", "", 0, 0}, {"foobar", "/", -3, 0},
	}
	for _, v := range vectors {
		if got := ShardOf(v.key, v.sep, v.shards); got != v.want {
			t.Errorf("ShardOf(%q, %q, %d) = %d; want %d", v.key, v.sep, v.shards, got, v.want)
		}
	}
	// Against the standard library's, for many keys and shard counts.
	for i := range 1000 {
		key := fmt.Sprintf("tenant-%d", i*7919)
		h := fnv.New32a()
		h.Write([]byte(key))
		for _, n := range []int{2, 3, 16, 255, 256} {
			if got, want := ShardOf(key, "", n), int(h.Sum32()%uint32(n)); got != want {
				t.Fatalf("ShardOf(%q, %d) = %d; want %d", key, n, got, want)
			}
		}
		if ShardOf(key+"|a", "|", 16) != ShardOf(key+"|b", "|", 16) {
			t.Fatalf("keys of tenant %s in different shards", key)
		}
	}
}

func TestSplitCredit(t *testing.T) {
	const maxU = ^uint64(0)
	tests := []struct {
		p        uint32
		backlogs []uint64
		want     []uint32
	}{
		{100, []uint64{0, 0, 0, 0}, []uint32{25, 25, 25, 25}},
		{10, []uint64{0, 0, 0}, []uint32{4, 3, 3}},
		{2, []uint64{0, 0, 0}, []uint32{1, 1, 1}}, // at least 1 each
		{0, []uint64{5, 0}, []uint32{1, 1}},
		{100, []uint64{0, 300}, []uint32{1, 99}},
		{100, []uint64{100, 300}, []uint32{26, 74}}, // 24.5 and 73.5: the tie to the lower shard
		{100, []uint64{maxU, maxU}, []uint32{50, 50}},
		{1 << 31, []uint64{maxU, 1}, []uint32{1<<31 - 1, 1}},
		{7, nil, []uint32{}},
	}
	for _, tt := range tests {
		got := splitCredit(tt.p, tt.backlogs)
		if !slices.Equal(got, tt.want) {
			t.Errorf("splitCredit(%d, %v) = %v; want %v", tt.p, tt.backlogs, got, tt.want)
		}
	}
	moves := []struct {
		cur, want uint32
		ok        bool
	}{
		{25, 25, false}, {25, 26, false}, {25, 30, false}, {25, 31, true}, {25, 19, true},
		{2, 1, true}, {1, 2, true}, {4, 5, true}, {8, 9, false}, {8, 10, true},
	}
	for _, m := range moves {
		if got := worthMoving(m.cur, m.want); got != m.ok {
			t.Errorf("worthMoving(%d, %d) = %v; want %v", m.cur, m.want, got, m.ok)
		}
	}
}

func sharded(id uint32) *wire.ErrorFrame {
	return &wire.ErrorFrame{Code: wire.CodeQueueSharded, Message: "queue orders has shards"}
}

// topology is the TopologyResult of "orders" with a shard led by each of
// leaders.
func topology(sep string, leaders ...string) *wire.TopologyResult {
	t := &wire.TopologyResult{Queue: "orders", TenantSeparator: sep}
	for i, a := range leaders {
		t.Shards = append(t.Shards, wire.ShardInfo{Shard: uint32(i), LeaderAddr: a, Queue: fmt.Sprintf("orders~%d", i), Term: 1})
	}
	return t
}

func keyed(queue string, keys ...string) []wire.EnqueueMessage {
	out := make([]wire.EnqueueMessage, len(keys))
	for i, k := range keys {
		out[i] = wire.EnqueueMessage{Queue: queue, FairnessKey: k, Payload: []byte(fmt.Sprint(i))}
	}
	return out
}

func isSharded(err error) bool {
	var re *RequestError
	return errors.As(err, &re) && re.Code == wire.CodeQueueSharded
}

// TestRouterShardedEnqueue: an Enqueue of a sharded queue answered
// QUEUE_SHARDED asks Topology, then goes to each shard's leader, each
// message to its key's shard, with new sequences; the results come back
// in the caller's order. The next Enqueue goes to the shards at once.
func TestRouterShardedEnqueue(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	leaders := []string{"b:1", "c:1", "b:1"} // orders~0, ~1, ~2
	keys := []string{"k0", "k1", "k2", "k3", "k4", "k5", "k6", "k7"}
	shardOf := make([]int, len(keys))
	hit := map[int]bool{}
	for i, k := range keys {
		shardOf[i] = ShardOf(k, "", 3)
		hit[shardOf[i]] = true
	}
	if len(hit) != 3 {
		t.Fatalf("keys %v hit shards %v; want all 3", keys, hit)
	}
	ms := keyed("orders", keys...)
	id, _ := h.r.Enqueue(ms, 0)
	h.takeDials()
	h.connect("a:1")
	first := h.one("a:1", wire.OpEnqueue)
	e0 := first.f.(*wire.Enqueue)
	h.reply("a:1", first.id, sharded(first.id))
	h.noCompletion(id)
	topo := h.one("a:1", wire.OpTopology)
	if q := topo.f.(*wire.Topology).Queue; q != "orders" {
		t.Fatalf("Topology of %q; want orders", q)
	}
	h.reply("a:1", topo.id, topology("", leaders...))
	if d := h.takeDials(); !slices.Equal(slices.Sorted(slices.Values(d)), []string{"b:1", "c:1"}) {
		t.Fatalf("dials %v; want the shard leaders b:1, c:1", d)
	}
	for _, m := range ms {
		if m.Queue != "orders" {
			t.Fatalf("the caller's message was changed: queue %q", m.Queue)
		}
	}
	h.connect("b:1")
	h.connect("c:1")
	seqs := map[uint64]bool{}
	for s := range e0.Messages {
		seqs[e0.Sequence+uint64(s)] = true
	}
	var got []string
	for _, addr := range []string{"b:1", "c:1"} {
		f := h.one(addr, wire.OpEnqueue)
		e := f.f.(*wire.Enqueue)
		if e.ProducerID != testProducer {
			t.Fatalf("%s: Enqueue producer %x; want the Router's", addr, e.ProducerID)
		}
		for k, m := range e.Messages {
			i := int(m.Payload[0] - '0')
			if want := fmt.Sprintf("orders~%d", shardOf[i]); m.Queue != want || leaders[shardOf[i]] != addr {
				t.Errorf("%s: message %d (key %s) to %s; want %s on %s", addr, i, keys[i], m.Queue, want, leaders[shardOf[i]])
			}
			if seqs[e.Sequence+uint64(k)] {
				t.Errorf("%s: sequence %d reused", addr, e.Sequence+uint64(k))
			}
			seqs[e.Sequence+uint64(k)] = true
			got = append(got, fmt.Sprint(i))
		}
		h.reply(addr, f.id, okResults(len(e.Messages), addr[0]))
	}
	slices.Sort(got)
	if len(got) != len(keys) {
		t.Fatalf("shards got messages %v; want each of %d once", got, len(keys))
	}
	cp := h.completion(id)
	if cp.Err != nil {
		t.Fatal(cp.Err)
	}
	rs := cp.Response.(*wire.EnqueueResult).Results
	if len(rs) != len(keys) {
		t.Fatalf("%d results; want %d", len(rs), len(keys))
	}
	// Result i came from message i's shard leader.
	for i, res := range rs {
		if res.Code != wire.CodeOK || res.ID[0] != leaders[shardOf[i]][0] {
			t.Errorf("result %d from %c; want from %s", i, res.ID[0], leaders[shardOf[i]])
		}
	}

	// The next goes straight to the shards.
	id2, _ := h.r.Enqueue(keyed("orders", keys[0], keys[1]), 0)
	if fs := h.sent("a:1"); len(fs) != 0 {
		t.Fatalf("a:1 got %v; want nothing (no Topology)", ops(fs))
	}
	for _, addr := range []string{leaders[shardOf[0]], leaders[shardOf[1]]} {
		fs := h.sent(addr)
		for _, f := range fs {
			if f.f.Opcode() != wire.OpEnqueue {
				t.Fatalf("%s got %v", addr, ops(fs))
			}
			h.reply(addr, f.id, okResults(len(f.f.(*wire.Enqueue).Messages), addr[0]))
		}
	}
	if cp := h.completion(id2); cp.Err != nil || len(cp.Response.(*wire.EnqueueResult).Results) != 2 {
		t.Fatalf("second Enqueue: %+v", cp)
	}
}

// TestRouterShardedEnqueueFailures: a Topology that fails, or that lists
// the queue alone, fails the Enqueue with its QUEUE_SHARDED, without
// sending it again.
func TestRouterShardedEnqueueFailures(t *testing.T) {
	for _, tc := range []struct {
		name string
		resp wire.Frame
	}{
		{"topology fails", &wire.ErrorFrame{Code: wire.CodeQueueNotFound, Message: "no orders"}},
		{"one shard", &wire.TopologyResult{Queue: "orders", Shards: []wire.ShardInfo{{LeaderAddr: "a:1"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
			id, _ := h.r.Enqueue(keyed("orders", "x"), 0)
			h.takeDials()
			h.connect("a:1")
			f := h.one("a:1", wire.OpEnqueue)
			h.reply("a:1", f.id, sharded(f.id))
			topo := h.one("a:1", wire.OpTopology)
			h.reply("a:1", topo.id, tc.resp)
			if cp := h.completion(id); !isSharded(cp.Err) {
				t.Fatalf("completion %+v; want QUEUE_SHARDED", cp)
			}
			if fs := h.sent("a:1"); len(fs) != 0 {
				t.Fatalf("sent %v after the failure", ops(fs))
			}
		})
	}
}

// TestRouterShardedItems: a frame split at the broker's batch cap whose
// second half names a sharded queue: that half, failed QUEUE_SHARDED, is
// sent to the shards, the first half's results kept.
func TestRouterShardedItems(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	ms := append(keyed("plain", "p0", "p1"), keyed("orders", "o0", "o1")...)
	id, _ := h.r.Enqueue(ms, 0)
	h.takeDials()
	h.connect("a:1", 2)
	fs := h.sent("a:1")
	if len(fs) != 2 {
		t.Fatalf("sent %v; want two Enqueues at the cap of 2", ops(fs))
	}
	h.reply("a:1", fs[0].id, okResults(2, 'p'))
	h.reply("a:1", fs[1].id, sharded(fs[1].id))
	topo := h.one("a:1", wire.OpTopology)
	h.reply("a:1", topo.id, topology("", "a:1", "a:1"))
	f := h.one("a:1", wire.OpEnqueue)
	e := f.f.(*wire.Enqueue)
	if len(e.Messages) != 2 {
		t.Fatalf("resent %d messages; want the 2 of orders", len(e.Messages))
	}
	for k, m := range e.Messages {
		if want := fmt.Sprintf("orders~%d", ShardOf(ms[2+k].FairnessKey, "", 2)); m.Queue != want {
			t.Errorf("message %d to %s; want %s", k, m.Queue, want)
		}
	}
	h.reply("a:1", f.id, okResults(2, 'o'))
	rs := h.completion(id).Response.(*wire.EnqueueResult).Results
	var got []byte
	for _, r := range rs {
		got = append(got, r.ID[0], '0'+r.ID[1])
	}
	if string(got) != "p0p1o0o1" {
		t.Fatalf("results %q; want p0p1o0o1", got)
	}
}

// shardedSub is a subscription of "orders" opened on its shards.
type shardedSub struct {
	id     uint32
	addrs  []string // each shard's leader
	conn   []uint32 // each shard's subscription ID on its connection
	shares []uint32 // the prefetch each shard's Subscribe asked
}

// openSharded subscribes to "orders" with prefetch, on a harness whose
// seed a:1 is connected: the Subscribe is answered QUEUE_SHARDED, the
// Topology lists a shard led by each of leaders, and each shard's
// Subscribe is granted what it asks.
func openSharded(h *routerHarness, prefetch uint32, leaders ...string) *shardedSub {
	t := h.t
	t.Helper()
	sub, _ := h.r.Subscribe("orders", prefetch, nil, 0)
	s := h.one("a:1", wire.OpSubscribe)
	h.reply("a:1", s.id, sharded(s.id))
	h.noCompletion(sub)
	topo := h.one("a:1", wire.OpTopology)
	h.reply("a:1", topo.id, topology("", leaders...))
	for _, a := range h.takeDials() {
		h.connect(a)
	}
	ss := &shardedSub{id: sub, addrs: leaders, conn: make([]uint32, len(leaders)), shares: make([]uint32, len(leaders))}
	got := map[string][]sentFrame{}
	for i, a := range leaders {
		if _, ok := got[a]; !ok {
			got[a] = h.sent(a)
		}
		if len(got[a]) == 0 || got[a][0].f.Opcode() != wire.OpSubscribe {
			t.Fatalf("%s: sent %v; want the Subscribe of shard %d", a, ops(got[a]), i)
		}
		f := got[a][0]
		got[a] = got[a][1:]
		sf := f.f.(*wire.Subscribe)
		if want := fmt.Sprintf("orders~%d", i); sf.Queue != want {
			t.Fatalf("%s: Subscribe of %s; want %s", a, sf.Queue, want)
		}
		ss.conn[i], ss.shares[i] = f.id, sf.Prefetch
	}
	for i, a := range leaders {
		h.noCompletion(sub)
		h.reply(a, ss.conn[i], &wire.SubscribeOk{Prefetch: ss.shares[i]})
	}
	cp := h.completion(sub)
	var sum uint32
	for _, p := range ss.shares {
		sum += p
	}
	if ok, isOK := cp.Response.(*wire.SubscribeOk); cp.Err != nil || !isOK || ok.Prefetch != sum {
		t.Fatalf("Subscribe completion %+v; want SubscribeOk with prefetch %d", cp, sum)
	}
	for i, a := range leaders {
		if id, ok := h.r.Subscription(a, ss.conn[i]); !ok || id != sub {
			t.Fatalf("Subscription(%s, %d) = %d, %v; want %d", a, ss.conn[i], id, ok, sub)
		}
	}
	return ss
}

// prefetchOf is the prefetch of shard i's subscription on its connection.
func (ss *shardedSub) prefetchOf(h *routerHarness, i int) uint32 {
	return h.r.nodes[ss.addrs[i]].conn.subs[ss.conn[i]].prefetch
}

func (ss *shardedSub) checkCredit(h *routerHarness) {
	h.t.Helper()
	for i, a := range ss.addrs {
		if err := checkCredit(h.r.nodes[a].conn, ss.conn[i]); err != nil {
			h.t.Fatalf("shard %d: %v", i, err)
		}
	}
}

func shardDelivery(backlog uint64, queue string, leases ...uint64) *wire.Delivery {
	d := &wire.Delivery{Backlog: backlog}
	for _, l := range leases {
		d.Messages = append(d.Messages, wire.DeliveredMessage{Queue: queue, Lease: l})
	}
	return d
}

// TestRouterShardedSubscribe: one subscription per shard, on its leader,
// merged: deliveries come under the caller's ID; SettleIn returns credit
// on the shard that delivered the lease, though both shards use it;
// Unsubscribe closes every shard's and ends the subscription once.
func TestRouterShardedSubscribe(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.takeDials()
	h.connect("a:1")
	ss := openSharded(h, 4, "a:1", "b:1")
	if !slices.Equal(ss.shares, []uint32{2, 2}) {
		t.Fatalf("shares %v; want 4 split evenly", ss.shares)
	}
	h.reply("a:1", ss.conn[0], shardDelivery(0, "orders~0", 7))
	h.reply("b:1", ss.conn[1], shardDelivery(0, "orders~1", 7))
	if len(h.deliveries) != 2 || h.deliveries[0].Subscription != ss.id || h.deliveries[1].Subscription != ss.id {
		t.Fatalf("deliveries %+v; want two under subscription %d", h.deliveries, ss.id)
	}
	if out, held, ok := h.r.Credit(ss.id); !ok || out != 2 || held != 2 {
		t.Fatalf("Credit() = %d, %d, %v; want 2 outstanding, 2 held", out, held, ok)
	}

	h.r.SettleIn(ss.id, "orders~1", 7)
	if fs := h.sent("a:1"); len(fs) != 0 {
		t.Fatalf("settling shard 1's lease 7 sent %v on shard 0's connection", ops(fs))
	}
	cr := h.one("b:1", wire.OpCredit).f.(*wire.Credit)
	if cr.Subscription != ss.conn[1] || cr.Credits != 1 {
		t.Fatalf("Credit %+v; want 1 for subscription %d", cr, ss.conn[1])
	}
	h.r.SettleIn(ss.id, "orders~0.dlq", 7) // a DLQ's name finds its shard too
	if cr := h.one("a:1", wire.OpCredit).f.(*wire.Credit); cr.Subscription != ss.conn[0] || cr.Credits != 1 {
		t.Fatalf("Credit %+v; want 1 for subscription %d", cr, ss.conn[0])
	}
	// Settle without the queue: the first shard that holds it.
	h.reply("b:1", ss.conn[1], shardDelivery(0, "orders~1", 8))
	h.r.Settle(ss.id, 8)
	h.one("b:1", wire.OpCredit)
	ss.checkCredit(h)

	un, _ := h.r.Unsubscribe(ss.id)
	ua, ub := h.one("a:1", wire.OpUnsubscribe), h.one("b:1", wire.OpUnsubscribe)
	if ua.f.(*wire.Unsubscribe).Subscription != ss.conn[0] || ub.f.(*wire.Unsubscribe).Subscription != ss.conn[1] {
		t.Fatalf("Unsubscribes of %+v, %+v; want %v", ua.f, ub.f, ss.conn)
	}
	h.reply("a:1", ua.id, &wire.UnsubscribeOk{})
	h.noCompletion(un)
	if len(h.ended) != 0 {
		t.Fatalf("ended %+v with a shard still open", h.ended)
	}
	h.reply("b:1", ub.id, &wire.UnsubscribeOk{})
	if cp := h.completion(un); cp.Err != nil {
		t.Fatal(cp.Err)
	}
	if len(h.ended) != 1 || h.ended[0].Subscription != ss.id || h.ended[0].Err != nil {
		t.Fatalf("ended %+v; want subscription %d once, with nil", h.ended, ss.id)
	}
	if len(h.r.subs) != 0 {
		t.Fatalf("subscriptions left: %d", len(h.r.subs))
	}
}

// TestRouterShardedCredit: a shard's backlog moves the credit to it; a
// small change moves nothing; SetPrefetch splits again.
func TestRouterShardedCredit(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.takeDials()
	h.connect("a:1")
	ss := openSharded(h, 100, "a:1", "b:1")
	if !slices.Equal(ss.shares, []uint32{50, 50}) {
		t.Fatalf("shares %v; want 50, 50", ss.shares)
	}
	// b reports 300 ready: a, with none known, keeps 1, b gets the rest.
	h.reply("b:1", ss.conn[1], shardDelivery(300, "orders~1", 1))
	cr := h.one("b:1", wire.OpCredit).f.(*wire.Credit)
	if cr.Subscription != ss.conn[1] || cr.Credits != 49 {
		t.Fatalf("Credit %+v; want 49 more for shard 1", cr)
	}
	if a, b := ss.prefetchOf(h, 0), ss.prefetchOf(h, 1); a != 1 || b != 99 {
		t.Fatalf("prefetches %d, %d; want 1, 99", a, b)
	}
	if fs := h.sent("a:1"); len(fs) != 0 {
		t.Fatalf("a:1 got %v for a decrease", ops(fs))
	}
	ss.checkCredit(h)
	// a reports 3: the split is 2 and 97. a leaves the floor, so it
	// changes; b would move by 2, less than a quarter of 99: it does not.
	h.reply("a:1", ss.conn[0], shardDelivery(3, "orders~0", 1))
	if a, b := ss.prefetchOf(h, 0), ss.prefetchOf(h, 1); a != 2 || b != 99 {
		t.Fatalf("after a small backlog, prefetches %d, %d; want 2, 99 kept", a, b)
	}
	// Equal backlogs: back to even.
	h.reply("a:1", ss.conn[0], shardDelivery(300, "orders~0"))
	if a, b := ss.prefetchOf(h, 0), ss.prefetchOf(h, 1); a != 50 || b != 50 {
		t.Fatalf("prefetches %d, %d; want 50, 50", a, b)
	}
	ss.checkCredit(h)
	if err := h.r.SetPrefetch(ss.id, 10); err != nil {
		t.Fatal(err)
	}
	if a, b := ss.prefetchOf(h, 0), ss.prefetchOf(h, 1); a != 5 || b != 5 {
		t.Fatalf("after SetPrefetch(10), prefetches %d, %d; want 5, 5", a, b)
	}
	ss.checkCredit(h)
}

// TestRouterShardedNotLeader: a shard whose leadership moves is opened
// again on the hint, alone, silently, with its deliveries still under
// the caller's ID.
func TestRouterShardedNotLeader(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.takeDials()
	h.connect("a:1")
	ss := openSharded(h, 4, "a:1", "b:1")
	h.reply("b:1", ss.conn[1], shardDelivery(0, "orders~1", 5))
	h.notLeader("b:1", ss.conn[1], "c:1")
	if d := h.takeDials(); !slices.Equal(d, []string{"c:1"}) {
		t.Fatalf("dials %v; want c:1", d)
	}
	h.connect("c:1")
	s := h.one("c:1", wire.OpSubscribe)
	if sf := s.f.(*wire.Subscribe); sf.Queue != "orders~1" || sf.Prefetch != 1 {
		t.Fatalf("reopened %+v; want orders~1 with 2 less the 1 held", sf)
	}
	if fs := h.sent("a:1"); len(fs) != 0 {
		t.Fatalf("a:1 got %v; want shard 0 left alone", ops(fs))
	}
	h.reply("c:1", s.id, &wire.SubscribeOk{Prefetch: 1})
	if len(h.completions) != 0 || len(h.ended) != 0 {
		t.Fatalf("completions %+v, ended %+v; want the move silent", h.completions, h.ended)
	}
	if id, ok := h.r.Subscription("c:1", s.id); !ok || id != ss.id {
		t.Fatalf("Subscription(c:1) = %d, %v; want %d", id, ok, ss.id)
	}
	h.deliveries = nil
	h.reply("c:1", s.id, shardDelivery(0, "orders~1", 6))
	if len(h.deliveries) != 1 || h.deliveries[0].Subscription != ss.id {
		t.Fatalf("deliveries %+v; want one under %d", h.deliveries, ss.id)
	}
	// Lease 5, from b, settles on c: the shard took it along.
	h.r.SettleIn(ss.id, "orders~1", 5)
	if err := checkCredit(h.r.nodes["c:1"].conn, s.id); err != nil {
		t.Fatal(err)
	}
	if _, held, _ := h.r.Credit(ss.id); held != 1 {
		t.Fatalf("held %d; want 1 (lease 6)", held)
	}
}

// TestRouterShardedEnd: a shard's subscription ended for good ends the
// sharded one, after closing the other shards'.
func TestRouterShardedEnd(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.takeDials()
	h.connect("a:1")
	ss := openSharded(h, 4, "a:1", "b:1")
	h.reply("a:1", ss.conn[0], &wire.ErrorFrame{Code: wire.CodeQueueNotFound, Message: "deleted"})
	u := h.one("b:1", wire.OpUnsubscribe)
	if len(h.ended) != 0 {
		t.Fatalf("ended %+v before shard 1 closed", h.ended)
	}
	h.reply("b:1", u.id, &wire.UnsubscribeOk{})
	var re *RequestError
	if len(h.ended) != 1 || h.ended[0].Subscription != ss.id || !errors.As(h.ended[0].Err, &re) || re.Code != wire.CodeQueueNotFound {
		t.Fatalf("ended %+v; want %d with QUEUE_NOT_FOUND", h.ended, ss.id)
	}
	if len(h.completions) != 0 {
		t.Fatalf("completions %+v; want none", h.completions)
	}
}

// TestRouterShardedSubscribeFailures: a Topology that fails fails the
// Subscribe with QUEUE_SHARDED; a shard that cannot be opened fails it
// too, closing the shards that opened.
func TestRouterShardedSubscribeFailures(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.takeDials()
	h.connect("a:1")
	sub, _ := h.r.Subscribe("orders", 4, nil, 0)
	s := h.one("a:1", wire.OpSubscribe)
	h.reply("a:1", s.id, sharded(s.id))
	topo := h.one("a:1", wire.OpTopology)
	h.reply("a:1", topo.id, &wire.ErrorFrame{Code: wire.CodeUnavailable})
	if cp := h.completion(sub); !isSharded(cp.Err) {
		t.Fatalf("completion %+v; want QUEUE_SHARDED", cp)
	}

	sub, _ = h.r.Subscribe("orders", 4, nil, 0)
	s = h.one("a:1", wire.OpSubscribe)
	h.reply("a:1", s.id, sharded(s.id))
	topo = h.one("a:1", wire.OpTopology)
	h.reply("a:1", topo.id, topology("", "a:1", "a:1"))
	fs := h.sent("a:1")
	if len(fs) != 2 {
		t.Fatalf("sent %v; want two Subscribes", ops(fs))
	}
	h.reply("a:1", fs[0].id, &wire.SubscribeOk{Prefetch: 2})
	h.reply("a:1", fs[0].id, shardDelivery(0, "orders~0", 1)) // held back until the Subscribe completes
	h.reply("a:1", fs[1].id, &wire.ErrorFrame{Code: wire.CodeForbidden, Message: "no"})
	u := h.one("a:1", wire.OpUnsubscribe)
	h.noCompletion(sub)
	h.reply("a:1", u.id, &wire.UnsubscribeOk{})
	var re *RequestError
	if cp := h.completion(sub); !errors.As(cp.Err, &re) || re.Code != wire.CodeForbidden {
		t.Fatalf("completion %+v; want FORBIDDEN", cp)
	}
	if len(h.deliveries) != 0 || len(h.ended) != 0 {
		t.Fatalf("deliveries %+v, ended %+v; want none for a Subscribe that failed", h.deliveries, h.ended)
	}
	// The shard map stays known: a third Subscribe goes to the shards.
	h.r.Subscribe("orders", 4, nil, 0)
	fs = h.sent("a:1")
	if len(fs) != 2 || fs[0].f.(*wire.Subscribe).Queue != "orders~0" || fs[1].f.(*wire.Subscribe).Queue != "orders~1" {
		t.Fatalf("sent %v; want the shards' Subscribes", ops(fs))
	}
}

// TestRouterShardedLookupOnce: Enqueues and a Subscribe answered
// QUEUE_SHARDED at the same time wait for one Topology.
func TestRouterShardedLookupOnce(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.takeDials()
	h.connect("a:1")
	e1, _ := h.r.Enqueue(keyed("orders", "x"), 0)
	e2, _ := h.r.Enqueue(keyed("orders", "y"), 0)
	sub, _ := h.r.Subscribe("orders", 2, nil, 0)
	fs := h.sent("a:1")
	if len(fs) != 3 {
		t.Fatalf("sent %v; want Enqueue, Enqueue, Subscribe", ops(fs))
	}
	for _, f := range fs {
		h.reply("a:1", f.id, sharded(f.id))
	}
	topo := h.one("a:1", wire.OpTopology)
	h.reply("a:1", topo.id, topology("", "a:1"))
	fs = h.sent("a:1")
	if !slices.Equal(ops(fs), []wire.Opcode{wire.OpEnqueue, wire.OpEnqueue, wire.OpSubscribe}) {
		t.Fatalf("sent %v after the Topology; want Enqueue, Enqueue, Subscribe", ops(fs))
	}
	for _, f := range fs {
		switch f := f.f.(type) {
		case *wire.Enqueue:
			if f.Messages[0].Queue != "orders~0" {
				t.Fatalf("Enqueue to %s; want orders~0", f.Messages[0].Queue)
			}
		case *wire.Subscribe:
			if f.Queue != "orders~0" || f.Prefetch != 2 {
				t.Fatalf("Subscribe %+v; want orders~0 with 2", f)
			}
		}
	}
	h.reply("a:1", fs[0].id, okResults(1, 'x'))
	h.reply("a:1", fs[1].id, okResults(1, 'y'))
	h.reply("a:1", fs[2].id, &wire.SubscribeOk{Prefetch: 2})
	for _, id := range []uint32{e1, e2, sub} {
		if cp := h.completion(id); cp.Err != nil {
			t.Fatalf("request %d: %v", id, cp.Err)
		}
	}
}
