package server

import (
	"container/list"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/sdk/core/wire"
)

var syscallEMFILE = syscall.EMFILE

// Limits of a connection's reading and writing.
const (
	// maxHandshakeFrame bounds every frame, and a continuation, before
	// the handshake is done: a Handshake is a few hundred bytes, and a
	// connection that has not authenticated must not make the server
	// buffer more.
	maxHandshakeFrame = 64 << 10
	// freeFrameBytes of a frame still arriving are not charged to
	// Config.ReassemblyBudget: the size of one read.
	freeFrameBytes = 64 << 10
	// writeChunk is the most the writer hands the socket in one write;
	// each write gets a fresh deadline, so Config.WriteTimeout measures
	// lack of progress, not the time to send a large backlog.
	writeChunk = 1 << 20
)

// conn is one client connection.
type conn struct {
	s   *Server
	nc  net.Conn
	id  uint64 // the log's conn attribute: the server's count of connections
	log *slog.Logger
	ctx context.Context // canceled when the connection ends
	end context.CancelFunc

	// Admission state, under Server.adm.mu.
	addr        netip.Prefix  // the address its per-address limits count under
	hasAddr     bool          // false for a remote address that is not IP
	admitted    *list.Element // its place in the handshaking pool, nil once out
	evicted     bool          // closed to make room in the handshaking pool
	established bool          // counted toward Config.MaxConnections

	// Reader goroutine only.
	fr         *wire.FrameReader
	charged    int64 // bytes of fr's pending input charged to Server.reassembling
	handshaken bool
	registered bool      // in Server.byKey
	readDL     time.Time // when the read deadline of a partial frame was last set; zero: no deadline

	// principal is set at handshake, before the connection is registered
	// by key (Server.register); read-only after.
	principal auth.Principal

	peerMaxFrame atomic.Int64

	revokeOnce sync.Once // see revoked

	mu        sync.Mutex
	out       []outItem
	notify    chan struct{} // signalled when out gains items
	closed    bool          // no more items are accepted
	goingAway bool
	subs      map[uint32]*subscription // by request ID
	// inflight holds the requests read and not yet answered, by request
	// ID, each with the bytes reserved for its answer; answering counts
	// the answers queued and not yet written. Both count toward
	// Config.MaxInFlight.
	inflight  map[uint32]request
	answering int
	// outBytes is what the connection's answers may cost: the
	// reservations of the requests in flight plus the estimated size of
	// the frames queued for the writer and not yet written (deliveries
	// excepted: credit bounds them).
	outBytes int64
	// room is signalled when outBytes or inflight shrink or the
	// connection closes: the reader waits on it while over its bounds.
	room sync.Cond
	// enqBytes is the bytes of message bodies this connection has
	// submitted to the shard and not yet seen durable; the reader waits
	// on room while it is over its bound (flow.bound).
	enqBytes int64
	// flow is the connection's enqueues as the server's producers see
	// them; its bulkUntil is under mu.
	flow flow

	// clientName is the handshake's client name, set before the
	// connection serves requests.
	clientName string
	// traced are the traced deliveries awaiting their settle
	// (Config.Tracer).
	traced tracedLeases
}

// outItem is one thing for the writer: a frame, or deliveries to encode.
type outItem struct {
	reqID uint32
	frame wire.Frame
	// deliveries of a subscription, when sub is not nil
	sub  *subscription
	msgs []node.Delivered
	// request marks a response that ends a request in flight.
	request bool
	// closeAfter closes the connection once this item is written.
	closeAfter bool
	// size is the estimated memory of frame, counted in conn.outBytes
	// until written.
	size int64
	// reserve is, for an answer, what its request reserved in
	// conn.outBytes (conn.begin), released once written.
	reserve int64
}

