package core

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// harness drives a Conn as a shell would and plays the broker's side.
type harness struct {
	t   *testing.T
	c   *Conn
	now Time
	// collected from Readys
	out         []byte
	completions []Completion
	deliveries  []DeliveryBatch
	ended       []SubscriptionEnd
	redirects   []Redirect
	expired     []Expiry
	state       *State
	settled     map[uint64]bool // leases settled with settle
}

func newHarness(t *testing.T, cfg Config) *harness {
	h := &harness{t: t, c: New(cfg), now: 1000, settled: map[uint64]bool{}}
	h.c.Tick(h.now)
	return h
}

func (h *harness) drain() {
	for h.c.HasReady() {
		rd := h.c.Ready()
		h.out = append(h.out, rd.Out...)
		h.completions = append(h.completions, rd.Completions...)
		h.deliveries = append(h.deliveries, rd.Deliveries...)
		h.ended = append(h.ended, rd.Ended...)
		h.redirects = append(h.redirects, rd.Redirects...)
		h.expired = append(h.expired, rd.Expired...)
		if rd.State != nil {
			st := *rd.State
			h.state = &st
		}
		h.c.Advance(rd)
	}
}

// sent decodes and clears the frames the client wrote.
func (h *harness) sent() []sentFrame {
	h.drain()
	fr := wire.NewFrameReader(0, 0)
	fr.Feed(h.out)
	h.out = nil
	var out []sentFrame
	for {
		hd, body, ok, err := fr.Next()
		if err != nil {
			h.t.Fatalf("client wrote bad bytes: %v", err)
		}
		if !ok {
			return out
		}
		f, err := wire.DecodeFrame(hd.Opcode, append([]byte(nil), body...))
		if err != nil {
			h.t.Fatalf("client wrote undecodable %v: %v", hd.Opcode, err)
		}
		out = append(out, sentFrame{hd.RequestID, f})
	}
}

type sentFrame struct {
	id uint32
	f  wire.Frame
}

func (h *harness) serve(id uint32, f wire.Frame) error {
	return h.c.Receive(wire.AppendFrame(nil, id, f))
}

func (h *harness) mustServe(id uint32, f wire.Frame) {
	h.t.Helper()
	if err := h.serve(id, f); err != nil {
		h.t.Fatalf("Receive(%v) = %v", f.Opcode(), err)
	}
	h.drain()
}

func (h *harness) handshake() {
	h.t.Helper()
	fs := h.sent()
	if len(fs) != 1 || fs[0].f.Opcode() != wire.OpHandshake {
		h.t.Fatalf("first frames = %+v; want one Handshake", fs)
	}
	h.mustServe(fs[0].id, &wire.HandshakeOk{Version: 1, NodeID: "n1", MaxFrameSize: wire.DefaultMaxFrameSize})
	if h.state == nil || !h.state.Handshaken {
		h.t.Fatalf("state after HandshakeOk = %+v", h.state)
	}
}

func TestHandshake(t *testing.T) {
	h := newHarness(t, Config{ClientName: "test", APIKey: "secret"})
	fs := h.sent()
	hs := fs[0].f.(*wire.Handshake)
	if hs.MaxVersion != wire.ProtocolVersion || hs.APIKey != "secret" || hs.ClientName != "test" || fs[0].id == 0 {
		t.Fatalf("Handshake = %+v id %d", hs, fs[0].id)
	}
	h.mustServe(fs[0].id, &wire.HandshakeOk{Version: 1, NodeID: "n1", ServerName: "fila-server/test", MaxFrameSize: 1 << 20})
	if !h.state.Handshaken || h.state.NodeID != "n1" || h.state.ServerMaxFrame != 1<<20 {
		t.Fatalf("state = %+v", h.state)
	}
	if len(h.completions) != 0 {
		t.Errorf("handshake surfaced as a completion: %+v", h.completions)
	}
}

