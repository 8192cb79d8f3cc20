package sched

import (
	"time"

	"github.com/fila-mq/fila/broker/internal/sched/bucket"
	"github.com/fila-mq/fila/broker/internal/sched/drr"
	"github.com/fila-mq/fila/broker/internal/sched/idem"
	"github.com/fila-mq/fila/broker/internal/sched/stfq"
)

// A message is in exactly one state at a time.
type msgState uint8

const (
	// stReady: in its lane's list, deliverable in turn.
	stReady msgState = iota
	// stDelayed: due later (enqueue delay or retry backoff), in the
	// timer heap. In an ordered lane it also keeps its place in the list.
	stDelayed
	// stLeased: delivered, lease deadline in the timer heap, linked in
	// its subscription's lease list.
	stLeased
	// stDeciding: failed, waiting for Decide (on_failure hook).
	stDeciding
	// stNone: between states inside one command; never seen outside.
	stNone
)

var stateNames = [...]string{stReady: "ready", stDelayed: "delayed", stLeased: "leased", stDeciding: "deciding", stNone: "none"}

// String returns the state's name, for messages.
func (st msgState) String() string { return stateNames[st] }

// msg flags.
const (
	fDead   uint8 = 1 << iota // dead-lettered: lives in its home queue's DLQ
	fState                    // a state record exists in storage
	fListed                   // in its lane's list
	fReason                   // has a last failure reason in Sched.reasons
	fFresh                    // leased in the Ready being built, not yet handed out
	fNoTTL                    // its stored record has an expiry a redrive took away (ttl.go)
)

// laneID identifies a lane within its fairness key. prio is the
// priority of the lane's messages (encoded as Message.Priority) in a
// lane without an ordering key; 0 in one with an ordering key, whose
// messages keep their order whatever their priorities.
type laneID struct {
	ts   *tset
	okey string
	prio uint8
}

type laneState uint8

const (
	lsIdle     laneState = iota // nothing deliverable (empty, or blocked by ordering)
	lsRunnable                  // in its key's runnable ring
	lsParked                    // in a bucket's waiting list
)

// A lane is the FIFO of one fairness key's messages that share a throttle
// key set and ordering key. DRR picks keys; a key serves its runnable
// lanes round robin, one message per visit; a lane whose next message
// lacks a token parks on that bucket without holding back the key's other
// lanes.
type lane struct {
	key        *fkey
	head, tail mref
	n          int32 // messages in the list
	refs       int32 // messages of any state in the lane
	ts         *tset // nil: no throttle keys
	okey       string
	// prio is its laneID's; rank is the priority (0 to 9) it was put in
	// its key's runnable rings with (priority.go).
	prio, rank uint8
	// inflight is an ordered lane's message that left the list for
	// delivery and has not been acked or dead-lettered: it blocks the
	// lane, and a retry puts it back at the head.
	inflight mref
	// idx is its index in Sched.lanes, which its messages name.
	idx uint32
	// next and prev link the lane into its key's runnable ring or its
	// bucket's waiting list.
	next, prev *lane
	tb         *tbucket // lsParked: the bucket it waits for
	state      laneState
	// img is the lane's number in the image being written (AppendImage's
	// scratch).
	img uint32
}

// ordered reports whether the lane enforces one-at-a-time delivery. DLQs
// keep ordering keys as metadata only.
func (l *lane) ordered() bool { return l.okey != "" && l.key.q.parent == nil }

// canRun reports whether l has a message to deliver, tokens aside.
func (s *Sched) canRun(l *lane) bool {
	if l.head == 0 {
		return false
	}
	if !l.ordered() {
		return true
	}
	return l.inflight == 0 && s.msg(l.head).state == stReady
}

// pushBack appends message x, its record m, to l's list.
func (s *Sched) pushBack(l *lane, x mref, m *msg) {
	m.next, m.prev = 0, l.tail
	if l.tail != 0 {
		s.msg(l.tail).next = x
	} else {
		l.head = x
	}
	l.tail = x
	l.n++
}

// pushFront puts message x, its record m, at the head of l's list.
func (s *Sched) pushFront(l *lane, x mref, m *msg) {
	m.prev, m.next = 0, l.head
	if l.head != 0 {
		s.msg(l.head).prev = x
	} else {
		l.tail = x
	}
	l.head = x
	l.n++
}

