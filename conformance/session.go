package conformance

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// A Scenario is Go code that drives one conversation with a broker: Record
// runs it against a live broker and writes the transcript of the same
// name, and client mode runs it against the fake broker to check the
// client it uses (the Go SDK, for the scenarios in package scenario).
type Scenario struct {
	// Name is the transcript's corpus name, such as "hotpath/enqueue".
	Name string
	// Doc is the transcript's leading comment: what the case shows.
	Doc string
	// BrokerEnv is the broker's environment (FILA_KEY=value) the
	// conversation needs, such as a short visibility timeout.
	BrokerEnv []string
	// Fresh says the conversation needs a broker of its own.
	Fresh bool
	// Targets are the replayers the transcript applies to; nil means all.
	Targets []string
	// Manual marks a conversation no broker can produce (a broker that
	// misbehaves, a cluster's redirect): its transcript is written by hand
	// and Record skips it. Run still drives a client in client mode.
	Manual bool
	// Run drives the conversation. It connects through s.Dial, once.
	Run func(ctx context.Context, s *Session) error
}

// A Session is the connection a scenario runs on: to a live broker (being
// recorded), or to the fake broker of client mode.
type Session struct {
	// Addr is the address to give a client that dials through Dial.
	Addr string

	dial func(ctx context.Context, addr string) (net.Conn, error)
	tap  *tap // when recording

	mu     sync.Mutex
	dialed bool
}

// NewSession returns a session whose Dial connects to addr over TCP.
func NewSession(addr string) *Session {
	var d net.Dialer
	return &Session{Addr: addr, dial: func(ctx context.Context, addr string) (net.Conn, error) {
		return d.DialContext(ctx, "tcp", addr)
	}}
}

// ErrSecondDial is returned by Dial when a scenario dials twice: a
// transcript holds one connection.
var ErrSecondDial = errors.New("conformance: a scenario dials once")

// Dial opens the scenario's connection; it has the signature of the
// dialer options of clients (fila.WithDialer). addr is ignored: the
// session knows where it connects.
func (s *Session) Dial(ctx context.Context, _ string) (net.Conn, error) {
	s.mu.Lock()
	if s.dialed {
		s.mu.Unlock()
		return nil, ErrSecondDial
	}
	s.dialed = true
	s.mu.Unlock()
	c, err := s.dial(ctx, s.Addr)
	if err != nil || s.tap == nil {
		return c, err
	}
	return s.tap.attach(c), nil
}

// WriteRaw writes b to c, a connection from Dial, as bytes the transcript
// shows raw: not a frame a client's core would build (a truncated frame,
// an unknown opcode, a second Handshake).
func (s *Session) WriteRaw(c net.Conn, b []byte) error {
	if tc, ok := c.(*tapConn); ok {
		return tc.write(b, true)
	}
	_, err := c.Write(b)
	return err
}

// CloseWrite half-closes c, a connection from Dial: the client will send
// nothing more, and the transcript says so.
func (s *Session) CloseWrite(c net.Conn) error {
	if tc, ok := c.(*tapConn); ok {
		return tc.closeWrite()
	}
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// chunk is one thing that crossed the recorded connection.
type chunk struct {
	client bool   // written by the client, else read from the broker
	data   []byte // nil for a close
	raw    bool   // written with WriteRaw
	close  bool   // CloseWrite by the client, or EOF from the broker
}

// tap records a connection's traffic. Its pump reads the broker on its
// own goroutine until EOF, so the transcript ends with everything the
// broker sent even after the client stopped reading.
type tap struct {
	mu     sync.Mutex
	chunks []chunk
	conn   net.Conn
	done   chan struct{} // closed when the pump saw EOF or failed
}

func (t *tap) add(c chunk) {
	t.mu.Lock()
	t.chunks = append(t.chunks, c)
	t.mu.Unlock()
}

func (t *tap) attach(c net.Conn) *tapConn {
	t.conn = c
	t.done = make(chan struct{})
	tc := &tapConn{t: t, real: c, notify: make(chan struct{}, 1)}
	go t.pump(c, tc)
	return tc
}

func (t *tap) pump(c net.Conn, tc *tapConn) {
	defer close(t.done)
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			data := append([]byte(nil), buf[:n]...)
			t.add(chunk{data: data})
			tc.deliver(data, false)
		}
		if err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				t.add(chunk{close: true})
			}
			tc.deliver(nil, true)
			return
		}
	}
}

