package fila

import (
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// fakeCluster plays the nodes of a cluster over net.Pipe: its dial
// answers each connection's handshake (node ID: the address) and hands
// the broker's end to the test on the node's channel.
type fakeCluster struct {
	t     *testing.T
	mu    sync.Mutex
	nodes map[string]chan *pipeBroker
	down  map[string]bool // dials refused
}

func newFakeCluster(t *testing.T, addrs ...string) *fakeCluster {
	fc := &fakeCluster{t: t, nodes: map[string]chan *pipeBroker{}, down: map[string]bool{}}
	for _, a := range addrs {
		fc.nodes[a] = make(chan *pipeBroker, 4)
	}
	return fc
}

func (fc *fakeCluster) dial(_ context.Context, addr string) (net.Conn, error) {
	fc.mu.Lock()
	ch, ok := fc.nodes[addr]
	down := fc.down[addr]
	fc.mu.Unlock()
	if !ok || down {
		return nil, errors.New("connection refused")
	}
	cnc, bnc := net.Pipe()
	// A test that goes wrong fails on a read deadline, not a hang.
	bnc.SetDeadline(time.Now().Add(time.Minute))
	b := &pipeBroker{t: fc.t, nc: bnc}
	fc.t.Cleanup(func() { bnc.Close() })
	go func() {
		h, _ := b.read()
		b.write(h.RequestID, &wire.HandshakeOk{Version: wire.ProtocolVersion, NodeID: addr,
			MaxFrameSize: wire.DefaultMaxFrameSize, MaxBatchSize: 4096})
		ch <- b
	}()
	return cnc, nil
}

// setDown makes dials of addr fail, or succeed again.
func (fc *fakeCluster) setDown(addr string, down bool) {
	fc.mu.Lock()
	fc.down[addr] = down
	fc.mu.Unlock()
}

// accept returns the next connection the client made to addr.
func (fc *fakeCluster) accept(addr string) *pipeBroker {
	fc.t.Helper()
	select {
	case b := <-fc.nodes[addr]:
		return b
	case <-time.After(time.Minute):
		fc.t.Fatalf("the client did not connect to %s", addr)
		return nil
	}
}

func (fc *fakeCluster) connect(ctx context.Context, addr string, opts ...Option) *Client {
	fc.t.Helper()
	opts = append([]Option{WithKeepalive(-1), WithDialer(fc.dial), WithReconnect(time.Millisecond, 10*time.Millisecond)}, opts...)
	c, err := Connect(ctx, addr, opts...)
	if err != nil {
		fc.t.Fatal(err)
	}
	fc.t.Cleanup(c.stop)
	return c
}

// readAs reads the next frame, which must be an op, and decodes it.
func readAs[F any, PF interface {
	*F
	wire.Frame
}](t *testing.T, b *pipeBroker) (uint32, PF) {
	t.Helper()
	h, body := b.read()
	var f PF = new(F)
	if h.Opcode != f.Opcode() {
		t.Fatalf("broker read %v; want %v", h.Opcode, f.Opcode())
	}
	if err := f.Decode(body); err != nil {
		t.Fatalf("decode %v: %v", h.Opcode, err)
	}
	return h.RequestID, f
}

type sendOutcome struct {
	id  ID
	err error
}

func sendAsync(ctx context.Context, c *Client, queue, payload string) chan sendOutcome {
	ch := make(chan sendOutcome, 1)
	go func() {
		id, err := c.Producer().Enqueue(ctx, queue, []byte(payload))
		ch <- sendOutcome{id, err}
	}()
	return ch
}

// TestProducerFollowsRedirect: node a answers an Enqueue with NOT_LEADER
// naming b; the client connects to b and sends the same frame there (same
// producer ID and sequence), and sends the queue's next Enqueue straight
// to b.
func TestProducerFollowsRedirect(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := newFakeCluster(t, "a:1", "b:1")
	c := fc.connect(ctx, "a:1")
	a := fc.accept("a:1")

	sent := sendAsync(ctx, c, "orders", "x")
	id, e := readAs[wire.Enqueue](t, a)
	if e.ProducerID == ([16]byte{}) || e.Sequence == 0 {
		t.Fatalf("Enqueue not stamped: producer %x, sequence %d", e.ProducerID, e.Sequence)
	}
	a.write(id, &wire.ErrorFrame{Code: wire.CodeNotLeader, Message: "led by b", LeaderHint: "b:1"})

	b := fc.accept("b:1")
	id2, e2 := readAs[wire.Enqueue](t, b)
	if e2.ProducerID != e.ProducerID || e2.Sequence != e.Sequence || len(e2.Messages) != 1 || string(e2.Messages[0].Payload) != "x" {
		t.Fatalf("redirected Enqueue %x/%d %+v; want a's frame %x/%d", e2.ProducerID, e2.Sequence, e2.Messages, e.ProducerID, e.Sequence)
	}
	b.write(id2, &wire.EnqueueResult{Results: []wire.EnqueueItemResult{{Code: wire.CodeOK, ID: [16]byte{0xb}}}})
	if r := <-sent; r.err != nil || r.id != (ID{0xb}) {
		t.Fatalf("Enqueue() = %v, %v; want b's ID", r.id, r.err)
	}

	sent = sendAsync(ctx, c, "orders", "y")
	id3, e3 := readAs[wire.Enqueue](t, b)
	if e3.Sequence != e.Sequence+1 || e3.ProducerID != e.ProducerID {
		t.Fatalf("next Enqueue %x/%d; want %x/%d", e3.ProducerID, e3.Sequence, e.ProducerID, e.Sequence+1)
	}
	b.write(id3, &wire.EnqueueResult{Results: []wire.EnqueueItemResult{{Code: wire.CodeOK, ID: [16]byte{0xc}}}})
	if r := <-sent; r.err != nil {
		t.Fatal(r.err)
	}
	if n := c.Stats().Reconnects; n != 1 {
		t.Errorf("Stats().Reconnects = %d; want 1 (the dial of b)", n)
	}
}

// TestConsumerResubscribesAfterNotLeader: a subscription ended by node a
// with NOT_LEADER is opened on b with the credit the application's
// unsettled deliveries leave; its channel carries deliveries from both;
// acking a delivery from a returns its credit on b, and goes to b.
func TestConsumerResubscribesAfterNotLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := newFakeCluster(t, "a:1", "b:1")
	c := fc.connect(ctx, "a:1")
	a := fc.accept("a:1")

	subscribed := make(chan *Subscription, 1)
	go func() {
		sub, err := c.Consumer().Subscribe(ctx, "jobs", Prefetch(4))
		if err != nil {
			t.Error(err)
		}
		subscribed <- sub
	}()
	subA, s := readAs[wire.Subscribe](t, a)
	if s.Queue != "jobs" || s.Prefetch != 4 {
		t.Fatalf("Subscribe %+v; want jobs, 4", s)
	}
	a.write(subA, &wire.SubscribeOk{Prefetch: 4})
	sub := <-subscribed
	if sub == nil {
		t.FailNow()
	}
	lease := uint64(time.Now().Add(time.Hour).UnixMilli())
	msg := func(n byte) wire.DeliveredMessage {
		return wire.DeliveredMessage{ID: [16]byte{n}, Queue: "jobs", Payload: []byte{n}, Attempt: 1, Lease: uint64(n), LeaseDeadlineAtMS: lease}
	}
	a.write(subA, &wire.Delivery{Messages: []wire.DeliveredMessage{msg(1), msg(2)}})
	d1, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}

	// a loses the queue's leadership.
	a.write(subA, &wire.ErrorFrame{Code: wire.CodeNotLeader, Message: "leadership moved", LeaderHint: "b:1"})
	b := fc.accept("b:1")
	subB, s2 := readAs[wire.Subscribe](t, b)
	if s2.Queue != "jobs" || s2.Prefetch != 2 {
		t.Fatalf("resubscribe %+v; want jobs with prefetch 2 (4 less 2 unsettled)", s2)
	}
	b.write(subB, &wire.SubscribeOk{Prefetch: 2})
	b.write(subB, &wire.Delivery{Messages: []wire.DeliveredMessage{msg(3)}})
	for _, want := range []byte{2, 3} {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("Next() = %v; want delivery %d", err, want)
		}
		if d.Payload()[0] != want {
			t.Fatalf("delivery %d; want %d", d.Payload()[0], want)
		}
	}

	acked := make(chan error, 1)
	go func() { acked <- d1.Ack(ctx) }()
	_, cr := readAs[wire.Credit](t, b)
	if cr.Subscription != subB || cr.Credits != 1 {
		t.Fatalf("Credit %+v; want 1 for b's subscription %d", cr, subB)
	}
	ackID, ack := readAs[wire.Ack](t, b)
	if len(ack.Items) != 1 || ack.Items[0].Lease != 1 {
		t.Fatalf("Ack %+v; want a's delivery 1", ack.Items)
	}
	b.write(ackID, &wire.AckResult{Results: []wire.ItemResult{{Code: wire.CodeOK}}})
	if err := <-acked; err != nil {
		t.Fatalf("Ack() = %v", err)
	}
	if err := sub.Err(); err != nil {
		t.Fatalf("Err() = %v; want the subscription open", err)
	}
}

