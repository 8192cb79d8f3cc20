package core

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

var testProducer = [16]byte{0xf1, 0x1a, 15: 1}

// routerHarness drives a Router as a shell would and plays every node's
// broker. Dials are not answered by themselves: connect does.
type routerHarness struct {
	t   *testing.T
	r   *Router
	now Time

	out         map[string][]byte // written to each node, not yet read
	dials       []string
	closes      []string
	completions []Completion
	deliveries  []DeliveryBatch
	ended       []SubscriptionEnd
	states      []NodeState
	deadline    Time
}

func newRouterHarness(t *testing.T, cfg RouterConfig) *routerHarness {
	t.Helper()
	if cfg.ProducerID == ([16]byte{}) {
		cfg.ProducerID = testProducer
	}
	cfg.Conn.KeepaliveInterval = -1
	h := &routerHarness{t: t, r: NewRouter(cfg), now: 1000, out: map[string][]byte{}}
	h.r.Tick(h.now)
	h.drain()
	return h
}

func (h *routerHarness) drain() {
	for h.r.HasReady() {
		rd := h.r.Ready()
		h.dials = append(h.dials, rd.Dial...)
		for _, w := range rd.Writes {
			h.out[w.Addr] = append(h.out[w.Addr], w.Out...)
		}
		h.closes = append(h.closes, rd.Close...)
		h.completions = append(h.completions, rd.Completions...)
		h.deliveries = append(h.deliveries, rd.Deliveries...)
		h.ended = append(h.ended, rd.Ended...)
		h.states = append(h.states, rd.Nodes...)
		h.deadline = rd.Deadline
		h.r.Advance(rd)
	}
}

// tick moves the clock on by d.
func (h *routerHarness) tick(d time.Duration) {
	h.now = h.now.Add(d)
	h.r.Tick(h.now)
	h.drain()
}

// takeDials returns and clears the dials asked for.
func (h *routerHarness) takeDials() []string {
	h.drain()
	d := h.dials
	h.dials = nil
	return d
}

// connect answers the dial of addr: the connection opens and the broker
// answers its Handshake (node ID addr, batch cap maxBatch or 4096).
func (h *routerHarness) connect(addr string, maxBatch ...uint32) {
	h.t.Helper()
	h.r.Connected(addr)
	fs := h.sent(addr)
	if len(fs) == 0 || fs[0].f.Opcode() != wire.OpHandshake {
		h.t.Fatalf("%s: first frames %v; want Handshake", addr, ops(fs))
	}
	mb := uint32(4096)
	if len(maxBatch) > 0 {
		mb = maxBatch[0]
	}
	h.reply(addr, fs[0].id, &wire.HandshakeOk{Version: wire.ProtocolVersion, NodeID: addr, MaxFrameSize: wire.DefaultMaxFrameSize, MaxBatchSize: mb})
}

// sent decodes and clears the frames written to addr.
func (h *routerHarness) sent(addr string) []sentFrame {
	h.t.Helper()
	h.drain()
	fr := wire.NewFrameReader(0, 0)
	fr.Feed(h.out[addr])
	delete(h.out, addr)
	var out []sentFrame
	for {
		hd, body, ok, err := fr.Next()
		if err != nil {
			h.t.Fatalf("%s: client wrote bad bytes: %v", addr, err)
		}
		if !ok {
			return out
		}
		f, err := wire.DecodeFrame(hd.Opcode, append([]byte(nil), body...))
		if err != nil {
			h.t.Fatalf("%s: client wrote undecodable %v: %v", addr, hd.Opcode, err)
		}
		out = append(out, sentFrame{hd.RequestID, f})
	}
}

// one returns the single frame written to addr, which must be op.
func (h *routerHarness) one(addr string, op wire.Opcode) sentFrame {
	h.t.Helper()
	fs := h.sent(addr)
	if len(fs) != 1 || fs[0].f.Opcode() != op {
		h.t.Fatalf("%s: client wrote %v; want one %v", addr, ops(fs), op)
	}
	return fs[0]
}

func (h *routerHarness) reply(addr string, id uint32, f wire.Frame) {
	h.t.Helper()
	if err := h.r.Receive(addr, wire.AppendFrame(nil, id, f)); err != nil {
		h.t.Fatalf("%s: Receive(%v) = %v", addr, f.Opcode(), err)
	}
	h.drain()
}

func (h *routerHarness) notLeader(addr string, id uint32, hint string) {
	h.t.Helper()
	h.reply(addr, id, &wire.ErrorFrame{Code: wire.CodeNotLeader, Message: "not the leader", LeaderHint: hint})
}

// completion returns and removes the completion of id.
func (h *routerHarness) completion(id uint32) Completion {
	h.t.Helper()
	h.drain()
	for i, cp := range h.completions {
		if cp.RequestID == id {
			h.completions = slices.Delete(h.completions, i, i+1)
			return cp
		}
	}
	h.t.Fatalf("no completion of request %d (have %d others)", id, len(h.completions))
	return Completion{}
}

func (h *routerHarness) noCompletion(id uint32) {
	h.t.Helper()
	h.drain()
	for _, cp := range h.completions {
		if cp.RequestID == id {
			h.t.Fatalf("request %d completed early: %+v", id, cp)
		}
	}
}

func ops(fs []sentFrame) []wire.Opcode {
	out := make([]wire.Opcode, len(fs))
	for i, f := range fs {
		out[i] = f.f.Opcode()
	}
	return out
}

