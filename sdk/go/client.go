// Package fila is the Go client of the Fila message broker.
//
// One connection, three capability handles, named after the broker's three
// permission kinds:
//
//	client, err := fila.Connect(ctx, "localhost:5555")
//	id, err := client.Producer().Enqueue(ctx, "orders", payload)       // produce
//	sub, err := client.Consumer().Subscribe(ctx, "orders")             // consume
//	err = client.Admin().CreateQueue(ctx, fila.NewQueueSpec("orders")) // admin
//
// A handle is the unit to pass to the code that needs it: a worker given a
// *Consumer cannot enqueue or delete a queue. The broker enforces the API
// key's permissions whichever handle is used.
//
// # Connection life
//
// The client is an I/O shell over the sans-io core (sdk/core): one owner
// goroutine per client drives the core's Router, and each connection has
// a goroutine reading its socket and one writing it; every call hands its
// request to the owner and waits for the result or its context. All
// methods are safe for concurrent use.
//
// The owner never waits on a socket: while a write waits for the broker
// (which stops reading a client that does not read its answers), the
// client goes on reading answers and deliveries. When more than 4 MiB of
// requests wait to be written to a connection, calls wait, bounded by
// their context, until the socket takes them: a producer that outruns the
// network is slowed instead of buffered without bound.
//
// When a connection fails, the requests in flight on it that are safe to
// repeat are sent again once a connection is back: Enqueues (each carries
// the producer's ID and a sequence, so the broker answers a resent one
// with the IDs it stored the first time, Duplicate set, and enqueues
// nothing twice), Acks, Nacks, RetryAfters, ExtendLeases, Releases
// (which name the message and its lease; a second one finds the lease
// settled) and reads. The others (admin writes) fail with an error
// wrapping ErrConnectionLost: the broker may or may not have applied them.
// The client reconnects with exponential backoff and full jitter (see
// WithReconnect), when a call or a subscription needs the node again.
// Open subscriptions are subscribed again on the new connection and keep
// their channels; calls made while the client is reconnecting wait for
// the new connection, bounded by their context. A broker that answers the
// handshake with UNAUTHORIZED or UNSUPPORTED_VERSION ends the client:
// every later call fails with ErrClosed wrapping that error.
//
// Client.Status tells whether the client is connected, disconnected,
// reconnecting or closed, and WithStatusHandler reports each change, with
// the reason for a lost connection. A subscription waiting for its
// connection to come back delivers nothing, as for an empty queue; Status
// tells the two apart. With WithoutReconnect, a lost connection ends the
// client: calls fail with ErrClosed, and subscriptions end with an error
// wrapping ErrConnectionLost.
//
// # Clusters
//
// Connect takes the addresses of several nodes of a cluster, separated by
// commas ("a:5555,b:5555,c:5555"); one address, the only form before
// clusters, is a cluster of one. Each queue is served by its leader (the
// leader of the queue's Raft group), admin operations by the meta group's
// leader. The client keeps a connection to each node it needs, dialled
// when first needed, and a table of which node leads which queue:
//
//   - A request goes to its queue's leader as far as the client knows, or
//     else to the first seed it can reach. A node that does not lead the
//     queue answers NOT_LEADER naming the leader, and the client sends the
//     request there, following at most 8 such redirects before the call
//     fails with *StatusError NOT_LEADER (errors.Is ErrNotLeader).
//   - During an election no node can name a leader: the client sends the
//     request again after 50ms, then 100ms, doubling up to 250ms, until it is
//     answered or its context's deadline would pass (without a deadline,
//     for 30s); then the call fails with NOT_LEADER.
//   - Concurrent Sends are coalesced per leader (see Producer.Send), and a
//     SendBatch or AckAll whose queues have different leaders is sent as
//     one request to each, with the results joined in order.
//   - When a queue's leader fails or steps down, its subscriptions end
//     there with NOT_LEADER (or with the connection), and the client
//     subscribes again on the new leader, keeping the channel. Deliveries
//     received from the old leader stay valid: their leases are
//     replicated, and their Ack, Nack and the rest go to the new leader.
//     After a NOT_LEADER the new subscription asks for the credit those
//     unsettled deliveries leave, so the application never holds more
//     than its prefetch.
//   - A node that sends GoAway (it is shutting down or draining) takes no
//     new requests; the node it names takes its place.
//
// # Errors
//
// Each operation returns its own error type (*EnqueueError, *AckError,
// *CreateQueueError, ...) for the failures particular to it, *StatusError
// for the failures any operation may meet, or an error wrapping
// ErrConnectionLost, ErrClosed or the context's error. Every protocol
// failure also matches its sentinel with errors.Is (ErrQueueNotFound,
// ErrLeaseExpired, ErrForbidden, ...), whichever operation returned it,
// and CodeOf returns its code, a Code to compare with the constants
// CodeQueueNotFound, CodeLeaseExpired and the others, without importing
// the codec package (sdk/core/wire).
package fila

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fila-mq/fila/sdk/core"
	"github.com/fila-mq/fila/sdk/core/wire"
	"go.opentelemetry.io/otel/trace"
)