// subscription is a connection's view of one of its subscriptions. It is
// the shard's Sink for it.
type subscription struct {
	c     *conn
	id    node.SubID
	reqID uint32
	queue string

	// ended is set when the broker ended the subscription (its key lost
	// consume on the queue, the key was revoked, the queue was deleted):
	// deliveries still queued for it are not written. Set under c.mu.
	ended atomic.Bool
	// Guarded by c.mu: open is set once SubscribeOk is queued; endErr is
	// why a subscription ended before that, the Subscribe's answer.
	open   bool
	endErr error
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	if _, isTLS := nc.(*tls.Conn); !isTLS {
		nc = &plainConn{Conn: nc}
	}
	id := s.connID.Add(1)
	c := &conn{
		s:        s,
		flow:     flow{p: &s.producers},
		nc:       nc,
		id:       id,
		log:      s.log.With("conn", id, "remote", nc.RemoteAddr().String()),
		ctx:      ctx,
		end:      cancel,
		fr:       wire.NewFrameReader(maxHandshakeFrame, maxHandshakeFrame),
		notify:   make(chan struct{}, 1),
		subs:     map[uint32]*subscription{},
		inflight: map[uint32]request{},
	}
	c.room.L = &c.mu
	c.addr, c.hasAddr = addrKey(nc.RemoteAddr())
	c.peerMaxFrame.Store(wire.DefaultMaxFrameSize)
	if pc, ok := nc.(*plainConn); ok {
		pc.c = c
	}
	return c
}

// serve runs the connection until it ends.
func (c *conn) serve() {
	defer c.cleanup()
	if tc, ok := c.nc.(*tls.Conn); ok && !c.handshakeTLS(tc) {
		return
	}
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		c.writeLoop()
	}()
	c.readLoop()
	c.mu.Lock()
	c.closeLocked()
	c.mu.Unlock()
	<-writerDone
}

// cleanup releases the connection's open subscriptions: their leased
// messages return to their queues at once, each attempt counted as failed.
// (Subscriptions closed with Unsubscribe keep their leases running.)
func (c *conn) cleanup() {
	c.end()
	c.nc.Close()
	c.s.unregister(c)
	c.mu.Lock()
	subs := c.subs
	c.subs = map[uint32]*subscription{}
	c.mu.Unlock()
	for _, sub := range subs {
		if err := c.s.n.Unsubscribe(context.Background(), sub.id, sub.queue, true, nil); err != nil {
			c.log.Debug("release subscription", "queue", sub.queue, "err", err)
		}
	}
}

// push queues an item for the writer. It never blocks; after the
// connection closed, items are dropped.
func (c *conn) push(it outItem) {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.pushLocked(it)
	c.mu.Unlock()
	c.wake()
}

// pushLocked queues an item for the writer, with c.mu held; the caller
// calls wake after unlocking. After the connection closed, items are
// dropped.
//
// An answer ends its request here, not once written: the client may
// reuse the request ID as soon as it reads the answer, which can be
// before the write returns. The request still counts toward the bounds,
// as answering, until the answer is on the socket.
func (c *conn) pushLocked(it outItem) {
	if c.closed {
		return
	}
	if it.frame != nil {
		it.size = frameCost(it.frame)
	}
	if it.request {
		r := c.inflight[it.reqID]
		it.reserve = r.reserve
		delete(c.inflight, it.reqID)
		c.answering++
		if m := c.s.cfg.Metrics; m != nil && r.op != 0 {
			code := wire.CodeOK
			if ef, ok := it.frame.(*wire.ErrorFrame); ok {
				code = ef.Code
			}
			m.Request(r.op, code, time.Since(r.start))
		}
		if code, bad := r.op.Undeclared(it.frame); bad && r.op != 0 {
			// A broker bug: the spec does not let the operation answer
			// so. Tests fail on this line (filatest).
			c.log.Error(UndeclaredCodeMsg, "op", r.op.String(), "code", code.String(), "request", it.reqID)
		}
	}
	c.out = append(c.out, it)
	c.outBytes += it.size
}

// msgNoHandshake opens the error of a connection that sent no handshake
// in time.
const msgNoHandshake = "no handshake within "