func msgs(queues ...string) []wire.EnqueueMessage {
	out := make([]wire.EnqueueMessage, len(queues))
	for i, q := range queues {
		out[i] = wire.EnqueueMessage{Queue: q, Payload: []byte(fmt.Sprint(i))}
	}
	return out
}

func okResults(n int, tag byte) *wire.EnqueueResult {
	rs := make([]wire.EnqueueItemResult, n)
	for i := range rs {
		rs[i] = wire.EnqueueItemResult{Code: wire.CodeOK, ID: [16]byte{tag, byte(i)}}
	}
	return &wire.EnqueueResult{Results: rs}
}

func TestRouteKeys(t *testing.T) {
	tests := []struct {
		f    wire.Frame
		want routeKey
	}{
		{&wire.Subscribe{Queue: "orders"}, "orders"},
		{&wire.QueueStats{Name: "orders"}, "orders"},
		{&wire.Explain{Queue: "orders.dlq"}, "orders"},
		{&wire.Redrive{DeadLetterQueue: "orders.dlq"}, "orders"},
		{&wire.CreateQueue{Name: "orders"}, metaKey},
		{&wire.DeleteQueue{Name: "orders"}, metaKey},
		{&wire.SetConfig{Key: "k"}, metaKey},
		{&wire.CreateAPIKey{Name: "k"}, metaKey},
		{&wire.SetACL{KeyID: "k"}, metaKey},
		{&wire.ListQueues{}, metaKey},
		{&wire.Ping{}, anyKey},
		{&wire.Topology{Queue: "orders"}, anyKey},
		{&wire.ClusterStatus{}, anyKey},
		{&wire.MoveQueue{Queue: "orders", Replicas: []uint64{1, 2, 3}}, anyKey},
		{&wire.DrainNode{NodeID: 2}, anyKey},
		{&wire.DrainNode{NodeID: 2, Undo: true}, anyKey},
		{&wire.Rebalance{DryRun: true}, anyKey},
		{&wire.AddNode{NodeID: 4, PeerAddr: "h:1"}, anyKey},
		{&wire.RemoveNode{NodeID: 4}, anyKey},
	}
	for _, tt := range tests {
		if got := frameKey(tt.f); got != tt.want {
			t.Errorf("frameKey(%v) = %q; want %q", tt.f.Opcode(), got, tt.want)
		}
	}
	ack := &wire.Ack{Items: []wire.LeaseRef{{Queue: "orders.dlq"}, {Queue: "orders"}}}
	if k0, k1 := queueKey(itemQueue(ack, 0)), queueKey(itemQueue(ack, 1)); k0 != k1 {
		t.Errorf("a DLQ's item key %q differs from its parent's %q", k0, k1)
	}
}

// TestRouterRedirect: a request answered NOT_LEADER is sent to the hint,
// unchanged (same producer ID and sequence); the table learns the leader,
// so the next request for the queue goes there at once.
func TestRouterRedirect(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1", "c:1"}})
	id, err := h.r.Enqueue(msgs("q", "q"), 0)
	if err != nil {
		t.Fatal(err)
	}
	if d := h.takeDials(); !slices.Equal(d, []string{"a:1"}) {
		t.Fatalf("dials %v; want the first seed", d)
	}
	h.connect("a:1")
	first := h.one("a:1", wire.OpEnqueue)
	e1 := first.f.(*wire.Enqueue)
	if e1.ProducerID != testProducer || e1.Sequence != 1 {
		t.Fatalf("Enqueue stamped %x/%d; want %x/1", e1.ProducerID, e1.Sequence, testProducer)
	}
	h.notLeader("a:1", first.id, "b:1")
	h.noCompletion(id)
	if d := h.takeDials(); !slices.Equal(d, []string{"b:1"}) {
		t.Fatalf("dials after the redirect %v; want the hint", d)
	}
	h.connect("b:1")
	again := h.one("b:1", wire.OpEnqueue)
	e2 := again.f.(*wire.Enqueue)
	if e2.ProducerID != e1.ProducerID || e2.Sequence != e1.Sequence || len(e2.Messages) != 2 {
		t.Fatalf("redirected Enqueue %x/%d with %d messages; want the first one's %x/%d with 2", e2.ProducerID, e2.Sequence, len(e2.Messages), e1.ProducerID, e1.Sequence)
	}
	h.reply("b:1", again.id, okResults(2, 1))
	if cp := h.completion(id); cp.Err != nil || len(cp.Response.(*wire.EnqueueResult).Results) != 2 {
		t.Fatalf("completion %+v; want 2 results", cp)
	}
	if got := h.r.Leader("q"); got != "b:1" {
		t.Errorf("Leader(q) = %q; want b:1", got)
	}
	// The next goes to b directly, with the next sequences.
	id2, _ := h.r.Enqueue(msgs("q"), 0)
	if fs := h.sent("a:1"); len(fs) != 0 {
		t.Fatalf("a:1 got %v; want nothing", ops(fs))
	}
	next := h.one("b:1", wire.OpEnqueue)
	if s := next.f.(*wire.Enqueue).Sequence; s != 3 {
		t.Errorf("next Enqueue sequence %d; want 3", s)
	}
	h.reply("b:1", next.id, okResults(1, 2))
	if cp := h.completion(id2); cp.Err != nil {
		t.Fatal(cp.Err)
	}
}

