package sched

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched/idem"
)

// DLQSuffix ends the name of every dead-letter queue: the DLQ of "orders"
// is "orders.dlq".
const DLQSuffix = ".dlq"

// MaxQueueName is the longest queue name, in bytes, a shard's DLQ's
// included (base~255.dlq).
const MaxQueueName = 200 + len(ShardSep) + 3 + len(DLQSuffix)

// validateName checks a queue name given to CreateQueue.
// ShardSep separates a sharded queue's name from a shard's number: shard
// i of queue q is the queue q~i. Queue names given by clients may not
// hold it.
const ShardSep = "~"

// MaxShards is the most shards a queue may be split into.
const MaxShards = 256

// ShardName returns the name of shard i of queue base: base~i.
func ShardName(base string, i int) string { return base + ShardSep + strconv.Itoa(i) }

// CutShard splits name, the name of a sharded queue's shard (base~i, i
// from 0 to MaxShards-1 in decimal without leading zeros), into base and
// i; ok is false for any other name.
func CutShard(name string) (base string, i int, ok bool) {
	j := strings.LastIndex(name, ShardSep)
	if j <= 0 {
		return "", 0, false
	}
	digits := name[j+1:]
	if digits == "" || len(digits) > 3 || (len(digits) > 1 && digits[0] == '0') {
		return "", 0, false
	}
	n := 0
	for k := 0; k < len(digits); k++ {
		c := digits[k]
		if c < '0' || c > '9' {
			return "", 0, false
		}
		n = n*10 + int(c-'0')
	}
	if n >= MaxShards {
		return "", 0, false
	}
	return name[:j], n, true
}

func validateName(name string) error {
	if base, _, ok := CutShard(name); ok {
		name = base // a sharded queue's shard: its queue's name, then ~<shard>
	}
	if len(name) == 0 || len(name) > 200 {
		return fmt.Errorf("queue name %q: length %d, want 1 to 200 bytes: %w", name, len(name), fault.ErrInvalidArgument)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-' || c == ':') {
			return fmt.Errorf("queue name %q: byte %d: want letters, digits and \"._-:\": %w", name, i, fault.ErrInvalidArgument)
		}
	}
	if strings.HasSuffix(name, DLQSuffix) {
		return fmt.Errorf("queue name %q: the suffix %q is reserved for dead-letter queues: %w", name, DLQSuffix, fault.ErrInvalidArgument)
	}
	return nil
}

// checkStored checks a stored spec before Restore adds its queue: a valid
// name and no negative duration. The bounds of QueueSettings.Check are
// not applied: a queue created under other bounds or defaults keeps its
// settings.
func checkStored(spec *QueueSpec) error {
	if err := validateName(spec.Name); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{
		{"visibility_timeout", spec.VisibilityTimeout},
		{"backoff_base", spec.BackoffBase},
		{"backoff_max", spec.BackoffMax},
		{"dedup_window", spec.DedupWindow},
		{"message_ttl", spec.MessageTTL},
	} {
		if f.v < 0 {
			return fmt.Errorf("queue %s: %s %d: must not be negative: %w", spec.Name, f.name, f.v, fault.ErrInvalidArgument)
		}
	}
	return nil
}

// checkSpec checks a spec given to CreateQueue: its name, then its
// settings, with zeros resolved against the Config (see
// QueueSettings.Check). The first setting out of range is reported, with
// "(the broker's default)" after a value the spec left at zero.
// CheckSpec returns the error CreateQueue would answer for spec, if any,
// whatever queues exist: a queue name that is not valid, or settings out
// of range (wrapping fault.ErrInvalidArgument). A cluster checks a new
// queue with it before proposing its creation.
func (s *Sched) CheckSpec(spec QueueSpec) error { return s.checkSpec(&spec) }

