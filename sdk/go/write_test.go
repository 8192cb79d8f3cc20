package fila

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// pipeBroker plays the broker's end of a net.Pipe, which has no buffer:
// a client write blocks until the broker reads it, so the test decides
// exactly when the client's writes make progress.
type pipeBroker struct {
	t  *testing.T
	nc net.Conn
}

// read reads one whole frame.
func (b *pipeBroker) read() (wire.Header, []byte) {
	b.t.Helper()
	h := b.readHeader()
	body := make([]byte, h.Length)
	if _, err := io.ReadFull(b.nc, body); err != nil {
		b.t.Errorf("broker: read %v body: %v", h.Opcode, err)
	}
	return h, body
}

// readHeader reads the header of the next frame and leaves its body.
func (b *pipeBroker) readHeader() wire.Header {
	b.t.Helper()
	hb := make([]byte, wire.HeaderSize)
	if _, err := io.ReadFull(b.nc, hb); err != nil {
		b.t.Errorf("broker: read header: %v", err)
		return wire.Header{}
	}
	h, _ := wire.ParseHeader(hb)
	return h
}

func (b *pipeBroker) write(reqID uint32, f wire.Frame) {
	b.t.Helper()
	if _, err := b.nc.Write(wire.AppendFrames(nil, reqID, f, wire.DefaultMaxFrameSize)); err != nil {
		b.t.Errorf("broker: write %v: %v", f.Opcode(), err)
	}
}

// connectPipe connects a client, without reconnects or keepalives, to a
// pipeBroker that answers its handshake. Both are closed when the test
// ends.
func connectPipe(ctx context.Context, t *testing.T) (*Client, *pipeBroker) {
	t.Helper()
	cnc, bnc := net.Pipe()
	b := &pipeBroker{t: t, nc: bnc}
	go func() {
		h, _ := b.read()
		b.write(h.RequestID, &wire.HandshakeOk{Version: wire.ProtocolVersion, NodeID: "n1",
			MaxFrameSize: wire.DefaultMaxFrameSize, MaxBatchSize: 4096})
	}()
	c, err := Connect(ctx, "pipe", WithoutReconnect(), WithKeepalive(-1),
		WithDialer(func(context.Context, string) (net.Conn, error) { return cnc, nil }))
	t.Cleanup(func() { bnc.Close() })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.stop) // after a failure; a no-op after Close
	return c, b
}