// UndeclaredCodeMsg is the message of the error logged when the broker
// answers a request with a code that the spec does not declare for its
// operation (wire.Opcode.Undeclared): a bug, which tests that run a
// fila-server fail on.
const UndeclaredCodeMsg = "answer code not declared for the operation"

// wake tells the writer that items are queued.
func (c *conn) wake() {
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// begin records request reqID, of opcode op, as in flight, reserving
// reserve bytes for its answer; false if a request with that ID is
// already in flight. Reader goroutine only.
func (c *conn) begin(reqID uint32, op wire.Opcode, reserve int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, dup := c.inflight[reqID]; dup {
		return false
	}
	r := request{op: op, reserve: reserve}
	if c.s.cfg.Metrics != nil {
		r.start = time.Now()
	}
	c.inflight[reqID] = r
	c.outBytes += reserve
	return true
}

// A request is one in flight: its opcode, and the bytes reserved in
// conn.outBytes for its answer.
type request struct {
	op      wire.Opcode
	reserve int64
	start   time.Time // when read; set only with Config.Metrics
}

// waitEnqueueRoom blocks the reader until n more bytes of bodies fit in
// the connection's bound on bodies in flight to storage (flow.bound; or
// none are in flight: a larger request goes alone), then counts them;
// rest is what is left of the request after these n bytes. enqueueDone
// gives them back. It returns false once the connection is closed.
// Reader goroutine only.
func (c *conn) waitEnqueueRoom(n, rest int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.flow.admitted(c.enqBytes + n + rest)
	for !c.closed && c.enqBytes > 0 && c.enqBytes+n > c.flow.bound(c.s.cfg.MaxEnqueueInFlight) {
		c.room.Wait()
	}
	if c.closed {
		return false
	}
	c.enqBytes += n
	return true
}

// enqueueDone gives back n bytes counted by waitEnqueueRoom, once the
// shard has answered them. Any goroutine.
func (c *conn) enqueueDone(n int64) {
	c.mu.Lock()
	c.enqBytes -= n
	c.mu.Unlock()
	c.room.Broadcast()
}

// chunkBytes returns the most body bytes one chunk of a large batch
// carries now (flow.chunkBytes). Reader goroutine only.
func (c *conn) chunkBytes() int64 { return c.flow.chunkBytes() }

// waitRoom blocks the reader while the connection's answers are over its
// bounds (Config.MaxInFlight requests, Config.MaxOutbound bytes), so a
// client that does not read its answers stops being read: the pressure
// stays in its TCP connection. It returns false once the connection is
// closed.
func (c *conn) waitRoom() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for !c.closed && (len(c.inflight)+c.answering >= c.s.cfg.MaxInFlight || c.outBytes > c.s.cfg.MaxOutbound) {
		c.room.Wait()
	}
	return !c.closed
}

// frameCost estimates the memory a queued frame holds until written, in
// bytes: its encoded size plus the item and struct around it.
func frameCost(f wire.Frame) int64 {
	const overhead = 128
	switch f := f.(type) {
	case *wire.ErrorFrame:
		return overhead + int64(len(f.Message)+len(f.LeaderHint))
	case *wire.Pong, *wire.SubscribeOk, *wire.UnsubscribeOk, *wire.GoAway, *wire.HandshakeOk:
		return overhead
	case *wire.EnqueueResult:
		n := int64(overhead)
		for i := range f.Results {
			n += 64 + int64(len(f.Results[i].Message))
		}
		return n
	case *wire.AckResult:
		return overhead + itemResultsCost(f.Results)
	case *wire.NackResult:
		return overhead + itemResultsCost(f.Results)
	case *wire.RetryAfterResult:
		return overhead + itemResultsCost(f.Results)
	case *wire.ReleaseResult:
		return overhead + itemResultsCost(f.Results)
	case *wire.ExtendLeaseResult:
		n := int64(overhead)
		for i := range f.Results {
			n += 48 + int64(len(f.Results[i].Message))
		}
		return n
	}
	// Admin answers: rare, and some (ListQueues) large; measure them.
	return overhead + int64(len(f.AppendTo(nil)))
}