// TestRouterRedirectBound: a request bounced from node to node fails with
// the last NOT_LEADER after MaxRedirects redirects.
func TestRouterRedirectBound(t *testing.T) {
	for _, max := range []int{0, 3} {
		t.Run(fmt.Sprint("max=", max), func(t *testing.T) {
			h := newRouterHarness(t, RouterConfig{Seeds: []string{"n0:1"}, MaxRedirects: max})
			want := max
			if want == 0 {
				want = 8
			}
			id, _ := h.r.Send(&wire.QueueStats{Name: "q"}, 0)
			sends := 0
			for i := 0; ; i++ {
				addr := fmt.Sprintf("n%d:1", i)
				if d := h.takeDials(); !slices.Equal(d, []string{addr}) {
					t.Fatalf("after %d sends, dials %v; want %s", sends, d, addr)
				}
				h.connect(addr)
				f := h.one(addr, wire.OpQueueStats)
				sends++
				h.notLeader(addr, f.id, fmt.Sprintf("n%d:1", i+1))
				if len(h.completions) > 0 {
					break
				}
			}
			if sends != want+1 {
				t.Errorf("sent %d times; want %d (1 + %d redirects)", sends, want+1, want)
			}
			cp := h.completion(id)
			var re *RequestError
			if !errors.As(cp.Err, &re) || re.Code != wire.CodeNotLeader || re.LeaderHint != fmt.Sprintf("n%d:1", want+1) {
				t.Fatalf("completion error %v; want the last NOT_LEADER", cp.Err)
			}
		})
	}
}

// TestRouterStaleHint: after a leader dies, its followers still name it
// until they elect another. A hint naming a node that cannot be reached
// is retried after a backoff, as with no hint, so the request outlives
// the election instead of spending its redirects going back and forth.
func TestRouterStaleHint(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1", "b:1"}})
	h.takeDials()
	h.connect("a:1")
	id, _ := h.r.Send(&wire.QueueStats{Name: "q"}, h.now.Add(30*time.Second))
	f := h.one("a:1", wire.OpQueueStats)
	h.notLeader("a:1", f.id, "b:1")
	if d := h.takeDials(); !slices.Equal(d, []string{"b:1"}) {
		t.Fatalf("dials %v; want b:1", d)
	}
	h.r.DialFailed("b:1", errors.New("connection refused"))
	h.drain()
	// Twenty more rounds of the same stale hint: more than MaxRedirects.
	for i := range 20 {
		fs := h.sent("a:1")
		for len(fs) == 0 {
			h.tick(50 * time.Millisecond)
			h.takeDials() // b:1 again, after its dial backoff: it stays down
			h.r.DialFailed("b:1", errors.New("connection refused"))
			fs = h.sent("a:1")
		}
		if len(fs) != 1 || fs[0].f.Opcode() != wire.OpQueueStats {
			t.Fatalf("round %d: sent %v; want one QueueStats", i, ops(fs))
		}
		h.notLeader("a:1", fs[0].id, "b:1")
		if len(h.completions) > 0 {
			t.Fatalf("round %d: completed with %v while the hinted node was down", i, h.completions[0].Err)
		}
	}
	// b:1 comes back, and leads again: once its dial backoff ends the
	// router dials it (the hint was kept) and the request goes there.
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("b:1 not dialled again in 10s after its last failure")
		}
		h.tick(50 * time.Millisecond)
		if d := h.takeDials(); slices.Contains(d, "b:1") {
			break
		}
		for _, f := range h.sent("a:1") {
			h.notLeader("a:1", f.id, "b:1")
		}
	}
	h.connect("b:1")
	f = h.one("b:1", wire.OpQueueStats)
	h.reply("b:1", f.id, &wire.QueueStatsResult{})
	if cp := h.completion(id); cp.Err != nil {
		t.Fatalf("completion %v; want success once the leader is back", cp.Err)
	}
}

// TestRouterBackoffWithoutHint: NOT_LEADER with no hint (an election) is
// retried after 50ms, doubling to a 250ms cap, so that the first retry
// after a new leader is elected comes at most 250ms later; the request
// fails once the next wait would pass its deadline.
func TestRouterBackoffWithoutHint(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.takeDials()
	h.connect("a:1")
	start := h.now
	id, _ := h.r.Send(&wire.Ack{Items: []wire.LeaseRef{{Queue: "q", Lease: 1}}}, start.Add(3*time.Second))
	retry := func(i int, w time.Duration) {
		t.Helper()
		f := h.one("a:1", wire.OpAck)
		h.notLeader("a:1", f.id, "")
		if h.deadline != h.now.Add(w) {
			t.Fatalf("retry %d: Deadline %v after now; want %v", i+1, time.Duration(h.deadline-h.now), w)
		}
		h.tick(w - time.Millisecond)
		if fs := h.sent("a:1"); len(fs) != 0 {
			t.Fatalf("retry %d: sent %v before the backoff ended", i+1, ops(fs))
		}
		h.tick(time.Millisecond)
	}
	i := 0
	for _, w := range []time.Duration{50, 100, 200, 250, 250} {
		retry(i, w*time.Millisecond)
		i++
	}
	// At the 250ms cap until the next wait would pass the deadline.
	for h.now-start+Time(250*time.Millisecond) < Time(3*time.Second) {
		retry(i, 250*time.Millisecond)
		i++
	}
	f := h.one("a:1", wire.OpAck)
	h.notLeader("a:1", f.id, "")
	cp := h.completion(id)
	var re *RequestError
	if !errors.As(cp.Err, &re) || re.Code != wire.CodeNotLeader {
		t.Fatalf("completion %v; want NOT_LEADER once the next wait passes the deadline", cp.Err)
	}
	if h.now-start >= Time(3*time.Second) {
		t.Errorf("failed at %v; want before the 3s deadline", time.Duration(h.now-start))
	}
}

