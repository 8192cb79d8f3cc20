package e2e

// Tests of what a hostile or careless client can cost the broker: memory
// before the handshake, slots in the connection table, failed handshakes,
// answers it never reads, frames it never finishes, batches without end.
// Each runs against a real fila-server and reports the broker's resident
// size where memory is the point; the assertions on it are generous.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

const mib = 1 << 20

// rssWatch samples a server's resident size every 50ms; stop returns the
// largest sample and the first.
type rssWatch struct {
	srv    *filatest.Server
	stopCh chan struct{}
	done   chan struct{}
	first  int64
	peak   int64
}

func watchRSS(t *testing.T, srv *filatest.Server) *rssWatch {
	t.Helper()
	first, err := srv.RSS()
	if err != nil {
		t.Skipf("cannot read the server's RSS: %v", err)
	}
	w := &rssWatch{srv: srv, stopCh: make(chan struct{}), done: make(chan struct{}), first: first, peak: first}
	go func() {
		defer close(w.done)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-w.stopCh:
				return
			case <-tick.C:
				if n, err := srv.RSS(); err == nil && n > w.peak {
					w.peak = n
				}
			}
		}
	}()
	return w
}

// stop ends the sampling and returns the growth from the first sample to
// the peak, in bytes.
func (w *rssWatch) stop(t *testing.T, what string) int64 {
	close(w.stopCh)
	<-w.done
	t.Logf("%s: broker RSS %.1f MiB before, %.1f MiB at peak (+%.1f MiB)", what,
		float64(w.first)/mib, float64(w.peak)/mib, float64(w.peak-w.first)/mib)
	return w.peak - w.first
}

// bounded reports whether the server's RSS bounds are checked: not for a
// race-built server, whose race detector multiplies its memory use.
func (w *rssWatch) bounded(t *testing.T) bool {
	if w.srv.RaceBuilt(t) {
		t.Logf("race-built fila-server: RSS bound not checked")
		return false
	}
	return true
}

// dialFrom connects to addr from the local address ip (127.0.0.x on
// loopback), so tests can play several client addresses.
func dialFrom(addr, ip string) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	return d.Dial("tcp", addr)
}

// readFrame reads the next frame from nc within d. It never fails the
// test, so it can run on any goroutine.
func readFrame(nc net.Conn, fr *wire.FrameReader, d time.Duration) (wire.Header, wire.Frame, error) {
	buf := make([]byte, 64<<10)
	nc.SetReadDeadline(time.Now().Add(d))
	for {
		h, body, ok, err := fr.Next()
		if err != nil {
			return h, nil, err
		}
		if ok {
			f, err := wire.DecodeFrame(h.Opcode, bytes.Clone(body))
			return h, f, err
		}
		n, err := nc.Read(buf)
		fr.Feed(buf[:n])
		if err != nil && n == 0 {
			return h, nil, err
		}
	}
}

// errorCode returns the code of an Error frame, or 0 for anything else.
func errorCode(f wire.Frame) (wire.Code, string) {
	if ef, ok := f.(*wire.ErrorFrame); ok {
		return ef.Code, ef.Message
	}
	return 0, ""
}

func handshakeFrame(key string) []byte {
	return wire.AppendFrame(nil, 1, &wire.Handshake{MaxVersion: 1, MinVersion: 1, ClientName: "hostile", APIKey: key})
}

