package e2e

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

// rawConn speaks frames to the server without the client core, to test
// the server's answers byte for byte.
type rawConn struct {
	t  *testing.T
	nc net.Conn
	fr *wire.FrameReader
}

func dialRaw(t *testing.T, addr string, handshake bool) *rawConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	rc := &rawConn{t: t, nc: nc, fr: wire.NewFrameReader(0, 0)}
	if handshake {
		rc.send(1, &wire.Handshake{MaxVersion: 1, MinVersion: 1, ClientName: "raw"})
		if h, f := rc.recv(); h.Opcode != wire.OpHandshakeOk {
			t.Fatalf("handshake answered by %v %+v", h.Opcode, f)
		}
	}
	return rc
}

func (rc *rawConn) send(id uint32, f wire.Frame) {
	rc.t.Helper()
	if _, err := rc.nc.Write(wire.AppendFrame(nil, id, f)); err != nil {
		rc.t.Fatal(err)
	}
}

// recv returns the next frame; it fails the test on timeout or close.
func (rc *rawConn) recv() (wire.Header, wire.Frame) {
	rc.t.Helper()
	h, f, err := rc.next()
	if err != nil {
		rc.t.Fatalf("recv: %v", err)
	}
	return h, f
}

func (rc *rawConn) next() (wire.Header, wire.Frame, error) {
	buf := make([]byte, 64<<10)
	rc.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		h, body, ok, err := rc.fr.Next()
		if err != nil {
			return h, nil, err
		}
		if ok {
			f, err := wire.DecodeFrame(h.Opcode, bytes.Clone(body))
			return h, f, err
		}
		n, err := rc.nc.Read(buf)
		rc.fr.Feed(buf[:n])
		if err != nil && n == 0 {
			return h, nil, err
		}
	}
}

// TestEveryRequestOpcodeAnswered sends each request opcode of the protocol
// and checks the answer is its response frame or an Error whose code the
// operation may return.
func TestEveryRequestOpcodeAnswered(t *testing.T) {
	srv := filatest.Start(t)
	rc := dialRaw(t, srv.Addr, true)
	var id uint32 = 1
	requests := []wire.Frame{
		&wire.Ping{Nonce: 42},
		&wire.CreateQueue{Name: "q"},
		&wire.Enqueue{Messages: []wire.EnqueueMessage{{Queue: "q", Payload: []byte("x")}, {Queue: "missing", Payload: []byte("y")}}},
		&wire.ListQueues{},
		&wire.QueueStats{Name: "q"},
		&wire.Explain{Queue: "q", ID: [16]byte{1}},
		&wire.SetConfig{Key: "throttle.k", Value: "10,10"},
		&wire.GetConfig{Key: "throttle.k"},
		&wire.ListConfig{Prefix: "throttle."},
		&wire.DeleteConfig{Key: "throttle.k"},
		&wire.Redrive{DeadLetterQueue: "q.dlq", Count: 0},
		&wire.PurgeQueue{Name: "q.dlq"},
		&wire.Peek{Queue: "q", Count: 10},
		&wire.Ack{Items: []wire.LeaseRef{{Queue: "q", ID: [16]byte{1}, Lease: 1}}},
		&wire.Nack{Items: []wire.NackItem{{Queue: "q", ID: [16]byte{1}, Lease: 1, Reason: "r"}}},
		&wire.RetryAfter{Items: []wire.RetryAfterItem{{Queue: "q", ID: [16]byte{1}, Lease: 1, DelayMS: 10}}},
		&wire.ExtendLease{Items: []wire.ExtendLeaseItem{{Queue: "q", ID: [16]byte{1}, Lease: 1, DurationMS: 10}}},
		&wire.Release{Items: []wire.LeaseRef{{Queue: "q", ID: [16]byte{1}, Lease: 1}}},
		&wire.Unsubscribe{Subscription: 999},
		&wire.CreateAPIKey{Name: "k"},
		&wire.ListAPIKeys{},
		&wire.RevokeAPIKey{KeyID: "nope"},
		&wire.SetACL{KeyID: "nope"},
		&wire.GetACL{KeyID: "nope"},
		&wire.Topology{Queue: "q"},
		&wire.ClusterStatus{},
		&wire.MoveQueue{Queue: "q", Replicas: []uint64{1, 2, 3}},
		&wire.DrainNode{NodeID: 1},
		&wire.Rebalance{DryRun: true},
		&wire.AddNode{NodeID: 2, PeerAddr: "127.0.0.1:1"},
		&wire.RemoveNode{NodeID: 2},
		&wire.DeleteQueue{Name: "q"},
		&wire.Subscribe{Queue: "gone", Prefetch: 1},
	}
	seen := map[wire.Opcode]bool{}
	for _, req := range requests {
		id++
		op := req.Opcode()
		seen[op] = true
		rc.send(id, req)
		h, f := rc.recv()
		if h.RequestID != id {
			t.Fatalf("%v: answer for request %d; want %d", op, h.RequestID, id)
		}
		switch got := f.(type) {
		case *wire.ErrorFrame:
			if got.Code.Scope() != wire.ScopeStatus && !op.Codes().Has(got.Code) {
				t.Errorf("%v answered %v (%s), which it may not return", op, got.Code, got.Message)
			}
			t.Logf("%v → %v: %s", op, got.Code, got.Message)
		default:
			if h.Opcode != op.Response() {
				t.Errorf("%v answered by %v; want %v", op, h.Opcode, op.Response())
			}
			if res, ok := f.(*wire.EnqueueResult); ok {
				if len(res.Results) != 2 || res.Results[0].Code != wire.CodeOK || res.Results[1].Code != wire.CodeQueueNotFound {
					t.Errorf("partial enqueue = %+v; want OK then QUEUE_NOT_FOUND", res.Results)
				}
			}
		}
	}
	for op := wire.Opcode(1); op < 0x0400; op++ {
		if op.Kind() == wire.KindRequest && op != wire.OpHandshake && !seen[op] {
			t.Errorf("request opcode %v not exercised", op)
		}
	}
}

