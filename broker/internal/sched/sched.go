package sched

import (
	"math"
	"slices"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched/drr"
)

// Defaults for the zero fields of Config.
const (
	DefaultQuantum           = drr.DefaultQuantum
	DefaultVisibilityTimeout = 30 * time.Second
	DefaultBackoffBase       = time.Second
	DefaultBackoffMax        = 60 * time.Second
	DefaultDedupWindow       = 5 * time.Minute
	DefaultMaxAttempts       = 3
	DefaultMaxDeliveryBatch  = 1024
	DefaultMaxLeaseExtension = 12 * time.Hour
	DefaultMaxUnsettled      = 1000
	DefaultProducerSeqs      = 1024
)

// Config holds the broker-wide scheduler settings. Zero (or negative)
// fields take the defaults above.
type Config struct {
	// Policy is the fair scheduling policy of queues created without one
	// ([scheduler] policy): PolicyDRR or PolicySTFQ; "" means
	// DefaultPolicy.
	Policy string
	// LatencyBudget is the latency lane's budget of stfq queues created
	// without one, in deliveries per key ([scheduler] latency_budget,
	// default 10); negative means no latency lane.
	LatencyBudget int
	// LatencyIdle is how long a key must have had nothing pending to
	// enter the latency lane even if it was served more than its share,
	// for stfq queues created without their own ([scheduler]
	// latency_idle, default 100ms).
	LatencyIdle time.Duration
	// Quantum is the deficit, in payload bytes, that a fairness key of
	// weight 1 earns per DRR round ([scheduler] quantum, default 1000,
	// at most drr.MaxQuantum).
	Quantum int64
	// VisibilityTimeout is the default lease length ([queue]
	// visibility_timeout, default 30s).
	VisibilityTimeout time.Duration
	// BackoffBase and BackoffMax are the default failure policy's first
	// delay and cap (defaults 1s and 60s).
	BackoffBase, BackoffMax time.Duration
	// DedupWindow is the default idempotency window (default 5m).
	DedupWindow time.Duration
	// MaxAttempts is the default number of deliveries before a message
	// is dead-lettered (default 3).
	MaxAttempts int
	// MaxLeaseExtension is the longest duration ExtendLease accepts, and
	// the longest visibility timeout CreateQueue accepts ([queue]
	// max_lease_extension, default 12h).
	MaxLeaseExtension time.Duration
	// MaxDeliveryBatch bounds the messages delivered to one subscription
	// in one Ready (default 1024); the rest follow in the next Ready.
	MaxDeliveryBatch int
	// MaxUnsettled caps the deliveries one subscription may hold
	// unsettled (leased to it) at a time, whatever credit it was given
	// ([server] max_unsettled, default 1000, at most 2^32-1). Subscribe
	// grants at most this much initial credit.
	MaxUnsettled int
	// LeaseBase is the lease token before the first delivery's; each
	// delivery takes the next. StartLeaseEpoch raises it.
	LeaseBase uint64
	// ProducerSeqs is how many sequences of each idempotent producer a
	// queue remembers, the most recent (default 1024); see producer.go.
	ProducerSeqs int
}

func (c Config) withDefaults() Config {
	if c.Policy == "" {
		c.Policy = DefaultPolicy
	}
	if c.LatencyBudget == 0 {
		c.LatencyBudget = DefaultLatencyBudget
	}
	c.LatencyBudget = min(c.LatencyBudget, MaxLatencyBudget)
	if c.LatencyIdle <= 0 {
		c.LatencyIdle = DefaultLatencyIdle
	}
	c.LatencyIdle = min(c.LatencyIdle, MaxLatencyIdle)
	if c.Quantum <= 0 {
		c.Quantum = DefaultQuantum
	}
	c.Quantum = min(c.Quantum, drr.MaxQuantum)
	if c.VisibilityTimeout <= 0 {
		c.VisibilityTimeout = DefaultVisibilityTimeout
	}
	if c.BackoffBase <= 0 {
		c.BackoffBase = DefaultBackoffBase
	}
	if c.BackoffMax <= 0 {
		c.BackoffMax = DefaultBackoffMax
	}
	if c.DedupWindow <= 0 {
		c.DedupWindow = DefaultDedupWindow
	}
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = DefaultMaxAttempts
	}
	if c.MaxLeaseExtension <= 0 {
		c.MaxLeaseExtension = DefaultMaxLeaseExtension
	}
	if c.MaxDeliveryBatch <= 0 {
		c.MaxDeliveryBatch = DefaultMaxDeliveryBatch
	}
	if c.MaxUnsettled <= 0 {
		c.MaxUnsettled = DefaultMaxUnsettled
	}
	c.MaxUnsettled = min(c.MaxUnsettled, math.MaxUint32)
	if c.ProducerSeqs <= 0 {
		c.ProducerSeqs = DefaultProducerSeqs
	}
	c.ProducerSeqs = min(c.ProducerSeqs, 1<<20)
	return c
}