// TestPreHandshakeFrameLimit: 40 connections each announce a 16 MiB
// Handshake and send 2 MiB of it. Before the handshake the broker accepts
// frames of at most 64 KiB, so each is refused from its header with
// FRAME_TOO_LARGE, before the body is buffered.
func TestPreHandshakeFrameLimit(t *testing.T) {
	// Each refusal is a failed handshake of the address: a burst as large
	// as the test keeps the failure rate from refusing the later
	// connections at accept when the machine is slow to dial them.
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_HANDSHAKE_FAILURE_BURST=1000"))
	w := watchRSS(t, srv)
	header := wire.AppendHeader(nil, wire.Header{Length: 16 * mib, Opcode: wire.OpHandshake, RequestID: 1})
	body := make([]byte, 2*mib)
	codes := make([]wire.Code, 40)
	var wg sync.WaitGroup
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			nc, err := net.DialTimeout("tcp", srv.Addr, 10*time.Second)
			if err != nil {
				return
			}
			defer nc.Close()
			go func() {
				nc.SetWriteDeadline(time.Now().Add(30 * time.Second))
				if _, err := nc.Write(header); err != nil {
					return
				}
				for off := 0; off < len(body); off += 64 << 10 {
					if _, err := nc.Write(body[off : off+64<<10]); err != nil {
						return // closed by the broker
					}
				}
			}()
			_, f, _ := readFrame(nc, wire.NewFrameReader(0, 0), 30*time.Second)
			codes[i], _ = errorCode(f)
		}()
	}
	wg.Wait()
	growth := w.stop(t, "40 connections sending 2 MiB of a 16 MiB Handshake")
	for i, c := range codes {
		if c != wire.CodeFrameTooLarge {
			t.Errorf("connection %d: got %v; want FRAME_TOO_LARGE from the header", i, c)
		}
	}
	if growth > 32*mib && w.bounded(t) {
		t.Errorf("broker RSS grew %d MiB; want the pre-handshake frames refused before they are buffered", growth/mib)
	}
}

// TestIdleSocketsDoNotLockOut: 1,000 sockets that never handshake, from
// four addresses, against max_connections = 1000. They are not counted
// toward it, and past max_handshaking the oldest are closed, so a real
// client connects, works, and stays connected while more arrive.
func TestIdleSocketsDoNotLockOut(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_MAX_CONNECTIONS=1000", "FILA_SERVER_MAX_HANDSHAKING=200"))
	w := watchRSS(t, srv)
	var idle []net.Conn
	t.Cleanup(func() {
		for _, nc := range idle {
			nc.Close()
		}
	})
	open := func(n int) {
		t.Helper()
		for i := range n {
			nc, err := dialFrom(srv.Addr, fmt.Sprintf("127.0.0.%d", 2+i%4))
			if err != nil {
				t.Fatalf("idle socket %d: %v", len(idle), err)
			}
			idle = append(idle, nc)
		}
	}
	open(1000)

	ctx := ctxT(t, time.Minute)
	c, err := fila.Connect(ctx, srv.Addr, fila.WithoutReconnect())
	if err != nil {
		t.Fatalf("Connect with 1,000 idle sockets open: %v", err)
	}
	defer c.Close()
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	// The oldest idle socket was closed to make room, and told why.
	_, f, err := readFrame(idle[0], wire.NewFrameReader(0, 0), 30*time.Second)
	if code, msg := errorCode(f); code != wire.CodeResourceExhausted {
		t.Errorf("oldest idle socket got %v %q (%v); want RESOURCE_EXHAUSTED", code, msg, err)
	}
	// Each eviction counts as a failed handshake of its address: the
	// addresses that flooded are now refused at accept, before the
	// broker spends a place in the pool on them.
	nc, err := dialFrom(srv.Addr, "127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, f, err = readFrame(nc, wire.NewFrameReader(0, 0), 30*time.Second)
	if code, msg := errorCode(f); code != wire.CodeResourceExhausted || !strings.Contains(msg, "too many failed handshakes") {
		t.Errorf("a new socket from a flooding address got %v %q (%v); want RESOURCE_EXHAUSTED: too many failed handshakes", code, msg, err)
	}
	// A handshaken connection is never evicted by later idle sockets.
	open(500)
	if _, err := c.Ping(ctx); err != nil {
		t.Fatalf("Ping after 500 more idle sockets: %v", err)
	}
	w.stop(t, "1,500 idle sockets")
}

// TestFailedHandshakesSlowedPerAddress: a client trying API keys from one
// address gets UNAUTHORIZED for its first handshake_failure_burst
// attempts, then is refused at accept, without an auth check, while its
// bucket refills at handshake_failure_rate. Other addresses are not
// affected.
func TestFailedHandshakesSlowedPerAddress(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY="+bootstrap,
		"FILA_SERVER_HANDSHAKE_FAILURE_RATE=1", "FILA_SERVER_HANDSHAKE_FAILURE_BURST=5"))
	// attempt tries a wrong key from ip: "unauthorized" (checked),
	// "refused" (turned away at accept) or "other".
	attempt := func(ip string) string {
		nc, err := dialFrom(srv.Addr, ip)
		if err != nil {
			return "other"
		}
		defer nc.Close()
		fr := wire.NewFrameReader(0, 0)
		// A refused connection is told at once; give it a moment before
		// sending, so the refusal is read rather than reset.
		_, f, err := readFrame(nc, fr, 200*time.Millisecond)
		var ne net.Error
		switch {
		case err == nil:
			if code, msg := errorCode(f); code == wire.CodeResourceExhausted && strings.Contains(msg, "failed handshakes") {
				return "refused"
			}
			return "other"
		case !errors.As(err, &ne) || !ne.Timeout():
			return "refused" // closed before we sent a byte: only a refusal does that
		}
		if _, err := nc.Write(handshakeFrame("fila_not-a-real-key")); err != nil {
			return "refused" // closed without reading: only a refusal does that
		}
		_, f, err = readFrame(nc, fr, 30*time.Second)
		code, msg := errorCode(f)
		switch {
		case code == wire.CodeUnauthorized:
			return "unauthorized"
		case code == wire.CodeResourceExhausted && strings.Contains(msg, "failed handshakes"):
			return "refused"
		case errors.Is(err, syscall.ECONNRESET):
			return "refused"
		}
		return "other"
	}

	start := time.Now()
	counts := map[string]int{}
	for range 30 {
		counts[attempt("127.0.0.2")]++
	}
	elapsed := time.Since(start)
	t.Logf("30 attempts from one address in %v: %v", elapsed.Round(time.Millisecond), counts)
	if counts["refused"] == 0 {
		t.Fatalf("no attempt was refused: %v", counts)
	}
	// burst, plus rate a second, plus one for the token refilling now.
	if limit := 5 + int(elapsed.Seconds()) + 1; counts["unauthorized"] > limit {
		t.Errorf("%d keys checked in %v; want at most %d (burst 5, 1 a second)", counts["unauthorized"], elapsed, limit)
	}
	if counts["other"] > 0 {
		t.Errorf("unexpected answers: %v", counts)
	}
	if got := attempt("127.0.0.3"); got != "unauthorized" {
		t.Errorf("a wrong key from another address: %s; want it checked (UNAUTHORIZED)", got)
	}
	if _, err := connectKey(t, srv.Addr, bootstrap); err != nil {
		t.Errorf("a valid key from a third address: %v", err)
	}
}

