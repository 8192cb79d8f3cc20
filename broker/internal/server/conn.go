package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/sdk/core/wire"
)

var syscallEMFILE = syscall.EMFILE

// conn is one client connection.
type conn struct {
	s   *Server
	nc  net.Conn
	log *slog.Logger
	ctx context.Context // canceled when the connection ends
	end context.CancelFunc

	// Reader goroutine only.
	fr         *wire.FrameReader
	charged    int64 // bytes of fr's reassembly charged to Server.reassembling
	handshaken bool
	principal  auth.Principal

	peerMaxFrame atomic.Int64
	inflight     atomic.Int32

	mu        sync.Mutex
	out       []outItem
	notify    chan struct{} // signalled when out gains items
	closed    bool          // no more items are accepted
	goingAway bool
	subs      map[uint32]*subscription // by request ID
}

// outItem is one thing for the writer: a frame, or deliveries to encode.
type outItem struct {
	reqID uint32
	frame wire.Frame
	// deliveries of a subscription, when sub is not nil
	sub  *subscription
	msgs []sched.Delivered
	// request marks a response that ends a request in flight.
	request bool
	// closeAfter closes the connection once this item is written.
	closeAfter bool
}

// subscription is a connection's view of one of its subscriptions. It is
// the shard's Sink for it.
type subscription struct {
	c     *conn
	id    sched.SubID
	reqID uint32
	queue string
}

func newConn(s *Server, nc net.Conn) *conn {
	ctx, cancel := context.WithCancel(context.Background())
	c := &conn{
		s:      s,
		nc:     nc,
		log:    s.log.With("remote", nc.RemoteAddr().String()),
		ctx:    ctx,
		end:    cancel,
		fr:     wire.NewFrameReader(s.cfg.MaxFrameSize, 0),
		notify: make(chan struct{}, 1),
		subs:   map[uint32]*subscription{},
	}
	c.peerMaxFrame.Store(wire.DefaultMaxFrameSize)
	return c
}