// TestEnqueueResentAfterConnectionDrop: the connection drops with an
// Enqueue in flight; the client reconnects and sends the same frame, same
// producer ID and sequence, and the broker's answer to it (a duplicate)
// completes the Send.
func TestEnqueueResentAfterConnectionDrop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := newFakeCluster(t, "a:1")
	c := fc.connect(ctx, "a:1")
	a := fc.accept("a:1")

	sent := sendAsync(ctx, c, "orders", "x")
	_, e := readAs[wire.Enqueue](t, a)
	a.nc.Close() // stored, but the answer never leaves

	a2 := fc.accept("a:1")
	id, e2 := readAs[wire.Enqueue](t, a2)
	if e2.ProducerID != e.ProducerID || e2.Sequence != e.Sequence {
		t.Fatalf("resent Enqueue %x/%d; want %x/%d", e2.ProducerID, e2.Sequence, e.ProducerID, e.Sequence)
	}
	a2.write(id, &wire.EnqueueResult{Results: []wire.EnqueueItemResult{{Code: wire.CodeOK, ID: [16]byte{7}, Duplicate: true}}})
	if r := <-sent; r.err != nil || r.id != (ID{7}) {
		t.Fatalf("Enqueue() = %v, %v; want the stored message's ID", r.id, r.err)
	}
	if n := c.Stats().Reconnects; n != 1 {
		t.Errorf("Stats().Reconnects = %d; want 1", n)
	}
}

