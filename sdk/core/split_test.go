package core

import (
	"errors"
	"fmt"
	"testing"

	"github.com/fila-mq/fila/sdk/core/wire"
)

func messages(n int) []wire.EnqueueMessage {
	msgs := make([]wire.EnqueueMessage, n)
	for i := range msgs {
		msgs[i] = wire.EnqueueMessage{Queue: "q", Payload: []byte(fmt.Sprint(i))}
	}
	return msgs
}

// handshakeWithCap answers the Handshake announcing a batch cap.
func (h *harness) handshakeWithCap(maxBatch uint32) {
	h.t.Helper()
	fs := h.sent()
	if len(fs) != 1 || fs[0].f.Opcode() != wire.OpHandshake {
		h.t.Fatalf("first frames = %+v; want one Handshake", fs)
	}
	h.mustServe(fs[0].id, &wire.HandshakeOk{Version: 1, NodeID: "n1", MaxFrameSize: wire.DefaultMaxFrameSize, MaxBatchSize: maxBatch})
}

// answerEnqueues answers each Enqueue the client wrote with one OK result
// per message, carrying the message's payload in its Message field so the
// order of the joined results can be checked.
func (h *harness) answerEnqueues(fs []sentFrame) {
	h.t.Helper()
	for _, sf := range fs {
		e := sf.f.(*wire.Enqueue)
		res := make([]wire.EnqueueItemResult, len(e.Messages))
		for i, m := range e.Messages {
			res[i] = wire.EnqueueItemResult{Message: string(m.Payload)}
		}
		h.mustServe(sf.id, &wire.EnqueueResult{Results: res})
	}
}

// TestSplitAtAnnouncedCap: an Enqueue of 10,000 messages to a broker that
// accepts 4096 per request goes out as 4096 + 4096 + 1808, and completes
// once, on the ID Enqueue returned, with the results in order.
func TestSplitAtAnnouncedCap(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshakeWithCap(4096)
	id, err := h.c.Enqueue(messages(10_000))
	if err != nil {
		t.Fatal(err)
	}
	fs := h.sent()
	var sizes []int
	for _, sf := range fs {
		sizes = append(sizes, len(sf.f.(*wire.Enqueue).Messages))
	}
	if fmt.Sprint(sizes) != "[4096 4096 1808]" || fs[0].id != id {
		t.Fatalf("sent Enqueues of %v items, the first on request %d; want [4096 4096 1808], the first on %d", sizes, fs[0].id, id)
	}
	// Answer out of order: the last part first.
	h.answerEnqueues([]sentFrame{fs[2], fs[0]})
	if len(h.completions) != 0 {
		t.Fatalf("completed with a part unanswered: %+v", h.completions)
	}
	h.answerEnqueues(fs[1:2])
	if len(h.completions) != 1 {
		t.Fatalf("%d completions; want 1", len(h.completions))
	}
	cp := h.completions[0]
	if cp.RequestID != id || cp.Err != nil || len(cp.Request.(*wire.Enqueue).Messages) != 10_000 {
		t.Fatalf("completion = req %d err %v; want req %d with the whole request", cp.RequestID, cp.Err, id)
	}
	res := cp.Response.(*wire.EnqueueResult).Results
	if len(res) != 10_000 {
		t.Fatalf("%d results; want 10000", len(res))
	}
	for i, r := range res {
		if r.Message != fmt.Sprint(i) {
			t.Fatalf("result %d is for message %s; want results in order", i, r.Message)
		}
	}
	if h.c.InFlight() != 0 {
		t.Errorf("InFlight = %d after completion", h.c.InFlight())
	}
}

