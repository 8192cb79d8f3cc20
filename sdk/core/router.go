package core

import (
	"errors"
	"fmt"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// RouterConfig configures a Router. The zero value of every field but
// Seeds takes the default its comment gives.
type RouterConfig struct {
	// Conn configures each connection.
	Conn Config
	// Seeds are nodes to ask first, host:port, in order of preference. A
	// request whose leader is not known goes to the first node that is
	// connected, else the first that may be dialled, and that node
	// redirects it. The shell may also connect to a node unasked
	// (Connected), which adds it.
	Seeds []string
	// ProducerID, when not zero, is stamped with a sequence on every
	// Enqueue that carries no producer ID of its own, so that a frame
	// resent after its connection was lost is not enqueued twice. The
	// shell picks it at random (a UUIDv4), once per producer. When zero,
	// Enqueues are not stamped, and one lost with its connection fails
	// with ErrConnectionLost.
	ProducerID [16]byte
	// MaxRedirects bounds how many times one request is sent again
	// elsewhere: after a NOT_LEADER naming the leader, or after its
	// connection was lost. 0 means 8.
	MaxRedirects int
	// RetryMin and RetryMax bound the wait before a request answered
	// NOT_LEADER without a leader hint (an election is under way) is sent
	// again: RetryMin, doubled after each such answer, at most RetryMax.
	// 0 means 50ms and 250ms: an election takes one to two election
	// timeouts, and the first retry after it ends comes at most RetryMax
	// later. The waits end at the request's deadline.
	RetryMin, RetryMax time.Duration
	// LeaderWait bounds how long a request without a deadline keeps
	// waiting for a leader to be known, from its first NOT_LEADER without
	// a hint; 0 means 30s. An open subscription waits without bound.
	LeaderWait time.Duration
	// DialMin and DialMax bound the wait before a node whose connection
	// failed, or could not be made, is dialled again: the n-th wait in a
	// row is drawn uniformly from [0, min(DialMax, DialMin·2ⁿ)) ("full
	// jitter"). 0 means 100ms and 5s.
	DialMin, DialMax time.Duration
	// JitterSeed seeds the dial backoff's jitter (a splitmix64 sequence):
	// the same seed gives the same waits. The shell passes a random one.
	JitterSeed uint64
}

// A Router is the sans-io client of a cluster: one Conn per node it
// needs, a routing table from queue to leader, and the rules that follow
// leadership as it moves. It owns what the Conns do not:
//
//   - routing: each request goes to the leader of its queue's group, or
//     of the meta group for admin operations, as far as the Router
//     knows; else to a node it may ask (see RouterConfig.Seeds). A batch
//     whose items are on several leaders is split per leader, and its
//     results joined in order. A success teaches the table where a group
//     is led; so does a Topology result.
//   - redirects: a request answered NOT_LEADER with a leader hint is sent
//     to the hint, at most RouterConfig.MaxRedirects times; with no hint
//     (an election), again after a backoff, until its deadline.
//   - resending: a request in flight on a connection that fails is sent
//     again if doing so is safe (stamped Enqueues, settles, reads; see
//     RouterConfig.ProducerID), else completes with ErrConnectionLost.
//   - subscriptions: one ended with NOT_LEADER is opened again on the
//     leader, with the credit the application's unsettled deliveries
//     leave, and settling those deliveries returns credit to the new
//     one; one whose connection failed is opened again with its whole
//     prefetch (the broker released its leases with the connection). The
//     caller's Subscribe completes once; later openings are silent.
//   - connections: a node is dialled when a request needs it (Ready.Dial)
//     and dialled again after a failure with backoff; a node that sends
//     GoAway takes no new requests and is closed once its requests are
//     answered (Ready.Close), its leader hint taking its place.
//   - sharded queues: an Enqueue or Subscribe answered QUEUE_SHARDED
//     learns the queue's shards from Topology, once per queue for the
//     Router's life. Each message then goes to the shard its fairness key
//     hashes to (ShardOf), split per shard leader and joined in order as
//     above; a subscription becomes one child subscription per shard,
//     merged under the caller's ID, its prefetch shared among the shards
//     by their backlog (see Subscribe). Settle a sharded subscription's
//     deliveries with SettleIn, naming the delivery's queue: lease numbers
//     are per shard.
//
// Request and subscription IDs are the Router's, stable across the
// connections a request or subscription crosses. Like Conn, it is
// deterministic, and not safe for concurrent use.
//
// The caller's obligations are Conn's (see the package documentation),
// per connection, plus:
//
//  1. Dial every address in Ready.Dial, and report the outcome with
//     Connected or DialFailed.
//  2. Write each of Ready.Writes to its node's connection, in order,
//     before Advance; then close the connections in Ready.Close.
//  3. Report a connection that fails (a read or write error, EOF) with
//     ConnLost, and pass what it reads to Receive with its address.
type Router struct {
	cfg RouterConfig
	now Time
	rng uint64

	nodes  map[string]*node
	order  []*node // seeds first, then nodes learned from hints
	routes map[routeKey]string

	nextID  uint32
	reqs    map[uint32]*request
	subs    map[uint32]*rsub     // the caller's, and the children of sharded ones
	shards  map[string]*shardMap // by queue name as the caller named it, once Topology told
	lookups map[string]*lookup   // Topology requests in flight for shard maps, by queue name
	waiting []*part              // parts to send when they may, in the order they began waiting
	seq     uint64               // the next Enqueue sequence
	closing bool

	dials       []string
	closes      []string
	writes      []Write
	completions []Completion
	deliveries  []DeliveryBatch
	expired     []Expiry
	ended       []SubscriptionEnd
	states      []NodeState
	reported    Time // the Deadline of the last Ready
}

// A Write is bytes for one node's connection.
type Write struct {
	Addr string
	Out  []byte

	conn *Conn
}

// A NodeState is the state of a node's connection when it changed.
type NodeState struct {
	Addr  string
	State State
}

// RouterReady is what a Router has for the shell. Its slices are valid
// until Advance.
type RouterReady struct {
	// Dial lists nodes to connect to: answer each with Connected or
	// DialFailed.
	Dial []string
	// Writes are bytes to write, per node, each in order.
	Writes []Write
	// Close lists connections to close, after writing their Writes: they
	// failed, or their node went away and has answered everything.
	Close []string
	// Completions are finished requests, by the Router's request IDs.
	Completions []Completion
	// Deliveries, Expired and Ended are by the Router's subscription IDs.
	// Ended lists only subscriptions that end for good.
	Deliveries []DeliveryBatch
	Expired    []Expiry
	Ended      []SubscriptionEnd
	// Nodes are connection states that changed.
	Nodes []NodeState
	// Deadline is when the shell must call Tick next; 0 means none.
	Deadline Time
}

// ErrGoneAway fails the connection of a node that sent GoAway once its
// requests are answered; its subscriptions are opened again elsewhere.
var ErrGoneAway = errors.New("fila: the broker went away")

// ErrDeadlineExceeded completes a request whose deadline passed while it
// waited for a connection, or for a leader to be elected.
var ErrDeadlineExceeded = errors.New("fila: request deadline passed before a broker took it")

type node struct {
	addr      string
	conn      *Conn
	state     State // conn's, as last reported
	dialing   bool  // in Ready.Dial, not yet answered
	failures  int   // connections failed or refused in a row
	downUntil Time  // not dialled again before
	inflight  map[uint32]*part
	subs      map[uint32]*rsub // by conn's subscription ID
}

func (n *node) usable() bool {
	return n.conn != nil && !n.conn.state.Failed && !n.conn.state.GoingAway
}

// A request is one call of Send or Unsubscribe.
type request struct {
	id       uint32
	op       wire.Opcode
	frame    wire.Frame // as the caller gave it
	deadline Time
	parts    []*part
	left     int
	done     bool
	// onDone, for a request the Router makes itself (a Topology asked
	// for a shard map, the Unsubscribe of a shard's subscription), takes
	// its outcome instead of a Completion.
	onDone func(wire.Frame, error)
}

// A part is what travels to one node: a whole request, the items of a
// batch request that one leader serves, or the Subscribe that opens (or
// opens again) a subscription.
type part struct {
	req   *request // nil for a Subscribe
	sub   *rsub    // the subscription a Subscribe opens
	frame wire.Frame
	idx   []int // the request's items this part carries; nil for all
	key   routeKey
	multi bool // items of several groups

	stamped   bool
	hint      string // where to send it next
	redirects int    // redirects followed and resends
	retries   int    // NOT_LEADER answers without a hint in a row
	waitUntil Time   // give up waiting for a leader then (with waitSet)
	waitSet   bool
	retryAt   Time
	lastErr   error
	queued    bool // in Router.waiting

	node   *node // the node it is in flight on
	connID uint32
	done   bool
	resp   wire.Frame
	err    error

	// An Enqueue part answered QUEUE_SHARDED waits (parked, in no
	// queue) for the shard maps of its queues, then is sent again split
	// by shard.
	sharded      *RequestError // the QUEUE_SHARDED answer
	parked       int           // shard-map lookups it waits for
	lookupFailed bool          // one of them failed
}

// deadline is when p stops waiting; 0 for none. An open subscription
// opens again without a deadline.
func (p *part) deadline() Time {
	if p.req != nil {
		return p.req.deadline
	}
	if !p.sub.opened {
		return p.sub.deadline
	}
	return 0
}

// rsub is a subscription across the connections it was opened on.
type rsub struct {
	id       uint32
	frame    *wire.Subscribe // as asked
	key      routeKey
	prefetch uint32 // for the next opening (SetPrefetch changes it)
	deadline Time   // of the caller's Subscribe
	opened   bool   // the caller's Subscribe completed

	attempt *part               // the Subscribe waiting or in flight, if any
	node    *node               // the node it is open, or opening, on
	connSub uint32              // its ID there
	live    bool                // SubscribeOk arrived there
	adopt   map[uint64]struct{} // leases of an ended opening, for the next
	closing bool                // Unsubscribe was called
	unsub   *request

	// A subscription of a sharded queue is a parent with one child per
	// shard, each an rsub of its own (with its own ID, never shown to the
	// caller) whose deliveries are reported under the parent's ID.
	parent   *rsub
	children []*rsub         // in shard order
	sharded  *RequestError   // the QUEUE_SHARDED answer, while the shard map is looked up
	ending   bool            // a child ended for good: the others are being closed
	endErr   error           // why
	early    []DeliveryBatch // children's deliveries before the parent opened
	earlyExp []Expiry
	granted  uint32 // a child's SubscribeOk prefetch, at its first opening
	backlog  uint64 // a child's backlog, from its last Delivery
}

// NewRouter returns a Router with no connections: the first request asks
// for a dial of a seed, or the shell connects one itself (Connected).
func NewRouter(cfg RouterConfig) *Router {
	if cfg.MaxRedirects <= 0 {
		cfg.MaxRedirects = 8
	}
	if cfg.RetryMin <= 0 {
		cfg.RetryMin = 50 * time.Millisecond
	}
	if cfg.RetryMax <= 0 {
		cfg.RetryMax = 250 * time.Millisecond
	}
	cfg.RetryMax = max(cfg.RetryMax, cfg.RetryMin)
	if cfg.LeaderWait <= 0 {
		cfg.LeaderWait = 30 * time.Second
	}
	if cfg.DialMin <= 0 {
		cfg.DialMin = 100 * time.Millisecond
	}
	if cfg.DialMax <= 0 {
		cfg.DialMax = 5 * time.Second
	}
	cfg.DialMax = max(cfg.DialMax, cfg.DialMin)
	r := &Router{
		cfg:     cfg,
		rng:     cfg.JitterSeed,
		nodes:   map[string]*node{},
		routes:  map[routeKey]string{},
		reqs:    map[uint32]*request{},
		subs:    map[uint32]*rsub{},
		shards:  map[string]*shardMap{},
		lookups: map[string]*lookup{},
		nextID:  1,
		seq:     1,
	}
	for _, a := range cfg.Seeds {
		r.node(a)
	}
	return r
}

// node returns the node at addr, adding it if it is new.
func (r *Router) node(addr string) *node {
	if n, ok := r.nodes[addr]; ok {
		return n
	}
	n := &node{addr: addr, inflight: map[uint32]*part{}, subs: map[uint32]*rsub{}}
	r.nodes[addr] = n
	r.order = append(r.order, n)
	return n
}

func (r *Router) allocID() uint32 {
	return nextID(&r.nextID, func(id uint32) bool {
		_, q := r.reqs[id]
		_, s := r.subs[id]
		return q || s
	})
}

// --- Inputs from the shell ---

// Tick tells the Router, and every connection, the current time.
func (r *Router) Tick(now Time) {
	r.now = now
	for _, n := range r.order {
		if n.conn != nil {
			n.conn.Tick(now)
		}
	}
	r.step()
}

// Connected reports that the shell connected to addr, asked in a Ready's
// Dial or not. A new Conn, with its Handshake queued, serves the node.
func (r *Router) Connected(addr string) {
	n := r.node(addr)
	n.dialing = false
	if r.closing {
		r.closes = append(r.closes, addr)
		return
	}
	if c := n.conn; c != nil {
		c.fail(errors.New("fila: replaced by a new connection"))
		r.pump(n, c)
	}
	n.conn = New(r.cfg.Conn)
	n.state = State{}
	n.conn.Tick(r.now)
	r.step()
}

// DialFailed reports that a dial of addr, asked in a Ready's Dial,
// failed. The node is dialled again after a backoff, if still needed;
// meanwhile requests go to other nodes.
func (r *Router) DialFailed(addr string, err error) {
	n, ok := r.nodes[addr]
	if !ok || !n.dialing {
		return
	}
	n.dialing = false
	r.down(n)
	r.step()
}

// ConnLost reports that addr's connection failed (a read or write error,
// EOF). Its requests are sent again or fail (see Router), and its
// subscriptions open again.
func (r *Router) ConnLost(addr string, err error) {
	n, ok := r.nodes[addr]
	if !ok || n.conn == nil {
		return
	}
	n.conn.fail(err)
	r.step()
}

// Receive feeds bytes read from addr's connection. A non-nil error is
// that connection's failure (see Conn.Receive): the Router has dropped
// it, and lists it in the next Ready's Close.
func (r *Router) Receive(addr string, b []byte) error {
	n, ok := r.nodes[addr]
	if !ok || n.conn == nil {
		return nil // a connection already dropped
	}
	err := n.conn.Receive(b)
	r.step()
	return err
}

// --- Requests ---

// Send queues request f, a frame of any request opcode but Handshake,
// Subscribe and Unsubscribe, and returns its ID; the Completion comes in
// a Ready. deadline (0 for none) bounds how long it may wait for a
// connection or a leader: past it, it completes with ErrDeadlineExceeded
// or with the last NOT_LEADER. f must not change until it completes.
func (r *Router) Send(f wire.Frame, deadline Time) (uint32, error) {
	if r.closing {
		return 0, ErrGoingAway
	}
	op := f.Opcode()
	if op.Kind() != wire.KindRequest {
		return 0, fmt.Errorf("%w: %v", ErrNotRequest, op)
	}
	switch op {
	case wire.OpSubscribe, wire.OpUnsubscribe, wire.OpHandshake:
		return 0, fmt.Errorf("fila: send %v: use its own method", op)
	}
	req := &request{id: r.allocID(), op: op, frame: f, deadline: deadline}
	r.reqs[req.id] = req
	r.split(req)
	for _, p := range req.parts {
		if !r.trySend(p) {
			r.wait(p)
		}
	}
	r.step()
	return req.id, nil
}

// Enqueue queues an Enqueue of msgs; see Send.
func (r *Router) Enqueue(msgs []wire.EnqueueMessage, deadline Time) (uint32, error) {
	return r.Send(&wire.Enqueue{Messages: msgs}, deadline)
}

// split cuts a batch request whose items the Router would send to several
// nodes into one part per node, and makes one part of anything else.
//
// The messages of an Enqueue naming a sharded queue whose shards the
// Router knows are sent to their shards (shardFrame); the caller's frame
// is left as it is.
func (r *Router) split(req *request) {
	f := r.shardFrame(req.frame)
	n := batchItems(f)
	if n <= 0 {
		req.parts = []*part{{req: req, frame: own(f), key: frameKey(f)}}
		req.left = 1
		return
	}
	k0 := queueKey(itemQueue(f, 0))
	same := true
	for i := 1; i < n && same; i++ {
		same = queueKey(itemQueue(f, i)) == k0
	}
	if same {
		req.parts = []*part{{req: req, frame: own(f), key: k0}}
		req.left = 1
		return
	}
	groups := r.groupItems(f)
	if len(groups) == 1 {
		req.parts = []*part{{req: req, frame: own(f), key: k0, multi: true}}
		req.left = 1
		return
	}
	for _, g := range groups {
		req.parts = append(req.parts, &part{req: req, frame: subset(f, g.idx), idx: g.idx, key: g.key, multi: g.multi})
	}
	req.left = len(req.parts)
}

// An itemGroup is the items of a batch request that go to one node.
type itemGroup struct {
	addr  string
	key   routeKey // its first item's
	multi bool     // items of several groups
	idx   []int
}

// groupItems groups the items of batch request f by the node each would
// go to now, in order of first appearance.
func (r *Router) groupItems(f wire.Frame) []*itemGroup {
	var groups []*itemGroup
	for i := range batchLen(f) {
		k := queueKey(itemQueue(f, i))
		a := r.addrFor(k)
		var g *itemGroup
		for _, h := range groups {
			if h.addr == a {
				g = h
				break
			}
		}
		if g == nil {
			g = &itemGroup{addr: a, key: k}
			groups = append(groups, g)
		}
		g.multi = g.multi || k != g.key
		g.idx = append(g.idx, i)
	}
	return groups
}

// Subscribe queues a Subscribe of queue and returns the subscription's ID
// (see Conn.Subscribe). Its Completion comes once, when the first node
// accepts it; after that it is opened again wherever its queue's
// leadership moves, and ends (Ready.Ended) only after Unsubscribe, or
// when a broker refuses it for good. deadline bounds the first opening.
//
// A sharded queue (one a broker answers QUEUE_SHARDED) is consumed
// through one subscription per shard, opened on each shard's leader once
// Topology has listed them, and followed as leadership moves each on its
// own; they are one subscription to the caller: the Completion comes once
// every shard's is open, with a SubscribeOk whose Prefetch is the sum of
// the shards' grants, their deliveries and expiries come under the ID
// Subscribe returned, and the first to end for good ends them all. The
// prefetch (P, or the sum of the grants when 0 was asked) is shared: each
// shard keeps at least 1 credit, so it delivers what it gets and reports
// its backlog, and the rest, max(P, shards) - shards, is split in
// proportion to each shard's backlog as its last Delivery reported it
// (evenly while none is known, or all are 0). A shard's share is changed
// (Conn.SetPrefetch) only when it moves by at least a quarter of its
// current prefetch (at least 1), or to or from 1. If the Topology fails,
// the Subscribe fails with the QUEUE_SHARDED error. Rate limits apply to
// each shard's subscription.
func (r *Router) Subscribe(queue string, prefetch uint32, limits []wire.RateLimit, deadline Time) (uint32, error) {
	return r.SubscribeLease(queue, prefetch, limits, 0, deadline)
}

// SubscribeLease is Subscribe with the subscription's own lease timeout
// in milliseconds (Subscribe's lease_timeout_ms), which every shard's
// subscription of a sharded queue asks for too; 0 means the queue's
// visibility timeout.
func (r *Router) SubscribeLease(queue string, prefetch uint32, limits []wire.RateLimit, leaseMS uint64, deadline Time) (uint32, error) {
	if r.closing {
		return 0, ErrGoingAway
	}
	s := &rsub{
		id:       r.allocID(),
		frame:    &wire.Subscribe{Queue: queue, Prefetch: prefetch, RateLimits: limits, LeaseTimeoutMS: leaseMS},
		key:      queueKey(queue),
		prefetch: prefetch,
		deadline: deadline,
	}
	r.subs[s.id] = s
	if m := r.shards[queue]; m != nil && !m.trivial(queue) {
		// Its shards are known: subscribe to them at once.
		r.splitSub(s, m)
		r.step()
		return s.id, nil
	}
	p := r.attempt(s)
	if !r.trySend(p) {
		r.wait(p)
	}
	r.step()
	return s.id, nil
}

// attempt returns a new Subscribe part for s.
func (r *Router) attempt(s *rsub) *part {
	p := &part{sub: s, key: s.key}
	s.attempt = p
	return p
}

// Unsubscribe queues the closing of sub, whose Subscribe completed
// (like Conn, it refuses one still opening). Its Completion carries
// UnsubscribeOk, and the subscription's SubscriptionEnd, with nil Err,
// comes in the same Ready; a subscription not open anywhere at the time
// (being opened again) ends at once. A sharded subscription's shards are
// each closed, and it completes, and ends, once every one is.
func (r *Router) Unsubscribe(sub uint32) (uint32, error) {
	if r.closing {
		return 0, ErrGoingAway
	}
	s, ok := r.sub(sub)
	if !ok || !s.opened || s.closing {
		return 0, fmt.Errorf("%w: %d", ErrUnknownSubscription, sub)
	}
	req := &request{id: r.allocID(), op: wire.OpUnsubscribe, frame: &wire.Unsubscribe{Subscription: sub}, left: 1}
	r.reqs[req.id] = req
	s.closing, s.unsub = true, req
	if s.children != nil {
		r.closeChildren(s)
	} else {
		r.stopSub(s)
	}
	r.step()
	return req.id, nil
}

// stopSub closes s, whose closing and unsub are set: where it is open,
// once its Subscribe in flight is answered, or now.
func (r *Router) stopSub(s *rsub) {
	switch {
	case s.live:
		r.sendUnsub(s)
	case s.attempt != nil && s.attempt.node != nil:
		// Its Subscribe is in flight: closed once answered.
	default:
		if s.attempt != nil {
			s.attempt.done = true
			s.attempt = nil
		}
		r.subGone(s, nil)
	}
}

// sub returns the caller's subscription id: not a shard's child.
func (r *Router) sub(id uint32) (*rsub, bool) {
	s, ok := r.subs[id]
	if !ok || s.parent != nil {
		return nil, false
	}
	return s, true
}

func (r *Router) sendUnsub(s *rsub) {
	n := s.node
	id, err := n.conn.Unsubscribe(s.connSub)
	if err != nil {
		r.subGone(s, nil) // the connection is going: the subscription goes with it
		return
	}
	p := &part{req: s.unsub, frame: s.unsub.frame, key: s.key, node: n, connID: id}
	s.unsub.parts = []*part{p}
	n.inflight[id] = p
}

// Settle reports deliveries of sub the application has finished with (see
// Conn.Settle), whichever connection delivered them. For a subscription of
// a sharded queue, whose shards number their leases each on their own,
// each lease is settled on the first shard that holds it: use SettleIn,
// which names the shard.
func (r *Router) Settle(sub uint32, leases ...uint64) {
	s, ok := r.sub(sub)
	if !ok {
		return
	}
	if s.children != nil {
		r.settleAny(s, leases)
		return
	}
	r.settle(s, leases)
}

// SettleIn is Settle for deliveries from queue, the queue each delivery
// names (wire.DeliveredMessage.Queue): for a subscription of a sharded
// queue, it settles them on the shard whose queue (or dead-letter queue)
// that is, since lease numbers are only unique within a shard; a queue
// that names none of its shards settles as Settle does. For any other
// subscription it is Settle. Unknown subscriptions and leases not held
// are ignored.
func (r *Router) SettleIn(sub uint32, queue string, leases ...uint64) {
	s, ok := r.sub(sub)
	if !ok {
		return
	}
	if s.children == nil {
		r.settle(s, leases)
		return
	}
	k := queueKey(queue)
	for _, c := range s.children {
		if c.key == k && r.alive(c) {
			r.settle(c, leases)
			return
		}
	}
	r.settleAny(s, leases)
}

// settle returns the credit of leases on s where it is open, or keeps it
// from being counted where it opens next.
func (r *Router) settle(s *rsub, leases []uint64) {
	for _, l := range leases {
		delete(s.adopt, l)
	}
	if s.node != nil && s.node.conn != nil && s.connSub != 0 {
		s.node.conn.Settle(s.connSub, leases...)
	}
}

// SetPrefetch changes sub's prefetch (see Conn.SetPrefetch), now where it
// is open and for every later opening. n must not be 0. A sharded
// subscription's n is split again among its shards (see Subscribe), each
// share applied whatever its change.
func (r *Router) SetPrefetch(sub uint32, n uint32) error {
	s, ok := r.sub(sub)
	if !ok {
		return fmt.Errorf("%w: %d", ErrUnknownSubscription, sub)
	}
	if n == 0 {
		return fmt.Errorf("fila: set prefetch of subscription %d to 0: only between nonzero values", sub)
	}
	if s.children != nil {
		s.prefetch = n
		r.rebalance(s, true)
		r.step()
		return nil
	}
	if s.live {
		if err := s.node.conn.SetPrefetch(s.connSub, n); err != nil {
			return err
		}
	}
	s.prefetch = n
	r.step()
	return nil
}

// Credit returns sub's credit state where it is open (see Conn.Credit);
// ok is false while it is not open anywhere. For a sharded subscription
// it is the sum over the shards where it is open.
func (r *Router) Credit(sub uint32) (outstanding, held uint32, ok bool) {
	s, found := r.sub(sub)
	if !found {
		return 0, 0, false
	}
	if s.children != nil {
		for _, c := range s.children {
			if o, h, live := r.credit(c); live {
				outstanding, held, ok = outstanding+o, held+h, true
			}
		}
		return outstanding, held, ok
	}
	return r.credit(s)
}

func (r *Router) credit(s *rsub) (outstanding, held uint32, ok bool) {
	if !s.live {
		return 0, 0, false
	}
	return s.node.conn.Credit(s.connSub)
}

// Close sends GoAway on every connection and takes no new requests;
// those waiting for a connection or a leader complete with ErrGoingAway.
// The shell closes the connections once InFlight() is 0 and the Writes
// are written.
func (r *Router) Close() {
	if r.closing {
		return
	}
	r.closing = true
	for _, n := range r.order {
		if n.conn != nil {
			n.conn.Close()
		}
	}
	r.step()
}

// --- Queries ---

// InFlight returns the number of requests not yet complete.
func (r *Router) InFlight() int { return len(r.reqs) }

// Leader returns the address a request for queue would go to now: its
// leader as far as the Router knows, else the node it would ask; "" when
// no node is reachable.
func (r *Router) Leader(queue string) string { return r.addrFor(queueKey(queue)) }

// LeaderOf returns the address an Enqueue of a message of queue with
// fairness key fairnessKey would go to now: Leader of the message's
// shard (see ShardOf) when queue is sharded and the Router knows its
// shards, else Leader(queue).
func (r *Router) LeaderOf(queue, fairnessKey string) string {
	if name, ok := r.shardName(queue, fairnessKey); ok {
		queue = name
	}
	return r.Leader(queue)
}

// Home returns the node requests with no known leader go to now; "" when
// no node is reachable.
func (r *Router) Home() string {
	if n := r.home(); n != nil {
		return n.addr
	}
	return ""
}

// NodeState returns the state of addr's connection; ok is false while
// the node has none.
func (r *Router) NodeState(addr string) (st State, ok bool) {
	n, found := r.nodes[addr]
	if !found || n.conn == nil {
		return State{}, false
	}
	return n.conn.State(), true
}

// Subscription returns the ID of the subscription that addr's
// connection knows as connSub (its Subscribe's request ID there), for
// tools that show the wire: for one shard's subscription, the ID of the
// sharded subscription it is part of.
func (r *Router) Subscription(addr string, connSub uint32) (uint32, bool) {
	n, ok := r.nodes[addr]
	if !ok {
		return 0, false
	}
	s, ok := n.subs[connSub]
	if !ok {
		return 0, false
	}
	return s.root().id, true
}

// --- Ready ---

// HasReady reports whether Ready has anything for the shell.
func (r *Router) HasReady() bool {
	if len(r.dials) > 0 || len(r.closes) > 0 || len(r.completions) > 0 || len(r.deliveries) > 0 ||
		len(r.expired) > 0 || len(r.ended) > 0 || len(r.states) > 0 {
		return true
	}
	for _, n := range r.order {
		if n.conn != nil && len(n.conn.out) > 0 {
			return true
		}
	}
	return r.deadline() != r.reported
}

// Ready returns what the Router has for the shell; see RouterReady.
func (r *Router) Ready() RouterReady {
	r.writes = r.writes[:0]
	for _, n := range r.order {
		if n.conn != nil && len(n.conn.out) > 0 {
			r.writes = append(r.writes, Write{Addr: n.addr, Out: n.conn.out, conn: n.conn})
		}
	}
	return RouterReady{
		Dial:        r.dials,
		Writes:      r.writes,
		Close:       r.closes,
		Completions: r.completions,
		Deliveries:  r.deliveries,
		Expired:     r.expired,
		Ended:       r.ended,
		Nodes:       r.states,
		Deadline:    r.deadline(),
	}
}

// Advance acknowledges rd: its Writes were written, its Dials started
// and its Closes done.
func (r *Router) Advance(rd RouterReady) {
	for _, w := range rd.Writes {
		w.conn.advanceOut(len(w.Out))
	}
	r.dials = trim(r.dials, len(rd.Dial))
	r.closes = trim(r.closes, len(rd.Close))
	r.completions = trim(r.completions, len(rd.Completions))
	r.deliveries = trim(r.deliveries, len(rd.Deliveries))
	r.expired = trim(r.expired, len(rd.Expired))
	r.ended = trim(r.ended, len(rd.Ended))
	r.states = trim(r.states, len(rd.Nodes))
	r.reported = rd.Deadline
}

// deadline is the earliest of the connections' deadlines, the retries of
// waiting parts, their deadlines, and the end of the backoff of nodes not
// connected, when anything waits.
func (r *Router) deadline() Time {
	var d Time
	at := func(t Time) {
		if t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	for _, n := range r.order {
		if n.conn != nil {
			at(n.conn.deadline())
		}
	}
	if len(r.waiting) == 0 {
		return d
	}
	for _, p := range r.waiting {
		if p.done {
			continue
		}
		if p.retryAt > r.now {
			at(p.retryAt)
		}
		at(p.deadline())
	}
	for _, n := range r.order {
		if n.conn == nil && !n.dialing && n.downUntil > r.now {
			at(n.downUntil)
		}
	}
	return d
}

// --- Driving the connections ---

// step takes every connection's events, closes what went away, and sends
// what waits and may go.
func (r *Router) step() {
	for i := 0; i < len(r.order); i++ {
		n := r.order[i]
		if c := n.conn; c != nil {
			r.pump(n, c)
			if n.conn == c && c.state.GoingAway && !c.state.Failed && !r.closing && c.InFlight() == 0 {
				// GoAway, and every request answered: done with it.
				c.fail(ErrGoneAway)
				r.pump(n, c)
			}
		}
	}
	r.dispatch()
}

// pump takes and acts on the events of c, n's connection or its last.
func (r *Router) pump(n *node, c *Conn) {
	for c.hasEvents() {
		rd := c.Ready()
		for _, d := range rd.Deliveries {
			if s, ok := n.subs[d.Subscription]; ok {
				r.delivered(s, d)
			}
		}
		for _, e := range rd.Expired {
			if s, ok := n.subs[e.Subscription]; ok {
				r.expiredIn(s, e)
			}
		}
		for _, cp := range rd.Completions {
			if p, ok := n.inflight[cp.RequestID]; ok {
				delete(n.inflight, cp.RequestID)
				r.answered(n, p, cp)
			}
		}
		for _, e := range rd.Ended {
			if s, ok := n.subs[e.Subscription]; ok {
				delete(n.subs, e.Subscription)
				r.subEnded(n, s, e)
			}
		}
		st := rd.State
		c.advanceEvents(rd)
		if st != nil {
			r.nodeState(n, c, *st)
		}
	}
	if n.conn != c {
		// c was dropped: anything it left is lost with it.
		for _, id := range sortedKeys(n.inflight) {
			p := n.inflight[id]
			delete(n.inflight, id)
			r.answered(n, p, Completion{RequestID: id, Err: fmt.Errorf("%w: %w", ErrConnectionLost, c.state.Err)})
		}
		for _, id := range sortedKeys(n.subs) {
			s := n.subs[id]
			delete(n.subs, id)
			r.subEnded(n, s, SubscriptionEnd{Subscription: id, Err: fmt.Errorf("%w: %w", ErrConnectionLost, c.state.Err)})
		}
	}
}

// nodeState records a change of c's state: a failed connection is
// dropped; one that goes away takes no new requests.
func (r *Router) nodeState(n *node, c *Conn, st State) {
	if n.conn != c {
		return
	}
	prev := n.state
	n.state = st
	r.states = append(r.states, NodeState{Addr: n.addr, State: st})
	if st.Handshaken && !prev.Handshaken {
		n.failures = 0
	}
	switch {
	case st.Failed:
		n.conn = nil
		r.closes = append(r.closes, n.addr)
		r.down(n)
	case st.GoingAway && !prev.GoingAway && !r.closing:
		r.goAway(n, st.LeaderHint)
	}
}

// down marks n as unreachable for a backoff, and forgets what it led.
func (r *Router) down(n *node) {
	n.failures++
	n.downUntil = r.now.Add(r.dialBackoff(n.failures))
	for k, a := range r.routes {
		if a == n.addr {
			delete(r.routes, k)
		}
	}
}

// goAway moves what n led to its hint, which takes n's place in the order
// of nodes to ask.
func (r *Router) goAway(n *node, hint string) {
	for k, a := range r.routes {
		if a == n.addr {
			if hint != "" {
				r.routes[k] = hint
			} else {
				delete(r.routes, k)
			}
		}
	}
	if hint == "" || hint == n.addr {
		return
	}
	h := r.node(hint)
	order := r.order[:0:0]
	for _, m := range r.order {
		switch m {
		case h:
		case n:
			order = append(order, h, n)
		default:
			order = append(order, m)
		}
	}
	r.order = order
}

// unreachable reports whether addr is a node whose last dial or
// connection failed, with no connection since.
func (r *Router) unreachable(addr string) bool {
	n, ok := r.nodes[addr]
	return ok && n.conn == nil && n.failures > 0
}

func (r *Router) dialBackoff(failures int) time.Duration {
	ceil := r.cfg.DialMin << min(failures-1, 30)
	if ceil <= 0 || ceil > r.cfg.DialMax {
		ceil = r.cfg.DialMax
	}
	return time.Duration(r.rand()%uint64(ceil)) + 1
}

// rand is splitmix64 (S. Vigna): deterministic from JitterSeed.
func (r *Router) rand() uint64 {
	r.rng += 0x9e3779b97f4a7c15
	z := r.rng
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// --- Sending ---

func (r *Router) wait(p *part) {
	if !p.queued && !p.done {
		p.queued = true
		r.waiting = append(r.waiting, p)
	}
}

// dispatch sends the waiting parts that may go, in order.
func (r *Router) dispatch() {
	if len(r.waiting) == 0 {
		return
	}
	ws := r.waiting
	r.waiting = nil // parts that fail may make others wait
	var keep []*part
	for _, p := range ws {
		p.queued = false
		if !r.trySend(p) {
			p.queued = true
			keep = append(keep, p)
		}
	}
	r.waiting = append(keep, r.waiting...)
}

// trySend sends p if it may go now; false if it must wait.
func (r *Router) trySend(p *part) bool {
	if p.done {
		return true
	}
	if r.closing {
		r.fail(p, ErrGoingAway)
		return true
	}
	if dl := p.deadline(); dl != 0 && r.now >= dl {
		err := ErrDeadlineExceeded
		if p.lastErr != nil {
			err = fmt.Errorf("%w: %w", ErrDeadlineExceeded, p.lastErr)
		}
		r.fail(p, err)
		return true
	}
	if p.retryAt > r.now {
		return false
	}
	n := r.pick(p)
	if n == nil {
		return false
	}
	if n.conn == nil {
		if !n.dialing {
			n.dialing = true
			r.dials = append(r.dials, n.addr)
		}
		return false
	}
	var id uint32
	var err error
	if s := p.sub; s != nil {
		id, err = n.conn.subscribe(s.frame.Queue, s.prefetch, s.frame.RateLimits, s.frame.LeaseTimeoutMS, sortedKeys64(s.adopt))
	} else {
		r.stamp(p)
		id, err = n.conn.Send(p.frame)
	}
	if err != nil {
		r.fail(p, err)
		return true
	}
	p.node, p.connID = n, id
	n.inflight[id] = p
	if s := p.sub; s != nil {
		s.node, s.connSub, s.live = n, id, false
		n.subs[id] = s
	}
	return true
}

// stamp gives an Enqueue part, when first sent, the producer ID and the
// next sequences; a resend keeps them.
func (r *Router) stamp(p *part) {
	if p.stamped || p.req.op != wire.OpEnqueue {
		return
	}
	p.stamped = true
	e := p.frame.(*wire.Enqueue)
	if e.ProducerID != ([16]byte{}) || r.cfg.ProducerID == ([16]byte{}) {
		return
	}
	e.ProducerID, e.Sequence = r.cfg.ProducerID, r.seq
	r.seq += uint64(len(e.Messages))
}

// pick chooses p's node: its hint, else its group's leader, else the node
// to ask; nil when none is reachable now.
func (r *Router) pick(p *part) *node {
	if p.hint != "" {
		if n := r.node(p.hint); r.reachable(n) {
			return n
		}
	}
	if n := r.routed(p.key); n != nil {
		return n
	}
	return r.home()
}

func (r *Router) routed(k routeKey) *node {
	if k == anyKey {
		return nil
	}
	if a, ok := r.routes[k]; ok {
		if n := r.nodes[a]; n != nil && r.reachable(n) {
			return n
		}
	}
	return nil
}

// addrFor is the address a request of group k would go to now.
func (r *Router) addrFor(k routeKey) string {
	if n := r.routed(k); n != nil {
		return n.addr
	}
	if n := r.home(); n != nil {
		return n.addr
	}
	return ""
}

func (r *Router) reachable(n *node) bool {
	if n.conn != nil {
		return n.usable()
	}
	return n.downUntil <= r.now
}

// home is the node to ask: the first connected, else the first that may
// be dialled.
func (r *Router) home() *node {
	for _, n := range r.order {
		if n.usable() {
			return n
		}
	}
	for _, n := range r.order {
		if n.conn == nil && n.downUntil <= r.now {
			return n
		}
	}
	return nil
}

// --- Outcomes ---

// answered acts on the outcome of part p on node n.
func (r *Router) answered(n *node, p *part, cp Completion) {
	if p.done {
		return
	}
	p.node = nil
	if p.sub != nil {
		r.subscribeAnswered(n, p, cp)
		return
	}
	if p.req.op == wire.OpUnsubscribe {
		r.unsubscribeAnswered(p, cp)
		return
	}
	var re *RequestError
	switch {
	case cp.Err == nil:
		if p.req.op == wire.OpEnqueue && r.shardedItems(n, p, cp.Response) {
			return
		}
		if r.notLeaderItems(n, p, cp.Response) {
			return
		}
		r.learn(n, p, cp.Response)
		r.finish(p, cp.Response, nil)
	case errors.Is(cp.Err, ErrConnectionLost):
		r.lost(p, cp.Err, cp.unsent)
	case errors.As(cp.Err, &re) && re.Code == wire.CodeNotLeader:
		r.redirect(n, p, re)
	case errors.As(cp.Err, &re) && re.Code == wire.CodeQueueSharded && p.req.op == wire.OpEnqueue:
		r.reshard(p, re)
	default:
		r.finish(p, nil, cp.Err)
	}
}

// learn records where p's groups are led: n, which served it; and, from
// a Topology result, where each shard of its queue is.
func (r *Router) learn(n *node, p *part, resp wire.Frame) {
	if t, ok := resp.(*wire.TopologyResult); ok {
		for _, sh := range t.Shards {
			if sh.LeaderAddr == "" {
				continue
			}
			r.node(sh.LeaderAddr)
			r.routes[queueKey(shardQueue(t, sh))] = sh.LeaderAddr
		}
	}
	switch {
	case p.multi:
		for i := range batchLen(p.frame) {
			r.routes[queueKey(itemQueue(p.frame, i))] = n.addr
		}
	case p.key != anyKey:
		r.routes[p.key] = n.addr
	}
}

// forget drops what the routing table says n leads of p's groups.
func (r *Router) forget(n *node, p *part) {
	drop := func(k routeKey) {
		if r.routes[k] == n.addr {
			delete(r.routes, k)
		}
	}
	if !p.multi {
		drop(p.key)
		return
	}
	for i := range batchLen(p.frame) {
		drop(queueKey(itemQueue(p.frame, i)))
	}
}

// redirect follows a NOT_LEADER from n: to the hint, or, with none, to
// whichever node after a backoff.
func (r *Router) redirect(n *node, p *part, re *RequestError) {
	p.lastErr = re
	r.forget(n, p)
	if p.redirects >= r.cfg.MaxRedirects {
		r.fail(p, re)
		return
	}
	if p.multi {
		r.splitRuns(p, re)
		return
	}
	hint := re.LeaderHint
	if hint != "" && !r.unreachable(hint) {
		p.redirects++
		p.hint, p.retryAt = hint, 0
		if p.key != anyKey {
			r.routes[p.key] = hint
		}
		r.wait(p)
		return
	}
	// No hint (an election), or one naming a node whose last dial or
	// connection failed: after a leader dies its followers name it until
	// they elect another. Retry after a backoff rather than spend the
	// redirects going back and forth; a stale hint is kept, so that the
	// node is dialled again once its dial backoff ends (it may be back,
	// and lead again).
	p.hint = hint
	at := r.now.Add(min(r.cfg.RetryMax, r.cfg.RetryMin<<min(p.retries, 30)))
	p.retries++
	limit := p.deadline()
	if limit == 0 && (p.sub == nil || !p.sub.opened) {
		if !p.waitSet {
			p.waitSet, p.waitUntil = true, r.now.Add(r.cfg.LeaderWait)
		}
		limit = p.waitUntil
	}
	if limit != 0 && at >= limit {
		r.fail(p, re)
		return
	}
	p.retryAt = at
	r.wait(p)
}

// splitRuns follows a NOT_LEADER for a part with items of several groups:
// the hint may lead only some, so the part is cut into runs of one group
// each (keeping each message's sequence), sent to the hint first.
func (r *Router) splitRuns(p *part, re *RequestError) {
	req := p.req
	f := p.frame
	var parts []*part
	for a, n := 0, batchLen(f); a < n; {
		k := queueKey(itemQueue(f, a))
		b := a + 1
		for b < n && queueKey(itemQueue(f, b)) == k {
			b++
		}
		idx := make([]int, b-a)
		for i := range idx {
			if p.idx == nil {
				idx[i] = a + i
			} else {
				idx[i] = p.idx[a+i]
			}
		}
		parts = append(parts, &part{req: req, frame: run(f, a, b), idx: idx, key: k, stamped: p.stamped,
			hint: re.LeaderHint, redirects: p.redirects + 1, lastErr: re})
		a = b
	}
	p.done = true
	for i, q := range req.parts {
		if q == p {
			req.parts = append(req.parts[:i:i], append(parts, req.parts[i+1:]...)...)
			break
		}
	}
	req.left += len(parts) - 1
	for _, q := range parts {
		r.wait(q)
	}
}

// lost acts on p's connection failing before its answer.
func (r *Router) lost(p *part, err error, unsent bool) {
	p.lastErr, p.hint = err, ""
	if !unsent {
		if !resendable(p.req.op, p.frame) || p.redirects >= r.cfg.MaxRedirects {
			r.finish(p, nil, err)
			return
		}
		p.redirects++
	}
	r.wait(p)
}

// fail ends p with err.
func (r *Router) fail(p *part, err error) {
	if p.sub != nil {
		r.subFailed(p, err)
		return
	}
	r.finish(p, nil, err)
}

// finish records p's outcome and completes its request once every part
// has one.
func (r *Router) finish(p *part, resp wire.Frame, err error) {
	if p.done {
		return
	}
	p.done, p.resp, p.err = true, resp, err
	req := p.req
	if req.left--; req.left > 0 || req.done {
		return
	}
	req.done = true
	delete(r.reqs, req.id)
	cp := Completion{RequestID: req.id, Op: req.op, Request: req.frame}
	if len(req.parts) == 1 {
		cp.Response, cp.Err = p.resp, p.err
	} else {
		cp.Response, cp.Err = joinParts(req)
	}
	if req.onDone != nil {
		req.onDone(cp.Response, cp.Err)
		return
	}
	r.completions = append(r.completions, cp)
}

// --- Subscriptions ---

func (r *Router) subscribeAnswered(n *node, p *part, cp Completion) {
	s := p.sub
	if cp.Err == nil {
		p.done = true
		s.attempt, s.live, s.adopt = nil, true, nil
		if s.key != anyKey {
			r.routes[s.key] = n.addr
		}
		if !s.opened {
			s.opened = true
			if s.parent != nil {
				r.childOpened(s, cp.Response)
			} else {
				r.completions = append(r.completions, Completion{RequestID: s.id, Op: wire.OpSubscribe, Request: s.frame, Response: cp.Response})
			}
		}
		if s.closing {
			r.sendUnsub(s)
		}
		return
	}
	delete(n.subs, p.connID)
	s.node, s.connSub = nil, 0
	if s.closing {
		p.done, s.attempt = true, nil
		r.subGone(s, nil)
		return
	}
	var re *RequestError
	switch {
	case errors.Is(cp.Err, ErrConnectionLost):
		r.lost(p, cp.Err, true) // a Subscribe is always safe to send again
	case errors.As(cp.Err, &re) && re.Code == wire.CodeNotLeader:
		r.redirect(n, p, re)
	case errors.As(cp.Err, &re) && re.Code == wire.CodeQueueSharded && s.parent == nil && !s.opened:
		p.done, s.attempt = true, nil
		r.shardSub(s, re)
	default:
		r.subFailed(p, cp.Err)
	}
}

// subEnded acts on the end of s where it was open.
func (r *Router) subEnded(n *node, s *rsub, e SubscriptionEnd) {
	s.node, s.connSub, s.live = nil, 0, false
	var re *RequestError
	switch {
	case e.Err == nil || s.closing:
		r.subGone(s, nil)
	case errors.Is(e.Err, ErrConnectionLost):
		// The broker released its leases with the connection: open it
		// again with its whole prefetch.
		s.adopt = nil
		r.lost(r.attempt(s), e.Err, true)
	case errors.As(e.Err, &re) && re.Code == wire.CodeNotLeader:
		// The leases stay valid on the new leader: keep counting them.
		s.adopt = make(map[uint64]struct{}, len(e.held))
		for _, l := range e.held {
			s.adopt[l] = struct{}{}
		}
		r.redirect(n, r.attempt(s), re)
	default:
		r.subGone(s, e.Err)
	}
}

// subFailed ends the opening p of its subscription with err: the
// caller's Subscribe fails, or the open subscription ends.
func (r *Router) subFailed(p *part, err error) {
	s := p.sub
	p.done = true
	if s.attempt == p {
		s.attempt = nil
	}
	r.subEnd(s, err)
}

// subEnd ends s, which has no opening in flight, with err: the caller's
// Subscribe fails, or the open subscription ends. A shard's subscription
// ends its sharded one (childGone).
func (r *Router) subEnd(s *rsub, err error) {
	if s.closing {
		r.subGone(s, nil)
		return
	}
	if s.parent != nil {
		r.subGone(s, err)
		return
	}
	if !s.opened {
		delete(r.subs, s.id)
		r.completions = append(r.completions, Completion{RequestID: s.id, Op: wire.OpSubscribe, Request: s.frame, Err: err})
		return
	}
	r.subGone(s, err)
}

// subGone ends s for good, completing an Unsubscribe of it.
func (r *Router) subGone(s *rsub, err error) {
	if _, ok := r.subs[s.id]; !ok {
		return
	}
	delete(r.subs, s.id)
	if s.node != nil && s.node.subs[s.connSub] == s {
		delete(s.node.subs, s.connSub)
	}
	if s.parent != nil {
		if req := s.unsub; req != nil && !req.done {
			if len(req.parts) == 0 {
				req.parts = []*part{{req: req, frame: req.frame}}
			}
			r.finish(req.parts[0], &wire.UnsubscribeOk{}, nil)
		}
		r.childGone(s, err)
		return
	}
	r.ended = append(r.ended, SubscriptionEnd{Subscription: s.id, Err: err})
	if req := s.unsub; req != nil && !req.done {
		if len(req.parts) == 0 {
			req.parts = []*part{{req: req, frame: req.frame}}
		}
		r.finish(req.parts[0], &wire.UnsubscribeOk{}, nil)
	}
}

// unsubscribeAnswered completes an Unsubscribe. Once its subscription
// ended (or the connection did, taking the subscription with it), it
// succeeded whatever the broker says.
func (r *Router) unsubscribeAnswered(p *part, cp Completion) {
	sub := p.req.frame.(*wire.Unsubscribe).Subscription
	s, open := r.subs[sub]
	switch {
	case cp.Err == nil:
		r.finish(p, cp.Response, nil)
	case !open || errors.Is(cp.Err, ErrConnectionLost) || isNotLeader(cp.Err):
		r.finish(p, &wire.UnsubscribeOk{}, nil)
	case s.parent != nil:
		// A shard's subscription the broker would not close: count it
		// gone, so that its sharded subscription can end.
		r.finish(p, nil, cp.Err)
		r.subGone(s, nil)
	default:
		s.closing, s.unsub = false, nil
		r.finish(p, nil, cp.Err)
	}
}

func isNotLeader(err error) bool {
	var re *RequestError
	return errors.As(err, &re) && re.Code == wire.CodeNotLeader
}