// TestConnectSeeds: Connect takes comma-separated seeds and uses the
// first that accepts a connection; when none does, the error names each.
func TestConnectSeeds(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := newFakeCluster(t, "a:1", "b:1")
	fc.setDown("a:1", true)
	c := fc.connect(ctx, " a:1, b:1 ,")
	fc.accept("b:1")
	if got := c.NodeID(); got != "b:1" {
		t.Errorf("NodeID() = %q; want b:1", got)
	}
	fc.setDown("b:1", true)
	_, err := Connect(ctx, "a:1,b:1", WithDialer(fc.dial))
	if err == nil || !strings.HasPrefix(err.Error(), "fila: connect a:1,b:1: a:1: connection refused") || !strings.Contains(err.Error(), "b:1: connection refused") {
		t.Errorf("Connect() with every seed down = %v; want both refusals", err)
	}
	if got := splitSeeds("a:1,,a:1, b:1"); strings.Join(got, " ") != "a:1 b:1" {
		t.Errorf("splitSeeds() = %q; want [a:1 b:1]", got)
	}
}

// TestSendsBatchPerLeader: coalescing is per leader. With an Enqueue in
// flight to a, unanswered, a Send to a queue led by b goes to b at once
// instead of waiting for a's answer, as it would behind one frame in
// flight for the whole client.
func TestSendsBatchPerLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := newFakeCluster(t, "a:1", "b:1")
	c := fc.connect(ctx, "a:1")
	a := fc.accept("a:1")
	ok := func(id [16]byte) *wire.EnqueueResult {
		return &wire.EnqueueResult{Results: []wire.EnqueueItemResult{{Code: wire.CodeOK, ID: id}}}
	}

	// Learn that b leads q2.
	sent := sendAsync(ctx, c, "q2", "x")
	id, _ := readAs[wire.Enqueue](t, a)
	a.write(id, &wire.ErrorFrame{Code: wire.CodeNotLeader, LeaderHint: "b:1"})
	b := fc.accept("b:1")
	id, _ = readAs[wire.Enqueue](t, b)
	b.write(id, ok([16]byte{1}))
	if r := <-sent; r.err != nil {
		t.Fatal(r.err)
	}

	toA := sendAsync(ctx, c, "q1", "y")
	idA, ea := readAs[wire.Enqueue](t, a) // in flight, not answered yet
	toB := sendAsync(ctx, c, "q2", "z")
	idB, eb := readAs[wire.Enqueue](t, b)
	if ea.Messages[0].Queue != "q1" || eb.Messages[0].Queue != "q2" {
		t.Fatalf("a got %s, b got %s; want q1 and q2", ea.Messages[0].Queue, eb.Messages[0].Queue)
	}
	b.write(idB, ok([16]byte{3}))
	if r := <-toB; r.err != nil || r.id != (ID{3}) {
		t.Fatalf("Enqueue(q2) = %v, %v", r.id, r.err)
	}
	a.write(idA, ok([16]byte{2}))
	if r := <-toA; r.err != nil || r.id != (ID{2}) {
		t.Fatalf("Enqueue(q1) = %v, %v", r.id, r.err)
	}
}