func TestUnknownOpcodeKeepsConnection(t *testing.T) {
	srv := filatest.Start(t)
	rc := dialRaw(t, srv.Addr, true)
	rc.send(7, &wire.UnknownFrame{Op: 0x0F01, Body: []byte("future")})
	h, f := rc.recv()
	ef, ok := f.(*wire.ErrorFrame)
	if !ok || h.RequestID != 7 || ef.Code != wire.CodeUnknownOpcode {
		t.Fatalf("unknown opcode answered %v %+v; want UNKNOWN_OPCODE on request 7", h.Opcode, f)
	}
	rc.send(8, &wire.Ping{Nonce: 1})
	if h, _ := rc.recv(); h.Opcode != wire.OpPong || h.RequestID != 8 {
		t.Fatalf("ping after unknown opcode answered %v", h.Opcode)
	}
}

func TestProtocolViolationsClose(t *testing.T) {
	srv := filatest.Start(t)
	for _, tc := range []struct {
		name      string
		handshake bool
		frames    []byte
		code      wire.Code
	}{
		{"frame before handshake", false, wire.AppendFrame(nil, 1, &wire.Ping{}), wire.CodeProtocolViolation},
		{"second handshake", true, wire.AppendFrame(nil, 5, &wire.Handshake{MaxVersion: 1, MinVersion: 1}), wire.CodeProtocolViolation},
		{"response opcode from client", true, wire.AppendFrame(nil, 5, &wire.EnqueueResult{}), wire.CodeProtocolViolation},
		{"unsupported version", false, wire.AppendFrame(nil, 1, &wire.Handshake{MaxVersion: 9, MinVersion: 7}), wire.CodeUnsupportedVersion},
		{"malformed body", true, append(wire.AppendHeader(nil, wire.Header{Length: 4, Opcode: wire.OpEnqueue, RequestID: 5}), 0xff, 0xff, 0xff, 0xff), wire.CodeMalformedFrame},
		{"truncated frame then close", true, wire.AppendHeader(nil, wire.Header{Length: 100, Opcode: wire.OpEnqueue, RequestID: 5}), 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialRaw(t, srv.Addr, tc.handshake)
			if _, err := rc.nc.Write(tc.frames); err != nil {
				t.Fatal(err)
			}
			if tc.code == 0 {
				// The server waits for the rest; a client that hangs up
				// costs nothing. The server must still serve others.
				rc.nc.Close()
				other := dialRaw(t, srv.Addr, true)
				other.send(2, &wire.Ping{})
				if h, _ := other.recv(); h.Opcode != wire.OpPong {
					t.Fatalf("server did not answer another client")
				}
				return
			}
			h, f := rc.recv()
			ef, ok := f.(*wire.ErrorFrame)
			if !ok || ef.Code != tc.code {
				t.Fatalf("answered %v %+v; want Error %v", h.Opcode, f, tc.code)
			}
			if _, _, err := rc.next(); !errors.Is(err, io.EOF) {
				t.Fatalf("connection not closed after %v: %v", tc.code, err)
			}
		})
	}
}