// waitFor polls cond until it holds; the test fails if it does not
// within a minute, the bound of a client that is stuck.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// TestReadsWhileWriteBlocked stops reading the client's socket in the
// middle of an Enqueue frame, as a broker applying back-pressure does: the
// client must still read and act on what the broker sends (the answer of
// that Enqueue), and, with a write backlog over maxWriteBacklog, take no
// more calls until the socket takes bytes again, then send everything in
// order.
func TestReadsWhileWriteBlocked(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, b := connectPipe(ctx, t)
	bnc := b.nc

	type sent struct {
		res []SendResult
		err error
	}
	send := func(n, size int) chan sent {
		ch := make(chan sent, 1)
		msgs := make([]*Message, n)
		for i := range msgs {
			msgs[i] = NewMessage("q", bytes.Repeat([]byte{byte('a' + i)}, size))
		}
		go func() {
			res, err := c.Producer().SendBatch(ctx, msgs)
			ch <- sent{res, err}
		}()
		return ch
	}

	// A 2 MiB Enqueue: the broker reads its header and stops reading, so
	// the client's writer is blocked in the middle of it.
	first := send(1, 2<<20)
	h1 := b.readHeader()
	if h1.Opcode != wire.OpEnqueue {
		t.Fatalf("first frame %v; want Enqueue", h1.Opcode)
	}
	// A 5 MiB Enqueue fills its frame at once: it is encoded and waits
	// for the writer, over maxWriteBacklog.
	second := send(5, 1<<20)
	waitFor(t, "the second Enqueue frame", func() bool { return c.Stats().EnqueueFrames == 2 })
	// A Ping now waits for the writer to catch up.
	pinged := make(chan error, 1)
	go func() {
		_, err := c.Ping(ctx)
		pinged <- err
	}()
	waitFor(t, "the Ping to be queued", func() bool { return len(c.reqs) == 1 })

	// The broker answers the first Enqueue without reading more: the
	// client reads the answer while its write is still blocked.
	b.write(h1.RequestID, &wire.EnqueueResult{Results: []wire.EnqueueItemResult{{Code: wire.CodeOK, ID: [16]byte{1}}}})
	if r := <-first; r.err != nil || len(r.res) != 1 || r.res[0].Err != nil {
		t.Fatalf("first SendBatch() = %+v, %v; want one result", r.res, r.err)
	}
	if n := len(c.reqs); n != 1 {
		t.Fatalf("%d calls queued after the answer was read; want the Ping still queued (1): the write backlog takes no more calls", n)
	}

	// The broker reads again: the rest of the first frame, the second,
	// then the Ping, in order; each is answered.
	body := make([]byte, h1.Length)
	if _, err := io.ReadFull(bnc, body); err != nil {
		t.Fatal(err)
	}
	var e wire.Enqueue
	if err := e.Decode(body); err != nil || len(e.Messages) != 1 || len(e.Messages[0].Payload) != 2<<20 {
		t.Fatalf("first Enqueue: %d messages, %v; want one of 2 MiB", len(e.Messages), err)
	}
	h2, body := b.read()
	e = wire.Enqueue{}
	if err := e.Decode(body); h2.Opcode != wire.OpEnqueue || err != nil || len(e.Messages) != 5 {
		t.Fatalf("second frame %v with %d messages, %v; want Enqueue with 5", h2.Opcode, len(e.Messages), err)
	}
	for i, m := range e.Messages {
		if len(m.Payload) != 1<<20 || m.Payload[0] != byte('a'+i) {
			t.Fatalf("second Enqueue message %d: %d bytes of %q; want 1 MiB of %q", i, len(m.Payload), m.Payload[:1], string(rune('a'+i)))
		}
	}
	results := make([]wire.EnqueueItemResult, 5)
	for i := range results {
		results[i] = wire.EnqueueItemResult{Code: wire.CodeOK, ID: [16]byte{2, byte(i)}}
	}
	b.write(h2.RequestID, &wire.EnqueueResult{Results: results})
	h3, body := b.read()
	var p wire.Ping
	if err := p.Decode(body); h3.Opcode != wire.OpPing || err != nil {
		t.Fatalf("third frame %v, %v; want Ping", h3.Opcode, err)
	}
	b.write(h3.RequestID, &wire.Pong{Nonce: p.Nonce})

	if r := <-second; r.err != nil || len(r.res) != 5 {
		t.Fatalf("second SendBatch() = %d results, %v; want 5", len(r.res), r.err)
	}
	if err := <-pinged; err != nil {
		t.Fatalf("Ping() = %v", err)
	}

	// Close drains: its GoAway is written before the socket closes.
	closed := make(chan error, 1)
	go func() { closed <- c.Close() }()
	if h, _ := b.read(); h.Opcode != wire.OpGoAway {
		t.Fatalf("frame after Close %v; want GoAway", h.Opcode)
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close() = %v", err)
	}
}