// TestSplitPartFails: a part the broker refuses as a whole gives its items
// the refusal; only when every part fails does the request fail.
func TestSplitPartFails(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshakeWithCap(2)
	acks := make([]wire.LeaseRef, 5)
	id, _ := h.c.Send(&wire.Ack{Items: acks})
	fs := h.sent()
	if len(fs) != 3 {
		t.Fatalf("sent %d frames; want 3", len(fs))
	}
	h.mustServe(fs[0].id, &wire.AckResult{Results: make([]wire.ItemResult, 2)})
	h.mustServe(fs[1].id, &wire.ErrorFrame{Code: wire.CodeResourceExhausted, Message: "busy"})
	h.mustServe(fs[2].id, &wire.AckResult{Results: []wire.ItemResult{{Code: wire.CodeLeaseExpired}}})
	cp := h.completions[0]
	if cp.RequestID != id || cp.Err != nil {
		t.Fatalf("completion = %+v; want success on %d", cp, id)
	}
	var codes []wire.Code
	for _, r := range cp.Response.(*wire.AckResult).Results {
		codes = append(codes, r.Code)
	}
	if fmt.Sprint(codes) != "[OK OK RESOURCE_EXHAUSTED RESOURCE_EXHAUSTED LEASE_EXPIRED]" {
		t.Fatalf("codes = %v", codes)
	}

	id, _ = h.c.Send(&wire.Release{Items: make([]wire.LeaseRef, 3)})
	fs = h.sent()
	for _, sf := range fs {
		h.mustServe(sf.id, &wire.ErrorFrame{Code: wire.CodeUnavailable, Message: "down"})
	}
	cp = h.completions[1]
	var re *RequestError
	if cp.RequestID != id || cp.Response != nil || !errors.As(cp.Err, &re) || re.Code != wire.CodeUnavailable {
		t.Fatalf("completion = %+v; want UNAVAILABLE for the whole request", cp)
	}
}

// TestRequestsHeldUntilHandshake: requests made before HandshakeOk are
// written after it, in order, and split at the cap it announces; a broker
// that announces none (0) takes up to wire.MaxBatchSize.
func TestRequestsHeldUntilHandshake(t *testing.T) {
	h := newHarness(t, Config{})
	hs := h.sent()
	id1, _ := h.c.Enqueue(messages(5))
	id2, _ := h.c.Send(&wire.Ping{Nonce: 3})
	if fs := h.sent(); len(fs) != 0 {
		t.Fatalf("wrote %d frames before HandshakeOk", len(fs))
	}
	h.mustServe(hs[0].id, &wire.HandshakeOk{Version: 1, MaxBatchSize: 2})
	fs := h.sent()
	var got []string
	for _, sf := range fs {
		got = append(got, fmt.Sprintf("%v", sf.f.Opcode()))
	}
	if fmt.Sprint(got) != "[Enqueue Enqueue Enqueue Ping]" || fs[0].id != id1 || fs[3].id != id2 {
		t.Fatalf("after HandshakeOk wrote %v (ids %d, %d); want three Enqueues then the Ping", got, fs[0].id, fs[3].id)
	}
	if h.state.MaxBatchSize != 2 {
		t.Errorf("State.MaxBatchSize = %d; want 2", h.state.MaxBatchSize)
	}

	old := newHarness(t, Config{})
	hs = old.sent()
	old.mustServe(hs[0].id, &wire.HandshakeOk{Version: 1})
	if old.state.MaxBatchSize != wire.MaxBatchSize {
		t.Errorf("State.MaxBatchSize from a broker that states none = %d; want %d", old.state.MaxBatchSize, wire.MaxBatchSize)
	}
	old.c.Enqueue(messages(wire.MaxBatchSize))
	if fs := old.sent(); len(fs) != 1 {
		t.Errorf("a batch of wire.MaxBatchSize went out as %d frames; want 1", len(fs))
	}
}

// TestSplitConnectionLost: a split request in flight when the connection
// fails completes once, with ErrConnectionLost.
func TestSplitConnectionLost(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshakeWithCap(3)
	id, _ := h.c.Enqueue(messages(7))
	fs := h.sent()
	h.answerEnqueues(fs[:1])
	h.c.Receive([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0, 0}) // an oversized frame fails the connection
	h.drain()
	if len(h.completions) != 1 || h.completions[0].RequestID != id || h.completions[0].Err == nil {
		t.Fatalf("completions = %+v; want one failure on %d", h.completions, id)
	}
}