// TestMaxConnections: server.max_connections counts handshaken
// connections, so the third is refused at its handshake.
func TestMaxConnections(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_MAX_CONNECTIONS=2"))
	a := dialRaw(t, srv.Addr, true)
	dialRaw(t, srv.Addr, true)
	over := dialRaw(t, srv.Addr, false)
	over.send(1, &wire.Handshake{MaxVersion: 1, MinVersion: 1, ClientName: "raw"})
	_, f := over.recv()
	if ef, ok := f.(*wire.ErrorFrame); !ok || ef.Code != wire.CodeResourceExhausted {
		t.Fatalf("third connection got %+v; want RESOURCE_EXHAUSTED", f)
	}
	// The first two are served.
	a.send(2, &wire.Ping{Nonce: 9})
	if h, _ := a.recv(); h.Opcode != wire.OpPong {
		t.Fatalf("first connection's ping answered with %v", h.Opcode)
	}
}

// TestReassemblyBudget: two connections each start a 2 MiB request in
// 64 KiB continuation frames against a 3 MiB budget shared by all
// connections. The one that crosses the budget is closed with
// RESOURCE_EXHAUSTED (both may be, if they cross it at the same moment);
// a survivor's request is enqueued; and once both are done the budget is
// free again for a third.
func TestReassemblyBudget(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_REASSEMBLY_BUDGET=3MB", "FILA_SERVER_MAX_FRAME_SIZE=64KB"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := fila.Connect(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("big")); err != nil {
		t.Fatal(err)
	}
	request := wire.AppendFrames(nil, 7, &wire.Enqueue{Messages: []wire.EnqueueMessage{
		{Queue: "big", Payload: make([]byte, 2<<20)},
	}}, 64<<10)
	// The last frame starts after every full 64 KiB frame.
	last := 0
	for last+wire.HeaderSize+64<<10 < len(request) {
		h, err := wire.ParseHeader(request[last:])
		if err != nil {
			t.Fatal(err)
		}
		last += wire.HeaderSize + int(h.Length)
	}

	conns := []*rawConn{dialRaw(t, srv.Addr, true), dialRaw(t, srv.Addr, true)}
	type answer struct {
		i   int
		h   wire.Header
		f   wire.Frame
		err error
	}
	answers := make(chan answer, 2)
	for i, rc := range conns {
		if _, err := rc.nc.Write(request[:last]); err != nil {
			t.Fatal(err)
		}
		go func() {
			h, f, err := rc.next()
			answers <- answer{i, h, f, err}
		}()
	}
	// Together the two partial requests exceed the budget, whatever the
	// order the server reads them in: the one that crosses it is closed.
	a := <-answers
	if ef, ok := a.f.(*wire.ErrorFrame); a.err != nil || !ok || ef.Code != wire.CodeResourceExhausted || a.h.RequestID != 0 {
		t.Fatalf("first answer %v %+v (%v); want RESOURCE_EXHAUSTED for the connection", a.h.Opcode, a.f, a.err)
	}
	other := conns[1-a.i]
	other.nc.Write(request[last:]) // fails if the server closed it already
	a = <-answers
	switch f := a.f.(type) {
	case *wire.EnqueueResult:
		if len(f.Results) != 1 || f.Results[0].Code != wire.CodeOK {
			t.Fatalf("the other connection's request answered %+v; want it enqueued", f.Results)
		}
	case *wire.ErrorFrame:
		if f.Code != wire.CodeResourceExhausted {
			t.Fatalf("the other connection answered %v", f.Code)
		}
	default:
		t.Fatalf("the other connection answered %v %+v (%v)", a.h.Opcode, a.f, a.err)
	}
	// Clients of single frames were never charged; the budget is free
	// again for a third continued request.
	if _, err := c.Admin().ListQueues(ctx); err != nil {
		t.Fatal(err)
	}
	third := dialRaw(t, srv.Addr, true)
	if _, err := third.nc.Write(request); err != nil {
		t.Fatal(err)
	}
	if _, f := third.recv(); f == nil {
		t.Fatal("no answer")
	} else if r, ok := f.(*wire.EnqueueResult); !ok || r.Results[0].Code != wire.CodeOK {
		t.Fatalf("third request answered %+v", f)
	}
}
