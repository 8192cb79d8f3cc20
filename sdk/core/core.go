package core

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// Time is a monotonic time in nanoseconds, supplied by the caller. Its
// origin does not matter; only differences are used.
type Time int64

// Add returns t+d.
func (t Time) Add(d time.Duration) Time { return t + Time(d) }

// Config configures a connection. The zero value is usable.
type Config struct {
	// ClientName identifies the client in the broker's logs, such as
	// "fila-go/0.1.0".
	ClientName string
	// APIKey is the secret presented at handshake; empty when auth is off.
	APIKey string
	// Capabilities are optional features to ask for.
	Capabilities []string
	// MaxFrameSize is the largest frame body this side accepts, in bytes;
	// 0 means wire.DefaultMaxFrameSize (16 MiB).
	MaxFrameSize int
	// KeepaliveInterval is how long the connection may be silent before the
	// core sends a Ping; 0 means 30s, negative disables keepalive.
	KeepaliveInterval time.Duration
	// KeepaliveTimeout is how long a Ping may go unanswered, and how long
	// the handshake may take, before the connection is declared dead;
	// 0 means 10s.
	KeepaliveTimeout time.Duration
}

// State describes the connection. A Ready carries it when it changed.
type State struct {
	// Handshaken is true once HandshakeOk arrived.
	Handshaken bool
	// Version is the negotiated protocol version.
	Version uint16
	// NodeID and ServerName identify the broker.
	NodeID, ServerName string
	// Capabilities granted by the broker.
	Capabilities []string
	// ServerMaxFrame is the largest frame body the broker accepts, in bytes.
	ServerMaxFrame int
	// MaxBatchSize is the most items the broker accepts in one batch
	// request (HandshakeOk.max_batch_size; wire.MaxBatchSize from a broker
	// that does not say). The core splits larger requests.
	MaxBatchSize int
	// GoingAway is true once either side sent GoAway: no new requests.
	GoingAway bool
	// GoAwayCode, GoAwayMessage and LeaderHint are from the broker's GoAway.
	GoAwayCode    wire.Code
	GoAwayMessage string
	LeaderHint    string
	// Failed is true once the connection is unusable; Err says why.
	Failed bool
	Err    error
}

// A Completion is the end of a request: its response, or an error.
type Completion struct {
	RequestID uint32
	// Op is the request's opcode.
	Op wire.Opcode
	// Request is the request as it was sent.
	Request wire.Frame
	// Response is the response frame when Err is nil.
	Response wire.Frame
	// Err is a *RequestError when the broker answered with an Error frame,
	// or wraps ErrConnectionLost when the connection failed first.
	Err error

	// unsent marks a request lost with its connection before it was
	// written: it was held for the handshake, so a Router may send it
	// again whatever it is.
	unsent bool
}

// A RequestError is the broker's Error frame answering a request.
type RequestError struct {
	Code       wire.Code
	Message    string
	LeaderHint string
}

func (e *RequestError) Error() string {
	if e.Message == "" {
		return "fila: " + e.Code.String()
	}
	return fmt.Sprintf("fila: %s: %s", e.Code, e.Message)
}

// A DeliveryBatch is messages pushed to one subscription.
type DeliveryBatch struct {
	Subscription uint32
	Messages     []wire.DeliveredMessage
	// Backlog is the Delivery's backlog: how many messages of the queue
	// (of the shard, for a sharded queue) were ready for delivery once
	// these were delivered, including those waiting for throttle tokens.
	// 0 also from a broker that predates it. A Router shares a sharded
	// subscription's credit among its shards by it.
	Backlog uint64
}

// An Expiry reports deliveries of a subscription whose leases ended
// without a settle (the broker's LeaseExpired). The core has counted each
// as settled: the broker gave its credit back itself, and a later Settle
// of it returns nothing. The application may still be working on one; an
// Ack of it gets LEASE_EXPIRED, and the message may be delivered again.
type Expiry struct {
	Subscription uint32
	Leases       []wire.ExpiredLease
}

// A SubscriptionEnd reports that a subscription will receive nothing more:
// Err is nil after Unsubscribe, else why the broker ended it (a
// *RequestError) or ErrConnectionLost.
type SubscriptionEnd struct {
	Subscription uint32
	Err          error

	// held are the leases the application still held when an Error
	// ended the subscription, in order: a Router adopts them into the
	// subscription it opens on the new leader.
	held []uint64
}

// A Redirect reports a request answered with NOT_LEADER: the shell should
// connect to LeaderHint (when not empty) and send Request again there. A
// Router does so itself.
type Redirect struct {
	RequestID  uint32
	Op         wire.Opcode
	Request    wire.Frame
	LeaderHint string
}