// TestRouterResendOnConnectionLoss: requests in flight on a connection
// that fails are sent again on the next one: the Enqueue with its
// producer ID and sequence, the Ack as it was; a CreateQueue, which is
// not safe to repeat, fails with ErrConnectionLost.
func TestRouterResendOnConnectionLoss(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}, DialMin: 100 * time.Millisecond})
	h.takeDials()
	h.connect("a:1")
	enq, _ := h.r.Enqueue(msgs("q", "q", "q"), 0)
	ack, _ := h.r.Send(&wire.Ack{Items: []wire.LeaseRef{{Queue: "q", ID: [16]byte{9}, Lease: 7}}}, 0)
	create, _ := h.r.Send(&wire.CreateQueue{Name: "r"}, 0)
	first := h.sent("a:1")
	if len(first) != 3 {
		t.Fatalf("sent %v; want Enqueue, Ack, CreateQueue", ops(first))
	}
	e1 := first[0].f.(*wire.Enqueue)

	h.r.ConnLost("a:1", errors.New("reset by peer"))
	h.drain()
	if !slices.Equal(h.closes, []string{"a:1"}) {
		t.Fatalf("Close %v; want a:1", h.closes)
	}
	if cp := h.completion(create); !errors.Is(cp.Err, ErrConnectionLost) {
		t.Fatalf("CreateQueue completed with %v; want ErrConnectionLost", cp.Err)
	}
	h.noCompletion(enq)
	h.noCompletion(ack)
	// The node is dialled again after the backoff, not at once.
	if d := h.takeDials(); len(d) != 0 {
		t.Fatalf("dialled %v at once; want a backoff", d)
	}
	if h.deadline == 0 || h.deadline > h.now.Add(100*time.Millisecond) {
		t.Fatalf("Deadline %v from now; want within the 100ms backoff", time.Duration(h.deadline-h.now))
	}
	h.tick(time.Duration(h.deadline - h.now))
	if d := h.takeDials(); !slices.Equal(d, []string{"a:1"}) {
		t.Fatalf("dials after the backoff %v; want a:1", d)
	}
	h.connect("a:1")
	again := h.sent("a:1")
	if len(again) != 2 || again[0].f.Opcode() != wire.OpEnqueue || again[1].f.Opcode() != wire.OpAck {
		t.Fatalf("resent %v; want Enqueue, Ack", ops(again))
	}
	e2 := again[0].f.(*wire.Enqueue)
	if e2.ProducerID != e1.ProducerID || e2.Sequence != e1.Sequence {
		t.Errorf("resent Enqueue %x/%d; want the same producer ID and sequence %x/%d", e2.ProducerID, e2.Sequence, e1.ProducerID, e1.Sequence)
	}
	if !bytes.Equal(wire.AppendFrame(nil, 0, again[1].f), wire.AppendFrame(nil, 0, first[1].f)) {
		t.Errorf("resent Ack %+v; want %+v", again[1].f, first[1].f)
	}
	dup := okResults(3, 1)
	for i := range dup.Results {
		dup.Results[i].Duplicate = true
	}
	h.reply("a:1", again[0].id, dup)
	h.reply("a:1", again[1].id, &wire.AckResult{Results: []wire.ItemResult{{Code: wire.CodeOK}}})
	if cp := h.completion(enq); cp.Err != nil || !cp.Response.(*wire.EnqueueResult).Results[0].Duplicate {
		t.Fatalf("Enqueue completion %+v; want the broker's answer to the resend", cp)
	}
	if cp := h.completion(ack); cp.Err != nil {
		t.Fatalf("Ack completion %v", cp.Err)
	}
}

// TestRouterUnstampedEnqueueNotResent: without a producer ID an Enqueue
// lost with its connection fails; one lost before the handshake (never
// written) is sent again anyway.
func TestRouterUnstampedEnqueueNotResent(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.r.cfg.ProducerID = [16]byte{}
	early, _ := h.r.Send(&wire.CreateQueue{Name: "q"}, 0)
	h.takeDials()
	h.r.Connected("a:1")
	h.sent("a:1") // Handshake; the CreateQueue is held for its answer
	h.r.ConnLost("a:1", errors.New("refused"))
	h.drain()
	h.noCompletion(early)
	h.tick(time.Second)
	h.takeDials()
	h.connect("a:1")
	cq := h.one("a:1", wire.OpCreateQueue)
	h.reply("a:1", cq.id, &wire.CreateQueueOk{Name: "q"})
	if cp := h.completion(early); cp.Err != nil {
		t.Fatalf("CreateQueue held for a handshake that never came: %v; want it sent on the next connection", cp.Err)
	}

	enq, _ := h.r.Enqueue(msgs("q"), 0)
	if e := h.one("a:1", wire.OpEnqueue).f.(*wire.Enqueue); e.ProducerID != ([16]byte{}) {
		t.Fatalf("Enqueue stamped %x without a producer ID", e.ProducerID)
	}
	h.r.ConnLost("a:1", errors.New("reset"))
	if cp := h.completion(enq); !errors.Is(cp.Err, ErrConnectionLost) {
		t.Fatalf("unstamped Enqueue completed with %v; want ErrConnectionLost", cp.Err)
	}
}

