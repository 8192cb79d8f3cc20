package fila

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
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

// session is one connection to a node: a socket, a goroutine reading it
// and one writing it. The bytes it carries are the Router's (sdk/core),
// which the owner goroutine drives; the owner owns the session, and the
// reader and the writer exit once the socket is closed. The reader hands
// what it reads, and then its error, to the owner on the loop's channel
// in, in order; the writer hands each buffer back on wrote.
//
// The owner never writes to the socket itself. It copies each Ready's
// Writes into a buffer (out) and hands that buffer to the writer whenever
// the writer is idle, taking back the one the writer finished: two
// buffers alternate, writes stay in order, and each hand-over is written
// at once (in writeChunk pieces). So the owner goes on consuming what the
// readers receive while a write waits for the broker. The broker stops
// reading a connection whose answers it cannot write
// (server.max_outbound_size); an owner blocked in a write would stop
// consuming the answers, the reader would stop reading them, and the two
// ends would wait on each other until the broker's write timeout closed
// the connection.
type session struct {
	addr    string
	nc      net.Conn
	in      chan<- chunk     // the loop's: chunks read, then the read error
	wrote   chan<- writeDone // the loop's: buffers written
	free    chan []byte      // chunks handed back for reuse
	stopped chan struct{}    // closed by close: the reader and the writer stop
	once    sync.Once

	// Writing. out, spare and writing belong to the owner goroutine.
	out     []byte      // bytes not yet handed to the writer, in order
	spare   []byte      // the buffer the writer last finished, for reuse
	writing bool        // the writer holds a buffer
	toWrite chan []byte // owner to writer: one buffer at a time
}

// chunk is bytes a session read, or (b nil) the error that ended reading.
type chunk struct {
	s   *session
	b   []byte
	err error
}

// writeDone is a buffer the writer finished, and the write's error.
type writeDone struct {
	s   *session
	buf []byte
	err error
}

// dial connects to addr (TCP, then TLS when configured) and starts a
// session that reports to l.
func (c *Client) dial(ctx context.Context, addr string, l *loop) (*session, error) {
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
		addr:    addr,
		nc:      nc,
		in:      l.in,
		wrote:   l.wrote,
		free:    make(chan []byte, 8),
		stopped: make(chan struct{}),
		toWrite: make(chan []byte, 1),
	}
	go s.readLoop()
	go s.writeLoop()
	return s, nil
}

// readLoop reads the socket into chunks for the owner goroutine until the
// socket fails or the session is closed; the error comes last.
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
			case s.in <- chunk{s: s, b: buf[:n]}:
			case <-s.stopped:
				return
			}
		}
		if err != nil {
			select {
			case s.in <- chunk{s: s, err: err}:
			case <-s.stopped:
			}
			return
		}
	}
}

// close closes the socket and stops the reader and the writer; it may be
// called more than once.
func (s *session) close() {
	s.once.Do(func() {
		s.nc.Close()
		close(s.stopped)
	})
}