func TestHandshakeVersionMismatch(t *testing.T) {
	h := newHarness(t, Config{})
	fs := h.sent()
	h.mustServe(fs[0].id, &wire.HandshakeOk{Version: 99})
	var ve *VersionError
	if h.state == nil || !h.state.Failed || !errors.As(h.state.Err, &ve) || ve.Server != 99 {
		t.Fatalf("state = %+v; want failed with *VersionError", h.state)
	}
}

func TestHandshakeRejected(t *testing.T) {
	h := newHarness(t, Config{APIKey: "wrong"})
	id, _ := h.c.Enqueue([]wire.EnqueueMessage{{Queue: "q"}})
	fs := h.sent()
	h.mustServe(fs[0].id, &wire.ErrorFrame{Code: wire.CodeUnauthorized, Message: "bad key"})
	var re *RequestError
	if !h.state.Failed || !errors.As(h.state.Err, &re) || re.Code != wire.CodeUnauthorized {
		t.Fatalf("state = %+v; want failed UNAUTHORIZED", h.state)
	}
	if len(h.completions) != 1 || h.completions[0].RequestID != id || !errors.Is(h.completions[0].Err, ErrConnectionLost) {
		t.Fatalf("completions = %+v; want the enqueue lost", h.completions)
	}
}

func TestInterleavedResponses(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	ids := map[uint32]int{}
	for i := 0; i < 100; i++ {
		id, err := h.c.Enqueue([]wire.EnqueueMessage{{Queue: "q", Payload: []byte(fmt.Sprint(i))}})
		if err != nil {
			t.Fatal(err)
		}
		ids[id] = i
	}
	fs := h.sent()
	if len(fs) != 100 {
		t.Fatalf("sent %d frames; want 100", len(fs))
	}
	r := rand.New(rand.NewPCG(7, 7))
	r.Shuffle(len(fs), func(i, j int) { fs[i], fs[j] = fs[j], fs[i] })
	var stream []byte
	for _, f := range fs {
		i := ids[f.id]
		stream = wire.AppendFrame(stream, f.id, &wire.EnqueueResult{Results: []wire.EnqueueItemResult{{ID: [16]byte{byte(i)}}}})
	}
	if err := h.c.Receive(stream); err != nil {
		t.Fatal(err)
	}
	h.drain()
	if len(h.completions) != 100 {
		t.Fatalf("%d completions; want 100", len(h.completions))
	}
	for _, cp := range h.completions {
		got := cp.Response.(*wire.EnqueueResult).Results[0].ID[0]
		if int(got) != ids[cp.RequestID] {
			t.Fatalf("request %d got result for %d", ids[cp.RequestID], got)
		}
		req := cp.Request.(*wire.Enqueue)
		if string(req.Messages[0].Payload) != fmt.Sprint(ids[cp.RequestID]) {
			t.Fatalf("completion carries the wrong request")
		}
	}
	if h.c.InFlight() != 0 {
		t.Errorf("InFlight = %d; want 0", h.c.InFlight())
	}
}

// nextLease numbers the leases of the deliveries the tests make, so that
// no two share one.
var nextLease uint64

func delivery(n int) *wire.Delivery {
	d := &wire.Delivery{}
	for i := 0; i < n; i++ {
		nextLease++
		d.Messages = append(d.Messages, wire.DeliveredMessage{Queue: "q", ID: [16]byte{byte(i)}, Attempt: 1, Lease: nextLease})
	}
	return d
}

// settle settles the n oldest deliveries of sub that the harness has not
// settled yet, as an application acking in order would.
func (h *harness) settle(sub uint32, n int) {
	h.t.Helper()
	h.drain()
	var leases []uint64
	for _, d := range h.deliveries {
		if d.Subscription != sub {
			continue
		}
		for _, m := range d.Messages {
			if len(leases) < n && !h.settled[m.Lease] {
				h.settled[m.Lease] = true
				leases = append(leases, m.Lease)
			}
		}
	}
	if len(leases) < n {
		h.t.Fatalf("settle %d of subscription %d: only %d unsettled", n, sub, len(leases))
	}
	h.c.Settle(sub, leases...)
}