// Version is the SDK's version, sent to the broker as part of the client
// name ("fila-go/0.1.0").
const Version = "0.1.0"

// ErrConnectionLost is wrapped by the errors of calls whose connection
// failed while they were in flight and that the client does not send
// again because repeating them is not safe (admin writes such as
// CreateQueue): the broker may or may not have applied them. It also ends
// the subscriptions of a client whose connection failed for good
// (WithoutReconnect).
var ErrConnectionLost = core.ErrConnectionLost

// An Option configures Connect.
type Option func(*options)

type options struct {
	apiKey       string
	tls          *tls.Config
	caFile       string
	certFile     string
	keyFile      string
	serverName   string
	dialTimeout  time.Duration
	clientName   string
	keepalive    time.Duration
	maxBatch     int
	maxBatchB    int
	linger       time.Duration
	reconnect    bool
	backoffMin   time.Duration
	backoffMax   time.Duration
	drainTimeout time.Duration
	logger       *slog.Logger
	dialer       func(ctx context.Context, addr string) (net.Conn, error)
	tracer       trace.Tracer // nil: no tracing

	statusHandler func(StatusEvent) // nil: none
}

// WithAPIKey authenticates the connection with an API key secret,
// presented at every handshake (reconnections included).
func WithAPIKey(secret string) Option { return func(o *options) { o.apiKey = secret } }

// WithTLS connects over TLS with cfg: RootCAs for a private CA,
// Certificates for mTLS, ServerName to override the name checked (default:
// the host of the address). cfg is cloned; later changes to it have no
// effect. WithCAFile, WithClientCertFile and WithServerName adjust the
// clone.
func WithTLS(cfg *tls.Config) Option {
	return func(o *options) {
		if cfg == nil {
			o.tls = nil
			return
		}
		o.tls = cfg.Clone()
	}
}

// WithCAFile connects over TLS and trusts the CAs in the PEM file at path
// instead of the system roots. Connect fails if the file cannot be read or
// holds no certificate. An empty path is ignored.
func WithCAFile(path string) Option {
	return func(o *options) {
		if path != "" {
			o.ensureTLS()
			o.caFile = path
		}
	}
}

// WithClientCertFile connects over TLS and presents the PEM certificate
// chain in certFile with the private key in keyFile (mTLS). Connect fails
// if they cannot be loaded. Two empty paths are ignored.
func WithClientCertFile(certFile, keyFile string) Option {
	return func(o *options) {
		if certFile != "" || keyFile != "" {
			o.ensureTLS()
			o.certFile, o.keyFile = certFile, keyFile
		}
	}
}

// WithServerName connects over TLS and checks the broker's certificate
// against name instead of the host of the address. An empty name is
// ignored.
func WithServerName(name string) Option {
	return func(o *options) {
		if name != "" {
			o.ensureTLS()
			o.serverName = name
		}
	}
}