// writeLoop writes the buffers the owner hands over, in order, and hands
// each back with the write's error, until a write fails or the session is
// closed.
func (s *session) writeLoop() {
	for {
		select {
		case b := <-s.toWrite:
			err := s.write(b)
			select {
			case s.wrote <- writeDone{s: s, buf: b, err: err}:
			case <-s.stopped:
				return
			}
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

// queueOut copies b, a Ready's Write, after the bytes waiting for the
// writer: the core reuses it once Advance is called. Runs on the owner
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

// Why the client ended, besides a failure.
var (
	errDrained  = errors.New("fila: client closed")    // Close drained it
	errGoneAway = errors.New("fila: broker went away") // without reconnection, the broker's GoAway, drained
)

// fatalError marks a failure that reconnecting cannot cure: the broker
// refused the API key or the protocol version.
type fatalError struct{ err error }

func (e *fatalError) Error() string { return e.err.Error() }
func (e *fatalError) Unwrap() error { return e.err }

// dialResult is the outcome of a dial the Router asked for.
type dialResult struct {
	addr string
	s    *session
	err  error
}

// run is the owner goroutine: the only one that touches the loop, the
// Router and the sessions. It serves them until the client closes or
// fails for good; first is the connection Connect made.
func (c *Client) run(l *loop, first *session, ready chan<- error) {
	defer close(c.done)
	defer l.stopDials()
	l.ready = ready
	l.sessions[first.addr] = first
	l.r.Connected(first.addr)
	err := l.serve()
	for _, s := range l.sessions {
		s.close()
	}
	switch {
	case errors.Is(err, errDrained):
		l.finish(ErrClosed)
	case l.ready != nil:
		// The first handshake never completed: Connect reports it.
		l.ready <- err
		l.finish(err)
	default:
		c.opts.logger.Error("fila: connection failed", "err", err)
		l.finish(err)
	}
}

// startDial dials addr for the Router, in a goroutine of its own. A
// node whose connection was lost is reconnecting from now on.
func (l *loop) startDial(addr string) {
	c := l.c
	if l.nodeStatus[addr] == StatusDisconnected {
		l.setNode(addr, StatusReconnecting, nil)
	}
	go func() {
		ctx, cancel := context.WithTimeout(l.dialCtx, c.opts.dialTimeout)
		s, err := c.dial(ctx, addr, l)
		cancel()
		select {
		case l.dialed <- dialResult{addr: addr, s: s, err: err}:
		case <-c.done:
			if s != nil {
				s.close()
			}
		}
	}()
}

// serve drives the Router and the sessions until the client ends, and
// returns why: errDrained after Close, a *fatalError when a broker
// refused the handshake, else the failure that ended it.
func (l *loop) serve() error {
	c := l.c
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
	took := false // ops were taken: decide whether to send the batches

	for {
		if err := l.pump(timer); err != nil {
			return err
		}
		if l.closing && len(l.inflight) == 0 && l.flushed() {
			return errDrained // the client's GoAways are written
		}
		// While a writer is behind, take no more calls: Sends and
		// requests wait, and the sockets are still read.
		backlogged := l.backlogged()

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
			// Nagle's rule (RFC 896) for Enqueue frames, per leader:
			// while one is in flight, messages gather for the next; a
			// frame also goes when full (addSend).
			if l.idleBatches() {
				switch {
				case c.opts.linger <= 0 || l.lingerFired:
					l.flushIdle()
				case lingerC == nil:
					if linger == nil {
						linger = time.NewTimer(c.opts.linger)
					} else {
						linger.Reset(c.opts.linger)
					}
					lingerC = linger.C
				}
			}
			if l.r.HasReady() {
				continue
			}
		}
		reqs, kick, lingered := c.reqs, c.kick, lingerC
		if backlogged {
			reqs, kick, lingered = nil, nil, nil
		}
		select {
		case d := <-l.wrote:
			if l.sessions[d.s.addr] != d.s {
				continue // a closed session's
			}
			if err := d.s.written(d); err != nil {
				l.lose(d.s, fmt.Errorf("write: %w", err))
			}
		case ch := <-l.in:
			s := ch.s
			if l.sessions[s.addr] != s {
				continue // a closed session's
			}
			l.r.Tick(l.now())
			if ch.err != nil {
				if l.closing && errors.Is(ch.err, io.EOF) {
					// The broker closes after answering our GoAway.
					l.lose(s, ch.err)
					if len(l.sessions) == 0 {
						return errDrained
					}
					continue
				}
				l.lose(s, fmt.Errorf("read: %w", ch.err))
				continue
			}
			l.r.Receive(s.addr, ch.b) // a failure shows in the next Ready
			select {
			case s.free <- ch.b[:cap(ch.b)]:
			default:
			}
		case res := <-l.dialed:
			l.r.Tick(l.now())
			if res.err != nil {
				c.opts.logger.Warn("fila: dial failed", "addr", res.addr, "err", res.err)
				if l.nodeStatus[res.addr] == StatusReconnecting {
					l.setNode(res.addr, StatusDisconnected, res.err)
				}
				if !c.opts.reconnect && !l.closing {
					return res.err
				}
				l.r.DialFailed(res.addr, res.err)
				continue
			}
			l.sessions[res.addr] = res.s
			c.stats.reconnects.Add(1)
			c.opts.logger.Info("fila: connected", "addr", res.addr)
			l.r.Connected(res.addr)
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
			l.flushIdle()
		case <-timer.C:
			l.r.Tick(l.now())
		case <-closeCh:
			closeCh = nil
			// Everything submitted before Close goes out before GoAway.
			l.drainQueued()
			l.takeSends()
			l.flushBatches()
			l.flushAcks()
			lingerC = nil
			l.closing = true
			l.r.Close()
		case <-c.quit:
			return ErrClosed
		}
	}
}

// lose closes session s after its socket failed, and tells the Router.
func (l *loop) lose(s *session, err error) {
	s.close()
	delete(l.sessions, s.addr)
	l.r.ConnLost(s.addr, err)
}

// pump acts on the Router's Readys: dials, writes, closes, results and
// connection states. It returns why the client must end, if it must.
func (l *loop) pump(timer *time.Timer) error {
	for l.r.HasReady() {
		rd := l.r.Ready()
		for _, a := range rd.Dial {
			l.startDial(a)
		}
		// The writers start on the bytes while the rest is handled; what
		// the next Readys add waits and goes in one write.
		for _, w := range rd.Writes {
			if s := l.sessions[w.Addr]; s != nil {
				s.queueOut(w.Out)
				s.flushOut()
			}
		}
		l.handle(rd)
		var end error
		for _, ns := range rd.Nodes {
			if err := l.nodeState(ns); err != nil && end == nil {
				end = err
			}
		}
		for _, a := range rd.Close {
			if s := l.sessions[a]; s != nil {
				s.close()
				delete(l.sessions, a)
			}
		}
		if d := rd.Deadline; d != 0 {
			timer.Reset(time.Duration(d - l.now()))
		}
		l.r.Advance(rd)
		if end != nil {
			return end
		}
	}
	return nil
}

// nodeState acts on a change of a node's connection, and returns why the
// client must end, if it must: a broker refused the handshake, the first
// connection failed before its handshake (Connect reports it), or a
// connection failed without reconnection.
func (l *loop) nodeState(ns core.NodeState) error {
	c := l.c
	st := ns.State
	if st.Handshaken && (ns.Addr == l.r.Home() || c.state.Load() == nil) {
		stc := st
		c.state.Store(&stc)
	}
	if st.Handshaken && !st.Failed && l.nodeStatus[ns.Addr] != StatusConnected {
		// Before Connect returns: it finds the client connected.
		l.setNode(ns.Addr, StatusConnected, nil)
	}
	if st.Handshaken && l.ready != nil && !st.Failed {
		l.ready <- nil
		l.ready = nil
	}
	switch {
	case st.Failed:
		if l.closing {
			return nil
		}
		err := l.failure(st.Err)
		if errors.Is(err, core.ErrGoneAway) {
			err = errGoneAway
		}
		switch l.nodeStatus[ns.Addr] {
		case StatusConnected:
			l.setNode(ns.Addr, StatusDisconnected, lostErr(err))
		case StatusReconnecting:
			// The new connection failed before its handshake completed.
			l.setNode(ns.Addr, StatusDisconnected, err)
		}
		if isFatal(err) || l.ready != nil || !c.opts.reconnect {
			return err
		}
		c.opts.logger.Warn("fila: connection lost; reconnecting", "addr", ns.Addr, "err", err)
	case st.GoingAway && !l.closing:
		c.opts.logger.Info("fila: broker going away", "addr", ns.Addr, "code", st.GoAwayCode, "leader", st.LeaderHint)
	}
	return nil
}

func (l *loop) now() core.Time { return core.Time(time.Since(l.start)) }

// at is t on the Router's clock; 0 for the zero time.
func (l *loop) at(t time.Time, ok bool) core.Time {
	if !ok {
		return 0
	}
	return max(core.Time(t.Sub(l.start)), 1)
}

// backlogged reports whether a session has so much waiting for its
// writer that the owner should take no more calls until it catches up.
func (l *loop) backlogged() bool {
	for _, s := range l.sessions {
		if s.backlogged() {
			return true
		}
	}
	return false
}

// flushed reports whether every session wrote everything queued.
func (l *loop) flushed() bool {
	for _, s := range l.sessions {
		if !s.flushed() {
			return false
		}
	}
	return true
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
