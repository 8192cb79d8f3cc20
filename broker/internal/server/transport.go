package server

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// A client that speaks TLS to a plaintext port, or plaintext to a TLS
// port, is told so in a Fila Error frame (PROTOCOL_VIOLATION, request ID
// 0, sent in plaintext) before the connection closes, and the event is
// audit-logged (tls.handshake_failed, rate-limited). A Fila client reads
// the frame; a TLS client on the plaintext port cannot, and its TLS
// library reports a first record that does not look like TLS, which the
// Go SDK turns into "does not speak TLS on this port".

// Messages of the Error frames sent on a TLS mismatch.
const (
	msgTLSRequired = "this port requires TLS; connect with TLS"
	msgTLSRefused  = "this port does not use TLS; connect without TLS"
)

// remote returns the client's address, for logs.
func (c *conn) remote() string { return c.nc.RemoteAddr().String() }

// handshakeTLS completes the TLS handshake of a connection on a TLS
// listener within the handshake timeout. It returns false, having told
// the client when it spoke plaintext and logged the failure, if the
// handshake failed; the caller then ends the connection.
func (c *conn) handshakeTLS(tc *tls.Conn) bool {
	ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.HandshakeTimeout)
	defer cancel()
	err := tc.HandshakeContext(ctx)
	if err == nil {
		return true
	}
	var rhe tls.RecordHeaderError
	switch {
	case errors.As(err, &rhe) && rhe.Conn != nil:
		// The first bytes are not a TLS record: a plaintext client.
		c.s.tlsFailed.record("conn", c.id, "remote", c.remote(), "reason", "plaintext client on the TLS port")
		c.s.cfg.Metrics.HandshakeFailed("tls")
		c.s.adm.failed(c)
		refuseMismatch(rhe.Conn, msgTLSRequired)
	case errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed):
		// Closed before a handshake started (a port probe, a health
		// check), or by Shutdown: nothing was attempted.
		c.log.Debug("tls handshake", "err", err)
	default:
		c.s.tlsFailed.record("conn", c.id, "remote", c.remote(), "reason", err.Error())
		c.s.cfg.Metrics.HandshakeFailed("tls")
		c.s.adm.failed(c)
	}
	return false
}

// refuseMismatch writes a connection-scoped Error frame in plaintext to
// nc, then half-closes it and reads what the client still sends until it
// closes (within a second), so that closing does not reset the connection
// before the client has read the frame.
func refuseMismatch(nc net.Conn, msg string) {
	nc.SetDeadline(time.Now().Add(time.Second))
	if _, err := nc.Write(wire.AppendFrame(nil, 0, &wire.ErrorFrame{Code: wire.CodeProtocolViolation, Message: msg})); err != nil {
		return
	}
	if cw, ok := nc.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
	}
	io.Copy(io.Discard, io.LimitReader(nc, 64<<10))
}

// plainConn is a connection on a plaintext listener. Its first Read
// checks that the client did not start a TLS handshake: the first byte of
// a TLS ClientHello is 0x16 (a handshake record), which as the first byte
// of a Fila frame would announce a Handshake of over 350 MB, so no Fila
// client sends it. Later reads go straight through.
type plainConn struct {
	net.Conn
	c       *conn
	checked bool // reader goroutine only
}

// errTLSClient ends the read loop of a TLS client on the plaintext port.
var errTLSClient = errors.New("TLS client on the plaintext port")

func (p *plainConn) Read(b []byte) (int, error) {
	n, err := p.Conn.Read(b)
	if p.checked || n == 0 {
		return n, err
	}
	p.checked = true
	if b[0] == 0x16 && (n < 2 || b[1] == 0x03) {
		p.c.s.tlsFailed.record("conn", p.c.id, "remote", p.c.remote(), "reason", "TLS client on the plaintext port")
		p.c.s.cfg.Metrics.HandshakeFailed("tls")
		p.c.s.adm.failed(p.c)
		refuseMismatch(p.Conn, msgTLSRefused)
		return 0, errTLSClient
	}
	return n, err
}