// TestClusterStatusAsksTheFirstNode: ClusterStatus is not a meta-group
// operation. With the meta group's leader known to be b (a CreateQueue
// redirected there), it still goes to a, the first seed, which answers
// for itself; every field of the answer reaches the caller.
func TestClusterStatusAsksTheFirstNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := newFakeCluster(t, "a:1", "b:1")
	c := fc.connect(ctx, "a:1,b:1")
	a := fc.accept("a:1")

	created := make(chan error, 1)
	go func() { created <- c.Admin().CreateQueue(ctx, NewQueueSpec("orders")) }()
	id, _ := readAs[wire.CreateQueue](t, a)
	a.write(id, &wire.ErrorFrame{Code: wire.CodeNotLeader, Message: "meta led by b", LeaderHint: "b:1"})
	b := fc.accept("b:1")
	id, _ = readAs[wire.CreateQueue](t, b)
	b.write(id, &wire.CreateQueueOk{Name: "orders", DeadLetterQueue: "orders.dlq"})
	if err := <-created; err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		st  *ClusterStatus
		err error
	}
	got := make(chan outcome, 1)
	go func() {
		st, err := c.Admin().ClusterStatus(ctx)
		got <- outcome{st, err}
	}()
	id, _ = readAs[wire.ClusterStatus](t, a)
	a.write(id, &wire.ClusterStatusResult{
		NodeID: 1,
		Nodes: []wire.ClusterNode{
			{NodeID: 1, Addr: "a:1", PeerAddr: "a:2", Connected: true, State: "active"},
			{NodeID: 2, Addr: "b:1", PeerAddr: "b:2", State: "draining"},
			{NodeID: 3, Addr: "c:1", PeerAddr: "c:2", Connected: true, State: "drained"},
		},
		Groups: []wire.ClusterGroup{
			{GroupID: 1, LeaderNodeID: 2, Term: 3, Commit: 9, Applied: 8, LastIndex: 9,
				Replicas: []wire.ClusterReplica{{NodeID: 1}, {NodeID: 2}}},
			{GroupID: 2, Queue: "orders", LeaderNodeID: 1, Term: 2, Commit: 5, Applied: 5, LastIndex: 7,
				Replicas: []wire.ClusterReplica{{NodeID: 1, Known: true, Match: 7}, {NodeID: 2, Known: true, Match: 4, Lag: 3}, {NodeID: 3, Known: true, Match: 1, Lag: 6, Learner: true}},
				Quiesced: true, Target: []uint64{1, 3}},
		},
	})
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	want := &ClusterStatus{
		NodeID: 1,
		Nodes: []ClusterNode{
			{ID: 1, Addr: "a:1", PeerAddr: "a:2", Connected: true, State: NodeActive},
			{ID: 2, Addr: "b:1", PeerAddr: "b:2", State: NodeDraining},
			{ID: 3, Addr: "c:1", PeerAddr: "c:2", Connected: true, State: NodeDrained},
		},
		Groups: []ClusterGroup{
			{ID: 1, Leader: 2, Term: 3, Commit: 9, Applied: 8, LastIndex: 9, Replicas: []ClusterReplica{{NodeID: 1}, {NodeID: 2}}},
			{ID: 2, Queue: "orders", Leader: 1, Term: 2, Commit: 5, Applied: 5, LastIndex: 7,
				Replicas: []ClusterReplica{{NodeID: 1, Known: true, Match: 7}, {NodeID: 2, Known: true, Match: 4, Lag: 3}, {NodeID: 3, Known: true, Match: 1, Lag: 6, Learner: true}},
				Quiesced: true, Target: []uint64{1, 3}},
		},
	}
	if !reflect.DeepEqual(r.st, want) || !r.st.Clustered() {
		t.Errorf("ClusterStatus() = %+v; want %+v", r.st, want)
	}
}