func (o *options) ensureTLS() {
	if o.tls == nil {
		o.tls = &tls.Config{MinVersion: tls.VersionTLS12}
	}
}

// WithDialTimeout bounds each connection attempt: the TCP connect, the TLS
// handshake and the protocol handshake together; default 10s.
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithClientName names the application in the broker's logs; default
// "fila-go/" + Version.
func WithClientName(name string) Option { return func(o *options) { o.clientName = name } }

// WithKeepalive sets how long the connection may be silent before the
// client sends a Ping; default 30s; negative disables keepalive. A Ping
// unanswered for the dial timeout fails the connection.
func WithKeepalive(d time.Duration) Option { return func(o *options) { o.keepalive = d } }

// WithMaxBatch bounds the Enqueue frames built by coalescing concurrent
// Send calls: at most n messages (default 1024) and b bytes of payload
// (default 4 MiB) per frame. A single SendBatch larger than the bounds is
// sent alone. Independently of these bounds, no request carries more
// items than the broker accepts (the max_batch_size it announces at
// handshake): larger ones are split into several requests, transparently.
func WithMaxBatch(n, b int) Option {
	return func(o *options) { o.maxBatch, o.maxBatchB = n, b }
}

// WithLinger makes the client hold a coalesced Enqueue frame up to d,
// when no Enqueue is in flight, for more concurrent Sends to join it,
// unless it fills first (see WithMaxBatch and Producer.Send). The default,
// 0, sends at once: while a frame is in flight the next one gathers
// anyway, which batches well without adding latency; a linger trades up
// to d of latency per frame for fewer, larger frames, and on Linux timers
// under a millisecond often fire late, so it rarely pays.
func WithLinger(d time.Duration) Option { return func(o *options) { o.linger = d } }

// WithReconnect sets the backoff between attempts to connect to a node
// after its connection failed or could not be made: the n-th wait is
// drawn uniformly from [0, min(max, min·2ⁿ)) ("full jitter", M. Brooker,
// "Exponential Backoff And Jitter", AWS Architecture Blog, 2015).
// Defaults: 100ms and 5s. A node is dialled again when a call or a
// subscription needs it; meanwhile requests go to the other nodes, if any.
// Attempts go on until Close, or until a broker refuses the API key or
// the protocol version.
func WithReconnect(min, max time.Duration) Option {
	return func(o *options) { o.reconnect, o.backoffMin, o.backoffMax = true, min, max }
}

// WithoutReconnect makes a failed connection, or a failed dial of a node
// the client was redirected to, final: the client ends, every later call
// fails with ErrClosed wrapping the failure, and open subscriptions end
// with an error wrapping ErrConnectionLost (their Next and Messages return
// it). A status handler (WithStatusHandler) sees StatusDisconnected for
// the lost connection, then StatusClosed.
func WithoutReconnect() Option { return func(o *options) { o.reconnect = false } }

// WithDrainTimeout bounds how long Close waits for requests in flight;
// default 10s.
func WithDrainTimeout(d time.Duration) Option { return func(o *options) { o.drainTimeout = d } }

// WithLogger sets the logger for connection events: connects, failures,
// reconnects (default: discard).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// WithDialer replaces the TCP dialer, for tests and custom transports. TLS,
// when configured, runs over the connection it returns.
func WithDialer(dial func(ctx context.Context, addr string) (net.Conn, error)) Option {
	return func(o *options) { o.dialer = dial }
}