// Ready is what the core has for the shell: bytes to write and things that
// happened. See the package documentation for the caller's obligations.
type Ready struct {
	// Out holds bytes to write to the connection, in order.
	Out []byte
	// Completions are finished requests.
	Completions []Completion
	// Deliveries are messages pushed to subscriptions, in arrival order.
	Deliveries []DeliveryBatch
	// Expired are deliveries whose leases ended without a settle, in
	// arrival order. A delivery in Deliveries of the same Ready may be
	// among them.
	Expired []Expiry
	// Ended are subscriptions that will receive nothing more.
	Ended []SubscriptionEnd
	// Redirects are requests the broker redirected to its leader. Each also
	// has a Completion with a NOT_LEADER *RequestError.
	Redirects []Redirect
	// State is the connection state when it changed, else nil.
	State *State
	// Deadline is when the shell must call Tick next; 0 means no deadline.
	Deadline Time
}

// Stats counts what crossed the connection.
type Stats struct {
	FramesIn, FramesOut uint64
	BytesIn, BytesOut   uint64
	// UnknownFrames counts frames with opcodes this version does not know;
	// they are ignored.
	UnknownFrames uint64
}

// Errors of the core.
var (
	// ErrConnectionLost completes requests and ends subscriptions that were
	// in flight when the connection failed.
	ErrConnectionLost = errors.New("fila: connection lost")
	// ErrGoingAway is returned for requests made after GoAway.
	ErrGoingAway = errors.New("fila: connection is going away")
	// ErrKeepaliveTimeout fails a connection whose Ping or handshake went
	// unanswered for KeepaliveTimeout.
	ErrKeepaliveTimeout = errors.New("fila: keepalive timeout")
	// ErrNotRequest is returned by Send for a frame that is not a request.
	ErrNotRequest = errors.New("fila: not a request frame")
	// ErrUnknownSubscription is returned for an operation on a subscription
	// the core does not have.
	ErrUnknownSubscription = errors.New("fila: unknown subscription")
	// ErrTLSRequired fails a connection whose first bytes from the broker
	// are a TLS record (an alert or a handshake, 0x15 or 0x16, then
	// 0x03): the broker, or a proxy in front of it, speaks TLS on this
	// port and the shell connected without it.
	ErrTLSRequired = errors.New("fila: the broker requires TLS on this port")
)

// A VersionError reports a broker that negotiated a protocol version
// outside the range this core speaks.
type VersionError struct {
	Server   uint16
	Min, Max uint16
}

func (e *VersionError) Error() string {
	return fmt.Sprintf("fila: broker chose protocol version %d; this client speaks %d to %d", e.Server, e.Min, e.Max)
}

type pending struct {
	op  wire.Opcode
	req wire.Frame
	// internal requests (handshake, keepalive pings) are not surfaced.
	internal bool
	// group, for one part of a request split at the broker's batch cap,
	// is the whole request; part is this part's index in it.
	group *group
	part  int
}

// A group is a batch request with more items than the broker accepts in
// one, sent as several requests of at most State.MaxBatchSize items. It
// completes once every part is answered, as one Completion on its first
// part's request ID, with the parts' results joined in order.
type group struct {
	id       uint32
	op       wire.Opcode
	req      wire.Frame
	parts    []wire.Frame    // each part's request, in order
	answers  []wire.Frame    // each part's response, nil until answered or when it failed
	errs     []*RequestError // each part's failure, nil when it succeeded
	left     int             // parts not yet answered
	reported bool            // its Completion has been made
}

type subscription struct {
	active bool // SubscribeOk received
	// Credit accounting. With prefetch > 0 the invariant is
	// outstanding + len(held) + unreturned == prefetch + debt, where
	// outstanding is what the broker may still deliver, held the leases
	// of the deliveries the application has not settled and that have not
	// expired, unreturned is settled credit not yet granted back, and debt
	// is credit to withhold: after a prefetch decrease, or when the broker
	// gave back the credit of an expired lease that the application had
	// already settled.
	prefetch    uint32
	asked       uint32 // the prefetch the Subscribe asked of the broker
	outstanding uint32
	held        map[uint64]struct{}
	unreturned  uint32
	debt        uint32
	unsubReq    uint32 // request ID of an Unsubscribe in flight, 0 if none
}

// Conn is the state machine of one client connection. It is not safe for
// concurrent use; the shell owns it from one goroutine.
type Conn struct {
	cfg   Config
	fr    *wire.FrameReader
	now   Time
	state State
	dirty bool // state changed since the last Ready

	nextID  uint32
	pending map[uint32]*pending
	subs    map[uint32]*subscription
	hsID    uint32

	lastRecv    Time
	pingID      uint32
	pingSentAt  Time
	pingNonce   uint64
	hsDeadline  Time
	timersArmed bool

	// held are the requests made before HandshakeOk, by ID, in order:
	// they are sent once the broker's batch cap is known.
	held     []uint32
	heldAway bool // Close was called before HandshakeOk: GoAway follows held

	out         []byte
	completions []Completion
	deliveries  []DeliveryBatch
	expired     []Expiry
	ended       []SubscriptionEnd
	redirects   []Redirect

	stats Stats
}

