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

// writeTimeout bounds one socket write: a broker that stops reading for
// this long fails the connection.
const writeTimeout = 30 * time.Second

// session is one connection attempt: a socket, the core that speaks the
// protocol over it, and the goroutine reading it. The owner goroutine owns
// it; the reader exits once the socket is closed.
type session struct {
	epoch   uint64 // counts sessions from 1; deliveries remember theirs
	addr    string
	nc      net.Conn
	conn    *core.Conn
	in      chan []byte // chunks read from the socket
	free    chan []byte // chunks handed back for reuse
	readErr chan error
	stopped chan struct{} // closed by close: the reader stops
	start   time.Time
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

func (s *session) write(b []byte) error {
	s.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
	_, err := s.nc.Write(b)
	return err
}

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
			if len(rd.Out) > 0 {
				if err := s.write(rd.Out); err != nil {
					conn.Advance(rd)
					return fmt.Errorf("write: %w", err)
				}
			}
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
			if l.closing {
				return errDrained
			}
			return errGoneAway
		}

		if len(l.acks) > 0 && l.ackInFlight == 0 {
			l.flushAcks()
			continue
		}
		if took || l.sendsCompleted {
			took = false
			if l.sendsCompleted {
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
		reqs, kick := c.reqs, c.kick
		if l.goingAway {
			reqs, kick = nil, nil // wait for the next session
		}
		select {
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
		case <-lingerC:
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