// TestRouterResubscribeAfterNotLeader: a subscription ended with
// NOT_LEADER is opened again on the hint with the credit the unsettled
// deliveries leave; settling them returns credit there; the caller's
// Subscribe completed once, and deliveries keep the subscription's ID.
func TestRouterResubscribeAfterNotLeader(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	sub, _ := h.r.Subscribe("q", 4, nil, 0)
	h.takeDials()
	h.connect("a:1")
	s1 := h.one("a:1", wire.OpSubscribe)
	h.reply("a:1", s1.id, &wire.SubscribeOk{Prefetch: 4})
	if cp := h.completion(sub); cp.Err != nil || cp.Op != wire.OpSubscribe {
		t.Fatalf("Subscribe completion %+v", cp)
	}
	h.reply("a:1", s1.id, &wire.Delivery{Messages: []wire.DeliveredMessage{{Queue: "q", Lease: 1}, {Queue: "q", Lease: 2}, {Queue: "q", Lease: 3}}})
	if len(h.deliveries) != 1 || h.deliveries[0].Subscription != sub {
		t.Fatalf("deliveries %+v; want one batch for subscription %d", h.deliveries, sub)
	}
	h.r.Settle(sub, 1) // 1 of 4/4: no Credit yet
	h.sent("a:1")

	// a loses leadership: the subscription ends there with NOT_LEADER.
	h.notLeader("a:1", s1.id, "b:1")
	if len(h.ended) != 0 {
		t.Fatalf("ended %+v; want the subscription kept", h.ended)
	}
	h.takeDials()
	h.connect("b:1")
	s2 := h.one("b:1", wire.OpSubscribe)
	if p := s2.f.(*wire.Subscribe).Prefetch; p != 2 {
		t.Fatalf("resubscribe asks prefetch %d; want 2 (4 less the 2 unsettled)", p)
	}
	h.reply("b:1", s2.id, &wire.SubscribeOk{Prefetch: 2})
	for _, cp := range h.completions {
		if cp.RequestID == sub {
			t.Fatalf("the resubscription completed the caller's Subscribe again: %+v", cp)
		}
	}
	if out, held, ok := h.r.Credit(sub); !ok || out != 2 || held != 2 {
		t.Fatalf("Credit() = %d, %d, %v; want 2 outstanding, 2 held", out, held, ok)
	}
	// Settling a delivery from a returns its credit on b.
	h.r.Settle(sub, 2)
	cr := h.one("b:1", wire.OpCredit).f.(*wire.Credit)
	if cr.Subscription != s2.id || cr.Credits != 1 {
		t.Fatalf("Credit %+v; want 1 for subscription %d on b", cr, s2.id)
	}
	h.reply("b:1", s2.id, &wire.Delivery{Messages: []wire.DeliveredMessage{{Queue: "q", Lease: 10}}})
	if last := h.deliveries[len(h.deliveries)-1]; last.Subscription != sub {
		t.Fatalf("delivery on b for subscription %d; want %d", last.Subscription, sub)
	}
	if err := checkCredit(h.r.nodes["b:1"].conn, s2.id); err != nil {
		t.Fatal(err)
	}
}

// TestRouterResubscribeHoldingAll: with every credit held, the new
// subscription asks for 1 and withholds one credit.
func TestRouterResubscribeHoldingAll(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	sub, _ := h.r.Subscribe("q", 2, nil, 0)
	h.takeDials()
	h.connect("a:1")
	s1 := h.one("a:1", wire.OpSubscribe)
	h.reply("a:1", s1.id, &wire.SubscribeOk{Prefetch: 2})
	h.reply("a:1", s1.id, &wire.Delivery{Messages: []wire.DeliveredMessage{{Lease: 1}, {Lease: 2}}})
	h.notLeader("a:1", s1.id, "a:1") // a moved leadership to itself: reopen there
	s2 := h.one("a:1", wire.OpSubscribe)
	if p := s2.f.(*wire.Subscribe).Prefetch; p != 1 {
		t.Fatalf("resubscribe asks %d; want 1", p)
	}
	h.reply("a:1", s2.id, &wire.SubscribeOk{Prefetch: 1})
	c := h.r.nodes["a:1"].conn
	if err := checkCredit(c, s2.id); err != nil {
		t.Fatal(err)
	}
	h.r.Settle(sub, 1, 2)
	if err := checkCredit(c, s2.id); err != nil {
		t.Fatal(err)
	}
	// 2 settled, 1 withheld: 1 credit goes back, and 2 are outstanding.
	if out, held, _ := h.r.Credit(sub); out != 2 || held != 0 {
		t.Fatalf("Credit() = %d outstanding, %d held; want 2, 0", out, held)
	}
}