// New returns a connection whose first Ready holds the Handshake.
func New(cfg Config) *Conn {
	if cfg.MaxFrameSize <= 0 {
		cfg.MaxFrameSize = wire.DefaultMaxFrameSize
	}
	if cfg.KeepaliveInterval == 0 {
		cfg.KeepaliveInterval = 30 * time.Second
	}
	if cfg.KeepaliveTimeout <= 0 {
		cfg.KeepaliveTimeout = 10 * time.Second
	}
	c := &Conn{
		cfg:     cfg,
		fr:      wire.NewFrameReader(cfg.MaxFrameSize, 0),
		pending: map[uint32]*pending{},
		subs:    map[uint32]*subscription{},
		nextID:  1,
	}
	c.state.ServerMaxFrame = wire.DefaultMaxFrameSize
	c.state.MaxBatchSize = wire.MaxBatchSize
	hs := &wire.Handshake{
		MaxVersion:   wire.ProtocolVersion,
		MinVersion:   wire.MinProtocolVersion,
		Capabilities: cfg.Capabilities,
		APIKey:       cfg.APIKey,
		ClientName:   cfg.ClientName,
		MaxFrameSize: uint32(cfg.MaxFrameSize),
	}
	c.hsID = c.allocID()
	c.pending[c.hsID] = &pending{op: wire.OpHandshake, req: hs, internal: true}
	c.write(c.hsID, hs)
	return c
}

// State returns the current connection state.
func (c *Conn) State() State { return c.state }

// Stats returns the connection's counters.
func (c *Conn) Stats() Stats { return c.stats }

// InFlight returns the number of requests awaiting a response (a
// request split at the broker's batch cap counts once per part), not
// counting subscriptions.
func (c *Conn) InFlight() int { return len(c.pending) }

func (c *Conn) allocID() uint32 {
	return nextID(&c.nextID, func(id uint32) bool {
		_, p := c.pending[id]
		_, s := c.subs[id]
		return p || s
	})
}

// nextID returns the request ID *next names, or the first after it that
// busy does not claim, skipping 0, and moves *next past it.
func nextID(next *uint32, busy func(uint32) bool) uint32 {
	for {
		id := *next
		*next++
		if *next == 0 {
			*next = 1
		}
		if !busy(id) {
			return id
		}
	}
}

func (c *Conn) write(reqID uint32, f wire.Frame) {
	before := len(c.out)
	c.out = wire.AppendFrames(c.out, reqID, f, c.state.ServerMaxFrame)
	c.stats.FramesOut++
	c.stats.BytesOut += uint64(len(c.out) - before)
}

// Send queues a request frame and returns its request ID; its Completion
// comes in a later Ready. Use the typed helpers (Enqueue, Subscribe, ...)
// where they exist: Subscribe and Unsubscribe must go through them so
// deliveries are routed. Send returns ErrNotRequest for a frame that is not
// a request, ErrGoingAway after GoAway, and the failure after the
// connection failed.
//
// Requests made before HandshakeOk are written once it arrives. A batch
// request (Enqueue, Ack, Nack, RetryAfter, ExtendLease, Release) with more
// items than the broker accepts (State.MaxBatchSize) is sent as several
// requests, in order; its Completion comes once all are answered, on the
// returned ID, with their results joined in order. A part the broker
// failed as a whole gives each of its items that failure's code and
// message; Completion.Err is set only when every part failed.
func (c *Conn) Send(f wire.Frame) (uint32, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	op := f.Opcode()
	if op.Kind() != wire.KindRequest {
		return 0, fmt.Errorf("%w: %v", ErrNotRequest, op)
	}
	switch op {
	case wire.OpSubscribe, wire.OpUnsubscribe, wire.OpHandshake:
		return 0, fmt.Errorf("fila: send %v: use its own method", op)
	}
	id := c.allocID()
	p := &pending{op: op, req: f}
	c.pending[id] = p
	c.transmit(id, p)
	return id, nil
}