// TestClientThatDoesNotRead: clients send Pings, or requests the broker
// answers with errors, without reading the answers. The broker stops
// reading them once their answers reach max_outbound_size, so their
// requests stay in their own TCP buffers, and closes them once their
// socket has taken nothing for write_timeout.
func TestClientThatDoesNotRead(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_WRITE_TIMEOUT=2s"))
	for _, tc := range []struct {
		name  string
		frame wire.Frame
	}{
		{"pings", &wire.Ping{Nonce: 1}},
		{"unknown opcodes", &wire.UnknownFrame{Op: 0x0F01}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := dialRaw(t, srv.Addr, true)
			var chunk []byte
			for id := uint32(2); len(chunk) < mib; id++ {
				chunk = wire.AppendFrame(chunk, id, tc.frame)
			}
			w := watchRSS(t, srv)
			sent := 0
			var werr error
			for sent < 128*mib {
				// Generous: the broker closes after 2s without progress.
				rc.nc.SetWriteDeadline(time.Now().Add(2 * time.Minute))
				n, err := rc.nc.Write(chunk)
				sent += n
				if err != nil {
					werr = err
					break
				}
			}
			growth := w.stop(t, fmt.Sprintf("%d MiB of %s not read", sent/mib, tc.name))
			if werr == nil {
				t.Errorf("wrote %d MiB of requests and the broker still read them; want it to stop reading and close", sent/mib)
			}
			var ne net.Error
			if errors.As(werr, &ne) && ne.Timeout() {
				t.Errorf("write timed out on the client side: the broker neither read nor closed")
			}
			if growth > 100*mib && w.bounded(t) {
				t.Errorf("broker RSS grew %d MiB; want the answers bounded", growth/mib)
			}
		})
	}
	// The broker still serves others.
	other := dialRaw(t, srv.Addr, true)
	other.send(2, &wire.Ping{})
	if h, _ := other.recv(); h.Opcode != wire.OpPong {
		t.Fatalf("another client's Ping answered %v", h.Opcode)
	}
}