// Sched is the scheduling state machine of one shard. See the package
// documentation for how a shell drives it. Its methods must be called
// from one goroutine.
type Sched struct {
	cfg     Config
	now     Time
	queues  map[string]*queue
	subs    map[SubID]*sub
	buckets map[string]*tbucket // throttle buckets by key
	tsets   map[string]*tset    // interned throttle key sets
	// recs holds the message records, exts their extension records
	// (table.go).
	recs recSlab
	exts extSlab
	// lanes maps msg.lane to the lane (index 0 is none); freeLanes lists
	// the indices to reuse.
	lanes     []*lane
	freeLanes []uint32
	timers    timerHeap[xref, extOrder]                // delays, backoffs, lease deadlines
	wakes     timerHeap[*tbucket, selfOrder[*tbucket]] // next token for buckets with waiters
	expiry    timerHeap[*queue, selfOrder[*queue]]     // queues by their first idempotency key or producer expiry
	unsorted  []*queue                                 // queues whose restored keys or producers need sorting
	// ptouched lists the producers an Enqueue command remembered
	// sequences of, and pend those sequences, written when it ends.
	ptouched []*producer
	pend     []pendEntry
	pbuf     []pentry
	lease    uint64 // last lease token handed out
	tseq     uint64 // last msgExt.tseq

	// slots maps msgExt.slot to the open subscription holding the lease
	// (slot 0 is none); freeSlots lists the slots to reuse.
	slots     []*sub
	freeSlots []uint32
	maxHeld   uint32 // Config.MaxUnsettled

	dirty  []*queue   // queues to pump
	woke   []*tbucket // buckets that woke waiters in this pump
	spare  []*tbucket
	capped []*sub // subscriptions at MaxDeliveryBatch

	bufs         [2]readyBuf
	bi           int
	cur          *readyBuf
	lastDeadline Time
	// statsFrom is the time of the first Tick: the stats window starts
	// there (window.go).
	statsFrom Time

	reasons map[mref]string // last failure reason of messages with fReason
	scratch []byte
	keys    []string
	// drop is DeleteQueue's scratch: the timed messages of the queue it
	// deletes.
	drop []mref
	// redrives lists the DLQs running a throttled redrive, in the order
	// they started (redrive.go).
	redrives []*queue
}

// New returns a scheduler with no queues. Restore stored records before
// the first Tick.
func New(cfg Config) *Sched {
	s := &Sched{
		cfg:     cfg.withDefaults(),
		queues:  make(map[string]*queue),
		subs:    make(map[SubID]*sub),
		buckets: make(map[string]*tbucket),
		tsets:   make(map[string]*tset),
		reasons: make(map[mref]string),
		slots:   []*sub{nil},
		lanes:   []*lane{nil},
	}
	s.timers.o.t = &s.exts
	s.maxHeld = uint32(s.cfg.MaxUnsettled)
	s.lease = s.cfg.LeaseBase
	s.cur = &s.bufs[0]
	return s
}

// StartLeaseEpoch makes every later lease token greater than base (and
// than every token handed out before): the shell starts an epoch at boot,
// with a base from the boot time, so that tokens never repeat across
// restarts.
func (s *Sched) StartLeaseEpoch(base uint64) {
	s.lease = max(s.lease, base)
}