func subscribe(t *testing.T, h *harness, queue string, prefetch uint32) uint32 {
	t.Helper()
	id, err := h.c.Subscribe(queue, prefetch, nil)
	if err != nil {
		t.Fatal(err)
	}
	fs := h.sent()
	if len(fs) != 1 || fs[0].f.(*wire.Subscribe).Prefetch != prefetch {
		t.Fatalf("sent %+v", fs)
	}
	h.mustServe(id, &wire.SubscribeOk{Prefetch: prefetch})
	return id
}

func TestTwoSubscriptionsIndependentCredit(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	a := subscribe(t, h, "a", 4)
	b := subscribe(t, h, "b", 8)

	h.mustServe(a, delivery(4))
	h.mustServe(b, delivery(3))
	if out, held, _ := h.c.Credit(a); out != 0 || held != 4 {
		t.Fatalf("a credit = %d/%d; want 0 outstanding, 4 held", out, held)
	}
	if out, held, _ := h.c.Credit(b); out != 5 || held != 3 {
		t.Fatalf("b credit = %d/%d; want 5 outstanding, 3 held", out, held)
	}
	// a is out of credit: one more delivery is a protocol violation.
	// First settle: a's credit returns (threshold prefetch/4 = 1).
	h.settle(a, 2)
	fs := h.sent()
	if len(fs) != 1 {
		t.Fatalf("after settling 2: sent %+v; want one Credit", fs)
	}
	cr := fs[0].f.(*wire.Credit)
	if cr.Subscription != a || cr.Credits != 2 || fs[0].id != 0 {
		t.Fatalf("Credit = %+v id %d; want 2 for subscription %d on request 0", cr, fs[0].id, a)
	}
	// b's credit is untouched.
	if out, _, _ := h.c.Credit(b); out != 5 {
		t.Fatalf("b outstanding = %d; want 5", out)
	}
	// b gets its 5, then is out.
	h.mustServe(b, delivery(5))
	if err := h.serve(b, delivery(1)); err == nil {
		t.Fatalf("delivery past credit accepted")
	}
	if !h.c.State().Failed {
		t.Fatalf("connection not failed after a credit violation")
	}
}

func TestCreditBatching(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	s := subscribe(t, h, "q", 100)
	h.mustServe(s, delivery(100))
	for i := 0; i < 24; i++ {
		h.settle(s, 1)
	}
	if fs := h.sent(); len(fs) != 0 {
		t.Fatalf("credit sent before a quarter of the prefetch was settled: %+v", fs)
	}
	h.settle(s, 1)
	fs := h.sent()
	if len(fs) != 1 || fs[0].f.(*wire.Credit).Credits != 25 {
		t.Fatalf("sent %+v; want Credit 25", fs)
	}
}

func TestSetPrefetch(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	s := subscribe(t, h, "q", 8)
	h.mustServe(s, delivery(8))
	// Lower to 4 with 8 in flight: the next 4 settled are withheld.
	if err := h.c.SetPrefetch(s, 4); err != nil {
		t.Fatal(err)
	}
	h.settle(s, 4)
	if fs := h.sent(); len(fs) != 0 {
		t.Fatalf("credit granted while paying debt: %+v", fs)
	}
	h.settle(s, 4)
	fs := h.sent()
	if len(fs) != 1 || fs[0].f.(*wire.Credit).Credits != 4 {
		t.Fatalf("sent %+v; want Credit 4", fs)
	}
	// Raise to 10: 6 more at once.
	if err := h.c.SetPrefetch(s, 10); err != nil {
		t.Fatal(err)
	}
	fs = h.sent()
	if len(fs) != 1 || fs[0].f.(*wire.Credit).Credits != 6 {
		t.Fatalf("sent %+v; want Credit 6", fs)
	}
	if out, _, _ := h.c.Credit(s); out != 10 {
		t.Fatalf("outstanding = %d; want 10", out)
	}
}