// TestMoveQueueAsksTheFirstNode: MoveQueue, like ClusterStatus, goes to
// the first seed even with the meta group's leader known to be another
// node, carries the queue and the node IDs as given, and maps the
// broker's answers: success, QUEUE_NOT_FOUND as *MoveQueueError, and
// NOT_SUPPORTED (a single node) or INVALID_ARGUMENT as *StatusError.
func TestMoveQueueAsksTheFirstNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := newFakeCluster(t, "a:1", "b:1")
	c := fc.connect(ctx, "a:1,b:1")
	a := fc.accept("a:1")

	created := make(chan error, 1)
	go func() { created <- c.Admin().CreateQueue(ctx, NewQueueSpec("orders")) }()
	id, _ := readAs[wire.CreateQueue](t, a)
	a.write(id, &wire.ErrorFrame{Code: wire.CodeNotLeader, Message: "meta led by b", LeaderHint: "b:1"})
	b := fc.accept("b:1")
	id, _ = readAs[wire.CreateQueue](t, b)
	b.write(id, &wire.CreateQueueOk{Name: "orders", DeadLetterQueue: "orders.dlq"})
	if err := <-created; err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name   string
		answer wire.Frame
		check  func(err error) bool
	}{
		{"planned", &wire.MoveQueueResult{}, func(err error) bool { return err == nil }},
		{"no such queue", &wire.ErrorFrame{Code: wire.CodeQueueNotFound, Message: "queue not found"}, func(err error) bool {
			var me *MoveQueueError
			return errors.As(err, &me) && me.Code == MoveQueueQueueNotFound && me.Target == "orders" && errors.Is(err, ErrQueueNotFound)
		}},
		{"single node", &wire.ErrorFrame{Code: wire.CodeNotSupported, Message: "not supported"}, func(err error) bool {
			var se *StatusError
			return errors.As(err, &se) && se.Code == wire.CodeNotSupported && errors.Is(err, ErrNotSupported)
		}},
		{"not a member", &wire.ErrorFrame{Code: wire.CodeInvalidArgument, Message: "node 9 is not a member"}, func(err error) bool {
			return errors.Is(err, ErrInvalidArgument) && strings.Contains(err.Error(), "node 9 is not a member")
		}},
	} {
		done := make(chan error, 1)
		go func() { done <- c.Admin().MoveQueue(ctx, "orders", 3, 1, 2) }()
		id, m := readAs[wire.MoveQueue](t, a)
		if m.Queue != "orders" || !reflect.DeepEqual(m.Replicas, []uint64{3, 1, 2}) {
			t.Fatalf("%s: MoveQueue sent %+v; want orders to 3, 1, 2", tc.name, m)
		}
		a.write(id, tc.answer)
		if err := <-done; !tc.check(err) {
			t.Errorf("%s: MoveQueue() = %#v (%v)", tc.name, err, err)
		}
	}
}