// Tick advances the scheduler's clock to now (a time before the current
// one is ignored) and fires what is due: delays and backoffs end, leases
// expire (a failed attempt, reason "lease expired"), buckets refill for
// the lanes and subscriptions waiting on them, idempotency keys are
// forgotten.
func (s *Sched) Tick(now Time) {
	if now > s.now {
		s.now = now
	}
	if s.statsFrom == 0 {
		s.statsFrom = s.now
	}
	for {
		t, ok := s.timers.top()
		if !ok || s.exts.at(uint32(t)).due > s.now {
			break
		}
		s.timers.pop()
		s.fire(s.exts.at(uint32(t)).msg)
	}
	for {
		b, ok := s.wakes.top()
		if !ok || b.wakeAt > s.now {
			break
		}
		s.wakes.pop()
		s.wake(b)
	}
	s.sortRestored()
	if len(s.redrives) > 0 {
		s.runRedrives()
	}
	for {
		q, ok := s.expiry.top()
		if !ok || q.dnext > s.now {
			break
		}
		s.expireDedup(q)
	}
}

// Now returns the scheduler's clock: the latest time given to Tick.
func (s *Sched) Now() Time { return s.now }

// HasReady reports whether Ready has anything for the shell: mutations,
// replies, deliveries, expired leases, failures, ended subscriptions, or a Deadline other
// than the one in the last Ready. It runs the pending scheduling work,
// so it is where deliveries are decided.
func (s *Sched) HasReady() bool {
	s.pumpAll()
	b := s.cur
	return len(b.persist) > 0 || len(b.replies) > 0 || len(b.dl) > 0 || len(b.exp) > 0 ||
		len(b.failures) > 0 || len(b.ended) > 0 || s.deadline() != s.lastDeadline
}

// Ready returns the effects accumulated since the last Ready and starts a
// new accumulation. The slices it returns stay valid until the next call
// of Ready; the shell must not modify them. Call Advance when it has been
// handled.
func (s *Sched) Ready() Ready {
	s.pumpAll()
	b := s.cur
	s.group(b)
	s.groupExpired(b)
	rd := Ready{
		Persist:    b.persist,
		Replies:    b.replies,
		Expired:    b.expired,
		Deliveries: b.dels,
		Failures:   b.failures,
		Ended:      b.ended,
		Deadline:   s.deadline(),
	}
	s.bi ^= 1
	s.cur = &s.bufs[s.bi]
	s.cur.reset()
	for _, sb := range s.capped {
		sb.capped = false
		if !sb.closed && s.canTake(sb) && sb.state == subIdle {
			s.subIn(sb)
			s.markDirty(sb.q)
		}
	}
	clear(s.capped)
	s.capped = s.capped[:0]
	return rd
}

// Advance tells the scheduler that rd, the last Ready, has been handled:
// its Persist is durable and its replies and deliveries were released,
// and the shell's timer is armed for rd.Deadline.
func (s *Sched) Advance(rd Ready) {
	s.lastDeadline = rd.Deadline
}

// Deadline returns when the shell must call Tick next, as Ready's
// Deadline does (Unix nanoseconds; 0: no timer), whether or not it has
// changed since the last Ready. A shell whose timer was not armed for the
// Readies it handled (a replica that follows its group's leader) arms it
// from this when it starts leading.
func (s *Sched) Deadline() Time { return s.deadline() }

// deadline returns the earliest timer, 0 for none.
func (s *Sched) deadline() Time {
	var d Time
	if t, ok := s.timers.top(); ok {
		d = s.exts.at(uint32(t)).due
	}
	if b, ok := s.wakes.top(); ok && (d == 0 || b.wakeAt < d) {
		d = b.wakeAt
	}
	if q, ok := s.expiry.top(); ok && (d == 0 || q.dnext < d) {
		d = q.dnext
	}
	if r := s.redriveDeadline(); r != 0 && (d == 0 || r < d) {
		d = r
	}
	return d
}

func (s *Sched) markDirty(q *queue) {
	if !q.dirty {
		q.dirty = true
		s.dirty = append(s.dirty, q)
	}
}