func itemResultsCost(rs []wire.ItemResult) int64 {
	var n int64
	for i := range rs {
		n += 32 + int64(len(rs[i].Message))
	}
	return n
}

// answerReserve is the bytes reserved for the answer of a request read
// from the client, before it is answered: the results of a batch (which
// the handlers allocate at once), or room for a list an admin request may
// return.
func answerReserve(f wire.Frame) int64 {
	const base = 256
	switch f := f.(type) {
	case *wire.Enqueue:
		return base + 64*int64(len(f.Messages))
	case *wire.Ack:
		return base + 64*int64(len(f.Items))
	case *wire.Nack:
		return base + 64*int64(len(f.Items))
	case *wire.RetryAfter:
		return base + 64*int64(len(f.Items))
	case *wire.Release:
		return base + 64*int64(len(f.Items))
	case *wire.ExtendLease:
		return base + 64*int64(len(f.Items))
	case *wire.ListQueues, *wire.QueueStats, *wire.ListConfig, *wire.ListAPIKeys, *wire.GetACL, *wire.Explain:
		return 64 << 10
	case *wire.Peek:
		return 4 << 20 // its result's bound
	}
	return base
}

// respond answers request reqID with f, ending the request in flight.
func (c *conn) respond(reqID uint32, f wire.Frame) {
	c.push(outItem{reqID: reqID, frame: f, request: true})
}

// respondErr answers request reqID with an Error frame for err.
func (c *conn) respondErr(reqID uint32, err error) {
	c.respond(reqID, errorFrame(err))
}

func errorFrame(err error) *wire.ErrorFrame {
	f := &wire.ErrorFrame{Code: CodeOf(err), Message: err.Error()}
	var nl *fault.NotLeader
	if errors.As(err, &nl) {
		f.LeaderHint = nl.Leader
	}
	return f
}

// fail sends a connection-scoped Error and closes the connection once it
// is written. Before the handshake is done, a failure that is the
// client's doing (anything but RESOURCE_EXHAUSTED, a limit of the
// server's) is charged to its address's failed-handshake bucket; after
// it, every failure is (a protocol violation, a malformed frame, the
// reassembly budget). Reader goroutine only.
func (c *conn) fail(reqID uint32, code wire.Code, msg string) {
	if !c.handshaken {
		c.handshakeFailed(code, msg)
		if code != wire.CodeResourceExhausted {
			c.s.adm.failed(c)
		}
		c.log.Debug("closing connection before handshake", "code", code, "reason", msg)
	} else {
		// A client that broke the protocol or a limit of the connection
		// (a partial frame held too long, the reassembly budget) pays as
		// for a failed handshake: reconnecting at once to do it again is
		// refused at accept once its address's bucket is empty.
		c.s.adm.failed(c)
		c.log.Info("closing connection", "code", code, "reason", msg)
	}
	c.shut(reqID, code, msg)
}

// failQuiet is fail without the log line, for failures that are logged
// rate-limited (see limitedAudit). Before the handshake, it charges the
// address's failed-handshake bucket as fail does.
func (c *conn) failQuiet(reqID uint32, code wire.Code, msg string) {
	if !c.handshaken {
		c.handshakeFailed(code, msg)
	}
	if !c.handshaken && code != wire.CodeResourceExhausted {
		c.s.adm.failed(c)
	}
	c.shut(reqID, code, msg)
}

// handshakeFailed counts a connection closed before its handshake for
// the fila_handshakes_failed_total metric.
func (c *conn) handshakeFailed(code wire.Code, msg string) {
	if c.s.cfg.Metrics == nil {
		return
	}
	reason := code.String()
	if strings.HasPrefix(msg, msgNoHandshake) {
		reason = "timeout"
	}
	c.s.cfg.Metrics.HandshakeFailed(reason)
}