// TestDrainNodeAsksTheFirstNode: DrainNode and UndrainNode, like
// ClusterStatus, go to the first seed even with the meta group's leader
// known to be another node, carry the node ID and undo as given, and map
// the broker's answers: the number of queues planned, and NOT_SUPPORTED
// (a single node) or INVALID_ARGUMENT as *StatusError naming the node.
func TestDrainNodeAsksTheFirstNode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := newFakeCluster(t, "a:1", "b:1")
	c := fc.connect(ctx, "a:1,b:1")
	a := fc.accept("a:1")

	created := make(chan error, 1)
	go func() { created <- c.Admin().CreateQueue(ctx, NewQueueSpec("orders")) }()
	id, _ := readAs[wire.CreateQueue](t, a)
	a.write(id, &wire.ErrorFrame{Code: wire.CodeNotLeader, Message: "meta led by b", LeaderHint: "b:1"})
	b := fc.accept("b:1")
	id, _ = readAs[wire.CreateQueue](t, b)
	b.write(id, &wire.CreateQueueOk{Name: "orders", DeadLetterQueue: "orders.dlq"})
	if err := <-created; err != nil {
		t.Fatal(err)
	}

	type outcome struct {
		queues int
		err    error
	}
	for _, tc := range []struct {
		name   string
		undo   bool
		answer wire.Frame
		check  func(o outcome) bool
	}{
		{"planned", false, &wire.DrainNodeResult{Queues: 7}, func(o outcome) bool { return o.err == nil && o.queues == 7 }},
		{"nothing left", false, &wire.DrainNodeResult{}, func(o outcome) bool { return o.err == nil && o.queues == 0 }},
		{"undone", true, &wire.DrainNodeResult{}, func(o outcome) bool { return o.err == nil }},
		{"single node", false, &wire.ErrorFrame{Code: wire.CodeNotSupported, Message: "not supported"}, func(o outcome) bool {
			var se *StatusError
			return errors.As(o.err, &se) && se.Code == wire.CodeNotSupported && se.Op == "drain node" && se.Target == "2" &&
				errors.Is(o.err, ErrNotSupported) && o.err.Error() == "fila: drain node 2: not supported"
		}},
		{"single node, undo", true, &wire.ErrorFrame{Code: wire.CodeNotSupported, Message: "not supported"}, func(o outcome) bool {
			return errors.Is(o.err, ErrNotSupported)
		}},
		{"the last active member", false, &wire.ErrorFrame{Code: wire.CodeInvalidArgument, Message: "drain node 2: no other member is left that is not draining: invalid argument"}, func(o outcome) bool {
			return errors.Is(o.err, ErrInvalidArgument) && o.err.Error() == "fila: drain node 2: no other member is left that is not draining: invalid argument"
		}},
		{"unavailable", false, &wire.ErrorFrame{Code: wire.CodeUnavailable, Message: "no meta leader"}, func(o outcome) bool {
			return errors.Is(o.err, ErrUnavailable) && o.queues == 0
		}},
	} {
		done := make(chan outcome, 1)
		go func() {
			if tc.undo {
				done <- outcome{err: c.Admin().UndrainNode(ctx, 2)}
				return
			}
			q, err := c.Admin().DrainNode(ctx, 2)
			done <- outcome{q, err}
		}()
		id, m := readAs[wire.DrainNode](t, a)
		if m.NodeID != 2 || m.Undo != tc.undo {
			t.Fatalf("%s: DrainNode sent %+v; want node 2, undo %v", tc.name, m, tc.undo)
		}
		a.write(id, tc.answer)
		if o := <-done; !tc.check(o) {
			t.Errorf("%s: = %d, %#v (%v)", tc.name, o.queues, o.err, o.err)
		}
	}
}

// TestMembershipOps: Rebalance, AddNode and RemoveNode go to the first
// seed, carry their arguments, and map the broker's answers: the plan,
// and errors as *StatusError naming the operation and node.
func TestMembershipOps(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	fc := newFakeCluster(t, "a:1", "b:1")
	c := fc.connect(ctx, "a:1,b:1")
	a := fc.accept("a:1")
	admin := c.Admin()

	planned := make(chan *RebalancePlan, 1)
	go func() {
		p, err := admin.Rebalance(ctx, true)
		if err != nil {
			t.Error(err)
		}
		planned <- p
	}()
	id, rb := readAs[wire.Rebalance](t, a)
	if !rb.DryRun {
		t.Errorf("Rebalance(dry run) sent %+v", rb)
	}
	a.write(id, &wire.RebalanceResult{
		Moves: []wire.RebalanceMove{{Queue: "orders", FromNodeID: 1, ToNodeID: 4}},
		Leads: []wire.RebalanceLead{{Queue: "orders", NodeID: 4}},
	})
	want := &RebalancePlan{Moves: []RebalanceMove{{"orders", 1, 4}}, Leads: []RebalanceLead{{"orders", 4}}}
	if got := <-planned; !reflect.DeepEqual(got, want) {
		t.Errorf("Rebalance = %+v; want %+v", got, want)
	}

	added := make(chan error, 1)
	go func() { added <- admin.AddNode(ctx, 4, "10.0.0.4:5556") }()
	id, an := readAs[wire.AddNode](t, a)
	if an.NodeID != 4 || an.PeerAddr != "10.0.0.4:5556" {
		t.Errorf("AddNode sent %+v", an)
	}
	a.write(id, &wire.ErrorFrame{Code: wire.CodeInvalidArgument, Message: "add node 4: it was removed from the cluster, and node IDs are never reused: invalid argument"})
	var se *StatusError
	if err := <-added; !errors.As(err, &se) || se.Op != "add node" || se.Target != "4" || !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("AddNode of a removed node = %#v (%v)", err, err)
	}

	removed := make(chan error, 1)
	go func() { removed <- admin.RemoveNode(ctx, 3) }()
	id, rn := readAs[wire.RemoveNode](t, a)
	if rn.NodeID != 3 {
		t.Errorf("RemoveNode sent %+v", rn)
	}
	a.write(id, &wire.RemoveNodeResult{})
	if err := <-removed; err != nil {
		t.Errorf("RemoveNode = %v", err)
	}
}