// Client is a connection to a broker, or to the nodes of a cluster that
// it needs. Get its handles with Producer, Consumer and Admin. Close it
// when done.
type Client struct {
	addr  string   // as given to Connect
	seeds []string // its addresses
	opts  options

	reqs      chan *op      // calls for the owner goroutine
	acc       accumulator   // messages of Sends for the owner goroutine
	kick      chan struct{} // the accumulator went from empty to not
	closeCh   chan struct{} // closed by Close/Shutdown: drain, then stop
	quit      chan struct{} // closed to stop at once, failing what is left
	done      chan struct{} // closed when the owner goroutine has exited
	closing   atomic.Bool
	closeOnce sync.Once
	quitOnce  sync.Once

	mu  sync.Mutex
	err error // why the client ended; read after done is closed

	state atomic.Pointer[core.State]
	stats struct{ frames, msgs, reconnects atomic.Uint64 }

	status atomic.Uint32 // a ConnStatus, for Status
	events *statusEvents // for WithStatusHandler; nil without one

	producer *Producer
	consumer *Consumer
	admin    *Administrator
}

// Connect dials addr ("host:port"), performs the handshake and returns a
// ready client. addr may list several seed nodes of a cluster, separated
// by commas ("a:5555,b:5555,c:5555"): Connect dials them in order until
// one accepts the TCP (and TLS) connection, and the client asks the seeds,
// first the one it is connected to, where each queue's leader is (see
// "Clusters" in the package documentation). The first attempt is not
// retried: Connect fails with the dial's error (each seed's, joined), the
// TLS handshake's, or the protocol handshake's (errors.Is ErrUnauthorized
// for a bad API key, ErrUnsupportedVersion), or ctx's. Reconnection
// applies from then on.
func Connect(ctx context.Context, addr string, opts ...Option) (*Client, error) {
	o := options{
		dialTimeout:  10 * time.Second,
		clientName:   "fila-go/" + Version,
		maxBatch:     1024,
		maxBatchB:    4 << 20,
		reconnect:    true,
		backoffMin:   100 * time.Millisecond,
		backoffMax:   5 * time.Second,
		drainTimeout: 10 * time.Second,
	}
	for _, fn := range opts {
		fn(&o)
	}
	if o.logger == nil {
		o.logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.dialer == nil {
		d := &net.Dialer{KeepAlive: 30 * time.Second}
		o.dialer = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	if o.backoffMin <= 0 {
		o.backoffMin = time.Millisecond
	}
	o.backoffMax = max(o.backoffMax, o.backoffMin)
	if o.maxBatch <= 0 {
		o.maxBatch = 1
	}
	if err := o.loadTLS(); err != nil {
		return nil, fmt.Errorf("fila: connect %s: %w", addr, err)
	}

	seeds := splitSeeds(addr)
	if len(seeds) == 0 {
		return nil, fmt.Errorf("fila: connect %q: no address", addr)
	}
	c := &Client{
		addr:    addr,
		seeds:   seeds,
		opts:    o,
		reqs:    make(chan *op, 1024),
		kick:    make(chan struct{}, 1),
		closeCh: make(chan struct{}),
		quit:    make(chan struct{}),
		done:    make(chan struct{}),
		events:  newStatusEvents(o.statusHandler),
	}
	c.producer = &Producer{c: c}
	c.consumer = &Consumer{c: c}
	c.admin = &Administrator{c: c}

	dctx, cancel := context.WithTimeout(ctx, o.dialTimeout)
	defer cancel()
	l := newLoop(c)
	var s *session
	var errs []error
	for _, a := range seeds {
		var err error
		if s, err = c.dial(dctx, a, l); err == nil {
			break
		}
		if len(seeds) > 1 {
			err = fmt.Errorf("%s: %w", a, err)
		}
		errs = append(errs, err)
		if dctx.Err() != nil {
			break
		}
	}
	if s == nil {
		l.stopDials()
		return nil, fmt.Errorf("fila: connect %s: %w", addr, errors.Join(errs...))
	}
	ready := make(chan error, 1)
	go c.run(l, s, ready)
	select {
	case err := <-ready:
		if err != nil {
			<-c.done
			return nil, fmt.Errorf("fila: connect %s: %w", addr, trimFila(err))
		}
		c.events.start()
		return c, nil
	case <-dctx.Done():
		c.stop()
		<-c.done
		return nil, fmt.Errorf("fila: connect %s: handshake: %w", addr, dctx.Err())
	}
}

// splitSeeds splits Connect's address into its comma-separated seeds,
// trimming spaces and dropping empty ones.
func splitSeeds(addr string) []string {
	var seeds []string
	for a := range strings.SplitSeq(addr, ",") {
		if a = strings.TrimSpace(a); a != "" && !slices.Contains(seeds, a) {
			seeds = append(seeds, a)
		}
	}
	return seeds
}

// loadTLS reads the CA and client certificate files into o.tls.
func (o *options) loadTLS() error {
	if o.tls == nil {
		return nil
	}
	if o.caFile != "" {
		pem, err := os.ReadFile(o.caFile)
		if err != nil {
			return fmt.Errorf("tls ca file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("tls ca file %s: no PEM certificate", o.caFile)
		}
		o.tls.RootCAs = pool
	}
	if o.certFile != "" || o.keyFile != "" {
		cert, err := tls.LoadX509KeyPair(o.certFile, o.keyFile)
		if err != nil {
			return fmt.Errorf("tls client certificate: %w", err)
		}
		o.tls.Certificates = append(o.tls.Certificates, cert)
	}
	if o.serverName != "" {
		o.tls.ServerName = o.serverName
	}
	return nil
}

// Producer returns the handle that enqueues messages.
func (c *Client) Producer() *Producer { return c.producer }

// Consumer returns the handle that subscribes to queues and settles
// deliveries.
func (c *Client) Consumer() *Consumer { return c.consumer }

// Admin returns the handle that manages queues, runtime config and API
// keys, and reads the cluster's status.
func (c *Client) Admin() *Administrator { return c.admin }

// NodeID returns the ID of the broker node of the current connection:
// the node requests whose leader is not known go to.
func (c *Client) NodeID() string {
	if st := c.state.Load(); st != nil {
		return st.NodeID
	}
	return ""
}

// ServerName returns the broker's software and version, such as
// "fila-server/0.1.0".
func (c *Client) ServerName() string {
	if st := c.state.Load(); st != nil {
		return st.ServerName
	}
	return ""
}

// Stats counts a client's activity since Connect.
type Stats struct {
	// EnqueueFrames and EnqueuedMessages count the Enqueue requests sent
	// and the messages in them; their ratio is the mean batch size that
	// SendBatch and coalescing achieved. A request split across leaders
	// counts once.
	EnqueueFrames, EnqueuedMessages uint64
	// Reconnects counts the connections made after the first: to the
	// same node after a failure, or to another node of a cluster.
	Reconnects uint64
}

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	return Stats{
		EnqueueFrames:    c.stats.frames.Load(),
		EnqueuedMessages: c.stats.msgs.Load(),
		Reconnects:       c.stats.reconnects.Load(),
	}
}

// Ping sends a Ping and returns the round-trip time once the Pong arrives.
// It fails with *StatusError, or an error wrapping ErrConnectionLost,
// ErrClosed or ctx's error.
func (c *Client) Ping(ctx context.Context) (time.Duration, error) {
	start := time.Now()
	if _, err := c.request(ctx, &wire.Ping{Nonce: uint64(start.UnixNano())}, ""); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// Close drains and closes the client: it stops taking calls (later calls
// fail with ErrClosed), sends what was already submitted, tells the broker
// it is leaving, waits for the responses of requests in flight (at most
// the drain timeout, see WithDrainTimeout), and closes the connection.
// Requests still unanswered then fail with ErrClosed. Subscriptions end:
// their channels close and their Err is ErrClosed. When the connection
// closes, the broker returns the messages still leased to them to their
// queues at once, each attempt counted as failed ("consumer
// disconnected"). Close returns nil, or an error if the drain timed out.
func (c *Client) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.drainTimeout)
	defer cancel()
	return c.Shutdown(ctx)
}

// Shutdown is Close with the drain bounded by ctx instead of the drain
// timeout. It returns ctx's error, wrapped, if ctx ended the drain.
func (c *Client) Shutdown(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.closing.Store(true)
		close(c.closeCh)
	})
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		c.stop()
		<-c.done
		return fmt.Errorf("fila: close: drain: %w", ctx.Err())
	}
}