func (s *Sched) checkSpec(spec *QueueSpec) error {
	if err := validateName(spec.Name); err != nil {
		return fmt.Errorf("create queue: %w", err)
	}
	if e := CheckPolicy(spec.Policy); e != nil {
		return fmt.Errorf("create queue %s: %w: %w", spec.Name, e, fault.ErrInvalidArgument)
	}
	if e := checkLatency(spec); e != nil {
		return fmt.Errorf("create queue %s: %w: %w", spec.Name, e, fault.ErrInvalidArgument)
	}
	if e := checkTenants(spec, cmp.Or(spec.Policy, s.cfg.Policy)); e != nil {
		return fmt.Errorf("create queue %s: %w: %w", spec.Name, e, fault.ErrInvalidArgument)
	}
	if e := checkTTL(spec); e != nil {
		return fmt.Errorf("create queue %s: %w: %w", spec.Name, e, fault.ErrInvalidArgument)
	}
	set := QueueSettings{
		VisibilityTimeout: cmp.Or(spec.VisibilityTimeout, s.cfg.VisibilityTimeout),
		MaxAttempts:       int64(spec.MaxAttempts),
		BackoffBase:       cmp.Or(spec.BackoffBase, s.cfg.BackoffBase),
		BackoffMax:        cmp.Or(spec.BackoffMax, s.cfg.BackoffMax),
		DedupWindow:       cmp.Or(spec.DedupWindow, s.cfg.DedupWindow),
	}
	if spec.MaxAttempts == 0 {
		set.MaxAttempts = int64(s.cfg.MaxAttempts)
	}
	errs := set.Check(s.cfg.MaxLeaseExtension)
	if len(errs) == 0 {
		return nil
	}
	e := *errs[0]
	var given bool
	switch e.Setting {
	case "visibility_timeout":
		given = spec.VisibilityTimeout != 0
	case "max_attempts":
		given = spec.MaxAttempts != 0
	case "backoff_base":
		given = spec.BackoffBase != 0
	case "backoff_max":
		given = spec.BackoffMax != 0
	case "dedup_window":
		given = spec.DedupWindow != 0
	}
	if !given {
		e.Value += " (the broker's default)"
	}
	return fmt.Errorf("create queue %s: %w: %w", spec.Name, &e, fault.ErrInvalidArgument)
}

// CreateQueue creates the queue spec.Name and its dead-letter queue
// spec.Name + ".dlq". The reply is a QueueCreated, or an error wrapping
// fault.ErrQueueExists, or fault.ErrInvalidArgument for a bad name or a
// setting out of the range QueueSettings.Check states (a *SettingError,
// found with errors.As). Zero settings take the Config's values, both for
// the check and when the queue is used. Compiling the hooks is the
// shell's job, before this command.
func (s *Sched) CreateQueue(ref Ref, spec QueueSpec) {
	if err := s.checkSpec(&spec); err != nil {
		s.reply(ref, err)
		return
	}
	if s.queues[spec.Name] != nil {
		s.reply(ref, fmt.Errorf("create queue %s: %w", spec.Name, fault.ErrQueueExists))
		return
	}
	if spec.TenantSeparator != "" || spec.CostByTime {
		spec.Policy = PolicySTFQ // they need it, whatever the default becomes
	}
	q := s.addQueue(spec)
	b := s.cur
	key := appendQueueKey(b.alloc(len(prefixQueue) + len(spec.Name))[:0], spec.Name)
	s.put(key, appendQueueRecord(b.alloc(65 + len(spec.OnEnqueue) + len(spec.OnFailure) + len(spec.Policy) + len(spec.TenantSeparator) + 13 + len(spec.ExpiredAction))[:0], &spec))
	s.reply(ref, QueueCreated{Name: q.name, DLQ: q.dlq.name})
}

// addQueue builds a queue and its DLQ in memory.
func (s *Sched) addQueue(spec QueueSpec) *queue {
	q := s.newQueue(spec.Name, spec)
	d := s.newQueue(spec.Name+DLQSuffix, dlqSpec(&spec))
	q.dlq = d
	d.parent = q
	return q
}

// dlqSpec returns the spec of the DLQ of a queue defined by spec: its
// settings without hooks or dedup window.
func dlqSpec(spec *QueueSpec) QueueSpec {
	return QueueSpec{Name: spec.Name + DLQSuffix, VisibilityTimeout: spec.VisibilityTimeout, MaxAttempts: spec.MaxAttempts, BackoffBase: spec.BackoffBase, BackoffMax: spec.BackoffMax, Policy: spec.Policy, LatencyBudget: spec.LatencyBudget, LatencyIdle: spec.LatencyIdle, TenantSeparator: spec.TenantSeparator, CostByTime: spec.CostByTime}
}

