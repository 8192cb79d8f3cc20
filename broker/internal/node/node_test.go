package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/hook"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
	"github.com/fila-mq/fila/sdk/core/wire"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

type memKV map[string][]byte

func (kv memKV) Put(k, v []byte) error                                { kv[string(k)] = bytes.Clone(v); return nil }
func (kv memKV) Delete(k []byte) error                                { delete(kv, string(k)); return nil }
func (kv memKV) Scan(prefix []byte, fn func(k, v []byte) error) error { return nil }

// newNode opens a node over a fresh shard, with an API key store, and
// returns the principal of a key allowed only to enqueue to and consume
// from "jobs".
func newNode(t *testing.T) (*Node, Principal) {
	t.Helper()
	sh, err := shard.Open(shard.Config{Logger: quiet}, store.NewMem())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Close)
	keys, err := auth.Open(memKV{}, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, secret, err := keys.Create("worker", []auth.Permission{{Kind: auth.Produce, Pattern: "jobs"}, {Kind: auth.Consume, Pattern: "jobs"}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := keys.Authenticate(secret)
	if err != nil {
		t.Fatal(err)
	}
	n := New(Config{NodeID: "n1", Keys: keys, Logger: quiet}, sh) // the default hooks registry
	return n, p
}

func wait(t *testing.T, submit func(done func(Result)) error) Result {
	t.Helper()
	ch := make(chan Result, 1)
	if err := submit(func(r Result) { ch <- r }); err != nil {
		t.Fatal(err)
	}
	return <-ch
}

// TestNodeChecksPermissions: every operation is checked against the
// caller's key before it reaches the shard, per item for batches.
func TestNodeChecksPermissions(t *testing.T) {
	ctx := context.Background()
	n, worker := newNode(t)
	admin := auth.Unrestricted()
	for _, q := range []string{"jobs", "billing"} {
		if r := wait(t, func(done func(Result)) error { return n.CreateQueue(ctx, admin, QueueSpec{Name: q}, 0, done) }); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	if err := n.CreateQueue(ctx, worker, QueueSpec{Name: "mine"}, 0, nil); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("CreateQueue by the worker = %v; want FORBIDDEN", err)
	}
	if _, err := n.Admit(ctx, worker, &wire.EnqueueMessage{Queue: "billing", Payload: []byte("x")}); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("Admit to billing = %v; want FORBIDDEN", err)
	}
	if _, err := n.Admit(ctx, worker, &wire.EnqueueMessage{Queue: "jobs", Headers: []wire.MessageHeader{{Key: "fila-x", Value: "1"}}}); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Errorf("Admit with a fila- header = %v; want INVALID_ARGUMENT", err)
	}
	m, err := n.Admit(ctx, worker, &wire.EnqueueMessage{Queue: "jobs", FairnessKey: "acme", Payload: []byte("hello")})
	if err != nil || m.FairnessKey != "acme" || m.PayloadSize != 5 {
		t.Fatalf("Admit to jobs = %+v, %v", m, err)
	}
	m.Body = EncodeBody(nil, nil, []byte("hello"))
	if r := wait(t, func(done func(Result)) error {
		return n.Enqueue(ctx, []EnqueueItem{{Queue: "jobs", Msg: m}}, done)
	}); r.Err != nil || len(r.Enqueued) != 1 || r.Enqueued[0].Err != nil {
		t.Fatalf("Enqueue = %+v", r)
	}

	if err := n.Subscribe(ctx, worker, 1, "billing", 10, nil, nil, nil); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("Subscribe to billing = %v; want FORBIDDEN", err)
	}
	if err := n.AddCredit(ctx, worker, 1, "billing", 1); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("AddCredit on billing = %v; want FORBIDDEN", err)
	}
	if err := n.QueueStats(ctx, worker, "jobs", 0, nil); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("QueueStats by the worker = %v; want FORBIDDEN", err)
	}
	if _, err := n.ListKeys(worker); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("ListKeys by the worker = %v; want FORBIDDEN", err)
	}
	if _, _, err := n.ClusterStatus(worker); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("ClusterStatus by the worker = %v; want FORBIDDEN", err)
	}
	if st, ok, err := n.ClusterStatus(admin); err != nil || ok || st.NodeID != 0 || len(st.Nodes) != 0 || len(st.Groups) != 0 {
		t.Errorf("ClusterStatus on a single node = %+v, %v, %v; want nothing, false, nil", st, ok, err)
	}
	if err := n.MoveQueue(ctx, worker, "jobs", []uint64{1, 2, 3}); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("MoveQueue by the worker = %v; want FORBIDDEN", err)
	}
	if err := n.MoveQueue(ctx, admin, "jobs", []uint64{1, 2, 3}); !errors.Is(err, fault.ErrNotSupported) {
		t.Errorf("MoveQueue on a single node = %v; want NOT_SUPPORTED", err)
	}
	if _, err := n.DrainNode(ctx, worker, 1, false); !errors.Is(err, fault.ErrForbidden) {
		t.Errorf("DrainNode by the worker = %v; want FORBIDDEN", err)
	}
	for _, undo := range []bool{false, true} {
		if q, err := n.DrainNode(ctx, admin, 1, undo); q != 0 || !errors.Is(err, fault.ErrNotSupported) {
			t.Errorf("DrainNode(undo %v) on a single node = %d, %v; want 0, NOT_SUPPORTED", undo, q, err)
		}
	}
	for what, op := range map[string]func(Principal) error{
		"Rebalance":  func(p Principal) error { _, err := n.Rebalance(ctx, p, true); return err },
		"AddNode":    func(p Principal) error { return n.AddNode(ctx, p, 2, "h:1") },
		"RemoveNode": func(p Principal) error { return n.RemoveNode(ctx, p, 1) },
	} {
		if err := op(worker); !errors.Is(err, fault.ErrForbidden) {
			t.Errorf("%s by the worker = %v; want FORBIDDEN", what, err)
		}
		if err := op(admin); !errors.Is(err, fault.ErrNotSupported) {
			t.Errorf("%s on a single node = %v; want NOT_SUPPORTED", what, err)
		}
	}
	if _, _, err := n.GetConfig(admin, "k"); !errors.Is(err, fault.ErrNotSupported) {
		t.Errorf("GetConfig without a runtime config = %v; want NOT_SUPPORTED", err)
	}

	// One Ack of two items: the one on billing is refused by the key, the
	// one on jobs reaches the scheduler (which finds no such lease).
	errs := make(chan []error, 1)
	items := []LeaseRef{{Queue: "billing", ID: [16]byte{1}, Lease: 1}, {Queue: "jobs", ID: [16]byte{2}, Lease: 1}}
	if err := n.Ack(ctx, worker, items, func(e []error, err error) {
		if err != nil {
			t.Error(err)
		}
		errs <- e
	}); err != nil {
		t.Fatal(err)
	}
	e := <-errs
	if len(e) != 2 || !errors.Is(e[0], fault.ErrForbidden) || e[1] == nil || errors.Is(e[1], fault.ErrForbidden) {
		t.Fatalf("Ack results = %v; want FORBIDDEN for billing, the scheduler's error for jobs", e)
	}

	// The worker sees only its queue (and its DLQ, by the same pattern
	// or not at all).
	r := wait(t, func(done func(Result)) error { return n.ListQueues(ctx, worker, done) })
	for _, q := range r.Queues {
		if q.Name == "billing" {
			t.Errorf("ListQueues by the worker shows billing")
		}
	}
}