// TestRouterResubscribeAfterConnectionLoss: the subscription is opened
// again, with its whole prefetch, once the node can be dialled again.
func TestRouterResubscribeAfterConnectionLoss(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	sub, _ := h.r.Subscribe("q", 4, nil, 0)
	h.takeDials()
	h.connect("a:1")
	s1 := h.one("a:1", wire.OpSubscribe)
	h.reply("a:1", s1.id, &wire.SubscribeOk{Prefetch: 4})
	h.completion(sub)
	h.reply("a:1", s1.id, &wire.Delivery{Messages: []wire.DeliveredMessage{{Lease: 1}}})
	h.r.ConnLost("a:1", errors.New("EOF"))
	h.drain()
	for range 3 { // the dial fails twice, then succeeds
		h.tick(5 * time.Second)
		if d := h.takeDials(); !slices.Equal(d, []string{"a:1"}) {
			t.Fatalf("dials %v; want a:1", d)
		}
		if len(h.ended) != 0 {
			t.Fatalf("subscription ended %+v while the node is down", h.ended)
		}
		if h.r.nodes["a:1"].failures < 3 {
			h.r.DialFailed("a:1", errors.New("refused"))
		}
	}
	h.connect("a:1")
	s2 := h.one("a:1", wire.OpSubscribe)
	if p := s2.f.(*wire.Subscribe).Prefetch; p != 4 {
		t.Fatalf("resubscribe asks %d; want the whole prefetch 4", p)
	}
	h.reply("a:1", s2.id, &wire.SubscribeOk{Prefetch: 4})
	if len(h.completions) != 0 {
		t.Fatalf("completions %+v; want none", h.completions)
	}
	h.r.Settle(sub, 1) // of the lost connection: returns nothing
	if fs := h.sent("a:1"); len(fs) != 0 {
		t.Fatalf("settling a delivery of the lost connection sent %v", ops(fs))
	}
}

// TestRouterSplitsBatchesPerLeader: a batch whose queues are led by two
// nodes goes as one frame to each, and its results come back joined in
// the caller's order.
func TestRouterSplitsBatchesPerLeader(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1", "b:1"}})
	h.r.routes["x"], h.r.routes["y"] = "a:1", "b:1"
	id, _ := h.r.Enqueue(msgs("x", "y", "x"), 0)
	h.takeDials()
	h.connect("a:1")
	h.connect("b:1")
	fa, fb := h.one("a:1", wire.OpEnqueue), h.one("b:1", wire.OpEnqueue)
	ea, eb := fa.f.(*wire.Enqueue), fb.f.(*wire.Enqueue)
	if len(ea.Messages) != 2 || len(eb.Messages) != 1 {
		t.Fatalf("a got %d messages, b %d; want 2 and 1", len(ea.Messages), len(eb.Messages))
	}
	if ea.Sequence == eb.Sequence || ea.ProducerID != testProducer || eb.ProducerID != testProducer {
		t.Fatalf("stamps %x/%d and %x/%d; want the producer's, distinct sequences", ea.ProducerID, ea.Sequence, eb.ProducerID, eb.Sequence)
	}
	h.reply("b:1", fb.id, okResults(1, 'b'))
	h.noCompletion(id)
	h.reply("a:1", fa.id, okResults(2, 'a'))
	rs := h.completion(id).Response.(*wire.EnqueueResult).Results
	var got []byte
	for _, r := range rs {
		got = append(got, r.ID[0], '0'+r.ID[1])
	}
	if string(got) != "a0b0a1" {
		t.Fatalf("joined results %q; want a0b0a1", got)
	}
}

// TestRouterMultiQueueRedirect: a frame with two queues answered
// NOT_LEADER is cut into one frame per queue, each keeping its messages'
// sequences, sent to the hint.
func TestRouterMultiQueueRedirect(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.takeDials()
	h.connect("a:1")
	id, _ := h.r.Enqueue(msgs("x", "x", "y"), 0)
	f := h.one("a:1", wire.OpEnqueue)
	seq := f.f.(*wire.Enqueue).Sequence
	h.notLeader("a:1", f.id, "b:1")
	h.takeDials()
	h.connect("b:1")
	fs := h.sent("b:1")
	if len(fs) != 2 {
		t.Fatalf("b got %v; want two Enqueues", ops(fs))
	}
	ex, ey := fs[0].f.(*wire.Enqueue), fs[1].f.(*wire.Enqueue)
	if len(ex.Messages) != 2 || ex.Sequence != seq || len(ey.Messages) != 1 || ey.Sequence != seq+2 {
		t.Fatalf("runs %d@%d and %d@%d; want 2@%d and 1@%d", len(ex.Messages), ex.Sequence, len(ey.Messages), ey.Sequence, seq, seq+2)
	}
	h.reply("b:1", fs[0].id, okResults(2, 'x'))
	h.notLeader("b:1", fs[1].id, "a:1") // y is a's after all
	fy := h.one("a:1", wire.OpEnqueue)
	if e := fy.f.(*wire.Enqueue); e.Sequence != seq+2 {
		t.Fatalf("y resent with sequence %d; want %d", e.Sequence, seq+2)
	}
	h.reply("a:1", fy.id, &wire.EnqueueResult{Results: []wire.EnqueueItemResult{{Code: wire.CodeQueueNotFound, Message: "no y"}}})
	rs := h.completion(id).Response.(*wire.EnqueueResult).Results
	if len(rs) != 3 || rs[0].ID[0] != 'x' || rs[1].ID[0] != 'x' || rs[2].Code != wire.CodeQueueNotFound {
		t.Fatalf("joined %+v; want x, x, QUEUE_NOT_FOUND", rs)
	}
	if h.r.Leader("x") != "b:1" || h.r.Leader("y") != "a:1" {
		t.Errorf("Leader(x), Leader(y) = %q, %q; want b:1, a:1", h.r.Leader("x"), h.r.Leader("y"))
	}
}