// serve runs the connection until it ends.
func (c *conn) serve() {
	defer c.cleanup()
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
	c.mu.Lock()
	subs := c.subs
	c.subs = map[uint32]*subscription{}
	c.mu.Unlock()
	for _, sub := range subs {
		if err := c.s.sh.Unsubscribe(context.Background(), sub.id, true, nil); err != nil {
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
	c.out = append(c.out, it)
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
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
	return &wire.ErrorFrame{Code: CodeOf(err), Message: err.Error()}
}

// fail sends a connection-scoped Error and closes the connection once it
// is written.
func (c *conn) fail(reqID uint32, code wire.Code, msg string) {
	c.log.Info("closing connection", "code", code, "reason", msg)
	c.push(outItem{reqID: reqID, frame: &wire.ErrorFrame{Code: code, Message: msg}, closeAfter: true})
	c.mu.Lock()
	c.closed = true // nothing after the error
	c.mu.Unlock()
}

func (c *conn) closeLocked() {
	c.closed = true
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
	done := c.goingAway && c.inflight.Load() == 0 && !c.closed
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
	buf := make([]byte, 64<<10)
	c.nc.SetReadDeadline(time.Now().Add(c.s.cfg.HandshakeTimeout))
	for {
		n, err := c.nc.Read(buf)
		if n > 0 {
			c.fr.Feed(buf[:n])
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
				if errors.As(err, &ne) && ne.Timeout() && !c.handshaken {
					c.fail(0, wire.CodeProtocolViolation, "no handshake within "+c.s.cfg.HandshakeTimeout.String())
				} else {
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

// chargeReassembly charges the growth of the frame reader's reassembly
// buffer to the server's budget, or closes the connection with
// RESOURCE_EXHAUSTED and returns false if the budget has no room: a
// client that starts a huge continued request, or many clients that do,
// cannot take the broker's memory from the others.
func (c *conn) chargeReassembly() bool {
	held := int64(c.fr.Reassembling())
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
				"continued request of %d bytes so far: the server's reassembly budget of %d bytes, shared by all connections, is exhausted",
				held, c.s.cfg.ReassemblyBudget))
			return false
		}
		if c.s.reassembling.CompareAndSwap(cur, cur+d) {
			c.charged = held
			return true
		}
	}
}

// writeLoop writes queued items until the connection closes.
func (c *conn) writeLoop() {
	var buf []byte
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

		buf = buf[:0]
		closeAfter := false
		ended := 0
		for i := range batch {
			it := &batch[i]
			switch {
			case it.sub != nil:
				buf = c.appendDeliveries(buf, it.sub, it.msgs)
			case it.frame != nil:
				buf = wire.AppendFrames(buf, it.reqID, it.frame, int(c.peerMaxFrame.Load()))
			}
			if it.request {
				ended++
			}
			if it.closeAfter {
				closeAfter = true
				break
			}
		}
		clear(batch)
		if len(buf) > 0 {
			if _, err := c.nc.Write(buf); err != nil {
				c.log.Debug("write", "err", err)
				c.close()
				return
			}
		}
		if ended > 0 {
			c.inflight.Add(int32(-ended))
			c.maybeFinishGoAway()
		}
		if closeAfter {
			c.close()
			return
		}
		if cap(buf) > 4<<20 {
			buf = nil // do not pin a large buffer
		}
	}
}

// appendDeliveries reads the messages' bodies and appends Delivery frames
// of at most the peer's max frame size. A message whose record is gone
// (acked or deleted meanwhile) is skipped.
func (c *conn) appendDeliveries(buf []byte, sub *subscription, msgs []sched.Delivered) []byte {
	maxFrame := int(c.peerMaxFrame.Load())
	var d wire.Delivery
	size := 0
	flush := func() {
		if len(d.Messages) > 0 {
			buf = wire.AppendFrames(buf, sub.reqID, &d, maxFrame)
			d.Messages = d.Messages[:0]
			size = 0
		}
	}
	for i := range msgs {
		m := &msgs[i]
		rec, err := c.s.sh.ReadRecord(m.Key)
		if err != nil {
			c.log.Debug("delivery record gone", "queue", m.Queue, "err", err)
			continue
		}
		body, err := sched.MessageBody(rec)
		if err != nil {
			c.log.Error("corrupt message record", "queue", m.Queue, "err", err)
			continue
		}
		headers, payload, err := decodeBody(body)
		if err != nil {
			c.log.Error("corrupt message body", "queue", m.Queue, "err", err)
			continue
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
		if size > 0 && size+est > maxFrame {
			flush()
		}
		d.Messages = append(d.Messages, dm)
		size += est
	}
	flush()
	return buf
}

// Expired implements shard.Sink: the client hears of the leases that
// ended, and of the credit they gave back, before any delivery that
// spends it (both go through the same ordered queue).
func (s *subscription) Expired(_ sched.SubID, leases []sched.ExpiredLease) {
	f := &wire.LeaseExpired{Leases: make([]wire.ExpiredLease, len(leases))}
	for i, l := range leases {
		f.Leases[i] = wire.ExpiredLease{ID: l.ID, Lease: l.Lease}
	}
	s.c.push(outItem{reqID: s.reqID, frame: f})
}

// Deliver implements shard.Sink.
func (s *subscription) Deliver(_ sched.SubID, msgs []sched.Delivered) {
	s.c.push(outItem{reqID: s.reqID, sub: s, msgs: msgs})
}

// Ended implements shard.Sink: the broker closed the subscription.
func (s *subscription) Ended(_ sched.SubID, err error) {
	s.c.mu.Lock()
	delete(s.c.subs, s.reqID)
	s.c.mu.Unlock()
	if err == nil {
		err = fmt.Errorf("subscription %s ended: %w", s.queue, fault.ErrQueueNotFound)
	}
	s.c.push(outItem{reqID: s.reqID, frame: errorFrame(err)})
}