// transmit writes request id, held until the handshake is done and split
// at the broker's batch cap.
func (c *Conn) transmit(id uint32, p *pending) {
	if !c.state.Handshaken {
		c.held = append(c.held, id)
		return
	}
	parts := splitBatch(p.req, c.state.MaxBatchSize)
	if parts == nil {
		c.write(id, p.req)
		return
	}
	g := &group{
		id: id, op: p.op, req: p.req, parts: parts,
		answers: make([]wire.Frame, len(parts)), errs: make([]*RequestError, len(parts)), left: len(parts),
	}
	for k, part := range parts {
		pid := id
		if k > 0 {
			pid = c.allocID()
		}
		c.pending[pid] = &pending{op: p.op, req: part, group: g, part: k}
		c.write(pid, part)
	}
}

// release writes what was held for the handshake, in order.
func (c *Conn) release() {
	held := c.held
	c.held = nil
	for _, id := range held {
		if p, ok := c.pending[id]; ok {
			c.transmit(id, p)
		}
	}
	if c.heldAway {
		c.heldAway = false
		c.write(0, &wire.GoAway{Code: wire.CodeOK, Message: "client closing"})
	}
}

func (c *Conn) usable() error {
	if c.state.Failed {
		return c.state.Err
	}
	if c.state.GoingAway {
		return ErrGoingAway
	}
	return nil
}

// Enqueue queues an Enqueue of msgs.
func (c *Conn) Enqueue(msgs []wire.EnqueueMessage) (uint32, error) {
	return c.Send(&wire.Enqueue{Messages: msgs})
}

// Subscribe queues a Subscribe and returns the subscription's ID (its
// request ID). prefetch is the credit granted to the broker, the most
// deliveries the application holds unsettled: 0 asks for as much as the
// broker allows (fila-server grants its max_unsettled, 1000 by default).
// The Completion carries SubscribeOk, with the credit the broker granted,
// or the failure; deliveries follow in DeliveryBatches with this ID.
func (c *Conn) Subscribe(queue string, prefetch uint32, limits []wire.RateLimit) (uint32, error) {
	return c.subscribe(queue, prefetch, limits, 0, nil)
}

// SubscribeLease is Subscribe with the subscription's own lease timeout
// in milliseconds (Subscribe's lease_timeout_ms): its deliveries are
// leased for that long instead of the queue's visibility timeout; 0
// means the queue's.
func (c *Conn) SubscribeLease(queue string, prefetch uint32, limits []wire.RateLimit, leaseMS uint64) (uint32, error) {
	return c.subscribe(queue, prefetch, limits, leaseMS, nil)
}

// subscribe opens a subscription whose application already holds the
// deliveries of held, adopted from a subscription of the same queue that
// ended elsewhere (a leader change): it asks the broker for the credit
// left, prefetch less what is held, so that settling those deliveries
// returns credit here and the application never holds more than
// prefetch. With nothing left it asks for 1 and withholds one credit
// later (debt), since a prefetch of 0 would ask for the broker's cap.
//
// leaseMS is the subscription's own lease timeout (Subscribe's
// lease_timeout_ms); 0 for the queue's visibility timeout.
func (c *Conn) subscribe(queue string, prefetch uint32, limits []wire.RateLimit, leaseMS uint64, held []uint64) (uint32, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	s := &subscription{prefetch: prefetch, held: make(map[uint64]struct{}, len(held))}
	for _, l := range held {
		s.held[l] = struct{}{}
	}
	ask := prefetch
	if h := uint32(len(s.held)); prefetch > 0 && h > 0 {
		if h < prefetch {
			ask = prefetch - h
		} else {
			ask = 1
			s.debt = h + 1 - prefetch
		}
	}
	s.asked, s.outstanding = ask, ask
	f := &wire.Subscribe{Queue: queue, Prefetch: ask, RateLimits: limits, LeaseTimeoutMS: leaseMS}
	id := c.allocID()
	p := &pending{op: wire.OpSubscribe, req: f}
	c.pending[id] = p
	c.subs[id] = s
	c.transmit(id, p)
	return id, nil
}

// Unsubscribe queues an Unsubscribe of sub. Its Completion carries
// UnsubscribeOk; the subscription's SubscriptionEnd (with nil Err) comes in
// the same Ready. Deliveries that arrive before then are still delivered.
func (c *Conn) Unsubscribe(sub uint32) (uint32, error) {
	if err := c.usable(); err != nil {
		return 0, err
	}
	s, ok := c.subs[sub]
	if !ok || !s.active {
		return 0, fmt.Errorf("%w: %d", ErrUnknownSubscription, sub)
	}
	f := &wire.Unsubscribe{Subscription: sub}
	id := c.allocID()
	c.pending[id] = &pending{op: wire.OpUnsubscribe, req: f}
	s.unsubReq = id
	c.write(id, f)
	return id, nil
}

