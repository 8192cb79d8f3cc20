// Package server speaks the Fila wire protocol to clients: it accepts
// connections (TCP, optionally TLS), performs the handshake, decodes
// requests, checks them, hands them to the shard, and writes responses and
// deliveries back.
//
// Each connection has two goroutines: a reader that decodes frames and
// dispatches them, and a writer that drains the connection's outbound
// queue (responses released by the shard once durable, deliveries whose
// bodies it reads back from storage). Neither the shard nor the storage
// completion goroutine ever blocks on a client: they only append to the
// outbound queue, whose length is bounded by the connection's requests in
// flight and its subscriptions' credit.
package server

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/metrics"
	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/tracing"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// Config configures a Server.
type Config struct {
	// NodeID identifies this node in HandshakeOk and topology answers.
	NodeID string
	// AdvertiseAddr is the host:port clients should use for this node
	// (Topology answers); empty means the listener's address.
	AdvertiseAddr string
	// MaxFrameSize is the largest frame body accepted, in bytes; 0 means
	// wire.DefaultMaxFrameSize.
	MaxFrameSize int
	// MaxConnections bounds the connections that completed the
	// handshake: a handshake over it is answered RESOURCE_EXHAUSTED and the
	// connection closed. Connections still handshaking do not count (see
	// MaxHandshaking). 0 means no limit.
	MaxConnections int
	// MaxHandshaking bounds the connections accepted and not yet
	// handshaken; accepting one more closes the oldest of them with
	// RESOURCE_EXHAUSTED. 0 means 1024.
	MaxHandshaking int
	// MaxConnectionsPerAddress bounds the open connections from one
	// address (an IPv4 address or an IPv6 /64), handshaking or not; one
	// over it is told RESOURCE_EXHAUSTED and closed at accept. 0 means no
	// limit.
	MaxConnectionsPerAddress int
	// HandshakeFailureRate and HandshakeFailureBurst are the token bucket
	// of failed handshakes per address (bad key, bad version, malformed or
	// non-Fila first bytes, handshake timeout), in failures a second and
	// failures: while an address's bucket is empty its connections are told
	// RESOURCE_EXHAUSTED and closed at accept, before anything is read. A
	// rate of 0 disables the bucket; a burst of 0 means 1.
	HandshakeFailureRate  float64
	HandshakeFailureBurst int
	// RefusalRate bounds the connections a second the accept loop refuses
	// at accept (per-address limits), with a burst of as many; 0 means
	// 500. Past it the loop waits before it accepts again: the sockets of
	// a flood queue in the kernel's backlog, and once that is full their
	// connects wait for retransmission, so the flood slows to this pace
	// instead of the broker spending its CPU refusing it. Open connections
	// are not affected; a client connecting during a flood waits in the
	// backlog behind it (up to the backlog's length over this rate).
	RefusalRate int
	// ReassemblyBudget bounds the bytes all connections together may hold
	// for requests still arriving: a frame received in part, beyond the
	// first FreeFrameBytes, and the frames of a continuation. A connection
	// that would take the total over it is told RESOURCE_EXHAUSTED and
	// closed. 0 means wire.MaxReassembledSize (256 MiB).
	ReassemblyBudget int64
	// MaxInFlight bounds requests in flight per connection: at the bound
	// the server stops reading the connection until answers are written.
	// 0 means 4096.
	MaxInFlight int
	// MaxOutbound bounds the bytes of answers one connection may have
	// waiting to be written (estimated as the memory they hold, reserved
	// when a request is read): over it the server stops reading the
	// connection's requests until the client reads its answers, so a
	// client that does not read costs only its own TCP buffers.
	// Deliveries are bounded by credit instead. 0 means 4 MiB.
	MaxOutbound int64
	// MaxEnqueueInFlight bounds the bytes of message bodies one
	// connection may have submitted to the shard and not yet durable:
	// over it the server stops reading the connection until its earlier
	// enqueues are answered, so one connection cannot fill the storage
	// pipeline. While a sparse producer enqueues, a bulk producer's
	// bound is BulkEnqueueInFlight instead (see producers). A single
	// larger request still goes, alone. 0 means 2 MiB.
	MaxEnqueueInFlight int64
	// BulkEnqueueInFlight tells sparse producers (bodies in flight,
	// with the rest of the request, within it) from bulk ones, and caps
	// a bulk producer's bound while a sparse one enqueues (see
	// producers): each commit then carries about as much of the bulk
	// producer's bodies as of the sparse producer's, and never more than
	// this, which bounds what it adds to the sparse producer's wait.
	// 0 means 32 KiB; it is at most MaxEnqueueInFlight.
	BulkEnqueueInFlight int64
	// WriteTimeout is how long a write to a client may make no progress
	// before the connection is closed (its leases then return to their
	// queues). 0 means 30s.
	WriteTimeout time.Duration
	// FrameReadTimeout is how long a frame, once its first bytes arrived
	// after the handshake, may wait for more: past it the connection is
	// closed. A connection with no partial frame may stay idle. 0 means
	// 30s.
	FrameReadTimeout time.Duration
	// MaxBatchSize is the most items one batch request may carry (the
	// messages of an Enqueue, the items of an Ack, Nack, RetryAfter,
	// ExtendLease or Release), announced in HandshakeOk; a request with
	// more fails with INVALID_ARGUMENT. 0 means 4096; at most
	// wire.MaxBatchSize.
	MaxBatchSize int
	// MaxSubscriptions bounds subscriptions per connection; 0 means 1024.
	MaxSubscriptions int
	// HandshakeTimeout bounds the time from accept to a complete
	// Handshake frame; 0 means 10s.
	HandshakeTimeout time.Duration
	// TLS, when not nil, is used for every accepted connection.
	TLS *tls.Config
	// Auth holds the API keys and their ACLs; nil refuses API-key
	// requests.
	Auth *auth.Store
	// RequireAuth makes every connection authenticate with an API key at
	// handshake. Without it every connection may do everything, and keys
	// can still be minted ahead of turning auth on.
	RequireAuth bool
	Logger      *slog.Logger
	// Version is reported to clients as fila-server/<Version>.
	Version string
	// Metrics, if set, counts connections, bytes and requests.
	Metrics *metrics.Metrics
	// Tracer, if set, records the spans of traced messages: enqueue,
	// deliver, and the consumer's settle (package tracing).
	Tracer *tracing.Tracer
}