// evict closes a connection still handshaking to make room for a newer
// one. Any goroutine.
func (c *conn) evict(msg string) {
	c.log.Debug("closing connection before handshake", "code", wire.CodeResourceExhausted, "reason", msg)
	c.shut(0, wire.CodeResourceExhausted, msg)
}

// shut queues an Error frame and closes the connection once it is
// written; nothing queued after it is sent.
func (c *conn) shut(reqID uint32, code wire.Code, msg string) {
	c.push(outItem{reqID: reqID, frame: &wire.ErrorFrame{Code: code, Message: msg}, closeAfter: true})
	c.mu.Lock()
	c.closed = true // nothing after the error
	c.room.Broadcast()
	c.mu.Unlock()
}

func (c *conn) closeLocked() {
	c.closed = true
	c.room.Broadcast()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

// close ends the connection now.
func (c *conn) close() {
	c.mu.Lock()
	c.closeLocked()
	c.mu.Unlock()
	c.end()
	c.nc.Close()
}

// goAway tells the client the server is leaving; the connection closes
// once the client's requests in flight are answered.
func (c *conn) goAway(code wire.Code, msg string) {
	c.mu.Lock()
	if c.goingAway || c.closed {
		c.mu.Unlock()
		return
	}
	// Queue the GoAway in the same critical section that marks the
	// connection going away, so the writer cannot finish the connection
	// between the two and drop it.
	c.goingAway = true
	c.out = append(c.out, outItem{frame: &wire.GoAway{Code: code, Message: msg}})
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
	c.maybeFinishGoAway()
}

func (c *conn) maybeFinishGoAway() {
	c.mu.Lock()
	done := c.goingAway && len(c.inflight) == 0 && c.answering == 0 && !c.closed
	if done {
		c.out = append(c.out, outItem{closeAfter: true})
		c.closed = true
	}
	c.mu.Unlock()
	if done {
		select {
		case c.notify <- struct{}{}:
		default:
		}
	}
}

func (c *conn) readLoop() {
	defer func() { c.s.reassembling.Add(-c.charged) }()
	// Until the handshake, reads are small: a Handshake is, and a socket
	// that never sends one should cost little. Reads go straight into the
	// frame reader's buffer (no copy from a buffer of our own).
	room := 4 << 10
	c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.HandshakeTimeout))
	for {
		if c.handshaken {
			room = 64 << 10
			c.armFrameDeadline()
		}
		n, err := c.nc.Read(c.fr.Room(room))
		c.fr.Fed(n)
		if n > 0 {
			for {
				h, body, ok, ferr := c.fr.Next()
				if ferr != nil {
					var ce *wire.ConnError
					if errors.As(ferr, &ce) {
						c.fail(0, ce.Code, ce.Reason)
					} else {
						c.fail(0, wire.CodeMalformedFrame, ferr.Error())
					}
					return
				}
				if !ok {
					break
				}
				if c.handshaken && !c.waitRoom() {
					return
				}
				if !c.dispatch(h, body) {
					return
				}
			}
			if !c.chargeReassembly() {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				var ne net.Error
				switch {
				case errors.As(err, &ne) && ne.Timeout() && !c.handshaken:
					c.fail(0, wire.CodeProtocolViolation, msgNoHandshake+c.s.cfg.HandshakeTimeout.String())
				case errors.As(err, &ne) && ne.Timeout():
					c.fail(0, wire.CodeProtocolViolation, fmt.Sprintf("frame incomplete: %d bytes received, none for %v", c.fr.Buffered(), c.s.cfg.FrameReadTimeout))
				default:
					c.log.Debug("read", "err", err)
				}
			}
			return
		}
		c.mu.Lock()
		closed := c.closed
		c.mu.Unlock()
		if closed {
			return
		}
	}
}