// TestRouterItemNotLeader: a node leading two queues of a frame answers
// NOT_LEADER for the items of one of them (its group is electing): those
// items are sent again after a backoff, with their sequences, and the
// caller's result joins the others' with theirs; an Ack's are too.
func TestRouterItemNotLeader(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.takeDials()
	h.connect("a:1")
	id, _ := h.r.Enqueue(msgs("x", "y", "x", "y"), 0)
	f := h.one("a:1", wire.OpEnqueue)
	seq := f.f.(*wire.Enqueue).Sequence
	nl := wire.EnqueueItemResult{Code: wire.CodeNotLeader, Message: "queue y has no leader yet"}
	ok := okResults(2, 'x').Results
	h.reply("a:1", f.id, &wire.EnqueueResult{Results: []wire.EnqueueItemResult{ok[0], nl, ok[1], nl}})
	h.noCompletion(id)
	if fs := h.sent("a:1"); len(fs) != 0 {
		t.Fatalf("resent at once: %v; want after a backoff", ops(fs))
	}
	h.tick(time.Second)
	fs := h.sent("a:1")
	if len(fs) != 2 {
		t.Fatalf("a got %v; want the two y items in two runs", ops(fs))
	}
	for i, x := range fs {
		e := x.f.(*wire.Enqueue)
		if len(e.Messages) != 1 || e.Messages[0].Queue != "y" || e.Sequence != seq+1+2*uint64(i) {
			t.Fatalf("resend %d: %d messages of %q at sequence %d; want 1 of y at %d", i, len(e.Messages), e.Messages[0].Queue, e.Sequence, seq+1+2*uint64(i))
		}
	}
	h.reply("a:1", fs[0].id, okResults(1, 'y'))
	h.reply("a:1", fs[1].id, okResults(1, 'z'))
	rs := h.completion(id).Response.(*wire.EnqueueResult).Results
	var got []byte
	for _, r := range rs {
		got = append(got, r.ID[0])
	}
	if string(got) != "xyxz" {
		t.Fatalf("joined results %q; want xyxz", got)
	}

	ack, _ := h.r.Send(&wire.Ack{Items: []wire.LeaseRef{{Queue: "x", Lease: 1}, {Queue: "y", Lease: 2}}}, 0)
	f = h.one("a:1", wire.OpAck)
	h.reply("a:1", f.id, &wire.AckResult{Results: []wire.ItemResult{{}, {Code: wire.CodeNotLeader}}})
	h.tick(time.Second)
	f = h.one("a:1", wire.OpAck)
	if items := f.f.(*wire.Ack).Items; len(items) != 1 || items[0].Queue != "y" {
		t.Fatalf("ack resent %+v; want y's", items)
	}
	h.reply("a:1", f.id, &wire.AckResult{Results: []wire.ItemResult{{}}})
	if rs := h.completion(ack).Response.(*wire.AckResult).Results; len(rs) != 2 || rs[0].Code != 0 || rs[1].Code != 0 {
		t.Fatalf("ack results %+v; want both ok", rs)
	}
}

// TestRouterGoAway: a node's GoAway moves new requests to its hint, and
// the node is closed once its requests are answered; its subscription is
// opened again at the hint.
func TestRouterGoAway(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	sub, _ := h.r.Subscribe("q", 1, nil, 0)
	h.takeDials()
	h.connect("a:1")
	s1 := h.one("a:1", wire.OpSubscribe)
	h.reply("a:1", s1.id, &wire.SubscribeOk{Prefetch: 1})
	h.completion(sub)
	ping, _ := h.r.Send(&wire.Ping{Nonce: 1}, 0)
	p := h.one("a:1", wire.OpPing)
	h.reply("a:1", 0, &wire.GoAway{Code: wire.CodeOK, Message: "draining", LeaderHint: "b:1"})
	if h.r.Home() != "b:1" {
		t.Fatalf("Home() = %q after GoAway; want the hint b:1", h.r.Home())
	}
	stats, _ := h.r.Send(&wire.QueueStats{Name: "q"}, 0)
	if d := h.takeDials(); !slices.Equal(d, []string{"b:1"}) {
		t.Fatalf("dials %v; want b:1", d)
	}
	if len(h.closes) != 0 {
		t.Fatalf("closed %v with a Ping in flight", h.closes)
	}
	h.reply("a:1", p.id, &wire.Pong{Nonce: 1})
	h.completion(ping)
	if !slices.Equal(h.closes, []string{"a:1"}) {
		t.Fatalf("closes %v; want a:1 once answered", h.closes)
	}
	h.connect("b:1")
	fs := h.sent("b:1")
	if len(fs) != 2 || fs[0].f.Opcode() != wire.OpQueueStats || fs[1].f.Opcode() != wire.OpSubscribe {
		t.Fatalf("b got %v; want QueueStats, Subscribe", ops(fs))
	}
	h.reply("b:1", fs[0].id, &wire.QueueStatsResult{Name: "q"})
	h.completion(stats)
	h.reply("b:1", fs[1].id, &wire.SubscribeOk{Prefetch: 1})
	if len(h.ended) != 0 || len(h.completions) != 0 {
		t.Fatalf("ended %+v, completions %+v; want the subscription moved silently", h.ended, h.completions)
	}
}