// Settle reports that the application has finished with the deliveries
// of sub that carried leases (acked, nacked, retried, released or
// abandoned), so their credit can return to the broker. Credit goes back
// in Credit frames of at least a quarter of the prefetch, so a busy
// subscription sends few of them. A lease that is not held (settled
// before, expired, or never delivered to sub) returns nothing: the credit
// of an expired lease came back with its LeaseExpired. Settle it before
// sending the Ack (or other request) that settles it at the broker, so
// the credit travels first.
func (c *Conn) Settle(sub uint32, leases ...uint64) {
	s, ok := c.subs[sub]
	if !ok {
		return
	}
	var n uint32
	for _, l := range leases {
		if _, held := s.held[l]; held {
			delete(s.held, l)
			n++
		}
	}
	if n == 0 || s.prefetch == 0 {
		return
	}
	s.unreturned += n
	pay := min(s.debt, s.unreturned)
	s.debt -= pay
	s.unreturned -= pay
	if s.unreturned >= max(1, s.prefetch/4) && s.active && s.unsubReq == 0 && c.usable() == nil {
		c.grant(sub, s, s.unreturned)
		s.unreturned = 0
	}
}

// SetPrefetch changes sub's prefetch to n (both nonzero): an increase is
// granted at once; a decrease is taken back from credit as deliveries are
// settled, so deliveries already in flight are accounted for. Switching
// between limited and unlimited credit is not supported: subscribe again.
func (c *Conn) SetPrefetch(sub uint32, n uint32) error {
	s, ok := c.subs[sub]
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknownSubscription, sub)
	}
	if s.prefetch == 0 || n == 0 {
		return fmt.Errorf("fila: set prefetch of subscription %d from %d to %d: only between nonzero values", sub, s.prefetch, n)
	}
	switch {
	case n > s.prefetch:
		add := n - s.prefetch
		pay := min(add, s.debt)
		s.debt -= pay
		add -= pay
		s.prefetch = n
		if add > 0 {
			c.grant(sub, s, add)
		}
	case n < s.prefetch:
		s.debt += s.prefetch - n
		s.prefetch = n
		pay := min(s.debt, s.unreturned)
		s.debt -= pay
		s.unreturned -= pay
	}
	return nil
}

func (c *Conn) grant(id uint32, s *subscription, n uint32) {
	s.outstanding += n
	c.write(0, &wire.Credit{Subscription: id, Credits: n})
}

// Credit returns sub's credit state: what the broker may still deliver and
// how many deliveries the application holds unsettled (not expired).
func (c *Conn) Credit(sub uint32) (outstanding, held uint32, ok bool) {
	s, ok := c.subs[sub]
	if !ok {
		return 0, 0, false
	}
	return s.outstanding, uint32(len(s.held)), true
}

// holds reports whether sub holds the delivery of lease unsettled.
func (c *Conn) holds(sub uint32, lease uint64) bool {
	s, ok := c.subs[sub]
	if !ok {
		return false
	}
	_, held := s.held[lease]
	return held
}

// Close queues a GoAway: no new requests are accepted; the shell closes the
// connection once requests in flight are complete (InFlight() == 0).
func (c *Conn) Close() {
	if c.state.Failed || c.state.GoingAway {
		return
	}
	c.state.GoingAway = true
	c.dirty = true
	if !c.state.Handshaken {
		c.heldAway = true // after the requests held for the handshake
		return
	}
	c.write(0, &wire.GoAway{Code: wire.CodeOK, Message: "client closing"})
}

// Tick tells the core the current time. It sends keepalive Pings and fails
// the connection when one, or the handshake, goes unanswered too long.
func (c *Conn) Tick(now Time) {
	c.now = now
	if !c.timersArmed {
		c.timersArmed = true
		c.lastRecv = now
		c.hsDeadline = now.Add(c.cfg.KeepaliveTimeout)
	}
	if c.state.Failed {
		return
	}
	if !c.state.Handshaken {
		if now >= c.hsDeadline {
			c.fail(fmt.Errorf("%w: no handshake answer in %v", ErrKeepaliveTimeout, c.cfg.KeepaliveTimeout))
		}
		return
	}
	if c.cfg.KeepaliveInterval < 0 {
		return
	}
	if c.pingID != 0 {
		if now-c.pingSentAt >= Time(c.cfg.KeepaliveTimeout) {
			c.fail(fmt.Errorf("%w: no pong in %v", ErrKeepaliveTimeout, c.cfg.KeepaliveTimeout))
		}
		return
	}
	if now-c.lastRecv >= Time(c.cfg.KeepaliveInterval) {
		c.pingNonce++
		p := &wire.Ping{Nonce: c.pingNonce}
		c.pingID = c.allocID()
		c.pingSentAt = now
		c.pending[c.pingID] = &pending{op: wire.OpPing, req: p, internal: true}
		c.write(c.pingID, p)
	}
}