// pumpAll delivers on every queue whose state changed, then gives buckets
// whose woken waiters did not use the tokens the chance to wake more, and
// repeats until nothing changes. It terminates: a bucket wakes only while
// it holds a token and has waiters, and within one pump (time fixed) a
// waiter that parks again does so because that token was taken.
func (s *Sched) pumpAll() {
	for len(s.dirty) > 0 || len(s.woke) > 0 {
		for i := 0; i < len(s.dirty); i++ {
			q := s.dirty[i]
			q.dirty = false
			if !q.deleted {
				s.pump(q)
			}
		}
		clear(s.dirty)
		s.dirty = s.dirty[:0]
		// rewake appends the buckets that wake waiters again to a fresh
		// list.
		woke := s.woke
		s.woke = s.spare[:0]
		for _, b := range woke {
			b.woke = false
			s.rewake(b)
		}
		clear(woke)
		s.spare = woke[:0]
	}
}

// readyBuf holds the effects of one Ready. Two alternate, so that one
// Ready's slices stay valid while the next accumulates.
type readyBuf struct {
	persist  []Mutation
	replies  []Reply
	dl       []pendingDelivery
	out      []Delivered
	dels     []Delivery
	counts   []int
	exp      []pendingExpiry
	expOut   []ExpiredLease
	expired  []Expiry
	ecounts  []int
	failures []Failure
	ended    []SubEnded
	arena    []byte
	enq      []EnqueueResult
	errs     []error
	ext      []ExtendResult
}

// pendingDelivery is a delivery decided in the current Ready; it is
// materialized as a Delivered when the Ready is taken, and dropped if the
// lease changed in between (the subscription closed).
type pendingDelivery struct {
	s     *sub
	m     mref
	lease uint64
}

// pendingExpiry is a lease of an open subscription that ended without a
// settle in the current Ready; it is reported unless the subscription
// closes before the Ready is taken.
type pendingExpiry struct {
	s     *sub
	id    [16]byte
	lease uint64
}

// maxArena is the arena capacity kept across Readys; a larger one, grown
// by a burst of big messages, is released.
const maxArena = 64 << 20

func (b *readyBuf) reset() {
	clear(b.persist)
	b.persist = b.persist[:0]
	clear(b.replies)
	b.replies = b.replies[:0]
	clear(b.dl)
	b.dl = b.dl[:0]
	clear(b.out)
	b.out = b.out[:0]
	clear(b.dels)
	b.dels = b.dels[:0]
	b.counts = b.counts[:0]
	clear(b.exp)
	b.exp = b.exp[:0]
	b.expOut = b.expOut[:0]
	b.ecounts = b.ecounts[:0]
	clear(b.expired)
	b.expired = b.expired[:0]
	clear(b.failures)
	b.failures = b.failures[:0]
	clear(b.ended)
	b.ended = b.ended[:0]
	if cap(b.arena) > maxArena {
		b.arena = nil
	}
	b.arena = b.arena[:0]
	clear(b.enq)
	b.enq = b.enq[:0]
	clear(b.errs)
	b.errs = b.errs[:0]
	clear(b.ext)
	b.ext = b.ext[:0]
}

// alloc returns n bytes of the arena, valid until the buffer is reset.
// A full arena is replaced, not grown, so slices already handed out keep
// their bytes.
func (b *readyBuf) alloc(n int) []byte {
	if cap(b.arena)-len(b.arena) < n {
		b.arena = make([]byte, 0, max(2*cap(b.arena), n, 4096))
	}
	i := len(b.arena)
	b.arena = b.arena[:i+n]
	return b.arena[i : i+n : i+n]
}

func (s *Sched) reply(ref Ref, v any) {
	s.cur.replies = append(s.cur.replies, Reply{Ref: ref, Value: v})
}

func (s *Sched) put(key, value []byte) {
	s.cur.persist = append(s.cur.persist, Mutation{Key: key, Value: value})
}

func (s *Sched) del(key []byte) {
	s.cur.persist = append(s.cur.persist, Mutation{Key: key, Delete: true})
}

// delRange deletes every key from start (inclusive) to end (exclusive).
func (s *Sched) delRange(start, end []byte) {
	s.cur.persist = append(s.cur.persist, Mutation{Key: start, End: end, Delete: true})
}