// TestRouterUnsubscribe covers Unsubscribe while open, while being opened
// again elsewhere, and when the subscription ends with its connection.
func TestRouterUnsubscribe(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	h.takeDials()
	h.connect("a:1")
	open := func() (uint32, uint32) {
		sub, _ := h.r.Subscribe("q", 1, nil, 0)
		f := h.one("a:1", wire.OpSubscribe)
		h.reply("a:1", f.id, &wire.SubscribeOk{Prefetch: 1})
		h.completion(sub)
		return sub, f.id
	}
	ended := func(sub uint32) {
		t.Helper()
		h.drain()
		if len(h.ended) != 1 || h.ended[0].Subscription != sub || h.ended[0].Err != nil {
			t.Fatalf("ended %+v; want subscription %d with nil", h.ended, sub)
		}
		h.ended = nil
	}

	sub, connSub := open()
	un, _ := h.r.Unsubscribe(sub)
	u := h.one("a:1", wire.OpUnsubscribe)
	if u.f.(*wire.Unsubscribe).Subscription != connSub {
		t.Fatalf("Unsubscribe of %d; want the connection's %d", u.f.(*wire.Unsubscribe).Subscription, connSub)
	}
	h.reply("a:1", u.id, &wire.UnsubscribeOk{})
	if cp := h.completion(un); cp.Err != nil || cp.Request.(*wire.Unsubscribe).Subscription != sub {
		t.Fatalf("Unsubscribe completion %+v", cp)
	}
	ended(sub)

	// Ended by NOT_LEADER with no hint: waiting to open again.
	sub, connSub = open()
	h.notLeader("a:1", connSub, "")
	un, _ = h.r.Unsubscribe(sub)
	if cp := h.completion(un); cp.Err != nil {
		t.Fatal(cp.Err)
	}
	ended(sub)
	h.tick(time.Second)
	if fs := h.sent("a:1"); len(fs) != 0 {
		t.Fatalf("sent %v for a closed subscription", ops(fs))
	}

	// The connection fails with the Unsubscribe in flight.
	sub, _ = open()
	un, _ = h.r.Unsubscribe(sub)
	h.one("a:1", wire.OpUnsubscribe)
	h.r.ConnLost("a:1", errors.New("EOF"))
	if cp := h.completion(un); cp.Err != nil {
		t.Fatalf("Unsubscribe lost with its connection: %v; want success", cp.Err)
	}
	ended(sub)
}

// TestRouterDeadlineWhileUnreachable: a request waiting for a node that
// cannot be dialled fails at its deadline.
func TestRouterDeadlineWhileUnreachable(t *testing.T) {
	h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1"}})
	id, _ := h.r.Send(&wire.ListQueues{}, h.now.Add(time.Second))
	h.takeDials()
	h.r.DialFailed("a:1", errors.New("refused"))
	for len(h.completions) == 0 {
		if h.deadline == 0 {
			t.Fatal("no Deadline while a request waits")
		}
		h.tick(time.Duration(h.deadline - h.now))
		for _, a := range h.takeDials() {
			h.r.DialFailed(a, errors.New("refused"))
		}
	}
	if cp := h.completion(id); !errors.Is(cp.Err, ErrDeadlineExceeded) {
		t.Fatalf("completion %v; want ErrDeadlineExceeded", cp.Err)
	}
}

// TestRouterDialBackoffJitter: the waits between dials of a failing node
// grow to DialMax, are drawn from the seed, and differ between seeds.
func TestRouterDialBackoffJitter(t *testing.T) {
	waits := func(seed uint64) []time.Duration {
		r := NewRouter(RouterConfig{JitterSeed: seed, DialMin: 100 * time.Millisecond, DialMax: time.Second})
		var out []time.Duration
		for n := 1; n <= 8; n++ {
			d := r.dialBackoff(n)
			ceil := min(time.Second, 100*time.Millisecond<<(n-1))
			if d <= 0 || d > ceil {
				t.Fatalf("wait %d = %v; want in (0, %v]", n, d, ceil)
			}
			out = append(out, d)
		}
		return out
	}
	if a, b := waits(1), waits(1); !slices.Equal(a, b) {
		t.Errorf("same seed, waits %v and %v", a, b)
	}
	if a, b := waits(1), waits(2); slices.Equal(a, b) {
		t.Errorf("seeds 1 and 2 gave the same waits %v", a)
	}
}

// TestRouterDeterministic: the same calls give the same Readys.
func TestRouterDeterministic(t *testing.T) {
	run := func() []byte {
		h := newRouterHarness(t, RouterConfig{Seeds: []string{"a:1", "b:1"}, JitterSeed: 7})
		var log bytes.Buffer
		record := func() {
			for h.r.HasReady() {
				rd := h.r.Ready()
				fmt.Fprintf(&log, "dial=%v close=%v dl=%d\n", rd.Dial, rd.Close, rd.Deadline)
				for _, w := range rd.Writes {
					fmt.Fprintf(&log, "%s %x\n", w.Addr, w.Out)
				}
				for _, cp := range rd.Completions {
					fmt.Fprintf(&log, "cp %d %v %v\n", cp.RequestID, cp.Response, cp.Err)
				}
				h.r.Advance(rd)
			}
		}
		h.r.Subscribe("q", 3, nil, 0)
		h.r.Enqueue(msgs("q", "r", "q"), 0)
		record()
		h.r.Connected("a:1")
		record()
		h.r.Receive("a:1", wire.AppendFrame(nil, 1, &wire.HandshakeOk{Version: 1, MaxBatchSize: 2}))
		record()
		h.r.Receive("a:1", wire.AppendFrame(nil, 3, &wire.ErrorFrame{Code: wire.CodeNotLeader, LeaderHint: "b:1"}))
		h.r.Receive("a:1", wire.AppendFrame(nil, 2, &wire.ErrorFrame{Code: wire.CodeNotLeader}))
		record()
		h.r.ConnLost("a:1", errors.New("EOF"))
		h.now += Time(time.Second)
		h.r.Tick(h.now)
		record()
		return log.Bytes()
	}
	a, b := run(), run()
	if !bytes.Equal(a, b) {
		t.Fatalf("two runs differ:\n%s\n---\n%s", a, b)
	}
}