// finish waits for the broker to close the connection, up to d, and
// returns the chunks. If it does not, the client half-closes (recorded)
// and it waits again.
func (t *tap) finish(d time.Duration) []chunk {
	if t.conn != nil {
		select {
		case <-t.done:
		case <-time.After(d):
			t.add(chunk{client: true, close: true})
			closeWrite(t.conn)
			select {
			case <-t.done:
			case <-time.After(d):
				t.conn.SetReadDeadline(time.Now())
				<-t.done
			}
		}
		t.conn.Close()
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.chunks
}

// tapConn is the client's end of a recorded connection: reads come from
// what the pump buffered, writes go to the broker and are recorded.
type tapConn struct {
	t      *tap
	real   net.Conn
	notify chan struct{} // signalled when buf or eof change

	mu       sync.Mutex
	buf      []byte
	eof      bool
	closed   bool
	deadline time.Time
}

func (c *tapConn) deliver(b []byte, eof bool) {
	c.mu.Lock()
	c.buf = append(c.buf, b...)
	c.eof = c.eof || eof
	c.mu.Unlock()
	select {
	case c.notify <- struct{}{}:
	default:
	}
}

func (c *tapConn) Read(p []byte) (int, error) {
	for {
		c.mu.Lock()
		switch {
		case c.closed:
			c.mu.Unlock()
			return 0, net.ErrClosed
		case len(c.buf) > 0:
			n := copy(p, c.buf)
			c.buf = c.buf[n:]
			c.mu.Unlock()
			return n, nil
		case c.eof:
			c.mu.Unlock()
			return 0, io.EOF
		}
		dl := c.deadline
		c.mu.Unlock()
		var timeout <-chan time.Time
		if !dl.IsZero() {
			d := time.Until(dl)
			if d <= 0 {
				return 0, os.ErrDeadlineExceeded
			}
			tm := time.NewTimer(d)
			timeout = tm.C
			defer tm.Stop()
		}
		select {
		case <-c.notify:
		case <-timeout:
			return 0, os.ErrDeadlineExceeded
		}
	}
}

func (c *tapConn) Write(b []byte) (int, error) {
	if err := c.write(b, false); err != nil {
		return 0, err
	}
	return len(b), nil
}

func (c *tapConn) write(b []byte, raw bool) error {
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return net.ErrClosed
	}
	c.t.add(chunk{client: true, data: append([]byte(nil), b...), raw: raw})
	_, err := c.real.Write(b)
	return err
}

func (c *tapConn) closeWrite() error {
	c.t.add(chunk{client: true, close: true})
	return closeWriteErr(c.real)
}

func closeWriteErr(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Close()
}

// Close detaches the client; the broker's side stays open for the pump.
func (c *tapConn) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.deliver(nil, false)
	return nil
}

func (c *tapConn) LocalAddr() net.Addr                { return c.real.LocalAddr() }
func (c *tapConn) RemoteAddr() net.Addr               { return c.real.RemoteAddr() }
func (c *tapConn) SetWriteDeadline(t time.Time) error { return c.real.SetWriteDeadline(t) }

func (c *tapConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	c.mu.Unlock()
	c.deliver(nil, false)
	return nil
}

func (c *tapConn) SetDeadline(t time.Time) error {
	c.SetReadDeadline(t)
	return c.SetWriteDeadline(t)
}