// stop makes the owner goroutine exit at once.
func (c *Client) stop() { c.quitOnce.Do(func() { close(c.quit) }) }

// setErr records why the client ended (first reason wins).
func (c *Client) setErr(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.mu.Unlock()
}

// closedErr is the error of calls made after the client ended. It wraps
// ErrClosed and why the client ended, so that errors.Is finds both
// (ErrClosed and ErrUnauthorized after the key was revoked).
func (c *Client) closedErr() error {
	c.mu.Lock()
	err := c.err
	c.mu.Unlock()
	if err == nil || errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	return &closedError{err}
}

// closedError is ErrClosed because of err.
type closedError struct{ err error }

func (e *closedError) Error() string   { return ErrClosed.Error() + ": " + trimFila(e.err).Error() }
func (e *closedError) Unwrap() []error { return []error{ErrClosed, e.err} }

// opKind says what an op asks of the owner goroutine.
type opKind uint8

const (
	opRequest     opKind = iota // send frame, complete with its response
	opEnqueue                   // messages of a Send or SendBatch, coalescible
	opSubscribe                 // open a subscription
	opUnsubscribe               // close one
	opPrefetch                  // change a subscription's prefetch
	opSettle                    // return the credit of deliveries settled through another client
)

// An op is one call handed to the owner goroutine.
type op struct {
	kind     opKind
	ctx      context.Context
	frame    wire.Frame    // opRequest
	count    int           // opEnqueue: how many messages
	sub      *Subscription // opSubscribe, opUnsubscribe, opPrefetch
	n        uint32        // opPrefetch
	settle   []*Delivery   // deliveries whose credit returns as this op is sent
	res      chan result   // buffered 1
	answered bool          // owner-only: res has its value
	// abandoned marks the owner's own Unsubscribe of a subscription whose
	// caller gave up before it opened: once it completes, the deliveries
	// queued for it are released.
	abandoned bool
}