func (c *Conn) deadline() Time {
	if c.state.Failed || !c.timersArmed {
		return 0
	}
	if !c.state.Handshaken {
		return c.hsDeadline
	}
	if c.cfg.KeepaliveInterval < 0 {
		return 0
	}
	if c.pingID != 0 {
		return c.pingSentAt.Add(c.cfg.KeepaliveTimeout)
	}
	return c.lastRecv.Add(c.cfg.KeepaliveInterval)
}

// Receive feeds bytes read from the connection, in any split. A non-nil
// error is connection-scoped (usually a *wire.ConnError): the connection
// has failed and must be closed; the failure is also in the next Ready.
func (c *Conn) Receive(b []byte) error {
	if c.state.Failed {
		return c.state.Err
	}
	if len(b) == 0 {
		return nil
	}
	if c.stats.BytesIn == 0 && looksLikeTLS(b) {
		c.fail(ErrTLSRequired)
		return ErrTLSRequired
	}
	c.stats.BytesIn += uint64(len(b))
	c.lastRecv = c.now
	c.fr.Feed(b)
	for {
		h, body, ok, err := c.fr.Next()
		if err != nil {
			c.fail(err)
			return err
		}
		if !ok {
			return nil
		}
		c.stats.FramesIn++
		// Decode from a private copy so decoded payloads outlive the
		// reader's buffer.
		if err := c.handle(h, append([]byte(nil), body...)); err != nil {
			c.fail(err)
			return err
		}
	}
}

// looksLikeTLS reports whether b, the first bytes from the broker, start a
// TLS record: content type alert (0x15) or handshake (0x16), then major
// version 3. The broker's first frame is a small HandshakeOk or Error,
// whose first byte, the top byte of its length, is 0.
func looksLikeTLS(b []byte) bool {
	return (b[0] == 0x15 || b[0] == 0x16) && (len(b) < 2 || b[1] == 0x03)
}

func violation(format string, args ...any) error {
	return &wire.ConnError{Code: wire.CodeProtocolViolation, Reason: fmt.Sprintf(format, args...)}
}

func (c *Conn) handle(h wire.Header, body []byte) error {
	op := h.Opcode
	if op.Kind() == wire.KindUnknown {
		c.stats.UnknownFrames++
		return nil
	}
	f := wire.New(op)
	if err := f.Decode(body); err != nil {
		return &wire.ConnError{Code: wire.CodeMalformedFrame, Reason: err.Error()}
	}
	switch f := f.(type) {
	case *wire.Ping:
		c.write(h.RequestID, &wire.Pong{Nonce: f.Nonce})
		return nil
	case *wire.GoAway:
		c.state.GoingAway = true
		c.state.GoAwayCode = f.Code
		c.state.GoAwayMessage = f.Message
		c.state.LeaderHint = f.LeaderHint
		c.dirty = true
		return nil
	case *wire.Delivery:
		return c.deliver(h.RequestID, f)
	case *wire.LeaseExpired:
		return c.leaseExpired(h.RequestID, f)
	}
	switch op.Kind() {
	case wire.KindRequest, wire.KindOneway:
		return violation("client-bound frame %v is a request", op)
	case wire.KindPush:
		return violation("unexpected push %v", op)
	}
	// A response: to a pending request, or an Error ending a subscription.
	p, ok := c.pending[h.RequestID]
	if !ok {
		if ef, isErr := f.(*wire.ErrorFrame); isErr {
			if h.RequestID == 0 {
				return &wire.ConnError{Code: ef.Code, Reason: ef.Message}
			}
			if s, isSub := c.subs[h.RequestID]; isSub && s.active {
				delete(c.subs, h.RequestID)
				c.ended = append(c.ended, SubscriptionEnd{Subscription: h.RequestID, Err: requestError(ef), held: sortedKeys64(s.held)})
				return nil
			}
		}
		return violation("%v for request %d, which is not in flight", op, h.RequestID)
	}
	delete(c.pending, h.RequestID)
	ef, isErr := f.(*wire.ErrorFrame)
	if !isErr && op != p.op.Response() {
		return violation("%v answers %v request %d; want %v", op, p.op, h.RequestID, p.op.Response())
	}
	if g := p.group; g != nil {
		if isErr {
			g.errs[p.part] = requestError(ef)
		} else {
			g.answers[p.part] = f
		}
		if g.left--; g.left == 0 {
			c.groupDone(g)
		}
		return nil
	}
	if isErr {
		return c.failed(h.RequestID, p, ef)
	}
	return c.succeeded(h.RequestID, p, f)
}