// TestConsumerThatDoesNotReadIsClosed: a consumer takes 100 messages of
// 256 KiB and never reads its socket. It is closed write_timeout after
// its socket stops taking bytes, its leases return at once, and another
// consumer gets every message, long before their visibility timeout.
func TestConsumerThatDoesNotReadIsClosed(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_WRITE_TIMEOUT=2s", "FILA_QUEUE_VISIBILITY_TIMEOUT=10m"))
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("slow")); err != nil {
		t.Fatal(err)
	}
	const n = 100
	var msgs []*fila.Message
	for i := range n {
		msgs = append(msgs, fila.NewMessage("slow", append([]byte(fmt.Sprint(i, ":")), make([]byte, 256<<10)...)))
	}
	if _, err := c.Producer().SendBatch(ctx, msgs); err != nil {
		t.Fatal(err)
	}

	rc := dialRaw(t, srv.Addr, true)
	rc.send(2, &wire.Subscribe{Queue: "slow", Prefetch: n})
	for {
		st, err := c.Admin().QueueStats(ctx, "slow")
		if err != nil {
			t.Fatal(err)
		}
		if st.Leased == n {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the silent consumer never leased all %d messages: %+v", n, st)
		case <-time.After(20 * time.Millisecond):
		}
	}

	sub, err := c.Consumer().Subscribe(ctx, "slow", fila.Prefetch(n))
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for len(seen) < n {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("after %d of %d messages: %v (the silent consumer kept its leases)", len(seen), n, err)
		}
		seen[strings.SplitN(string(d.Payload()[:8]), ":", 2)[0]] = true
		d.Ack(ctx)
	}
	if !strings.Contains(srv.Log(), "has not read for the write timeout") {
		t.Errorf("the broker did not log closing the silent consumer")
	}
}

// TestPartialFramesCharged: 30 connections each send 15 MiB of a 16 MiB
// frame and stop. The bytes of frames still arriving are charged to
// reassembly_budget, so those past it are closed with RESOURCE_EXHAUSTED,
// and the others are closed with PROTOCOL_VIOLATION once no byte of their
// frame has come for frame_read_timeout. A producer keeps working. (The
// memory limit keeps the garbage of the refused frames from inflating the
// resident size the test reads: the budget bounds what is held, the
// collector what is not yet freed.)
func TestPartialFramesCharged(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_REASSEMBLY_BUDGET=64MB", "FILA_SERVER_FRAME_READ_TIMEOUT=2s", "FILA_SERVER_MEMORY_LIMIT=128MB"))
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("busy")); err != nil {
		t.Fatal(err)
	}
	w := watchRSS(t, srv)

	header := wire.AppendHeader(nil, wire.Header{Length: 16 * mib, Opcode: wire.OpEnqueue, RequestID: 2})
	body := make([]byte, 15*mib)
	type outcome struct {
		code wire.Code
		msg  string
		err  error
	}
	outcomes := make([]outcome, 30)
	// Every connection completes its handshake before any sends its
	// frame: a connection closed for the budget charges its address's
	// failed-handshake bucket, and once that is empty the address's late
	// dialers would be refused at accept, which is not what this tests.
	var wg, handshaken sync.WaitGroup
	start := make(chan struct{})
	for i := range outcomes {
		wg.Add(1)
		handshaken.Add(1)
		go func() {
			defer wg.Done()
			shook := sync.OnceFunc(handshaken.Done)
			defer shook()
			nc, err := net.DialTimeout("tcp", srv.Addr, 10*time.Second)
			if err != nil {
				outcomes[i].err = err
				return
			}
			defer nc.Close()
			fr := wire.NewFrameReader(0, 0)
			nc.Write(handshakeFrame(""))
			if _, f, err := readFrame(nc, fr, 30*time.Second); err != nil || f == nil || f.Opcode() != wire.OpHandshakeOk {
				outcomes[i].err = fmt.Errorf("handshake: %v %v", f, err)
				return
			}
			shook()
			<-start
			go func() {
				nc.SetWriteDeadline(time.Now().Add(time.Minute))
				if _, err := nc.Write(header); err != nil {
					return
				}
				for off := 0; off < len(body); off += mib {
					if _, err := nc.Write(body[off : off+mib]); err != nil {
						return
					}
				}
			}()
			_, f, err := readFrame(nc, fr, time.Minute)
			outcomes[i].code, outcomes[i].msg = errorCode(f)
			outcomes[i].err = err
		}()
	}

	handshaken.Wait()
	close(start)
	// Meanwhile a producer's enqueues complete.
	for i := range 100 {
		if _, err := c.Producer().Enqueue(ctx, "busy", []byte(fmt.Sprint(i))); err != nil {
			t.Fatalf("enqueue %d during the attack: %v", i, err)
		}
	}
	wg.Wait()
	if growth := w.stop(t, "30 connections holding 15 MiB of a 16 MiB frame"); growth > 256*mib && w.bounded(t) {
		t.Errorf("broker RSS grew %d MiB; want the partial frames bounded by the 64 MB budget (and the 128 MB memory limit)", growth/mib)
	}

	counts := map[string]int{}
	for i, o := range outcomes {
		switch {
		case o.code == wire.CodeResourceExhausted:
			counts["over budget"]++
		case o.code == wire.CodeProtocolViolation && strings.Contains(o.msg, "frame incomplete"):
			counts["timed out"]++
		default:
			t.Errorf("connection %d: %v %q (%v); want RESOURCE_EXHAUSTED or the frame timeout", i, o.code, o.msg, o.err)
		}
	}
	t.Logf("outcomes: %v", counts)
	// 64 MB holds at most four 15 MiB partial frames.
	if counts["over budget"] < 26 {
		t.Errorf("%d connections refused for the budget; want at least 26", counts["over budget"])
	}
	if counts["timed out"] == 0 {
		t.Errorf("no stalled frame was timed out")
	}
}