// armFrameDeadline sets the read deadline after the handshake: while part
// of a frame is buffered, more of it must arrive within
// Config.FrameReadTimeout; with nothing buffered the connection may stay
// idle (keepalive is the client's business). The deadline moves only
// when an eighth of the timeout has passed since it was last set, so a
// frame arriving in many reads does not reset a timer on each, and a
// reader that was held up (waiting for room, or for the shard) gets a
// fresh deadline before it reads again.
func (c *conn) armFrameDeadline() {
	partial := c.fr.Buffered() > 0
	switch {
	case partial:
		now := time.Now()
		if to := c.s.cfg.FrameReadTimeout; c.readDL.IsZero() || now.Sub(c.readDL) > to/8 {
			c.nc.SetReadDeadline(now.Add(to))
			c.readDL = now
		}
	case !c.readDL.IsZero():
		c.nc.SetReadDeadline(time.Time{})
		c.readDL = time.Time{}
	}
}

// chargeReassembly charges the bytes the frame reader holds for input
// still arriving (a partial frame beyond freeFrameBytes, the frames of a
// continuation) to the server's budget, or closes the connection with
// RESOURCE_EXHAUSTED and returns false if the budget has no room: a client
// that starts a huge request, or many clients that do, cannot take the
// broker's memory from the others.
func (c *conn) chargeReassembly() bool {
	held := int64(max(c.fr.Held()-freeFrameBytes, 0))
	d := held - c.charged
	if d <= 0 {
		if d < 0 {
			c.s.reassembling.Add(d)
			c.charged = held
		}
		return true
	}
	for {
		cur := c.s.reassembling.Load()
		if cur+d > c.s.cfg.ReassemblyBudget {
			// Give back what this connection holds at once, so that the
			// others see the room before it has closed.
			c.s.reassembling.Add(-c.charged)
			c.charged = 0
			c.fail(0, wire.CodeResourceExhausted, fmt.Sprintf(
				"request of %d bytes (as announced, %d received): the server's budget of %d bytes for requests still arriving, shared by all connections, is exhausted",
				c.fr.Held(), c.fr.Buffered(), c.s.cfg.ReassemblyBudget))
			return false
		}
		if c.s.reassembling.CompareAndSwap(cur, cur+d) {
			c.charged = held
			return true
		}
	}
}

// An outWriter writes the connection's frames in chunks of about
// writeChunk bytes, each with a fresh deadline: a client that stops
// reading is closed Config.WriteTimeout after the socket last took
// bytes, and a large backlog is never encoded into one buffer.
type outWriter struct {
	c   *conn
	buf []byte
	dl  time.Time // when the write deadline was last set
	// arena holds the payloads of the deliveries being encoded, bodies
	// their headers (readBodies).
	arena  []byte
	bodies []body
}

// full reports whether buf should be written before more is added.
func (w *outWriter) full() bool { return len(w.buf) >= writeChunk }

// flush writes buf. An error (the write deadline passed, the connection
// failed) means the connection must close.
func (w *outWriter) flush() error {
	if len(w.buf) == 0 {
		return nil
	}
	now := time.Now()
	if to := w.c.s.cfg.WriteTimeout; now.Sub(w.dl) > to/8 {
		w.c.nc.SetWriteDeadline(now.Add(to))
		w.dl = now
	}
	_, err := w.c.nc.Write(w.buf)
	w.buf = w.buf[:0]
	return err
}

// writeLoop writes queued items until the connection closes.
func (c *conn) writeLoop() {
	w := &outWriter{c: c}
	var batch []outItem
	for {
		c.mu.Lock()
		for len(c.out) == 0 && !c.closed {
			c.mu.Unlock()
			<-c.notify
			c.mu.Lock()
		}
		batch, c.out = c.out, batch[:0]
		closed := c.closed
		c.mu.Unlock()
		if len(batch) == 0 && closed {
			return
		}

		closeAfter := false
		written := 0 // batch[:written] are on the socket
		var err error
		for i := range batch {
			it := &batch[i]
			switch {
			case it.sub != nil && it.sub.ended.Load():
				// Ended by the broker: the leases of these deliveries
				// were released.
			case it.sub != nil:
				_, err = c.appendDeliveries(w, it.sub, it.msgs)
			case it.frame != nil:
				w.buf = wire.AppendFrames(w.buf, it.reqID, it.frame, int(c.peerMaxFrame.Load()))
			}
			if err == nil && (w.full() || it.closeAfter || i == len(batch)-1) {
				err = w.flush()
				if err == nil {
					c.written(batch[written : i+1])
					written = i + 1
				}
			}
			if err != nil {
				break
			}
			if it.closeAfter {
				closeAfter = true
				break
			}
		}
		clear(batch)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				c.log.Info("closing connection: the client has not read for the write timeout", "timeout", c.s.cfg.WriteTimeout)
			} else {
				c.log.Debug("write", "err", err)
			}
			c.close()
			return
		}
		if closeAfter {
			c.close()
			return
		}
		if cap(w.buf) > 4<<20 {
			w.buf = nil // do not pin a large buffer
		}
	}
}