// unlink takes message x, its record m, out of l's list.
func (s *Sched) unlink(l *lane, x mref, m *msg) {
	s.unlinkMsg(&l.head, &l.tail, m)
	l.n--
}

// unlinkMsg takes message record m out of the doubly linked list whose
// first and last messages are *head and *tail (a lane's, or a
// subscription's leases).
func (s *Sched) unlinkMsg(head, tail *mref, m *msg) {
	if m.prev != 0 {
		s.msg(m.prev).next = m.next
	} else {
		*head = m.next
	}
	if m.next != 0 {
		s.msg(m.next).prev = m.prev
	} else {
		*tail = m.prev
	}
	m.next, m.prev = 0, 0
}

func (l *lane) throttleKeys() []string {
	if l.ts == nil {
		return nil
	}
	return l.ts.names
}

// An fkey is one fairness key of a queue: its DRR flow and its lanes.
type fkey struct {
	flow  drr.Flow[*fkey]
	sflow stfq.Flow[*fkey]
	q     *queue
	name  string
	// run is the runnable ring's next lane to serve; nrun its length,
	// counting every ring's lanes when pr is set.
	run *lane
	// pr holds a runnable ring per priority, once a lane of a priority
	// other than the default has been runnable (priority.go); run is then
	// the position in the highest priority's ring.
	pr *prioRings
	// refs counts the key's messages in any state; the key is dropped at 0.
	refs int32
	// pending counts its stReady messages.
	pending int32
	nrun    int32
	// backlogged is set while the key holds a deficit: from its
	// activation until pending drops to 0.
	backlogged bool
	delivered  uint64
	// The latency lane (stfq queues, policy.go): idleSince is when the
	// key last had nothing pending (0: not since it was created); left
	// is what remains of its budget while inLat; lnext and lprev link
	// the lane's FIFO.
	idleSince    Time
	left         uint32
	inLat        bool
	lnext, lprev *fkey
	// ten is its tenant, in a queue with a tenant separator (policy.go).
	ten *tenant
	// est is, in a queue that charges by time, its estimate of a
	// delivery's lease time in milliseconds (0: none yet).
	est   uint32
	dflt  lane // the lane without throttle keys or ordering key
	lanes map[laneID]*lane
	img   uint32 // its number in the image being written
	// win counts its deliveries over the stats window, from its first
	// delivery on (window.go).
	win *window
}

// DRR returns the key's DRR flow (drr.Node).
func (k *fkey) DRR() *drr.Flow[*fkey] { return &k.flow }

// A tset is an interned set of throttle keys, shared by lanes.
type tset struct {
	canon   string // the sorted names, each prefixed by its length (uvarint)
	names   []string
	buckets []*tbucket
	refs    int    // lanes using it
	img     uint32 // its number in the image being written
}

// A tbucket is a token bucket with the lanes (throttle buckets) or
// subscriptions (consumer rate limits) waiting for its next token.
type tbucket struct {
	name string
	b    bucket.Bucket
	// limited is false for a throttle key without configuration: then
	// it admits everything.
	limited bool
	// lanes waiting, FIFO.
	whead, wtail *lane
	nwait        int
	// subs waiting (consumer rate limits).
	subs *sub
	// q is the queue of a consumer rate limit; nil for throttle buckets.
	q    *queue
	refs int // tsets (throttle) or subscriptions (rate limit)
	// held counts the lanes parked for its token (ThrottleKeyStats.HeldBack).
	held   uint64
	wakeAt Time
	hidx   int32
	woke   bool   // in Sched.woke
	img    uint32 // its number in the image being written
}

// before orders bucket timers by time, then throttle buckets by key
// before rate limits by name and queue: a total order, so that equal
// times fire in the same order whatever the heap's layout.
func (b *tbucket) before(o *tbucket) bool {
	if b.wakeAt != o.wakeAt {
		return b.wakeAt < o.wakeAt
	}
	if (b.q == nil) != (o.q == nil) {
		return b.q == nil
	}
	if b.name != o.name {
		return b.name < o.name
	}
	return b.q != nil && b.q.name < o.q.name
}
func (b *tbucket) setIndex(i int32) { b.hidx = i }
func (b *tbucket) index() int32     { return b.hidx }