func (c *Config) defaults() {
	if c.MaxFrameSize <= 0 {
		c.MaxFrameSize = wire.DefaultMaxFrameSize
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = 4096
	}
	if c.MaxHandshaking <= 0 {
		c.MaxHandshaking = 1024
	}
	if c.HandshakeFailureBurst <= 0 {
		c.HandshakeFailureBurst = 1
	}
	if c.RefusalRate <= 0 {
		c.RefusalRate = defaultRefusalRate
	}
	if c.MaxOutbound <= 0 {
		c.MaxOutbound = 4 << 20
	}
	if c.MaxEnqueueInFlight <= 0 {
		c.MaxEnqueueInFlight = 2 << 20
	}
	if c.BulkEnqueueInFlight <= 0 {
		c.BulkEnqueueInFlight = 32 << 10
	}
	c.BulkEnqueueInFlight = min(c.BulkEnqueueInFlight, c.MaxEnqueueInFlight)
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 30 * time.Second
	}
	if c.FrameReadTimeout <= 0 {
		c.FrameReadTimeout = 30 * time.Second
	}
	if c.MaxBatchSize <= 0 {
		c.MaxBatchSize = 4096
	}
	c.MaxBatchSize = min(c.MaxBatchSize, wire.MaxBatchSize)
	if c.ReassemblyBudget <= 0 {
		c.ReassemblyBudget = wire.MaxReassembledSize
	}
	if c.MaxSubscriptions <= 0 {
		c.MaxSubscriptions = 1024
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
}

// Server serves clients of one node: it speaks the wire protocol and
// hands each operation to the node.
type Server struct {
	cfg   Config
	n     *node.Node
	log   *slog.Logger
	subID atomic.Uint64
	// connID numbers the client connections from 1, for the log's conn
	// attribute.
	connID atomic.Uint64
	// reassembling is the bytes charged to Config.ReassemblyBudget.
	reassembling atomic.Int64
	adm          *admission
	refusals     *rate.Limiter // paces the accept loop's refusals (Config.RefusalRate)
	producers    producers     // sparse and bulk producers (producers.go)

	mu       sync.Mutex
	lns      []net.Listener
	conns    map[*conn]struct{}
	draining bool
	wg       sync.WaitGroup

	// keysMu guards byKey: the open connections of each API key whose
	// access can change (see access.go).
	keysMu sync.Mutex
	byKey  map[string]map[*conn]struct{}

	// Rate-limited audit events.
	authFailed, tlsFailed *limitedAudit
}

// New returns a server over n. With cfg.Auth set, it listens to the key
// store's changes (auth.Store.OnChange) for as long as the store lives.
func New(cfg Config, n *node.Node) *Server {
	cfg.defaults()
	s := &Server{
		cfg:        cfg,
		n:          n,
		log:        cfg.Logger,
		conns:      map[*conn]struct{}{},
		byKey:      map[string]map[*conn]struct{}{},
		authFailed: newLimitedAudit(cfg.Logger, auditAuthFailed),
		tlsFailed:  newLimitedAudit(cfg.Logger, auditTLSFailed),
		adm:        newAdmission(&cfg),
		refusals:   rate.NewLimiter(rate.Limit(cfg.RefusalRate), cfg.RefusalRate),
	}
	s.producers.shared = cfg.BulkEnqueueInFlight
	if cfg.Auth != nil {
		cfg.Auth.OnChange(s.keyChanged)
	}
	return s
}