// TestBatchCap: the broker announces max_batch_size at handshake and
// refuses a larger request as a whole with INVALID_ARGUMENT, keeping the
// connection; lists over the protocol's maximums (a message's headers, a
// batch past 65536) are refused the same way before they are decoded. The
// Go SDK splits a larger SendBatch transparently.
func TestBatchCap(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_MAX_BATCH_SIZE=100"))
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("capped")); err != nil {
		t.Fatal(err)
	}

	rc := dialRaw(t, srv.Addr, false)
	rc.send(1, &wire.Handshake{MaxVersion: 1, MinVersion: 1, ClientName: "raw"})
	if _, f := rc.recv(); f.(*wire.HandshakeOk).MaxBatchSize != 100 {
		t.Fatalf("HandshakeOk = %+v; want max_batch_size 100", f)
	}
	msgs := func(n, headers int) []wire.EnqueueMessage {
		out := make([]wire.EnqueueMessage, n)
		for i := range out {
			out[i] = wire.EnqueueMessage{Queue: "capped", Payload: []byte("x"), Headers: make([]wire.MessageHeader, headers)}
		}
		return out
	}
	for _, tc := range []struct {
		name string
		req  wire.Frame
		want string
	}{
		{"over the announced cap", &wire.Enqueue{Messages: msgs(101, 0)}, "at most 100 per request"},
		{"too many headers", &wire.Enqueue{Messages: msgs(1, wire.MaxEnqueueMessageHeaders+1)}, "exceeds the maximum of 1024"},
		{"over the protocol's ceiling", &wire.Ack{Items: make([]wire.LeaseRef, wire.MaxBatchSize+1)}, "exceeds the maximum of 65536"},
	} {
		rc.send(5, tc.req)
		h, f := rc.recv()
		code, msg := errorCode(f)
		if h.RequestID != 5 || code != wire.CodeInvalidArgument || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: answered %v on request %d: %v %q; want INVALID_ARGUMENT saying %q", tc.name, h.Opcode, h.RequestID, code, msg, tc.want)
		}
		rc.send(6, &wire.Ping{Nonce: 6})
		if h, _ := rc.recv(); h.Opcode != wire.OpPong {
			t.Fatalf("%s: the connection did not stay open: %v", tc.name, h.Opcode)
		}
	}
	rc.send(7, &wire.Enqueue{Messages: msgs(100, 0)})
	if _, f := rc.recv(); len(f.(*wire.EnqueueResult).Results) != 100 {
		t.Fatalf("a batch at the cap answered %+v", f)
	}

	var batch []*fila.Message
	for i := range 10_000 {
		batch = append(batch, fila.NewMessage("capped", []byte(fmt.Sprint(i))))
	}
	res, err := c.Producer().SendBatch(ctx, batch)
	if err != nil {
		t.Fatalf("SendBatch of 10,000 to a broker taking 100 per request: %v", err)
	}
	for i := 1; i < len(res); i++ {
		if res[i].Err != nil || bytes.Compare(res[i-1].ID[:], res[i].ID[:]) >= 0 {
			t.Fatalf("result %d: %+v after %+v; want every message enqueued, in order", i, res[i], res[i-1])
		}
	}
	st, err := c.Admin().QueueStats(ctx, "capped")
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != 100+10_000 {
		t.Errorf("queue holds %d ready messages; want %d", st.Ready, 100+10_000)
	}
}