func (b *tbucket) addWaiter(l *lane) {
	l.next, l.prev = nil, b.wtail
	if b.wtail != nil {
		b.wtail.next = l
	} else {
		b.whead = l
	}
	b.wtail = l
	b.nwait++
}

func (b *tbucket) removeWaiter(l *lane) {
	if l.prev != nil {
		l.prev.next = l.next
	} else {
		b.whead = l.next
	}
	if l.next != nil {
		l.next.prev = l.prev
	} else {
		b.wtail = l.prev
	}
	l.next, l.prev = nil, nil
	b.nwait--
}

type subState uint8

const (
	subIdle     subState = iota // no credit, MaxUnsettled leases held, or at MaxDeliveryBatch for this Ready
	subEligible                 // in its queue's ring
	subParked                   // waiting for a rate-limit token
)

// A sub is a subscription.
type sub struct {
	id     SubID
	q      *queue
	credit uint32
	// lease is its deliveries' lease length; 0: the queue's visibility
	// timeout.
	lease time.Duration
	// held counts the messages leased to it (its lease list's length); it
	// takes deliveries only while held < Sched.maxHeld.
	held   uint32
	slot   uint32 // its index in Sched.slots
	limits []*tbucket
	// lhead and ltail are the first and last of the messages leased to
	// it, linked by their next and prev, in the order leased.
	lhead, ltail mref
	// next and prev link it into its queue's eligible ring or a limit
	// bucket's waiting list.
	next, prev *sub
	tb         *tbucket
	state      subState
	batch      int  // messages delivered in the Ready being built
	capped     bool // in Sched.capped
	closed     bool
	group      int32 // index in the Ready's Deliveries while grouping
	egroup     int32 // index in the Ready's Expired while grouping
}

// A queue is a queue or a DLQ.
type queue struct {
	// win counts the queue's deliveries over the stats window.
	win    window
	name   string
	spec   QueueSpec
	parent *queue // set for a DLQ
	dlq    *queue // set for a queue
	msgs   msgIndex
	keys   map[string]*fkey
	fair   fair // across its fairness keys
	subs   map[SubID]*sub
	// elig is the eligible ring's next subscription to serve.
	elig  *sub
	ready uint64
	// delayed counts stDelayed and stDeciding.
	delayed, leased uint64
	// dedup remembers the idempotency keys; dnext is its first expiry
	// and dhidx the queue's index in Sched.expiry, -1 when it is empty.
	dedup     idem.Table
	dnext     Time
	dhidx     int32
	dunsorted bool // keys or producers restored, not yet in Sched.expiry
	limits    map[string]*tbucket
	dirty     bool
	deleted   bool
	// ttls is set once a message with a TTL joined the queue: ready
	// messages may then be in the timer heap.
	ttls bool
	// counts are its cumulative events (QueueStats.Counts).
	counts QueueCounts
	// redrive is a DLQ's throttled redrive under way (redrive.go).
	redrive *redrive

	// prods are the idempotent producers the queue remembers, listed
	// from phead to ptail by expiry (producer.go).
	prods        map[[16]byte]*producer
	phead, ptail *producer

	// Effective settings.
	vis    time.Duration
	policy RetryPolicy
	window time.Duration

	img uint32 // its number in the image being written
}

// home is the queue under whose name the message records of this queue's
// messages are stored: a dead-lettered message keeps its record.
func (q *queue) home() *queue {
	if q.parent != nil {
		return q.parent
	}
	return q
}

// nextExpiry returns the first expiry of the queue's idempotency keys and
// producers; ok is false when it has neither.
func (q *queue) nextExpiry() (next Time, ok bool) {
	n, ok := q.dedup.Next()
	next = Time(n)
	if p := q.phead; p != nil && (!ok || p.expires < next) {
		return p.expires, true
	}
	return next, ok
}

func (q *queue) before(o *queue) bool {
	if q.dnext != o.dnext {
		return q.dnext < o.dnext
	}
	return q.name < o.name
}
func (q *queue) setIndex(i int32) { q.dhidx = i }
func (q *queue) index() int32     { return q.dhidx }