func (s *Sched) newQueue(name string, spec QueueSpec) *queue {
	q := &queue{
		name:   name,
		spec:   spec,
		keys:   make(map[string]*fkey),
		subs:   make(map[SubID]*sub),
		dhidx:  -1,
		limits: make(map[string]*tbucket),
		vis:    cmp.Or(spec.VisibilityTimeout, s.cfg.VisibilityTimeout),
		window: cmp.Or(spec.DedupWindow, s.cfg.DedupWindow),
		policy: RetryPolicy{
			MaxAttempts: cmp.Or(spec.MaxAttempts, uint32(min(s.cfg.MaxAttempts, math.MaxUint32))),
			BackoffBase: cmp.Or(spec.BackoffBase, s.cfg.BackoffBase),
			BackoffMax:  cmp.Or(spec.BackoffMax, s.cfg.BackoffMax),
		},
	}
	q.policy.BackoffMax = max(q.policy.BackoffMax, q.policy.BackoffBase)
	budget, idle := s.cfg.latency(&spec)
	q.fair.init(cmp.Or(spec.Policy, s.cfg.Policy), s.cfg.Quantum, budget, idle, spec.TenantSeparator, spec.CostByTime)
	s.queues[name] = q
	return q
}

// DeleteQueue deletes a queue, its DLQ and all their messages,
// idempotency keys and producers, and ends their subscriptions
// (Ready.Ended). The reply is nil, or an error wrapping
// fault.ErrQueueNotFound, or fault.ErrInvalidArgument for a DLQ (it is
// deleted with its queue).
//
// The deletion is a fixed number of mutations, whatever the queue holds:
// a range delete of each of its key ranges (QueueRanges) but its
// definition's, which holds that one key and is deleted as a key. The
// records of the DLQ's messages are under the queue's name. In memory it
// costs O(messages + fairness keys + lanes) and allocates nothing per
// message; the timers of its delayed and leased messages are taken out
// of the timer heap in order of ID, in O(t log t) for t of them (see
// dropTimers).
func (s *Sched) DeleteQueue(ref Ref, name string) {
	q := s.queues[name]
	if q == nil {
		s.reply(ref, fmt.Errorf("delete queue %s: %w", name, fault.ErrQueueNotFound))
		return
	}
	if q.parent != nil {
		s.reply(ref, fmt.Errorf("delete queue %s: a dead-letter queue is deleted with %s: %w", name, q.parent.name, fault.ErrInvalidArgument))
		return
	}
	s.dropQueue(q.dlq)
	s.dropQueue(q)
	rs := QueueRanges(name)
	for _, r := range rs[1:] {
		s.delRange(r.Start, r.End)
	}
	s.del(appendQueueKey(s.cur.alloc(len(prefixQueue) + len(name))[:0], name))
	s.reply(ref, nil)
}

// dropQueue takes q, being deleted, out of memory: it ends its
// subscriptions, frees its messages, lanes and fairness keys, and forgets
// its idempotency keys and producers. It writes nothing: DeleteQueue
// deletes the records by range.
func (s *Sched) dropQueue(q *queue) {
	q.deleted = true
	s.stopRedrive(q)
	ended := fmt.Errorf("queue %s deleted: %w", q.name, fault.ErrQueueNotFound)
	for _, id := range sortedKeys(q.subs, func(a, b SubID) int { return cmp.Compare(a, b) }) {
		sb := q.subs[id]
		s.closeSub(sb)
		s.orphanLeases(sb)
		s.cur.ended = append(s.cur.ended, SubEnded{Sub: id, Err: ended})
	}
	s.dropTimers(q)
	for x := range q.msgs.all() {
		s.freeMsg(x)
	}
	q.msgs = msgIndex{}
	q.ready, q.delayed, q.leased = 0, 0, 0
	s.dropLanes(q)
	q.dedup = idem.Table{}
	q.prods, q.phead, q.ptail = nil, nil, nil
	if q.dhidx >= 0 {
		s.expiry.remove(q)
	}
	for _, lb := range q.limits {
		if lb.hidx >= 0 {
			s.wakes.remove(lb)
		}
	}
	delete(s.queues, q.name)
}