// TestLargeBatchesDoNotStopOthers: while one client enqueues batches of
// the largest size in a loop, another producer's single enqueues keep
// completing.
func TestLargeBatchesDoNotStopOthers(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 5*time.Minute)
	admin := connect(t, srv.Addr)
	for _, q := range []string{"bulk", "single"} {
		if err := admin.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)); err != nil {
			t.Fatal(err)
		}
	}
	bulk := connect(t, srv.Addr)
	var batch []*fila.Message
	for i := range 4096 {
		batch = append(batch, fila.NewMessage("bulk", []byte(fmt.Sprint(i))))
	}
	stop := make(chan struct{})
	var batches atomic.Int64
	bulkDone := make(chan error, 1)
	go func() {
		for {
			select {
			case <-stop:
				bulkDone <- nil
				return
			default:
			}
			if _, err := bulk.Producer().SendBatch(ctx, batch); err != nil {
				bulkDone <- err
				return
			}
			batches.Add(1)
		}
	}()
	single := connect(t, srv.Addr)
	for i := range 200 {
		if _, err := single.Producer().Enqueue(ctx, "single", []byte(fmt.Sprint(i))); err != nil {
			t.Fatalf("single enqueue %d while batches of 4096 flow: %v", i, err)
		}
	}
	close(stop)
	if err := <-bulkDone; err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("bulk producer: %v", err)
	}
	t.Logf("200 single enqueues completed while %d batches of 4096 went in", batches.Load())
}

// TestProtocolFailuresSlowedPerAddress: a client with a valid key that,
// connection after connection, breaks the protocol once handshaken (here
// a frame for request ID 0) is closed each time, and each close counts as
// a failed handshake of its address: after handshake_failure_burst of
// them its next connection is refused at accept, while other addresses
// connect as before.
func TestProtocolFailuresSlowedPerAddress(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_HANDSHAKE_FAILURE_RATE=1", "FILA_SERVER_HANDSHAKE_FAILURE_BURST=5"))
	ctx := ctxT(t, time.Minute)
	bad := wire.AppendFrame(nil, 0, &wire.Ping{Nonce: 1})
	for i := range 5 {
		nc, fr, _, err := handshakeRaw(ctx, srv.Addr, "127.0.0.7", "")
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if _, err := nc.Write(bad); err != nil {
			t.Fatal(err)
		}
		_, f, err := readFrame(nc, fr, 30*time.Second)
		if code, msg := errorCode(f); code != wire.CodeProtocolViolation {
			t.Fatalf("connection %d: a frame with request ID 0 got %v %q (%v); want PROTOCOL_VIOLATION", i, code, msg, err)
		}
		nc.Close()
	}
	nc, err := dialFrom(srv.Addr, "127.0.0.7")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	_, f, err := readFrame(nc, wire.NewFrameReader(0, 0), 30*time.Second)
	if code, msg := errorCode(f); code != wire.CodeResourceExhausted || !strings.Contains(msg, "too many failed handshakes") {
		t.Errorf("a new socket after 5 protocol violations got %v %q (%v); want RESOURCE_EXHAUSTED: too many failed handshakes", code, msg, err)
	}
	other, _, _, err := handshakeRaw(ctx, srv.Addr, "127.0.0.8", "")
	if err != nil {
		t.Fatalf("another address: %v", err)
	}
	other.Close()
}