// TestOnEnqueueHook: the queue's on_enqueue hook sets the fairness key
// of a message the node admits.
func TestOnEnqueueHook(t *testing.T) {
	ctx := context.Background()
	n, _ := newNode(t)
	admin := auth.Unrestricted()
	spec := QueueSpec{Name: "jobs", OnEnqueue: `function on_enqueue(msg) return { fairness_key = msg.headers["tenant"] } end`}
	if r := wait(t, func(done func(Result)) error { return n.CreateQueue(ctx, admin, spec, 0, done) }); r.Err != nil {
		t.Fatal(r.Err)
	}
	m, err := n.Admit(ctx, admin, &wire.EnqueueMessage{Queue: "jobs", Headers: []wire.MessageHeader{{Key: "tenant", Value: "acme"}}, Payload: []byte("x")})
	if err != nil || m.FairnessKey != "acme" {
		t.Fatalf("Admit = %+v, %v; want the hook's fairness key acme", m, err)
	}
	if err := n.CreateQueue(ctx, admin, QueueSpec{Name: "bad", OnEnqueue: "function ("}, 0, nil); !errors.Is(err, fault.ErrScriptError) {
		t.Errorf("CreateQueue with a broken hook = %v; want SCRIPT_ERROR", err)
	}
}

type chanSink chan []Delivered

func (c chanSink) Deliver(_ SubID, msgs []Delivered) { c <- msgs }
func (c chanSink) Expired(SubID, []ExpiredLease)     {}
func (c chanSink) Ended(SubID, error)                {}

// TestReadMessageOneStep: a delivered message's stored record reads back
// as its headers and payload in one call.
func TestReadMessageOneStep(t *testing.T) {
	ctx := context.Background()
	n, _ := newNode(t)
	admin := auth.Unrestricted()
	if r := wait(t, func(done func(Result)) error { return n.CreateQueue(ctx, admin, QueueSpec{Name: "jobs"}, 0, done) }); r.Err != nil {
		t.Fatal(r.Err)
	}
	headers := []wire.MessageHeader{{Key: "a", Value: "1"}, {Key: "b", Value: ""}}
	msg := Message{PayloadSize: 7, Body: EncodeBody(nil, headers, []byte("payload"))}
	if r := wait(t, func(done func(Result)) error { return n.Enqueue(ctx, []EnqueueItem{{Queue: "jobs", Msg: msg}}, done) }); r.Err != nil {
		t.Fatal(r.Err)
	}
	sink := make(chanSink, 1)
	if r := wait(t, func(done func(Result)) error { return n.Subscribe(ctx, admin, 1, "jobs", 1, nil, sink, done) }); r.Err != nil {
		t.Fatal(r.Err)
	}
	d := (<-sink)[0]
	h, p, err := n.ReadMessage(&d)
	if err != nil || !reflect.DeepEqual(h, headers) || string(p) != "payload" {
		t.Fatalf("ReadMessage = %v, %q, %v; want the enqueued headers and payload", h, p, err)
	}
}