// groupDone completes a split request once its last part is answered:
// with the joined results, or, when every part failed, the first
// failure.
func (c *Conn) groupDone(g *group) {
	g.reported = true
	allFailed := true
	for _, e := range g.errs {
		if e == nil {
			allFailed = false
		}
	}
	if allFailed {
		rerr := g.errs[0]
		if rerr.Code == wire.CodeNotLeader {
			c.redirects = append(c.redirects, Redirect{RequestID: g.id, Op: g.op, Request: g.req, LeaderHint: rerr.LeaderHint})
		}
		c.completions = append(c.completions, Completion{RequestID: g.id, Op: g.op, Request: g.req, Err: rerr})
		return
	}
	c.completions = append(c.completions, Completion{RequestID: g.id, Op: g.op, Request: g.req, Response: joinResults(g)})
}

func requestError(ef *wire.ErrorFrame) *RequestError {
	return &RequestError{Code: ef.Code, Message: ef.Message, LeaderHint: ef.LeaderHint}
}

func (c *Conn) failed(id uint32, p *pending, ef *wire.ErrorFrame) error {
	rerr := requestError(ef)
	switch p.op {
	case wire.OpHandshake:
		c.fail(fmt.Errorf("fila: handshake: %w", rerr))
		return nil
	case wire.OpPing:
		if p.internal {
			c.pingID = 0
			return nil
		}
	case wire.OpSubscribe:
		delete(c.subs, id)
	case wire.OpUnsubscribe:
		if s, ok := c.subs[p.req.(*wire.Unsubscribe).Subscription]; ok {
			s.unsubReq = 0
		}
	}
	if ef.Code == wire.CodeNotLeader {
		c.redirects = append(c.redirects, Redirect{RequestID: id, Op: p.op, Request: p.req, LeaderHint: ef.LeaderHint})
	}
	c.completions = append(c.completions, Completion{RequestID: id, Op: p.op, Request: p.req, Err: rerr})
	return nil
}

func (c *Conn) succeeded(id uint32, p *pending, f wire.Frame) error {
	switch resp := f.(type) {
	case *wire.HandshakeOk:
		if resp.Version < wire.MinProtocolVersion || resp.Version > wire.ProtocolVersion {
			c.fail(&VersionError{Server: resp.Version, Min: wire.MinProtocolVersion, Max: wire.ProtocolVersion})
			return nil
		}
		c.state.Handshaken = true
		c.state.Version = resp.Version
		c.state.NodeID = resp.NodeID
		c.state.ServerName = resp.ServerName
		c.state.Capabilities = resp.Capabilities
		if resp.MaxFrameSize >= wire.MinMaxFrameSize {
			c.state.ServerMaxFrame = int(resp.MaxFrameSize)
		}
		if resp.MaxBatchSize > 0 {
			c.state.MaxBatchSize = int(min(resp.MaxBatchSize, wire.MaxBatchSize))
		}
		c.dirty = true
		c.release()
		return nil
	case *wire.Pong:
		if p.internal {
			c.pingID = 0
			return nil
		}
	case *wire.SubscribeOk:
		s := c.subs[id]
		if s.asked > 0 && (resp.Prefetch == 0 || resp.Prefetch > s.asked) {
			return violation("SubscribeOk grants prefetch %d to subscription %d, which asked for %d", resp.Prefetch, id, s.asked)
		}
		s.active = true
		switch {
		case resp.Prefetch == s.asked:
		case s.asked == 0:
			// A limit where none was asked (the broker's cap): it may
			// deliver no more than it says, beside what is held.
			s.prefetch = resp.Prefetch + uint32(len(s.held))
			s.outstanding = resp.Prefetch
		default:
			// The broker capped the credit.
			cut := s.asked - resp.Prefetch
			s.prefetch -= cut
			s.outstanding -= cut
		}
	case *wire.UnsubscribeOk:
		sub := p.req.(*wire.Unsubscribe).Subscription
		delete(c.subs, sub)
		c.ended = append(c.ended, SubscriptionEnd{Subscription: sub})
	}
	c.completions = append(c.completions, Completion{RequestID: id, Op: p.op, Request: p.req, Response: f})
	return nil
}

func (c *Conn) deliver(sub uint32, d *wire.Delivery) error {
	s, ok := c.subs[sub]
	if !ok || !s.active {
		return violation("delivery for subscription %d, which is not open", sub)
	}
	n := uint32(len(d.Messages))
	if s.prefetch > 0 && n > s.outstanding {
		return violation("delivery of %d messages to subscription %d exceeds its credit %d", n, sub, s.outstanding)
	}
	for i := range d.Messages {
		l := d.Messages[i].Lease
		if _, dup := s.held[l]; dup {
			return violation("delivery to subscription %d reuses lease %d, which it holds", sub, l)
		}
		s.held[l] = struct{}{}
	}
	if s.prefetch > 0 {
		s.outstanding -= n
	}
	c.deliveries = append(c.deliveries, DeliveryBatch{Subscription: sub, Messages: d.Messages, Backlog: d.Backlog})
	return nil
}