// dropTimers takes the timers of q's messages (delayed, leased, or ready
// with a TTL) out of
// Sched.timers one by one in order of message ID, as deleting the
// messages one by one did: the heap's layout, which images record, comes
// out as it did then, and does not depend on the layout of q's ID index.
// It sorts only those messages, in a scratch slice kept across calls
// (unless it grew past maxDropScratch): O(t log t) for t timers, against
// O(m log m) for sorting all m messages.
func (s *Sched) dropTimers(q *queue) {
	if q.delayed+q.leased == 0 && !q.ttls {
		return
	}
	ms := s.drop[:0]
	for x := range q.msgs.all() {
		if m := s.msg(x); m.state == stDelayed || m.state == stLeased || m.ext != 0 && s.exts.at(uint32(m.ext)).heap != 0 {
			ms = append(ms, x)
		}
	}
	s.sortByID(ms)
	for _, x := range ms {
		s.timers.remove(s.msg(x).ext)
	}
	if cap(ms) > maxDropScratch {
		ms = nil // a big queue's: not kept
	}
	s.drop = ms[:0]
}

// maxDropScratch bounds the capacity of Sched.drop kept across calls.
const maxDropScratch = 1 << 16

// dropLanes frees the lanes of q's fairness keys, takes those waiting
// for a throttle token out of the buckets' waiting lists, and releases
// their throttle key sets. The buckets that lost waiters are re-armed
// once each, by name, so that the order of q's maps does not show in
// the timer heap.
//
// Re-arming a bucket that still has waiters refills it (bucket.Next) at
// the current time, which fixes the point its token arithmetic starts
// from. Taking the lanes out one at a time, each followed by re-arming
// the bucket, as the scheduler did before it deleted queues by range,
// refilled a bucket whenever a waiter was left after a removal: when q
// had two lanes or more waiting on it, or others waited. A bucket is
// refilled in the same cases here, so that a deletion leaves it as it
// did. (One difference remains: a bucket that already holds a token
// when a queue is deleted, between a Tick and the next pump, now wakes
// other queues' lanes only, where before it could wake q's dying lanes
// first, depending on their messages' IDs.)
func (s *Sched) dropLanes(q *queue) {
	var parked []*tbucket
	for _, k := range q.keys {
		for l := range k.allLanes() {
			if l.state == lsParked {
				l.tb.removeWaiter(l)
				parked = append(parked, l.tb)
				l.tb, l.state = nil, lsIdle
			}
			if l.ts != nil {
				s.releaseTset(l.ts)
			}
			s.dropLane(l)
		}
	}
	if len(parked) == 0 {
		return
	}
	slices.SortFunc(parked, func(a, b *tbucket) int { return strings.Compare(a.name, b.name) })
	for i := 0; i < len(parked); {
		b, n := parked[i], 1
		for i+n < len(parked) && parked[i+n] == b {
			n++
		}
		i += n
		if b.limited && n >= 2 {
			b.b.Tokens(int64(s.now)) // refill, as removing the second-last of them did
		}
		s.arm(b)
	}
}

func sortedKeys[K comparable, V any](m map[K]V, cmp func(a, b K) int) []K {
	keys := make([]K, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, cmp)
	return keys
}

// Specs returns the definitions of all queues (not DLQs), sorted by name,
// as created: the shell compiles their hooks after Restore.
func (s *Sched) Specs() []QueueSpec {
	var out []QueueSpec
	for _, name := range sortedKeys(s.queues, strings.Compare) {
		if q := s.queues[name]; q.parent == nil {
			out = append(out, q.spec)
		}
	}
	return out
}

// ListQueues replies with a []QueueSummary of every queue and DLQ, sorted
// by name.
func (s *Sched) ListQueues(ref Ref) {
	out := make([]QueueSummary, 0, len(s.queues))
	for _, name := range sortedKeys(s.queues, strings.Compare) {
		q := s.queues[name]
		sum := QueueSummary{Name: name, Ready: q.ready, Delayed: q.delayed, Leased: q.leased}
		if q.dlq != nil {
			sum.DeadLetterQueue = q.dlq.name
		}
		if q.parent != nil {
			sum.Parent = q.parent.name
		}
		out = append(out, sum)
	}
	s.reply(ref, out)
}