// TestLeaseExpiredReturnsCredit: a subscription whose whole window
// expired unsettled gets its credit back from the broker's LeaseExpired,
// keeps receiving, and a late settle of an expired delivery returns
// nothing.
func TestLeaseExpiredReturnsCredit(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	s := subscribe(t, h, "q", 5)
	d := delivery(5)
	h.mustServe(s, d)
	if out, held, _ := h.c.Credit(s); out != 0 || held != 5 {
		t.Fatalf("credit = %d/%d; want 0 outstanding, 5 held", out, held)
	}
	exp := &wire.LeaseExpired{}
	for _, m := range d.Messages {
		exp.Leases = append(exp.Leases, wire.ExpiredLease{ID: m.ID, Lease: m.Lease})
	}
	h.mustServe(s, exp)
	h.drain()
	if len(h.expired) != 1 || h.expired[0].Subscription != s || len(h.expired[0].Leases) != 5 {
		t.Fatalf("Expired = %+v; want the 5 leases of subscription %d", h.expired, s)
	}
	if out, held, _ := h.c.Credit(s); out != 5 || held != 0 {
		t.Fatalf("after LeaseExpired: credit = %d/%d; want 5 outstanding, 0 held", out, held)
	}
	// The returned credit is spent by the next deliveries.
	h.mustServe(s, delivery(5))
	// A late settle of the expired deliveries returns no credit.
	for _, m := range d.Messages {
		h.c.Settle(s, m.Lease)
	}
	if fs := h.sent(); len(fs) != 0 {
		t.Fatalf("settling expired deliveries sent %+v; want nothing", fs)
	}
	if err := checkCredit(h.c, s); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseExpiredAfterSettle: an expiry that crosses the application's
// settle (the Ack reached the broker after the lease ended) returns the
// credit once, not twice.
func TestLeaseExpiredAfterSettle(t *testing.T) {
	t.Run("credit not yet returned", func(t *testing.T) {
		h := newHarness(t, Config{})
		h.handshake()
		s := subscribe(t, h, "q", 8) // Credit in steps of 2
		d := delivery(1)
		h.mustServe(s, d)
		h.settle(s, 1) // 1 unreturned: below the step
		h.mustServe(s, &wire.LeaseExpired{Leases: []wire.ExpiredLease{{Lease: d.Messages[0].Lease}}})
		if out, held, _ := h.c.Credit(s); out != 8 || held != 0 {
			t.Fatalf("credit = %d/%d; want 8 outstanding, 0 held", out, held)
		}
		h.mustServe(s, delivery(2))
		h.settle(s, 2)
		fs := h.sent()
		if len(fs) != 1 || fs[0].f.(*wire.Credit).Credits != 2 {
			t.Fatalf("sent %+v; want Credit 2", fs)
		}
		if err := checkCredit(h.c, s); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("credit already returned", func(t *testing.T) {
		h := newHarness(t, Config{})
		h.handshake()
		s := subscribe(t, h, "q", 1)
		d := delivery(1)
		h.mustServe(s, d)
		h.settle(s, 1)
		if fs := h.sent(); len(fs) != 1 {
			t.Fatalf("sent %+v; want Credit 1", fs)
		}
		// The broker got the credit twice: it may deliver 2, and the
		// core withholds the next credit.
		h.mustServe(s, &wire.LeaseExpired{Leases: []wire.ExpiredLease{{Lease: d.Messages[0].Lease}}})
		h.mustServe(s, delivery(2))
		h.settle(s, 1)
		if fs := h.sent(); len(fs) != 0 {
			t.Fatalf("sent %+v; want the credit withheld", fs)
		}
		h.settle(s, 1)
		if fs := h.sent(); len(fs) != 1 || fs[0].f.(*wire.Credit).Credits != 1 {
			t.Fatalf("sent %+v; want Credit 1", fs)
		}
		if out, held, _ := h.c.Credit(s); out != 1 || held != 0 {
			t.Fatalf("credit = %d/%d; want 1 outstanding, 0 held", out, held)
		}
	})
}

func TestLeaseExpiredUnknownSubscription(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	if err := h.serve(7, &wire.LeaseExpired{Leases: []wire.ExpiredLease{{Lease: 1}}}); err == nil {
		t.Fatal("LeaseExpired for no subscription accepted")
	}
}

// TestPrefetchZeroGrantedCap: prefetch 0 asks for as much as the broker
// allows; the broker grants its cap, and credit then works as for any
// prefetch.
func TestPrefetchZeroGrantedCap(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	id, _ := h.c.Subscribe("q", 0, nil)
	h.sent()
	h.mustServe(id, &wire.SubscribeOk{Prefetch: 8})
	h.mustServe(id, delivery(8))
	if err := h.serve(id, delivery(1)); err == nil {
		t.Fatal("delivery beyond the granted credit accepted")
	}
}

func TestPrefetchZeroGrantedCapReturnsCredit(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	id, _ := h.c.Subscribe("q", 0, nil)
	h.sent()
	h.mustServe(id, &wire.SubscribeOk{Prefetch: 8})
	h.mustServe(id, delivery(8))
	h.settle(id, 2)
	fs := h.sent()
	if len(fs) != 1 || fs[0].f.(*wire.Credit).Credits != 2 {
		t.Fatalf("sent %+v; want Credit 2", fs)
	}
}

// TestUnlimitedCredit: a broker that grants 0 for prefetch 0 (an older
// one) sets no limit; no credit is returned.
func TestUnlimitedCredit(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	s := subscribe(t, h, "q", 0)
	h.mustServe(s, delivery(1000))
	h.settle(s, 1000)
	if fs := h.sent(); len(fs) != 0 {
		t.Fatalf("credit sent for an unlimited subscription: %+v", fs)
	}
}

func TestSubscriptionCappedByServer(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	id, _ := h.c.Subscribe("q", 1000, nil)
	h.sent()
	h.mustServe(id, &wire.SubscribeOk{Prefetch: 10})
	if err := h.serve(id, delivery(11)); err == nil {
		t.Fatal("delivery beyond the capped credit accepted")
	}
}

func TestUnsubscribe(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	s := subscribe(t, h, "q", 0)
	u, err := h.c.Unsubscribe(s)
	if err != nil {
		t.Fatal(err)
	}
	h.sent()
	// A delivery racing the Unsubscribe is still delivered.
	h.mustServe(s, delivery(1))
	h.mustServe(u, &wire.UnsubscribeOk{})
	if len(h.deliveries) != 1 || len(h.ended) != 1 || h.ended[0].Subscription != s || h.ended[0].Err != nil {
		t.Fatalf("deliveries %d, ended %+v", len(h.deliveries), h.ended)
	}
	if err := h.serve(s, delivery(1)); err == nil {
		t.Fatal("delivery after UnsubscribeOk accepted")
	}
}

func TestSubscriptionEndedByServer(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	s := subscribe(t, h, "q", 0)
	h.mustServe(s, &wire.ErrorFrame{Code: wire.CodeQueueNotFound, Message: "queue deleted"})
	var re *RequestError
	if len(h.ended) != 1 || !errors.As(h.ended[0].Err, &re) || re.Code != wire.CodeQueueNotFound {
		t.Fatalf("ended = %+v", h.ended)
	}
}

func TestSubscribeFails(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	id, _ := h.c.Subscribe("nope", 1, nil)
	h.sent()
	h.mustServe(id, &wire.ErrorFrame{Code: wire.CodeQueueNotFound})
	if len(h.completions) != 1 || h.completions[0].Err == nil || len(h.ended) != 0 {
		t.Fatalf("completions %+v ended %+v", h.completions, h.ended)
	}
	if err := h.serve(id, delivery(1)); err == nil {
		t.Fatal("delivery to a failed subscription accepted")
	}
}

// TestReceiveSplitAtEveryByte delivers a burst of server frames cut at
// every byte boundary and checks the same events result.
func TestReceiveSplitAtEveryByte(t *testing.T) {
	build := func() (*harness, []byte) {
		h := newHarness(t, Config{})
		h.handshake()
		s := subscribe(t, h, "q", 0)
		id, _ := h.c.Enqueue([]wire.EnqueueMessage{{Queue: "q"}})
		h.sent()
		h.completions = nil
		var stream []byte
		stream = wire.AppendFrame(stream, s, delivery(3))
		stream = wire.AppendFrame(stream, id, &wire.EnqueueResult{Results: []wire.EnqueueItemResult{{ID: [16]byte{9}}}})
		stream = wire.AppendFrame(stream, 77, &wire.Ping{Nonce: 5})
		return h, stream
	}
	_, stream := build()
	for cut := 0; cut <= len(stream); cut++ {
		h, _ := build()
		if err := h.c.Receive(stream[:cut]); err != nil {
			t.Fatal(err)
		}
		if err := h.c.Receive(stream[cut:]); err != nil {
			t.Fatal(err)
		}
		h.drain()
		if len(h.deliveries) != 1 || len(h.deliveries[0].Messages) != 3 || len(h.completions) != 1 {
			t.Fatalf("cut %d: %d deliveries %d completions", cut, len(h.deliveries), len(h.completions))
		}
		fs := h.sent()
		if len(fs) != 1 || fs[0].id != 77 || fs[0].f.(*wire.Pong).Nonce != 5 {
			t.Fatalf("cut %d: answer to ping = %+v", cut, fs)
		}
	}
}

func TestOversizeFrameFails(t *testing.T) {
	h := newHarness(t, Config{MaxFrameSize: 4096})
	h.handshake()
	err := h.c.Receive(wire.AppendHeader(nil, wire.Header{Length: 1 << 30, Opcode: wire.OpDelivery, RequestID: 1}))
	var ce *wire.ConnError
	if !errors.As(err, &ce) || ce.Code != wire.CodeFrameTooLarge {
		t.Fatalf("Receive = %v; want FRAME_TOO_LARGE", err)
	}
	h.drain()
	if !h.state.Failed {
		t.Fatal("connection not failed")
	}
	if _, err := h.c.Enqueue(nil); err == nil {
		t.Fatal("Enqueue accepted on a failed connection")
	}
}

func TestUnknownOpcodeIgnored(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	f := &wire.UnknownFrame{Op: 0x0F0E, Body: []byte("future")}
	if err := h.c.Receive(wire.AppendFrame(nil, 0, f)); err != nil {
		t.Fatalf("Receive(unknown) = %v; want nil", err)
	}
	if h.c.Stats().UnknownFrames != 1 || h.c.State().Failed {
		t.Fatalf("stats %+v state %+v", h.c.Stats(), h.c.State())
	}
}

func TestResponseToUnknownRequest(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	err := h.serve(4242, &wire.EnqueueResult{})
	var ce *wire.ConnError
	if !errors.As(err, &ce) || ce.Code != wire.CodeProtocolViolation {
		t.Fatalf("Receive = %v; want PROTOCOL_VIOLATION", err)
	}
}

func TestWrongResponseType(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	id, _ := h.c.Send(&wire.ListQueues{})
	h.sent()
	if err := h.serve(id, &wire.AckResult{}); err == nil {
		t.Fatal("AckResult accepted as the answer to ListQueues")
	}
}

func TestMalformedFrameFails(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	id, _ := h.c.Send(&wire.ListQueues{})
	h.sent()
	bad := wire.AppendHeader(nil, wire.Header{Length: 4, Opcode: wire.OpListQueuesResult, RequestID: id})
	bad = append(bad, 0xff, 0xff, 0xff, 0xff) // list count with nothing behind it
	err := h.c.Receive(bad)
	var ce *wire.ConnError
	if !errors.As(err, &ce) || ce.Code != wire.CodeMalformedFrame {
		t.Fatalf("Receive = %v; want MALFORMED_FRAME", err)
	}
	h.drain()
	if len(h.completions) != 1 || !errors.Is(h.completions[0].Err, ErrConnectionLost) {
		t.Fatalf("in-flight request not completed as lost: %+v", h.completions)
	}
}

func TestNotLeaderRedirect(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	id, _ := h.c.Enqueue([]wire.EnqueueMessage{{Queue: "q"}})
	h.sent()
	h.mustServe(id, &wire.ErrorFrame{Code: wire.CodeNotLeader, LeaderHint: "10.0.0.2:5555"})
	if len(h.redirects) != 1 || h.redirects[0].LeaderHint != "10.0.0.2:5555" || h.redirects[0].Request.(*wire.Enqueue).Messages[0].Queue != "q" {
		t.Fatalf("redirects = %+v", h.redirects)
	}
	var re *RequestError
	if len(h.completions) != 1 || !errors.As(h.completions[0].Err, &re) || re.Code != wire.CodeNotLeader {
		t.Fatalf("completions = %+v", h.completions)
	}
}

func TestKeepalive(t *testing.T) {
	h := newHarness(t, Config{KeepaliveInterval: time.Second, KeepaliveTimeout: 500 * time.Millisecond})
	h.handshake()
	rd := h.c.Ready()
	if rd.Deadline != h.now.Add(time.Second) {
		t.Fatalf("Deadline = %d; want %d", rd.Deadline, h.now.Add(time.Second))
	}
	h.now = h.now.Add(time.Second)
	h.c.Tick(h.now)
	fs := h.sent()
	if len(fs) != 1 || fs[0].f.Opcode() != wire.OpPing {
		t.Fatalf("sent %+v; want a Ping", fs)
	}
	// Answered: no failure, and no completion surfaces.
	h.mustServe(fs[0].id, &wire.Pong{Nonce: fs[0].f.(*wire.Ping).Nonce})
	if len(h.completions) != 0 {
		t.Fatalf("keepalive pong surfaced: %+v", h.completions)
	}
	// Next ping unanswered past the timeout: failed.
	h.now = h.now.Add(time.Second)
	h.c.Tick(h.now)
	h.sent()
	h.now = h.now.Add(499 * time.Millisecond)
	h.c.Tick(h.now)
	if h.c.State().Failed {
		t.Fatal("failed before the timeout")
	}
	h.now = h.now.Add(time.Millisecond)
	h.c.Tick(h.now)
	if st := h.c.State(); !st.Failed || !errors.Is(st.Err, ErrKeepaliveTimeout) {
		t.Fatalf("state = %+v; want keepalive timeout", st)
	}
}

func TestHandshakeTimeout(t *testing.T) {
	h := newHarness(t, Config{KeepaliveTimeout: time.Second})
	h.now = h.now.Add(time.Second)
	h.c.Tick(h.now)
	if st := h.c.State(); !st.Failed || !errors.Is(st.Err, ErrKeepaliveTimeout) {
		t.Fatalf("state = %+v; want handshake timeout", st)
	}
}

func TestGoAway(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	id, _ := h.c.Enqueue([]wire.EnqueueMessage{{Queue: "q"}})
	h.sent()
	h.mustServe(0, &wire.GoAway{Code: wire.CodeUnavailable, Message: "shutting down", LeaderHint: "b:5555"})
	if !h.state.GoingAway || h.state.LeaderHint != "b:5555" {
		t.Fatalf("state = %+v", h.state)
	}
	if _, err := h.c.Enqueue(nil); !errors.Is(err, ErrGoingAway) {
		t.Fatalf("Enqueue after GoAway = %v; want ErrGoingAway", err)
	}
	// Requests in flight are still answered.
	h.mustServe(id, &wire.EnqueueResult{})
	if len(h.completions) != 1 || h.completions[0].Err != nil {
		t.Fatalf("completions = %+v", h.completions)
	}
}

func TestClientClose(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	h.c.Close()
	fs := h.sent()
	if len(fs) != 1 || fs[0].f.Opcode() != wire.OpGoAway {
		t.Fatalf("sent %+v; want GoAway", fs)
	}
}

func TestLargeRequestSplitToServerMax(t *testing.T) {
	h := newHarness(t, Config{})
	fs := h.sent()
	h.mustServe(fs[0].id, &wire.HandshakeOk{Version: 1, MaxFrameSize: 4096})
	h.c.Enqueue([]wire.EnqueueMessage{{Queue: "q", Payload: make([]byte, 10000)}})
	h.drain()
	n := 0
	for rest := h.out; len(rest) > 0; n++ {
		hd, _ := wire.ParseHeader(rest)
		if hd.Length > 4096 {
			t.Fatalf("frame of %d bytes; server max is 4096", hd.Length)
		}
		rest = rest[wire.HeaderSize+int(hd.Length):]
	}
	if n < 3 {
		t.Fatalf("%d frames; want the request split", n)
	}
}

// TestDeterministic runs the same script twice and compares every byte and
// event.
func TestDeterministic(t *testing.T) {
	run := func() string {
		h := newHarness(t, Config{ClientName: "d", KeepaliveInterval: time.Second})
		h.handshake()
		s := subscribe(t, h, "q", 10)
		for i := 0; i < 5; i++ {
			h.c.Enqueue([]wire.EnqueueMessage{{Queue: "q", Payload: []byte{byte(i)}}})
		}
		h.mustServe(s, delivery(10))
		h.settle(s, 7)
		h.now = h.now.Add(2 * time.Second)
		h.c.Tick(h.now)
		h.drain()
		return fmt.Sprintf("%x|%d|%d", h.out, len(h.deliveries), len(h.completions))
	}
	if a, b := run(), run(); a != b {
		t.Fatalf("two runs differ:\n%s\n%s", a, b)
	}
}

func TestPayloadOutlivesAdvance(t *testing.T) {
	h := newHarness(t, Config{})
	h.handshake()
	s := subscribe(t, h, "q", 0)
	d := &wire.Delivery{Messages: []wire.DeliveredMessage{{Queue: "q", Payload: []byte("hello"), Lease: 1}}}
	h.mustServe(s, d)
	p := h.deliveries[0].Messages[0].Payload
	// More traffic reuses the reader's buffer.
	h.mustServe(s, &wire.Delivery{Messages: []wire.DeliveredMessage{{Queue: "q", Payload: []byte("XXXXX"), Lease: 2}}})
	if !bytes.Equal(p, []byte("hello")) {
		t.Fatalf("payload = %q after more input; want hello", p)
	}
}

// TestTLSBytesFromBroker checks that a broker answering in TLS (a TLS
// port, or a proxy that terminates TLS) fails the connection with
// ErrTLSRequired, whatever the split, rather than as an oversize frame.
func TestTLSBytesFromBroker(t *testing.T) {
	for _, tc := range []struct {
		name  string
		first []byte
		tls   bool
	}{
		{"alert", []byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46}, true},
		{"handshake", []byte{0x16, 0x03, 0x01, 0x00, 0x5a, 0x02}, true},
		{"first byte alone", []byte{0x16}, true},
		{"not TLS", []byte{0x16, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, Config{})
			h.sent()
			err := h.c.Receive(tc.first)
			h.drain()
			if got := errors.Is(err, ErrTLSRequired); got != tc.tls {
				t.Fatalf("Receive(% x) = %v; want ErrTLSRequired: %v", tc.first, err, tc.tls)
			}
			if !h.state.Failed || errors.Is(h.state.Err, ErrTLSRequired) != tc.tls {
				t.Fatalf("state = %+v", h.state)
			}
		})
	}
	// Later bytes are never taken for TLS: a frame's length may start
	// with 0x16 once frames are large.
	h := newHarness(t, Config{})
	h.handshake()
	if err := h.c.Receive([]byte{0x16, 0x03}); errors.Is(err, ErrTLSRequired) {
		t.Fatalf("Receive after the handshake = %v", err)
	}
}
