package fila

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"runtime"
	"time"

	"github.com/fila-mq/fila/sdk/core"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// Limits of a session's writing.
const (
	// writeTimeout bounds each socket write of at most writeChunk bytes:
	// a broker that takes no bytes for this long fails the connection.
	writeTimeout = 30 * time.Second
	// writeChunk is the most the writer hands the socket in one write,
	// so that writeTimeout measures lack of progress, not the time to
	// send a large backlog.
	writeChunk = 1 << 20
	// maxWriteBacklog is how many bytes may wait for the writer, beyond
	// the buffer it is writing, before the owner goroutine takes no more
	// calls (Sends, requests) until the writer catches up. The owner
	// keeps reading the socket meanwhile: see session.
	maxWriteBacklog = 4 << 20
	// maxWriteBuffer is the largest write buffer kept for reuse; a larger
	// one, grown by a burst, is left to the garbage collector.
	maxWriteBuffer = 2 * maxWriteBacklog
)

// session is one connection attempt: a socket, the core that speaks the
// protocol over it, a goroutine reading the socket and one writing it.
// The owner goroutine owns the session; the reader and the writer exit
// once the socket is closed.
//
// The owner never writes to the socket itself. It copies each Ready's Out
// into a buffer (out) and hands that buffer to the writer whenever the
// writer is idle, taking back the one the writer finished: two buffers
// alternate, writes stay in order, and each hand-over is written at once
// (in writeChunk pieces). So the owner goes on consuming what the reader
// receives while a write waits for the broker. The broker stops reading
// a connection whose answers it cannot write (server.max_outbound_size);
// an owner blocked in a write would stop consuming the answers, the
// reader would stop reading them, and the two ends would wait on each
// other until the broker's write timeout closed the connection.
type session struct {
	epoch   uint64 // counts sessions from 1; deliveries remember theirs
	addr    string
	nc      net.Conn
	conn    *core.Conn
	in      chan []byte // chunks read from the socket
	free    chan []byte // chunks handed back for reuse
	readErr chan error
	stopped chan struct{} // closed by close: the reader and the writer stop
	start   time.Time

	// Writing. out, spare and writing belong to the owner goroutine.
	out     []byte         // bytes not yet handed to the writer, in order
	spare   []byte         // the buffer the writer last finished, for reuse
	writing bool           // the writer holds a buffer
	toWrite chan []byte    // owner to writer: one buffer at a time
	wrote   chan writeDone // writer to owner: the buffer back, and the error
}

// writeDone is a buffer the writer finished, and the write's error.
type writeDone struct {
	buf []byte
	err error
}

// dial connects to addr (TCP, then TLS when configured) and starts a
// session whose core has the Handshake queued.
func (c *Client) dial(ctx context.Context, addr string, epoch uint64) (*session, error) {
	o := &c.opts
	nc, err := o.dialer(ctx, addr)
	if err != nil {
		return nil, err
	}
	if o.tls != nil {
		cfg := o.tls.Clone()
		if cfg.ServerName == "" {
			host, _, _ := net.SplitHostPort(addr)
			cfg.ServerName = host
		}
		tc := tls.Client(nc, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			var rhe tls.RecordHeaderError
			if errors.As(err, &rhe) && rhe.Conn != nil {
				// The broker's first bytes are not TLS: a plaintext port,
				// whose Fila Error frame the TLS library cannot read.
				return nil, &tlsMismatchError{err: err}
			}
			return nil, fmt.Errorf("tls: %w", err)
		}
		nc = tc
	}
	if tcp, ok := nc.(*net.TCPConn); ok {
		tcp.SetNoDelay(true)
	}
	s := &session{
		epoch:   epoch,
		addr:    addr,
		nc:      nc,
		in:      make(chan []byte, 8),
		free:    make(chan []byte, 8),
		readErr: make(chan error, 1),
		stopped: make(chan struct{}),
		toWrite: make(chan []byte, 1),
		wrote:   make(chan writeDone, 1),
		start:   time.Now(),
		conn: core.New(core.Config{
			ClientName:        o.clientName,
			APIKey:            o.apiKey,
			KeepaliveInterval: o.keepalive,
			KeepaliveTimeout:  o.dialTimeout,
		}),
	}
	s.conn.Tick(s.now())
	go s.readLoop()
	go s.writeLoop()
	return s, nil
}