// QueueStats replies with the QueueStats of a queue or DLQ, listing its
// top most pending fairness keys (0, or over MaxStatsKeys: MaxStatsKeys),
// or an error wrapping fault.ErrQueueNotFound. It costs O(fairness keys
// × log top + lanes).
func (s *Sched) QueueStats(ref Ref, name string, top int) {
	q := s.queues[name]
	if q == nil {
		s.reply(ref, fmt.Errorf("queue stats %s: %w", name, fault.ErrQueueNotFound))
		return
	}
	s.reply(ref, s.queueStats(q, name, top))
}

// AllQueueStats replies with a []QueueStats: those of every queue and
// DLQ, by name, each listing its top most pending fairness keys as
// QueueStats does. It is a metrics scrape's one read of the scheduler.
func (s *Sched) AllQueueStats(ref Ref, top int) {
	out := make([]QueueStats, 0, len(s.queues))
	for _, name := range sortedKeys(s.queues, strings.Compare) {
		out = append(out, s.queueStats(s.queues[name], name, top))
	}
	s.reply(ref, out)
}

// queueStats returns q's QueueStats with its top most pending fairness
// keys (0, or over MaxStatsKeys: MaxStatsKeys).
func (s *Sched) queueStats(q *queue, name string, top int) QueueStats {
	if top <= 0 || top > MaxStatsKeys {
		top = MaxStatsKeys
	}
	st := QueueStats{
		Name:              name,
		Ready:             q.ready,
		Delayed:           q.delayed,
		Leased:            q.leased,
		Subscriptions:     uint32(min(len(q.subs), math.MaxUint32)),
		VisibilityTimeout: q.vis,
		MaxAttempts:       q.policy.MaxAttempts,
		Policy:            q.fair.name(),
		Counts:            q.counts,
		Redrive:           q.redriveProgress(),
	}
	if q.fair.stfq && q.fair.budget > 0 {
		st.LatencyBudget, st.LatencyIdle = q.fair.budget, q.fair.idle
	}
	st.TenantSeparator, st.CostByTime = q.fair.sep, q.fair.byTime
	st.MessageTTL = q.home().spec.MessageTTL
	st.ExpiredAction = cmp.Or(q.home().spec.ExpiredAction, ExpireDeadLetter)
	st.Bytes = q.msgs.bytes
	if q.dlq != nil {
		st.DeadLettered = uint64(q.dlq.msgs.len())
		st.Bytes += q.dlq.msgs.bytes
	}
	s.fairnessStats(q, &st, top)
	waiting := make(map[*tbucket]uint64)
	for _, k := range q.keys {
		for l := range k.allLanes() {
			if l.ts == nil || l.n == 0 || q.parent != nil { // DLQs are not throttled
				continue
			}
			for _, b := range l.ts.buckets {
				waiting[b] += 0
			}
			if l.state == lsParked {
				waiting[l.tb] += uint64(l.n)
			}
		}
	}
	now := int64(s.now)
	for b, w := range waiting {
		ts := ThrottleKeyStats{Key: b.name, Rate: math.Inf(1), Burst: math.Inf(1), Tokens: math.Inf(1), Waiting: w, HeldBack: b.held}
		if b.limited {
			ts.Rate, ts.Burst, ts.Tokens = b.b.Rate(), b.b.Burst(), b.b.Tokens(now)
		}
		st.ThrottleKeys = append(st.ThrottleKeys, ts)
	}
	slices.SortFunc(st.ThrottleKeys, func(a, b ThrottleKeyStats) int { return strings.Compare(a.Key, b.Key) })
	return st
}

// allLanes iterates over the key's lanes, the default one first.
func (k *fkey) allLanes() func(yield func(*lane) bool) {
	return func(yield func(*lane) bool) {
		if !yield(&k.dflt) {
			return
		}
		for _, l := range k.lanes {
			if !yield(l) {
				return
			}
		}
	}
}