// Serve accepts connections on ln until Shutdown, and returns nil then.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.draining {
		s.mu.Unlock()
		return errors.New("server shutting down")
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			draining := s.draining
			s.mu.Unlock()
			if draining {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, syscallEMFILE) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; retrying", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		backoff = 0
		if addr, ok := addrKey(nc.RemoteAddr()); ok {
			if refusal := s.adm.precheck(addr); refusal != "" {
				s.log.Debug("refusing a connection", "remote", nc.RemoteAddr().String(), "reason", refusal)
				s.cfg.Metrics.Refused(refusalReason(refusal))
				s.refuse(nc, refusal)
				s.refusals.Wait(context.Background())
				continue
			}
		}
		if s.cfg.Metrics != nil {
			nc = &meteredConn{Conn: nc, m: s.cfg.Metrics}
		}
		if s.cfg.TLS != nil {
			nc = tls.Server(nc, s.cfg.TLS)
		}
		c := newConn(s, nc)
		s.mu.Lock()
		if s.draining {
			s.mu.Unlock()
			nc.Close()
			continue
		}
		refusal, evict := s.adm.admit(c)
		if refusal != "" {
			s.mu.Unlock()
			s.log.Debug("refusing a connection", "remote", nc.RemoteAddr().String(), "reason", refusal)
			s.cfg.Metrics.Refused(refusalReason(refusal))
			s.refuse(nc, refusal)
			s.refusals.Wait(context.Background())
			continue
		}
		s.cfg.Metrics.ConnAccepted()
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		if evict != nil {
			// A socket that held a place in the pool until it was the
			// oldest there counts as a failed handshake of its address:
			// a flood of idle sockets from one address is soon refused
			// at accept, which costs the broker far less than admitting
			// and evicting each.
			s.adm.failed(evict)
			evict.evict(fmt.Sprintf("more than %d connections waiting for a handshake; closing the oldest", s.cfg.MaxHandshaking))
		}
		go func() {
			defer s.wg.Done()
			c.serve()
			s.cfg.Metrics.ConnClosed()
			s.adm.closed(c)
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// refusalReason names a refusal of the admission checks for the
// fila_connections_refused_total metric.
func refusalReason(msg string) string {
	switch {
	case strings.HasPrefix(msg, "too many failed handshakes"):
		return "failed_handshakes"
	case strings.Contains(msg, " connections from "):
		return "per_address"
	case strings.HasPrefix(msg, "evicted"):
		return "handshaking"
	}
	return "max_connections"
}

// meteredConn counts the bytes of a client connection (Config.Metrics).
type meteredConn struct {
	net.Conn
	m *metrics.Metrics
}

func (c *meteredConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.m.Received(n)
	return n, err
}

func (c *meteredConn) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	c.m.Sent(n)
	return n, err
}

// defaultRefusalRate is Config.RefusalRate's default.
const defaultRefusalRate = 500

// refuse tells a connection over a limit why, and closes it, without
// reading from it. nc is the accepted socket, before any TLS: with TLS
// on, the answer goes after a TLS handshake, on a goroutine of its own
// with a deadline; without, the accept loop writes it at once (a new
// socket's send buffer takes a small frame without waiting), so a flood
// refused at accept costs no goroutine and no timer per socket.
func (s *Server) refuse(nc net.Conn, reason string) {
	frame := wire.AppendFrame(nil, 0, &wire.ErrorFrame{Code: wire.CodeResourceExhausted, Message: reason})
	if s.cfg.TLS != nil {
		go func() {
			tc := tls.Server(nc, s.cfg.TLS)
			defer tc.Close()
			// A deadline on both directions: the write runs the TLS
			// handshake, which reads.
			tc.SetDeadline(time.Now().Add(time.Second))
			tc.Write(frame)
		}()
		return
	}
	if writeNow(nc, frame) {
		nc.Close()
		return
	}
	go func() {
		defer nc.Close()
		nc.SetDeadline(time.Now().Add(time.Second))
		nc.Write(frame)
	}()
}

// Shutdown stops accepting, sends GoAway to every connection, waits until
// ctx for their requests in flight to be answered, then closes them.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	s.draining = true
	for _, ln := range s.lns {
		ln.Close()
	}
	conns := make([]*conn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		c.goAway(wire.CodeUnavailable, "server shutting down")
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		for _, c := range conns {
			c.close()
		}
		<-done
		return ctx.Err()
	}
}