type result struct {
	resp  wire.Frame
	items []wire.EnqueueItemResult // opEnqueue: this op's share of the results
	err   error                    // *core.RequestError, or wraps ErrConnectionLost or ErrClosed
}

// answer completes o; only the first answer counts. Runs on the owner
// goroutine.
func (o *op) answer(r result) {
	if o.answered {
		return
	}
	o.answered = true
	o.res <- r
}

var resultChans = sync.Pool{New: func() any { return make(chan result, 1) }}

// call hands o to the owner goroutine and waits for its result or ctx.
func (c *Client) call(ctx context.Context, o *op) (result, error) {
	if c.closing.Load() {
		return result{}, c.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	o.ctx = ctx
	o.res = resultChans.Get().(chan result)
	select {
	case c.reqs <- o:
	case <-c.done:
		return result{}, c.closedErr()
	case <-ctx.Done():
		return result{}, ctx.Err()
	}
	return c.wait(ctx, o)
}

// wait waits for the result of o, which the owner goroutine has or will
// have, or for ctx.
func (c *Client) wait(ctx context.Context, o *op) (result, error) {
	select {
	case r := <-o.res:
		resultChans.Put(o.res)
		return r, nil
	case <-ctx.Done():
		// The owner will still answer into o.res; the channel is not
		// reused.
		return result{}, ctx.Err()
	case <-c.done:
		select {
		case r := <-o.res:
			return r, nil
		default:
			return result{}, c.closedErr()
		}
	}
}

// accumulator gathers the messages of concurrent Sends. The owner
// goroutine takes everything gathered at once, so it wakes once per
// Enqueue frame rather than once per Send.
type accumulator struct {
	mu   sync.Mutex
	msgs []wire.EnqueueMessage
	ops  []*op // each owns the next op.count messages
}

// enqueue hands msgs to the owner goroutine through the accumulator and
// waits for their results.
func (c *Client) enqueue(ctx context.Context, msgs []wire.EnqueueMessage) (result, error) {
	if c.closing.Load() {
		return result{}, c.closedErr()
	}
	if err := ctx.Err(); err != nil {
		return result{}, err
	}
	o := &op{kind: opEnqueue, ctx: ctx, count: len(msgs), res: resultChans.Get().(chan result)}
	c.acc.mu.Lock()
	c.acc.msgs = append(c.acc.msgs, msgs...)
	c.acc.ops = append(c.acc.ops, o)
	first := len(c.acc.ops) == 1
	c.acc.mu.Unlock()
	if first {
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return c.wait(ctx, o)
}

// request sends a request frame and returns its response, mapping an Error
// frame to the operation's error type with target in the message.
// release gives back deliveries of a closed subscription in one Release,
// best effort: a lease that already expired stays with the broker's
// redelivery.
func (c *Client) release(ctx context.Context, ds []*Delivery) {
	items := make([]wire.LeaseRef, 0, len(ds))
	for _, d := range ds {
		d.settled.Store(true)
		items = append(items, d.ref())
	}
	_, err := c.request(ctx, &wire.Release{Items: items}, ds[0].m.Queue)
	for _, d := range ds {
		d.endProcess("release", err)
	}
}

func (c *Client) request(ctx context.Context, f wire.Frame, target string, settle ...*Delivery) (wire.Frame, error) {
	r, err := c.call(ctx, &op{kind: opRequest, frame: f, settle: settle})
	if err != nil {
		return nil, wrapErr(f.Opcode(), target, err)
	}
	if r.err != nil {
		return nil, mapErr(f.Opcode(), target, r.err)
	}
	return r.resp, nil
}

// mapErr turns an error of the owner goroutine into the SDK's error for
// the operation op: the operation's own type or *StatusError for a
// broker's Error frame, else a wrapped ErrConnectionLost or ErrClosed.
func mapErr(op wire.Opcode, target string, err error) error {
	var re *core.RequestError
	// A request lost with its connection stays ErrConnectionLost, even
	// when the connection failed on an Error frame (a refused handshake).
	if !errors.Is(err, ErrConnectionLost) && errors.As(err, &re) {
		return opError(op, re.Code, target, re.Message, re.LeaderHint)
	}
	return wrapErr(op, target, err)
}

// callError is a failure of a call that is not the broker's answer: the
// connection was lost, the client is closed, the context ended.
type callError struct {
	op     string
	target string
	err    error
}

func (e *callError) Error() string {
	head := "fila: " + e.op
	if e.target != "" {
		head += " " + e.target
	}
	return head + ": " + trimFila(e.err).Error()
}

func (e *callError) Unwrap() error { return e.err }

// Is reports whether target is the sentinel of the code of a
// connection-scoped Error that failed the call, so that a request in
// flight when the broker closed the connection with UNAUTHORIZED (its key
// was revoked) matches ErrUnauthorized as well as ErrConnectionLost.
func (e *callError) Is(target error) bool {
	var ce *wire.ConnError
	return target != nil && errors.As(e.err, &ce) && target == sentinel(ce.Code)
}

func wrapErr(op wire.Opcode, target string, err error) error {
	return &callError{op: opVerb(op), target: target, err: err}
}

// trimFila drops a leading "fila: " so wrapped messages do not stutter.
func trimFila(err error) error {
	if err == nil {
		return nil
	}
	s := err.Error()
	if len(s) > 6 && s[:6] == "fila: " {
		return &trimmed{s: s[6:], err: err}
	}
	return err
}

type trimmed struct {
	s   string
	err error
}

func (t *trimmed) Error() string { return t.s }
func (t *trimmed) Unwrap() error { return t.err }