// FuzzDecodeBody: any bytes decode to a body or to ErrBody, never a
// panic; a decoded body encodes back to the same bytes.
func FuzzDecodeBody(f *testing.F) {
	f.Add(EncodeBody(nil, nil, nil))
	f.Add(EncodeBody(nil, []wire.MessageHeader{{Key: "k", Value: "v"}}, []byte("payload")))
	f.Add([]byte{1, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, p, err := DecodeBody(b)
		if err != nil {
			if !errors.Is(err, ErrBody) {
				t.Fatalf("error %v is not ErrBody", err)
			}
			return
		}
		if got := EncodeBody(nil, h, p); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded body differs: %x vs %x", got, b)
		}
		if BodySize(h, p) != len(b) {
			t.Fatalf("BodySize = %d; want %d", BodySize(h, p), len(b))
		}
	})
}

// TestNoMessageSkipsANewQueuesHook: while a queue with an on_enqueue hook
// is being created, a message for it is refused (QUEUE_NOT_FOUND), not
// admitted without the hook and then enqueued once the queue exists; once
// the queue is created, every message runs the hook.
func TestNoMessageSkipsANewQueuesHook(t *testing.T) {
	ctx := context.Background()
	n, _ := newNode(t)
	admin := auth.Unrestricted()
	hold := make(chan struct{})
	if err := n.Barrier(ctx, func() { <-hold }); err != nil {
		t.Fatal(err)
	}
	spec := QueueSpec{Name: "jobs", OnEnqueue: `function on_enqueue(msg) return { fairness_key = "hooked" } end`}
	created := make(chan Result, 1)
	if err := n.CreateQueue(ctx, admin, spec, 0, func(r Result) { created <- r }); err != nil {
		t.Fatal(err)
	}
	msg := &wire.EnqueueMessage{Queue: "jobs", FairnessKey: "producer", Payload: []byte("x")}
	if m, err := n.Admit(ctx, admin, msg); !errors.Is(err, fault.ErrQueueNotFound) {
		t.Fatalf("Admit while the queue is being created = %+v, %v; want QUEUE_NOT_FOUND", m, err)
	}
	close(hold)
	if r := <-created; r.Err != nil {
		t.Fatal(r.Err)
	}
	if m, err := n.Admit(ctx, admin, msg); err != nil || m.FairnessKey != "hooked" {
		t.Fatalf("Admit once the queue exists = %+v, %v; want the hook's fairness key", m, err)
	}
	// Deleted, the queue refuses messages again, and its DLQ is forgotten
	// with it.
	deleted := make(chan Result, 1)
	if err := n.DeleteQueue(ctx, admin, "jobs", func(r Result) { deleted <- r }); err != nil {
		t.Fatal(err)
	}
	<-deleted
	for _, q := range []string{"jobs", "jobs.dlq"} {
		if _, known := n.cfg.Hooks.Lookup(q); known {
			t.Errorf("%s still known after DeleteQueue", q)
		}
	}
	if _, err := n.Admit(ctx, admin, msg); !errors.Is(err, fault.ErrQueueNotFound) {
		t.Fatalf("Admit after DeleteQueue = %v; want QUEUE_NOT_FOUND", err)
	}
}

// TestOpenBreakerDoesNotFloodTheLog: once a failing on_enqueue hook's
// circuit breaker is open, the messages that bypass it are not each
// logged; the breaker logs its opening.
func TestOpenBreakerDoesNotFloodTheLog(t *testing.T) {
	ctx := context.Background()
	var logged bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logged, nil))
	sh, err := shard.Open(shard.Config{Logger: quiet}, store.NewMem())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Close)
	hooks := NewHooks(hook.Limits{CircuitBreakerThreshold: 1, CircuitBreakerCooldown: time.Hour}, nil, log)
	n := New(Config{Hooks: hooks, Logger: log}, sh)
	admin := auth.Unrestricted()
	spec := QueueSpec{Name: "jobs", OnEnqueue: `function on_enqueue(msg) error("boom") end`}
	if r := wait(t, func(done func(Result)) error { return n.CreateQueue(ctx, admin, spec, 0, done) }); r.Err != nil {
		t.Fatal(r.Err)
	}
	for range 5 {
		m, err := n.Admit(ctx, admin, &wire.EnqueueMessage{Queue: "jobs", FairnessKey: "producer", Payload: []byte("x")})
		if err != nil || m.FairnessKey != "producer" {
			t.Fatalf("Admit with a failing hook = %+v, %v; want the producer's values", m, err)
		}
	}
	if got := strings.Count(logged.String(), "on_enqueue failed"); got != 1 {
		t.Fatalf("%d lines of on_enqueue failed for 5 messages, 4 of them bypassing the open breaker; want 1:\n%s", got, logged.String())
	}
}