// TestCloseReleasesDeliveriesReadWithUnsubscribeOk sends Deliveries and
// the UnsubscribeOk that follows them in one write, so the client reads
// them at once: every delivery, none of which the application saw, must be
// released by Close, not left leased until its visibility timeout. (The
// client once answered Close before queueing the deliveries read with its
// UnsubscribeOk; many deliveries make that window wide.)
func TestCloseReleasesDeliveriesReadWithUnsubscribeOk(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, b := connectPipe(ctx, t)
	bnc := b.nc

	const n = 1000
	subscribed := make(chan uint32, 1)
	go func() {
		h, _ := b.read()
		b.write(h.RequestID, &wire.SubscribeOk{Prefetch: n})
		subscribed <- h.RequestID
	}()
	sub, err := c.Consumer().Subscribe(ctx, "q", Prefetch(n))
	if err != nil {
		t.Fatal(err)
	}
	subID := <-subscribed

	closed := make(chan error, 1)
	go func() { closed <- sub.Close(ctx) }()
	h, _ := b.read()
	if h.Opcode != wire.OpUnsubscribe {
		t.Fatalf("frame after Close %v; want Unsubscribe", h.Opcode)
	}
	msgs := make([]wire.DeliveredMessage, n)
	deadline := uint64(time.Now().Add(time.Hour).UnixMilli())
	for i := range msgs {
		msgs[i] = wire.DeliveredMessage{ID: [16]byte{byte(i), byte(i >> 8)}, Queue: "q", Payload: []byte("x"),
			Attempt: 1, Lease: uint64(i + 1), LeaseDeadlineAtMS: deadline}
	}
	var buf []byte
	for i := 0; i < n; i += 100 {
		buf = wire.AppendFrames(buf, subID, &wire.Delivery{Messages: msgs[i : i+100]}, wire.DefaultMaxFrameSize)
	}
	buf = wire.AppendFrames(buf, h.RequestID, &wire.UnsubscribeOk{}, wire.DefaultMaxFrameSize)
	if _, err := bnc.Write(buf); err != nil {
		t.Fatal(err)
	}

	// A client that releases nothing sends nothing more: stop waiting.
	bnc.SetReadDeadline(time.Now().Add(30 * time.Second))
	released := map[uint64]bool{}
	for len(released) < n {
		h, body := b.read()
		var r wire.Release
		if t.Failed() || h.Opcode != wire.OpRelease {
			t.Fatalf("frame after UnsubscribeOk %v with %d of %d deliveries released; want Release of the rest", h.Opcode, len(released), n)
		}
		if err := r.Decode(body); err != nil {
			t.Fatal(err)
		}
		res := make([]wire.ItemResult, len(r.Items))
		for i, it := range r.Items {
			released[it.Lease] = true
			res[i].Code = wire.CodeOK
		}
		b.write(h.RequestID, &wire.ReleaseResult{Results: res})
	}
	if err := <-closed; err != nil {
		t.Fatalf("Close() = %v", err)
	}
}

// TestAbandonedSubscribeReleasesItsDeliveries: a Subscribe whose caller
// gave up (its ctx ended) before the broker's SubscribeOk is closed by
// the client, and the deliveries that came with the SubscribeOk, which no
// one will read, are released rather than left leased until their
// visibility timeout.
func TestAbandonedSubscribeReleasesItsDeliveries(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, b := connectPipe(ctx, t)

	sctx, scancel := context.WithCancel(ctx)
	subscribed := make(chan error, 1)
	go func() {
		_, err := c.Consumer().Subscribe(sctx, "q", Prefetch(10))
		subscribed <- err
	}()
	h, _ := b.read()
	if h.Opcode != wire.OpSubscribe {
		t.Fatalf("first frame %v; want Subscribe", h.Opcode)
	}
	scancel()
	if err := <-subscribed; !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe after its ctx ended = %v; want context.Canceled", err)
	}
	m := wire.DeliveredMessage{ID: [16]byte{7}, Queue: "q", Payload: []byte("x"), Attempt: 1, Lease: 42,
		LeaseDeadlineAtMS: uint64(time.Now().Add(time.Hour).UnixMilli())}
	buf := wire.AppendFrames(nil, h.RequestID, &wire.SubscribeOk{Prefetch: 10}, wire.DefaultMaxFrameSize)
	buf = wire.AppendFrames(buf, h.RequestID, &wire.Delivery{Messages: []wire.DeliveredMessage{m}}, wire.DefaultMaxFrameSize)
	if _, err := b.nc.Write(buf); err != nil {
		t.Fatal(err)
	}

	b.nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	h2, body := b.read()
	var u wire.Unsubscribe
	if err := u.Decode(body); h2.Opcode != wire.OpUnsubscribe || err != nil || u.Subscription != h.RequestID {
		t.Fatalf("frame after the abandoned SubscribeOk %v, %v; want Unsubscribe of it", h2.Opcode, err)
	}
	b.write(h2.RequestID, &wire.UnsubscribeOk{})
	h3, body := b.read()
	var r wire.Release
	if h3.Opcode != wire.OpRelease {
		t.Fatalf("frame after UnsubscribeOk %v; want Release of the unread delivery", h3.Opcode)
	}
	if err := r.Decode(body); err != nil || len(r.Items) != 1 || r.Items[0].Lease != m.Lease {
		t.Fatalf("Release %+v, %v; want the delivery's lease", r.Items, err)
	}
	b.write(h3.RequestID, &wire.ReleaseResult{Results: []wire.ItemResult{{Code: wire.CodeOK}}})
}