// written releases what the items, now on the socket, held of the
// connection's bounds: their frames' estimated size and, for answers, the
// requests in flight they end.
func (c *conn) written(items []outItem) {
	ended := false
	c.mu.Lock()
	for i := range items {
		it := &items[i]
		c.outBytes -= it.size
		if it.request {
			c.outBytes -= it.reserve
			c.answering--
			ended = true
		}
	}
	c.room.Broadcast()
	c.mu.Unlock()
	if ended {
		c.maybeFinishGoAway()
	}
}

// appendDeliveries reads the messages' bodies and appends Delivery frames
// of at most the peer's max frame size to w, writing w's buffer whenever
// it fills. It returns how many messages it encoded; a message whose
// record is gone (acked or deleted meanwhile) is skipped. An error is
// w's: the connection must close.
//
// The bodies are read readChunk messages at a time (Node.ReadMessages:
// one storage read for a run of messages enqueued together) into the
// writer's arena, which the chunk's frames are encoded from before the
// next chunk reuses it.
func (c *conn) appendDeliveries(w *outWriter, sub *subscription, msgs []node.Delivered) (int, error) {
	maxFrame := int(c.peerMaxFrame.Load())
	var d wire.Delivery
	size := 0
	n := 0
	encode := func() {
		if len(d.Messages) > 0 {
			w.buf = wire.AppendFrames(w.buf, sub.reqID, &d, maxFrame)
			n += len(d.Messages)
			clear(d.Messages) // let go of the arena's payloads
			d.Messages = d.Messages[:0]
			size = 0
		}
	}
	defer w.trimArena()
	for lo := 0; lo < len(msgs); lo += readChunk {
		chunk := msgs[lo:min(lo+readChunk, len(msgs))]
		w.readBodies(c.s.n, chunk)
		for i := range chunk {
			m := &chunk[i]
			rb := &w.bodies[i]
			if errors.Is(rb.err, fault.ErrMessageNotFound) {
				c.log.Debug("delivery record gone", "queue", m.Queue, "err", rb.err)
				continue
			}
			if rb.err != nil {
				c.log.Error("corrupt message record", "queue", m.Queue, "err", rb.err)
				continue
			}
			headers, payload := rb.headers, w.arena[rb.lo:rb.hi:rb.hi]
			if c.s.cfg.Tracer != nil {
				c.traceDeliver(m, headers)
			}
			if m.DeadLettered {
				headers = append(headers,
					wire.MessageHeader{Key: "fila-attempts", Value: fmt.Sprint(m.Attempts)},
					wire.MessageHeader{Key: "fila-error", Value: m.LastError})
			}
			dm := wire.DeliveredMessage{
				ID:                m.ID,
				Queue:             m.Queue,
				Headers:           headers,
				Payload:           payload,
				FairnessKey:       m.FairnessKey,
				Weight:            m.Weight,
				ThrottleKeys:      m.ThrottleKeys,
				OrderingKey:       m.OrderingKey,
				Attempt:           m.Attempt,
				EnqueuedAtMS:      uint64(int64(m.EnqueuedAt) / 1e6),
				LeaseDeadlineAtMS: uint64(int64(m.LeaseDeadline) / 1e6),
				Lease:             m.Lease,
			}
			est := 128 + len(payload) + len(m.Queue) + len(m.FairnessKey)
			for _, h := range headers {
				est += 8 + len(h.Key) + len(h.Value)
			}
			if size > 0 && (size+est > maxFrame || len(w.buf)+size+est > writeChunk) {
				encode()
				if w.full() {
					if err := w.flush(); err != nil {
						return n, err
					}
				}
			}
			d.Messages = append(d.Messages, dm)
			d.Backlog = m.Backlog
			size += est
		}
		// The next chunk reuses the arena: encode this one's frames.
		encode()
		clear(w.bodies)
		if w.full() {
			if err := w.flush(); err != nil {
				return n, err
			}
		}
	}
	return n, nil
}

