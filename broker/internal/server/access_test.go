package server

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// memKV is the auth store's KV in memory.
type memKV struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (kv *memKV) Put(k, v []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	kv.m[string(k)] = bytes.Clone(v)
	return nil
}

func (kv *memKV) Delete(k []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	delete(kv.m, string(k))
	return nil
}

func (kv *memKV) Scan(prefix []byte, fn func(k, v []byte) error) error { return nil }

// authBroker runs a broker with auth on, in process, over memory storage.
type authBroker struct {
	srv  *Server
	sh   *shard.Shard
	n    *node.Node
	keys *auth.Store
	addr string
}

func startAuthBroker(t *testing.T) *authBroker {
	t.Helper()
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	sh, err := shard.Open(shard.Config{Logger: log}, store.NewMem())
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.Open(&memKV{m: map[string][]byte{}}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	n := node.New(node.Config{NodeID: "test", Keys: keys, Logger: log}, sh)
	srv := New(Config{NodeID: "test", Logger: log, Auth: keys, RequireAuth: true}, n)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() {
		srv.Shutdown(context.Background())
		sh.Close()
	})
	return &authBroker{srv: srv, sh: sh, n: n, keys: keys, addr: ln.Addr().String()}
}

// createQueue creates a queue through the node, as an admin.
func (b *authBroker) createQueue(t *testing.T, spec node.QueueSpec) {
	t.Helper()
	done := make(chan node.Result, 1)
	if err := b.n.CreateQueue(context.Background(), auth.Unrestricted(), spec, 0, func(r node.Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.Err != nil {
		t.Fatal(r.Err)
	}
}

// stats reads a queue's statistics.
func (b *authBroker) stats(t *testing.T, queue string) sched.QueueStats {
	t.Helper()
	done := make(chan shard.Result, 1)
	if err := b.sh.QueueStats(context.Background(), queue, 0, func(r shard.Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	return (<-done).Stats
}

// frameConn speaks frames over TCP.
type frameConn struct {
	t  *testing.T
	nc net.Conn
	fr *wire.FrameReader
}

func dialFrames(t *testing.T, addr, key string) *frameConn {
	t.Helper()
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	fc := &frameConn{t: t, nc: nc, fr: wire.NewFrameReader(0, 0)}
	fc.send(1, &wire.Handshake{MinVersion: 1, MaxVersion: 1, ClientName: "test", APIKey: key})
	if h, f := fc.recv(); h.Opcode != wire.OpHandshakeOk {
		t.Fatalf("handshake answered by %v %+v", h.Opcode, f)
	}
	return fc
}

func (fc *frameConn) send(id uint32, f wire.Frame) {
	fc.t.Helper()
	if _, err := fc.nc.Write(wire.AppendFrame(nil, id, f)); err != nil {
		fc.t.Fatal(err)
	}
}

// recv returns the next frame; a broker that sends nothing for a minute
// fails the test rather than hang it.
func (fc *frameConn) recv() (wire.Header, wire.Frame) {
	fc.t.Helper()
	buf := make([]byte, 64<<10)
	fc.nc.SetReadDeadline(time.Now().Add(time.Minute))
	for {
		h, body, ok, err := fc.fr.Next()
		if err != nil {
			fc.t.Fatal(err)
		}
		if ok {
			f, err := wire.DecodeFrame(h.Opcode, bytes.Clone(body))
			if err != nil {
				fc.t.Fatal(err)
			}
			return h, f
		}
		n, err := fc.nc.Read(buf)
		fc.fr.Feed(buf[:n])
		if err != nil && n == 0 {
			fc.t.Fatalf("recv: %v", err)
		}
	}
}

// TestCreditChecksConsume checks the Credit frame on its own: while the
// store's notification of an ACL change is held back, a Credit for a
// subscription whose key lost consume ends the subscription with
// FORBIDDEN and releases its lease.
func TestCreditChecksConsume(t *testing.T) {
	b := startAuthBroker(t)
	b.createQueue(t, node.QueueSpec{Name: "q", VisibilityTimeout: time.Hour})
	id, secret, err := b.keys.Create("worker", []auth.Permission{{Kind: auth.Consume, Pattern: "q"}, {Kind: auth.Produce, Pattern: "q"}})
	if err != nil {
		t.Fatal(err)
	}
	fc := dialFrames(t, b.addr, secret)
	fc.send(3, &wire.Subscribe{Queue: "q", Prefetch: 1})
	if h, f := fc.recv(); h.Opcode != wire.OpSubscribeOk {
		t.Fatalf("Subscribe answered by %v %+v", h.Opcode, f)
	}
	fc.send(4, &wire.Enqueue{Messages: []wire.EnqueueMessage{{Queue: "q", Payload: []byte("x")}}})
	for got := 0; got < 2; got++ { // the EnqueueResult and the Delivery, in either order
		if h, f := fc.recv(); h.Opcode != wire.OpEnqueueResult && h.Opcode != wire.OpDelivery {
			t.Fatalf("got %v %+v; want the EnqueueResult and the Delivery", h.Opcode, f)
		}
	}

	// Hold the notification: keyChanged waits for keysMu.
	b.srv.keysMu.Lock()
	changed := make(chan error, 1)
	go func() { changed <- b.keys.SetACL(id, []auth.Permission{{Kind: auth.Produce, Pattern: "q"}}) }()
	for { // the new ACL is visible to checks before the listeners run
		if ps, _ := b.keys.GetACL(id); len(ps) == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	fc.send(0, &wire.Credit{Subscription: 3, Credits: 5})
	h, f := fc.recv()
	ef, ok := f.(*wire.ErrorFrame)
	if !ok || h.RequestID != 3 || ef.Code != wire.CodeForbidden || !strings.Contains(ef.Message, `no longer holds consume on "q"`) {
		t.Fatalf("Credit after consume was taken away: %v on %d %+v; want Error FORBIDDEN on 3", h.Opcode, h.RequestID, f)
	}
	b.srv.keysMu.Unlock()
	if err := <-changed; err != nil {
		t.Fatal(err)
	}
	st := b.stats(t, "q")
	if st.Leased != 0 || st.Ready != 1 {
		t.Fatalf("q: ready %d, leased %d; want the lease released", st.Ready, st.Leased)
	}
	// The late notification found the subscription already ended: the
	// next frame is the answer to a Ping, not a second Error.
	fc.send(9, &wire.Ping{Nonce: 7})
	if h, f := fc.recv(); h.Opcode != wire.OpPong || h.RequestID != 9 {
		t.Fatalf("after the notification: %v on %d %+v; want the Pong", h.Opcode, h.RequestID, f)
	}
}

// TestSubscribeEndedBeforeItOpens takes consume away while a Subscribe
// waits for the shard: the Subscribe is answered FORBIDDEN, not
// SubscribeOk, and the shard's subscription is closed.
func TestSubscribeEndedBeforeItOpens(t *testing.T) {
	b := startAuthBroker(t)
	b.createQueue(t, node.QueueSpec{Name: "q"})
	id, secret, err := b.keys.Create("worker", []auth.Permission{{Kind: auth.Consume, Pattern: "q"}})
	if err != nil {
		t.Fatal(err)
	}
	fc := dialFrames(t, b.addr, secret)

	// Hold the shard, so the Subscribe waits for it once checked.
	unblock := make(chan struct{})
	if err := b.sh.Barrier(context.Background(), func() { <-unblock }); err != nil {
		t.Fatal(err)
	}
	fc.send(3, &wire.Subscribe{Queue: "q", Prefetch: 10})
	for { // until the server has checked the Subscribe and registered it
		if len(b.openSubs()) == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if err := b.keys.SetACL(id, nil); err != nil {
		t.Fatal(err)
	}
	close(unblock)
	h, f := fc.recv()
	if ef, ok := f.(*wire.ErrorFrame); !ok || h.RequestID != 3 || ef.Code != wire.CodeForbidden {
		t.Fatalf("Subscribe answered by %v on %d %+v; want Error FORBIDDEN", h.Opcode, h.RequestID, f)
	}
	// The shard's subscription is closed soon after (the test's deadline
	// bounds the wait).
	for b.stats(t, "q").Subscriptions != 0 {
		time.Sleep(time.Millisecond)
	}
}

// openSubs lists the subscriptions of every connection.
func (b *authBroker) openSubs() []*subscription {
	b.srv.mu.Lock()
	defer b.srv.mu.Unlock()
	var out []*subscription
	for c := range b.srv.conns {
		c.mu.Lock()
		for _, s := range c.subs {
			out = append(out, s)
		}
		c.mu.Unlock()
	}
	return out
}

// TestMoveQueueNeedsAdminOnEverything: a key that administers a queue
// may not move it, drain, add or remove a node, rebalance, nor see the
// cluster's status: each needs
// admin on "*". The refusal comes before the single-node check.
func TestMoveQueueNeedsAdminOnEverything(t *testing.T) {
	b := startAuthBroker(t)
	b.createQueue(t, node.QueueSpec{Name: "q"})
	_, secret, err := b.keys.Create("queue-admin", []auth.Permission{{Kind: auth.Admin, Pattern: "q"}, {Kind: auth.Admin, Pattern: "q.*"}})
	if err != nil {
		t.Fatal(err)
	}
	fc := dialFrames(t, b.addr, secret)
	for id, f := range map[uint32]wire.Frame{
		2: &wire.MoveQueue{Queue: "q", Replicas: []uint64{1}}, 3: &wire.ClusterStatus{},
		4: &wire.DrainNode{NodeID: 1}, 5: &wire.DrainNode{NodeID: 1, Undo: true},
		6: &wire.Rebalance{}, 7: &wire.Rebalance{DryRun: true},
		8: &wire.AddNode{NodeID: 4, PeerAddr: "h:1"}, 9: &wire.RemoveNode{NodeID: 1},
	} {
		fc.send(id, f)
		h, got := fc.recv()
		if ef, ok := got.(*wire.ErrorFrame); !ok || h.RequestID != id || ef.Code != wire.CodeForbidden {
			t.Errorf("%v by a key with admin on q answered by %v on %d %+v; want Error FORBIDDEN on %d", f.Opcode(), h.Opcode, h.RequestID, got, id)
		}
	}
}