// group turns the pending deliveries into per-subscription Deliveries.
func (s *Sched) group(b *readyBuf) {
	for _, p := range b.dl {
		p.s.batch = 0
		if p.s.closed || !s.holds(p.m, p.lease) {
			continue
		}
		s.msg(p.m).flags &^= fFresh
		if p.s.group < 0 {
			p.s.group = int32(len(b.dels))
			b.dels = append(b.dels, Delivery{Sub: p.s.id})
			b.counts = append(b.counts, 0)
		}
		b.counts[p.s.group]++
	}
	if len(b.dels) == 0 {
		return
	}
	off := 0
	for i, n := range b.counts {
		b.counts[i] = off
		off += n
	}
	if cap(b.out) < off {
		b.out = make([]Delivered, off)
	}
	b.out = b.out[:off]
	for _, p := range b.dl {
		if p.s.group < 0 || p.s.closed || !s.holds(p.m, p.lease) {
			continue
		}
		i := b.counts[p.s.group]
		b.counts[p.s.group]++
		b.out[i] = s.delivered(b, p.m)
		b.out[i].Backlog = p.s.q.ready
	}
	start := 0
	for i := range b.dels {
		end := b.counts[i]
		b.dels[i].Msgs = b.out[start:end:end]
		start = end
	}
	for _, p := range b.dl {
		p.s.group = -1
	}
}

// groupExpired turns the pending expiries into per-subscription Expired,
// in the order of each subscription's first expiry, dropping those of
// subscriptions closed since.
func (s *Sched) groupExpired(b *readyBuf) {
	if len(b.exp) == 0 {
		return
	}
	n := 0
	for _, p := range b.exp {
		if p.s.closed {
			continue
		}
		if p.s.egroup < 0 {
			p.s.egroup = int32(len(b.expired))
			b.expired = append(b.expired, Expiry{Sub: p.s.id})
			b.ecounts = append(b.ecounts, 0)
		}
		b.ecounts[p.s.egroup]++
		n++
	}
	off := 0
	for i, c := range b.ecounts {
		b.ecounts[i] = off
		off += c
	}
	b.expOut = slices.Grow(b.expOut[:0], n)[:n]
	for _, p := range b.exp {
		if p.s.closed {
			continue
		}
		i := b.ecounts[p.s.egroup]
		b.ecounts[p.s.egroup]++
		b.expOut[i] = ExpiredLease{ID: p.id, Lease: p.lease}
	}
	start := 0
	for i := range b.expired {
		end := b.ecounts[i]
		b.expired[i].Leases = b.expOut[start:end:end]
		start = end
	}
	for _, p := range b.exp {
		p.s.egroup = -1
	}
}

// holds reports whether message x is leased with the given token (which
// is never 0): whether a delivery decided with it still stands. The
// record may have been freed and reused since; tokens are never reused.
func (s *Sched) holds(x mref, lease uint64) bool {
	m := s.recs.peek(uint32(x))
	return m != nil && m.state == stLeased && s.leaseOf(m) == lease
}

func (s *Sched) delivered(b *readyBuf, x mref) Delivered {
	m := s.msg(x)
	l := s.laneOf(m)
	q := l.key.q
	e := s.ext(m)
	return Delivered{
		Key:           appendMsgKey(b.alloc(msgKeyLen(q.home().name))[:0], q.home().name, m.id),
		ID:            m.id,
		Queue:         q.name,
		FairnessKey:   l.key.name,
		Weight:        s.weightOf(m),
		ThrottleKeys:  l.throttleKeys(),
		OrderingKey:   l.okey,
		Attempt:       satInc(e.attempts),
		Attempts:      e.attempts,
		LastError:     s.reason(x, m),
		DeadLettered:  m.flags&fDead != 0,
		PayloadSize:   m.cost,
		EnqueuedAt:    m.enq,
		LeaseDeadline: e.due,
		Lease:         e.lease,
	}
}

func satInc(v uint32) uint32 {
	if v == ^uint32(0) {
		return v
	}
	return v + 1
}