// leaseExpired counts the deliveries whose leases the broker ended as
// settled: the broker gave their credit back itself.
func (c *Conn) leaseExpired(sub uint32, f *wire.LeaseExpired) error {
	s, ok := c.subs[sub]
	if !ok || !s.active {
		return violation("LeaseExpired for subscription %d, which is not open", sub)
	}
	for _, l := range f.Leases {
		_, held := s.held[l.Lease]
		if held {
			delete(s.held, l.Lease)
		}
		if s.prefetch == 0 {
			continue
		}
		s.outstanding++
		if !held {
			// The application settled it before the expiry reached us
			// (its Ack crossed the expiry): its credit came back twice,
			// once from the broker and once, or soon, from us. Keep it
			// from being returned, or withhold one later.
			if s.unreturned > 0 {
				s.unreturned--
			} else {
				s.debt++
			}
		}
	}
	c.expired = append(c.expired, Expiry{Subscription: sub, Leases: f.Leases})
	return nil
}

// fail marks the connection failed: every request in flight completes with
// ErrConnectionLost and every subscription ends.
func (c *Conn) fail(err error) {
	if c.state.Failed {
		return
	}
	c.state.Failed = true
	c.state.Err = err
	c.dirty = true
	lost := fmt.Errorf("%w: %w", ErrConnectionLost, err)
	for _, id := range sortedKeys(c.pending) {
		p := c.pending[id]
		switch {
		case p.internal:
		case p.group != nil:
			if g := p.group; !g.reported {
				g.reported = true
				c.completions = append(c.completions, Completion{RequestID: g.id, Op: g.op, Request: g.req, Err: lost})
			}
		default:
			c.completions = append(c.completions, Completion{RequestID: id, Op: p.op, Request: p.req, Err: lost,
				unsent: slices.Contains(c.held, id)})
		}
	}
	c.pending = map[uint32]*pending{}
	c.held, c.heldAway = nil, false
	for _, id := range sortedKeys(c.subs) {
		if c.subs[id].active {
			c.ended = append(c.ended, SubscriptionEnd{Subscription: id, Err: lost})
		}
	}
	c.subs = map[uint32]*subscription{}
}

// HasReady reports whether Ready has anything for the shell.
func (c *Conn) HasReady() bool {
	return len(c.out) > 0 || c.hasEvents()
}

// hasEvents reports whether a Ready would have anything besides Out.
func (c *Conn) hasEvents() bool {
	return len(c.completions) > 0 || len(c.deliveries) > 0 ||
		len(c.expired) > 0 || len(c.ended) > 0 || len(c.redirects) > 0 || c.dirty
}

// Ready returns what the core has for the shell. The shell writes Out, acts
// on the rest, then calls Advance.
func (c *Conn) Ready() Ready {
	rd := Ready{
		Out:         c.out,
		Completions: c.completions,
		Deliveries:  c.deliveries,
		Expired:     c.expired,
		Ended:       c.ended,
		Redirects:   c.redirects,
		Deadline:    c.deadline(),
	}
	if c.dirty {
		st := c.state
		rd.State = &st
	}
	return rd
}

// Advance acknowledges that rd was handled; its slices may be reused.
func (c *Conn) Advance(rd Ready) {
	c.advanceOut(len(rd.Out))
	c.advanceEvents(rd)
}

// advanceOut drops the first n bytes of Out, which the shell has written.
func (c *Conn) advanceOut(n int) {
	if n > 0 {
		c.out = c.out[:copy(c.out, c.out[n:])]
	}
}

// advanceEvents acknowledges rd's events, leaving Out: a Router takes a
// connection's events at once and its bytes when its shell has them.
func (c *Conn) advanceEvents(rd Ready) {
	c.completions = trim(c.completions, len(rd.Completions))
	c.deliveries = trim(c.deliveries, len(rd.Deliveries))
	c.expired = trim(c.expired, len(rd.Expired))
	c.ended = trim(c.ended, len(rd.Ended))
	c.redirects = trim(c.redirects, len(rd.Redirects))
	if rd.State != nil {
		c.dirty = false
	}
}

// trim drops the first n items, which the shell has handled, keeping any
// added since its Ready.
func trim[T any](s []T, n int) []T {
	rest := copy(s, s[n:])
	clear(s[rest:])
	return s[:rest]
}

func sortedKeys64(m map[uint64]struct{}) []uint64 {
	if len(m) == 0 {
		return nil
	}
	keys := make([]uint64, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sortedKeys[V any](m map[uint32]V) []uint32 {
	keys := make([]uint32, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