// readChunk is how many deliveries appendDeliveries reads at once.
const readChunk = 128

// body is one message's body as outWriter.readBodies read it: its headers,
// its payload's place in the arena, or why it could not be read.
type body struct {
	headers []wire.MessageHeader
	lo, hi  int
	err     error
}

// readBodies reads the bodies of msgs into w.bodies (one each, in order)
// and their payloads into w.arena.
func (w *outWriter) readBodies(n *node.Node, msgs []node.Delivered) {
	w.arena = w.arena[:0]
	w.bodies = slices.Grow(w.bodies[:0], len(msgs))[:len(msgs)]
	n.ReadMessages(msgs, func(i int, headers []wire.MessageHeader, payload []byte, err error) {
		lo := len(w.arena)
		w.arena = append(w.arena, payload...)
		w.bodies[i] = body{headers: headers, lo: lo, hi: len(w.arena), err: err}
	})
}

// maxArena bounds the arena an outWriter keeps between deliveries, in
// bytes: a chunk of large messages gets its own, left to the collector.
const maxArena = 1 << 20

// trimArena lets go of an arena grown past maxArena.
func (w *outWriter) trimArena() {
	if cap(w.arena) > maxArena {
		w.arena = nil
	}
}

// Expired implements node.Sink: the client hears of the leases that
// ended, and of the credit they gave back, before any delivery that
// spends it (both go through the same ordered queue). Nothing is sent
// for a subscription the broker has ended: the client has forgotten it.
func (s *subscription) Expired(_ node.SubID, leases []node.ExpiredLease) {
	s.c.traceExpired(leases)
	f := &wire.LeaseExpired{Leases: make([]wire.ExpiredLease, len(leases))}
	for i, l := range leases {
		f.Leases[i] = wire.ExpiredLease{ID: l.ID, Lease: l.Lease}
	}
	c := s.c
	c.mu.Lock()
	if !s.ended.Load() {
		c.pushLocked(outItem{reqID: s.reqID, frame: f})
	}
	c.mu.Unlock()
	c.wake()
}

// Deliver implements node.Sink.
func (s *subscription) Deliver(_ node.SubID, msgs []node.Delivered) {
	if s.ended.Load() {
		return // released: the shard takes the leases back
	}
	s.c.push(outItem{reqID: s.reqID, sub: s, msgs: msgs})
}

// Ended implements node.Sink: the broker closed the subscription.
func (s *subscription) Ended(_ node.SubID, err error) {
	c := s.c
	if err == nil {
		err = fmt.Errorf("subscription %s ended: %w", s.queue, fault.ErrQueueNotFound)
	}
	c.mu.Lock()
	registered := c.subs[s.reqID] == s
	if registered {
		delete(c.subs, s.reqID)
	}
	if s.ended.Load() {
		c.mu.Unlock()
		return // already ended by the connection, and released
	}
	s.ended.Store(true)
	switch {
	case !s.open:
		s.endErr = err
	case registered:
		c.pushLocked(outItem{reqID: s.reqID, frame: errorFrame(err)})
	default:
		// The client unsubscribed (or the connection is closing): it
		// is told nothing more of the subscription.
	}
	c.mu.Unlock()
	c.wake()
}