func (s *session) now() core.Time { return core.Time(time.Since(s.start)) }

// readLoop reads the socket into chunks for the owner goroutine until the
// socket fails or the session is closed.
func (s *session) readLoop() {
	for {
		var buf []byte
		select {
		case buf = <-s.free:
		default:
			buf = make([]byte, 64<<10)
		}
		n, err := s.nc.Read(buf)
		if n > 0 {
			select {
			case s.in <- buf[:n]:
			case <-s.stopped:
				return
			}
		}
		if err != nil {
			s.readErr <- err // buffered; the only send
			return
		}
	}
}

func (s *session) close() {
	s.nc.Close()
	close(s.stopped)
}

// writeLoop writes the buffers the owner hands over, in order, and hands
// each back with the write's error, until a write fails or the session is
// closed.
func (s *session) writeLoop() {
	for {
		select {
		case b := <-s.toWrite:
			err := s.write(b)
			s.wrote <- writeDone{buf: b, err: err} // buffered; the owner hands over one buffer at a time
			if err != nil {
				return
			}
		case <-s.stopped:
			return
		}
	}
}

// write writes b in pieces of at most writeChunk bytes, each with a fresh
// deadline. Runs on the writer goroutine.
func (s *session) write(b []byte) error {
	for len(b) > 0 {
		n := min(len(b), writeChunk)
		s.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		if _, err := s.nc.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

// queueOut copies b, a Ready's Out, after the bytes waiting for the
// writer: the core reuses Out once Advance is called. Runs on the owner
// goroutine.
func (s *session) queueOut(b []byte) {
	s.out = append(s.out, b...)
}

// flushOut hands the waiting bytes to the writer if it is idle. Runs on
// the owner goroutine; never blocks.
func (s *session) flushOut() {
	if s.writing || len(s.out) == 0 {
		return
	}
	s.toWrite <- s.out // buffered, and the writer holds nothing
	s.out, s.spare = s.spare[:0], nil
	s.writing = true
}

// written takes back the buffer the writer finished and hands it the
// bytes that waited meanwhile. It returns the write's error, which fails
// the session. Runs on the owner goroutine.
func (s *session) written(d writeDone) error {
	s.writing = false
	if d.err != nil {
		return d.err
	}
	if cap(d.buf) <= maxWriteBuffer {
		s.spare = d.buf[:0]
	}
	s.flushOut()
	return nil
}

// backlogged reports whether enough bytes wait for the writer that the
// owner should take no more calls until it catches up.
func (s *session) backlogged() bool { return len(s.out) >= maxWriteBacklog }

// flushed reports whether everything queued was written.
func (s *session) flushed() bool { return !s.writing && len(s.out) == 0 }

// Why a session ended, besides a failure.
var (
	errDrained  = errors.New("fila: client closed")    // Close drained it
	errGoneAway = errors.New("fila: broker went away") // the broker's GoAway, drained
)

// fatalError marks a failure that reconnecting cannot cure: the broker
// refused the API key or the protocol version.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// run is the owner goroutine: the only one that touches the loop and the
// sessions. It serves one session after another until the client closes or
// the connection fails for good.
func (c *Client) run(s *session, ready chan<- error) {
	defer close(c.done)
	l := newLoop(c)
	l.ready = ready
	epoch := s.epoch
	addr := c.addr
	for {
		err := l.serve(s)
		s.close()
		switch {
		case errors.Is(err, errDrained):
			l.finish(ErrClosed)
			return
		case l.ready != nil:
			// The first handshake never completed: Connect reports it.
			l.ready <- err
			l.finish(err)
			return
		case isFatal(err) || !c.opts.reconnect:
			c.opts.logger.Error("fila: connection failed", "addr", s.addr, "err", err)
			l.finish(err)
			return
		}
		c.opts.logger.Warn("fila: connection lost; reconnecting", "addr", s.addr, "err", err)
		l.detach(err)
		if errors.Is(err, errGoneAway) && l.leaderHint != "" {
			addr = l.leaderHint
		}
		l.leaderHint = ""
		for attempt := 0; ; attempt++ {
			if err := c.backoff(attempt); err != nil {
				l.finish(err)
				return
			}
			epoch++
			ctx, cancel := context.WithTimeout(context.Background(), c.opts.dialTimeout)
			ns, err := c.dial(ctx, addr, epoch)
			cancel()
			if err == nil {
				s = ns
				c.stats.reconnects.Add(1)
				c.opts.logger.Info("fila: reconnected", "addr", addr, "attempt", attempt+1)
				break
			}
			c.opts.logger.Warn("fila: reconnect failed", "addr", addr, "attempt", attempt+1, "err", err)
			addr = c.addr
		}
	}
}

// backoff waits before reconnect attempt n (from 0), or returns why the
// client ends instead.
func (c *Client) backoff(n int) error {
	ceil := c.opts.backoffMin << min(n, 30)
	if ceil <= 0 || ceil > c.opts.backoffMax {
		ceil = c.opts.backoffMax
	}
	t := time.NewTimer(rand.N(ceil) + 1)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-c.closeCh:
		return ErrClosed
	case <-c.quit:
		return ErrClosed
	}
}

// serve drives one session until it ends, and returns why: errDrained
// after Close, errGoneAway after the broker's GoAway, a *fatalError when
// the broker refused the handshake, else the failure.
func (l *loop) serve(s *session) error {
	c := l.c
	l.attach(s)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var lingerC <-chan time.Time
	var linger *time.Timer
	defer func() {
		if linger != nil {
			linger.Stop()
		}
	}()
	closeCh := c.closeCh
	took := false // ops were taken: decide whether to send the batch

	for {
		conn := s.conn
		for conn.HasReady() {
			rd := conn.Ready()
			// The writer starts on Out while the rest is handled; what
			// the next Readys add waits and goes in one write.
			s.queueOut(rd.Out)
			s.flushOut()
			l.handle(rd)
			if st := rd.State; st != nil {
				stc := *st
				c.state.Store(&stc)
				if st.Failed {
					conn.Advance(rd)
					return l.failure(st.Err)
				}
				if st.Handshaken && !l.handshaken {
					l.handshaken = true
					if l.ready != nil {
						l.ready <- nil
						l.ready = nil
					}
				}
				if st.GoingAway && !l.closing {
					l.goingAway = true
					l.leaderHint = st.LeaderHint
				}
			}
			if d := rd.Deadline; d != 0 {
				timer.Reset(time.Duration(d - s.now()))
			}
			conn.Advance(rd)
		}
		if (l.closing || l.goingAway) && len(l.inflight) == 0 {
			switch {
			case !l.closing:
				return errGoneAway
			case s.flushed(): // the client's GoAway is written
				return errDrained
			}
		}
		// While the writer is behind, take no more calls: Sends and
		// requests wait, and the socket is still read.
		backlogged := s.backlogged()

		if len(l.acks) > 0 && l.ackInFlight == 0 {
			l.flushAcks()
			continue
		}
		if took || l.sendsCompleted {
			took = false
			if l.sendsCompleted && !backlogged {
				// Let the Senders just answered run first: those that
				// send again join the next frame.
				l.sendsCompleted = false
				l.gatherSends()
			}
			// Nagle's rule (RFC 896) for Enqueue frames: while one is in
			// flight, messages gather for the next; a frame also goes
			// when full (addSend).
			if len(l.batch) > 0 && l.enqInFlight == 0 {
				switch {
				case c.opts.linger <= 0 || l.lingerFired:
					l.flushBatch()
				case lingerC == nil:
					if linger == nil {
						linger = time.NewTimer(c.opts.linger)
					} else {
						linger.Reset(c.opts.linger)
					}
					lingerC = linger.C
				}
			}
			if conn.HasReady() {
				continue
			}
		}
		reqs, kick, lingered := c.reqs, c.kick, lingerC
		if l.goingAway {
			reqs, kick = nil, nil // wait for the next session
		}
		if backlogged {
			reqs, kick, lingered = nil, nil, nil
		}
		select {
		case d := <-s.wrote:
			if err := s.written(d); err != nil {
				return fmt.Errorf("write: %w", err)
			}
		case b := <-s.in:
			conn.Tick(s.now())
			conn.Receive(b) // a failure shows in the next Ready
			select {
			case s.free <- b[:cap(b)]:
			default:
			}
		case err := <-s.readErr:
			if len(s.in) > 0 {
				// The reader sent its last bytes before the error, but
				// select may pick either: handle those bytes first (the
				// broker's answers, a handshake refusal), then the error.
				for len(s.in) > 0 {
					b := <-s.in
					conn.Tick(s.now())
					conn.Receive(b)
				}
				s.readErr <- err
				continue
			}
			if l.closing && errors.Is(err, io.EOF) {
				return errDrained
			}
			if l.goingAway && errors.Is(err, io.EOF) {
				return errGoneAway
			}
			return fmt.Errorf("read: %w", err)
		case o := <-reqs:
			l.submit(o)
			// Take whatever else is queued so it shares the next write.
			l.drainQueued()
			took = true
		case <-kick:
			l.takeSends()
			took = true
		case <-lingered:
			lingerC = nil
			l.lingerFired = true
			l.takeSends()
			if l.enqInFlight == 0 {
				l.flushBatch()
			}
		case <-timer.C:
			conn.Tick(s.now())
		case <-closeCh:
			closeCh = nil
			// Everything submitted before Close goes out before GoAway.
			l.drainQueued()
			l.takeSends()
			l.flushBatch()
			l.flushAcks()
			lingerC = nil
			l.closing = true
			conn.Close()
		case <-c.quit:
			return ErrClosed
		}
	}
}

// gatherSends yields to the goroutines an Enqueue completion just woke, so
// that those sending again join the next frame, and takes their messages.
// It stops once a yield brings nothing new, after at most 8.
func (l *loop) gatherSends() {
	acc := &l.c.acc
	for range 8 {
		acc.mu.Lock()
		n := len(acc.ops)
		acc.mu.Unlock()
		runtime.Gosched()
		acc.mu.Lock()
		grew := len(acc.ops) > n
		acc.mu.Unlock()
		if !grew {
			break
		}
	}
	l.takeSends()
}

// tlsMismatchError reports a connection whose two ends disagree on TLS.
// It wraps the error that showed it: core.ErrTLSRequired when a plaintext
// connection received TLS, or the TLS library's tls.RecordHeaderError
// when a TLS handshake received something else.
type tlsMismatchError struct{ err error }

func (e *tlsMismatchError) Error() string {
	if errors.Is(e.err, core.ErrTLSRequired) {
		return "the broker requires TLS on this port; connect with TLS"
	}
	return "the broker does not speak TLS on this port (is TLS enabled on the broker?)"
}

func (e *tlsMismatchError) Unwrap() error { return e.err }

// failure classifies a connection failure: a refused handshake is final.
func (l *loop) failure(err error) error {
	var re *core.RequestError
	var ve *core.VersionError
	switch {
	case errors.Is(err, core.ErrTLSRequired):
		return &fatalError{&tlsMismatchError{err: err}}
	case errors.As(err, &re) && (re.Code == wire.CodeUnauthorized || re.Code == wire.CodeUnsupportedVersion):
		return &fatalError{opError(wire.OpHandshake, re.Code, "", re.Message, "")}
	case errors.As(err, &ve):
		return &fatalError{&StatusError{Code: wire.CodeUnsupportedVersion, Op: "handshake", Message: trimFila(ve).Error()}}
	}
	var ce *wire.ConnError
	if errors.As(err, &ce) {
		// The broker's connection-scoped code, such as UNAUTHORIZED at
		// handshake or PROTOCOL_VIOLATION.
		se := &StatusError{Code: ce.Code, Op: "connection", Message: ce.Reason}
		if ce.Code == wire.CodeUnauthorized || ce.Code == wire.CodeUnsupportedVersion {
			return &fatalError{se}
		}
		return se
	}
	return err
}

func isFatal(err error) bool {
	var fe *fatalError
	return errors.As(err, &fe)
}
