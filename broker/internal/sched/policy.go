package sched

import (
	"cmp"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched/drr"
	"github.com/fila-mq/fila/broker/internal/sched/stfq"
)

// The fair scheduling policies a queue may use across its fairness keys
// (QueueSpec.Policy, Config.Policy).
const (
	// PolicyDRR is deficit round robin (drr): each backlogged key earns
	// weight × quantum payload bytes per round. Shares hold over whole
	// rounds, in payload bytes.
	PolicyDRR = "drr"
	// PolicySTFQ is start-time fair queueing (stfq): each backlogged key
	// is served in order of its virtual start tag, which one message
	// advances by 1/weight. Shares hold at every time scale, in messages:
	// two keys backlogged over any interval are served, per unit of
	// weight, within 1/w_i + 1/w_j messages of each other.
	PolicySTFQ = "stfq"
	// DefaultPolicy is the policy of queues when Config.Policy is empty.
	DefaultPolicy = PolicySTFQ
)

// Policies lists the accepted policy names.
var Policies = []string{PolicyDRR, PolicySTFQ}

// checkLatency returns a *SettingError for a latency lane setting of spec
// out of range, or nil.
func checkLatency(spec *QueueSpec) *SettingError {
	if spec.LatencyBudget > MaxLatencyBudget {
		return &SettingError{Setting: "latency_budget", Value: fmt.Sprint(spec.LatencyBudget),
			Want: fmt.Sprintf("an integer from 0 (the broker's default) to %d", MaxLatencyBudget)}
	}
	if d := spec.LatencyIdle; d < 0 || (d > 0 && d < MinQueueDuration) || d > MaxLatencyIdle {
		return &SettingError{Setting: "latency_idle", Value: FormatDuration(d),
			Want: "0 (the broker's default) or a duration from " + FormatDuration(MinQueueDuration) + " to " + FormatDuration(MaxLatencyIdle)}
	}
	return nil
}

// MaxTenantSeparator bounds QueueSpec.TenantSeparator, in bytes.
const MaxTenantSeparator = 16

// checkTenants returns a *SettingError if spec names a tenant separator
// that is too long, or a separator or cost by time for a queue whose
// policy (policy, resolved against the Config) is not stfq; else nil.
func checkTenants(spec *QueueSpec, policy string) *SettingError {
	sep := spec.TenantSeparator
	if spec.CostByTime && policy != PolicySTFQ {
		return &SettingError{Setting: "cost_by_time", Value: "true", Want: `a queue of policy "stfq" (this one is ` + fmt.Sprintf("%q", policy) + ")"}
	}
	switch {
	case sep == "":
		return nil
	case len(sep) > MaxTenantSeparator:
		return &SettingError{Setting: "tenant_separator", Value: fmt.Sprintf("%q", sep), Want: fmt.Sprintf("at most %d bytes", MaxTenantSeparator)}
	case policy != PolicySTFQ:
		return &SettingError{Setting: "tenant_separator", Value: fmt.Sprintf("%q", sep), Want: `a queue of policy "stfq" (this one is ` + fmt.Sprintf("%q", policy) + ")"}
	}
	return nil
}

// TenantOf returns the tenant of fairness key key in a queue whose tenant
// separator is sep: key up to the first sep, or all of key if it holds
// none (or sep is "").
func TenantOf(key, sep string) string {
	if sep == "" {
		return key
	}
	if i := strings.Index(key, sep); i >= 0 {
		return key[:i]
	}
	return key
}

// CheckPolicy returns nil if name is a policy, or "" (the default); else
// a *SettingError for the setting "policy".
func CheckPolicy(name string) *SettingError {
	switch name {
	case "", PolicyDRR, PolicySTFQ:
		return nil
	}
	return &SettingError{Setting: "policy", Value: fmt.Sprintf("%q", name), Want: `"drr" or "stfq"`}
}

// Latency lane defaults and bounds (QueueSpec.LatencyBudget and
// LatencyIdle, Config.LatencyBudget and LatencyIdle).
const (
	// DefaultLatencyBudget is the deliveries a key that was idle takes in
	// the latency lane.
	DefaultLatencyBudget = 10
	// MaxLatencyBudget bounds a latency budget.
	MaxLatencyBudget = 1_000_000
	// DefaultLatencyIdle is how long a key must have had nothing pending
	// to enter the latency lane when it becomes backlogged again, even if
	// it was served more than its share.
	DefaultLatencyIdle = 100 * time.Millisecond
	// MaxLatencyIdle bounds LatencyIdle.
	MaxLatencyIdle = time.Hour
	// latencyBurst is how many latency budgets the lane may deliver in a
	// row when it has been little used: its credit's ceiling.
	latencyBurst = 10
	// creditUnit is what one delivery from the latency lane costs of its
	// credit: the credit is a fixed-point count of deliveries.
	creditUnit = 1 << 16
)

// fair is a queue's fair scheduler across its fairness keys: one of the
// two policies, behind one set of operations. The keys embed the state of
// both (a few dozen bytes each); a queue uses one.
//
// An stfq queue also has a latency lane, after the sparse flows of
// FQ-CoDel (RFC 8290), for the keys that are not noisy: a key that
// becomes backlogged after having nothing pending for at least idle (or
// for the first time), or whose tag is at most budget messages ahead of
// the virtual time (it has not been served more than its share), is
// served budget messages ahead of the throughput lane, the keys in the
// latency lane taking turns one message each; when the budget is spent
// the key stays for another budget if its tag is still within budget
// messages of the virtual time, and joins the throughput lane if not.
// What it is served there advances its tag as any delivery does, so the
// lane changes when a key is served, not how much: a key served more
// than its share leaves the lane and waits in the throughput lane until
// the others catch up. A noisy key, one that wants more than its share,
// thus ends in the throughput lane, and the keys that want less are
// served ahead of it. A key dropped (nothing of it left) less than idle
// ago comes back with the tag it had, so draining does not reset it.
// The lane's share is capped at its keys' equal share: each delivery
// adds max(l/(l+t), 1/2) of a delivery to its credit, l and t the keys
// (tenants, with a hierarchy) in the latency and throughput lanes, a
// delivery from the lane costs one, and the lane is
// served only while credit holds one; a lane little used may deliver
// latencyBurst budgets in a row. So the keys in the throughput lane get
// at least their equal share, however many keys use the lane. When the
// throughput lane is empty the latency lane is served whatever its
// credit (no delivery is withheld). A key whose messages all wait for
// throttle tokens leaves the lane and forfeits the rest of its budget; it
// returns to the throughput lane.
//
// An stfq queue with a tenant separator (sep) schedules in two levels,
// after hierarchical start-time fair queueing (P. Goyal, X. Guo and H. M.
// Vin, "A Hierarchical CPU Scheduler for Multimedia Operating Systems",
// OSDI 1996): top orders the tenants that have keys in the throughput
// lane, by a tag that one message advances by 1/(the tenant's weight);
// each tenant orders its own keys, at equal weights, in its own
// scheduler. A tenant's share is then its weight's, split among its
// backlogged keys, however many it spreads its messages over. The latency
// lane is the tenant's too: a key enters it only as the first of its
// tenant to become backlogged, after the tenant had nothing pending for
// idle (or ever) or while the tenant has not been served more than its
// share, so one tenant holds at most one key there.
type fair struct {
	stfq bool
	drr  drr.Scheduler[*fkey]
	fq   stfq.Scheduler[*fkey]

	// The hierarchy: the separator ("" for none), the tenants that have
	// keys, by name, and the scheduler across those with keys in the
	// throughput lane (while it is used, fq is not).
	sep     string
	tenants map[string]*tenant
	top     stfq.Scheduler[*tenant]

	// Cost by consumer time (byTime): a delivery is charged its key's
	// estimate of the lease time it will hold, in milliseconds, and
	// corrected by what it held when the lease ends. est is the queue's
	// estimate, for keys without one; held the open leases' start and
	// charge, by lease token.
	byTime bool
	est    uint32
	held   map[uint64]heldLease

	// The latency lane: budget per key (0: none), idle time to qualify,
	// the FIFO of keys in it, and its credit (ceiling creditMax).
	budget    uint32
	idle      time.Duration
	lhead     *fkey
	ltail     *fkey
	nlat      int
	credit    int64
	creditMax int64
	// recent remembers, for idle, the keys (tenants, with a hierarchy)
	// dropped in the last idle (nothing left of them): when each went
	// idle and its start tag, so that a key that comes back sooner is
	// not new and takes its tag back (it cannot skip ahead of its share
	// by draining and returning). recentQ lists them oldest first, from
	// rhead, for their expiry. It holds at most the keys dropped in one
	// idle.
	recent  map[string]recalled
	recentQ []recentKey
	rhead   int
}

// recalled is what recent remembers of a dropped key: when it went idle
// and its start tag then.
type recalled struct {
	at  Time
	tag uint64
}

type recentKey struct {
	name string
	at   Time
}

// A heldLease is an open lease of a queue that charges by time: when it
// started and what its delivery was charged, in milliseconds.
type heldLease struct {
	start Time
	est   uint32
}

// A tenant is the state of one tenant of a queue with a tenant separator
// while it has fairness keys: its flow in the queue's top scheduler (of
// the tenant's weight, the weight of the message last enqueued to any of
// its keys) and the scheduler across its keys in the throughput lane.
type tenant struct {
	name  string
	sflow stfq.Flow[*tenant]
	keys  stfq.Scheduler[*fkey]
	// nkeys counts its fairness keys, nback those backlogged; idleSince
	// is when nback last fell to 0 (0: not since it was created).
	nkeys, nback int32
	idleSince    Time
	img          uint32 // its number in the image being written
}

// STFQ returns the tenant's flow in the top scheduler (stfq.Node).
func (t *tenant) STFQ() *stfq.Flow[*tenant] { return &t.sflow }

// latency resolves a queue's latency lane settings against the Config:
// the budget in deliveries (0: no latency lane) and the idle time.
func (c Config) latency(spec *QueueSpec) (budget uint32, idle time.Duration) {
	budget = spec.LatencyBudget
	if budget == 0 && c.LatencyBudget > 0 {
		budget = uint32(c.LatencyBudget)
	}
	return budget, cmp.Or(spec.LatencyIdle, c.LatencyIdle)
}

// STFQ returns the key's start-time fair queueing flow (stfq.Node).
func (k *fkey) STFQ() *stfq.Flow[*fkey] { return &k.sflow }

func (f *fair) init(policy string, quantum int64, budget uint32, idle time.Duration, sep string, byTime bool) {
	f.stfq = policy == PolicySTFQ
	f.drr.Init(quantum)
	if f.stfq {
		f.budget, f.idle = budget, idle
		f.creditMax = latencyBurst * int64(budget) * creditUnit
		f.credit = f.creditMax
		f.setSep(sep)
		f.setByTime(byTime)
	}
}

// setByTime makes an stfq queue charge by consumer time.
func (f *fair) setByTime(on bool) {
	f.byTime = on
	if on {
		f.held = make(map[uint64]heldLease)
	}
}

// estimate returns what a delivery from k is charged in a queue that
// charges by time: k's estimate of its lease time in milliseconds, else
// the queue's, else 1.
func (f *fair) estimate(k *fkey) uint32 {
	return max(cmp.Or(k.est, f.est), 1)
}

// leased records the start of lease, just given to a delivery from k, in
// a queue that charges by time.
func (f *fair) leased(k *fkey, lease uint64, now Time) {
	f.held[lease] = heldLease{start: now, est: f.estimate(k)}
}

// settled charges k, whose delivery's lease just ended (acked, nacked,
// released or expired), the difference between the lease time it held
// and what it was charged, and learns from it: each estimate moves an
// eighth of the way to the time held (the first takes it whole).
func (f *fair) settled(k *fkey, lease uint64, now Time) {
	h, ok := f.held[lease]
	if !ok {
		return
	}
	delete(f.held, lease)
	ms := uint32(min(max((now-h.start+Time(time.Millisecond)-1)/Time(time.Millisecond), 1), math.MaxUint32))
	if delta := int64(ms) - int64(h.est); delta != 0 {
		f.kq(k).Adjust(k, delta)
		if t := k.ten; t != nil {
			f.top.Adjust(t, delta)
		}
	}
	k.est, f.est = ewma(k.est, ms), ewma(f.est, ms)
}

// ewma moves est an eighth of the way to x; an est of 0 (none) takes x.
func ewma(est, x uint32) uint32 {
	if est == 0 {
		return x
	}
	return uint32(int64(est) + (int64(x)-int64(est))/8)
}

// setSep gives an stfq queue its tenant separator.
func (f *fair) setSep(sep string) {
	f.sep = sep
	if sep != "" {
		f.tenants = make(map[string]*tenant)
	}
}

// kq returns the scheduler that holds k's place in the throughput lane.
func (f *fair) kq(k *fkey) *stfq.Scheduler[*fkey] {
	if k.ten != nil {
		return &k.ten.keys
	}
	return &f.fq
}

// tput returns how many keys (tenants, with a hierarchy) the throughput
// lane holds.
func (f *fair) tput() int {
	if f.sep != "" {
		return f.top.Len()
	}
	return f.fq.Len()
}

// enter puts k in the throughput lane, and its tenant with it.
func (f *fair) enter(k *fkey) {
	f.kq(k).Activate(k)
	if t := k.ten; t != nil {
		f.top.Activate(t)
	}
}

// adopt gives a key being created its place: in a queue with tenants,
// its tenant, created as needed; else, if it was dropped less than idle
// ago, when it went idle and its tag then (else it is new).
func (f *fair) adopt(k *fkey, now Time) {
	if f.sep == "" {
		if r, ok := f.recall(k.name, now); ok {
			k.idleSince = r.at
			restoreTag(&k.sflow, r.tag)
		}
		return
	}
	name := TenantOf(k.name, f.sep)
	t := f.tenants[name]
	if t == nil {
		t = &tenant{name: name}
		if r, ok := f.recall(name, now); ok {
			t.idleSince = r.at
			restoreTag(&t.sflow, r.tag)
		}
		f.tenants[name] = t
	}
	t.nkeys++
	k.ten = t
}

// next returns the key to serve next.
func (f *fair) next() (*fkey, bool) {
	if !f.stfq {
		return f.drr.Next()
	}
	if f.lhead != nil && (f.credit >= creditUnit || f.tput() == 0) {
		return f.lhead, true
	}
	if f.sep == "" {
		return f.fq.Next()
	}
	t, ok := f.top.Next()
	if !ok {
		return nil, false
	}
	return t.keys.Next()
}

// charge accounts one message of payload cost bytes served from k, the key
// next returned: DRR charges the bytes, STFQ one message, or its estimate
// of the lease time in milliseconds when the queue charges by time.
func (f *fair) charge(k *fkey, cost int64) {
	if !f.stfq {
		f.drr.Charge(k, cost)
		return
	}
	unit := int64(1)
	if f.byTime {
		unit = int64(f.estimate(k))
	}
	f.kq(k).Charge(k, unit)
	if t := k.ten; t != nil {
		f.top.Charge(t, unit)
	}
	if f.budget == 0 {
		return
	}
	l, t := int64(f.nlat), int64(f.tput())
	f.credit = min(f.credit+max(l*creditUnit/max(l+t, 1), creditUnit/2), f.creditMax)
	if !k.inLat {
		return
	}
	f.credit = max(f.credit-creditUnit, -f.creditMax)
	f.latRemove(k)
	if k.left--; k.left == 0 && int64(k.pending) <= int64(f.budget) && f.withinShare(k) {
		k.left = f.budget // not served more than its share: it stays
	}
	if k.left > 0 {
		f.latPush(k) // the lane's keys take turns
		return
	}
	f.enter(k) // budget spent: the throughput lane
}

// activate adds a key that has just become backlogged: to the latency
// lane if it had nothing pending for at least the idle time (or ever), or
// if it has not been served more than its share (withinShare), else to
// the throughput lane.
func (f *fair) activate(k *fkey, now Time) {
	if !f.stfq {
		f.drr.Activate(k)
		return
	}
	since, first := k.idleSince, true
	if t := k.ten; t != nil {
		since, first = t.idleSince, t.nback == 0
		t.nback++
	}
	if f.budget > 0 && first && (since == 0 || now-since >= Time(f.idle) || f.withinShare(k)) {
		f.kq(k).Sync(k)
		if t := k.ten; t != nil {
			f.top.Sync(t)
		}
		k.left = f.budget
		f.latPush(k)
		return
	}
	f.enter(k)
}

// withinShare reports whether k (its tenant, with a hierarchy) is at most
// one latency budget of its own messages ahead of its share: whether its
// tag is within budget/weight of the virtual time. A key that is not, was
// served more than its share lately, and waits in the throughput lane.
func (f *fair) withinShare(k *fkey) bool {
	var tag, v uint64
	if t := k.ten; t != nil {
		tag, v = t.sflow.Tag(), f.top.V()
	} else {
		tag, v = k.sflow.Tag(), f.fq.V()
	}
	ahead := int64(tag - v)
	return ahead <= int64(f.budget)*stfq.Scale/int64(f.weight(k))
}

// drop takes out a key that is being deleted (nothing of it is left) and,
// if it went idle less than idle ago, remembers when and its tag; with
// tenants, it does so for the tenant when its last key goes.
func (f *fair) drop(k *fkey, now Time) {
	if !f.stfq {
		f.drr.Forget(k)
		return
	}
	f.remove(k)
	f.expire(now)
	name, since, tag := k.name, k.idleSince, k.sflow.Tag()
	if t := k.ten; t != nil {
		k.ten = nil
		if t.nkeys--; t.nkeys > 0 {
			return
		}
		delete(f.tenants, t.name)
		name, since, tag = t.name, t.idleSince, t.sflow.Tag()
	}
	if f.budget == 0 || since == 0 || now-since >= Time(f.idle) {
		return
	}
	if f.recent == nil {
		f.recent = make(map[string]recalled)
	}
	f.recent[name] = recalled{since, tag}
	f.recentQ = append(f.recentQ, recentKey{name, since})
}

// recall returns what was remembered of a key (a tenant, in a queue with
// tenants) being created, if it was dropped less than idle ago; ok is
// false if not (the key is new).
func (f *fair) recall(name string, now Time) (r recalled, ok bool) {
	if len(f.recent) == 0 {
		return r, false
	}
	f.expire(now)
	r, ok = f.recent[name]
	return r, ok
}

// restoreTag gives a flow being created the start tag it had when it
// was dropped; Activate and Sync then take max(V, tag).
func restoreTag[T stfq.Node[T]](fl *stfq.Flow[T], tag uint64) {
	st := fl.State()
	st.Tag = tag
	fl.SetState(st)
}

// expire forgets the dropped keys idle for at least idle.
func (f *fair) expire(now Time) {
	for f.rhead < len(f.recentQ) && now-f.recentQ[f.rhead].at >= Time(f.idle) {
		e := f.recentQ[f.rhead]
		if f.recent[e.name].at == e.at {
			delete(f.recent, e.name)
		}
		f.recentQ[f.rhead] = recentKey{}
		f.rhead++
	}
	if f.rhead == len(f.recentQ) {
		f.recentQ, f.rhead = f.recentQ[:0], 0
	} else if f.rhead > 1024 && f.rhead > len(f.recentQ)/2 {
		f.recentQ = append(f.recentQ[:0], f.recentQ[f.rhead:]...)
		f.rhead = 0
	}
}

func (f *fair) latPush(k *fkey) {
	k.inLat = true
	k.lnext, k.lprev = nil, f.ltail
	if f.ltail != nil {
		f.ltail.lnext = k
	} else {
		f.lhead = k
	}
	f.ltail = k
	f.nlat++
}

func (f *fair) latRemove(k *fkey) {
	if k.lprev != nil {
		k.lprev.lnext = k.lnext
	} else {
		f.lhead = k.lnext
	}
	if k.lnext != nil {
		k.lnext.lprev = k.lprev
	} else {
		f.ltail = k.lprev
	}
	k.lnext, k.lprev, k.inLat = nil, nil, false
	f.nlat--
}

// resume returns a backlogged key that was taken out (no lane could run):
// DRR keeps its deficit; STFQ gives it max(V, its tag), no credit for the
// time out.
func (f *fair) resume(k *fkey) {
	if f.stfq {
		f.enter(k)
		return
	}
	f.drr.Resume(k)
}

// remove takes a backlogged key out, keeping its state for resume; a key
// in the latency lane forfeits the rest of its budget.
func (f *fair) remove(k *fkey) {
	if !f.stfq {
		f.drr.Remove(k)
		return
	}
	if k.inLat {
		f.latRemove(k)
		k.left = 0
		return
	}
	f.kq(k).Remove(k)
	if t := k.ten; t != nil && t.keys.Len() == 0 {
		f.top.Remove(t)
	}
}

// forget takes out a key with nothing pending, as of now. DRR clears its
// deficit; STFQ keeps its tag while the key exists, so that a key that
// empties and refills at once gains nothing, and notes when it went idle
// (and its tenant, when it was the tenant's last backlogged key).
func (f *fair) forget(k *fkey, now Time) {
	if !f.stfq {
		f.drr.Forget(k)
		return
	}
	f.remove(k)
	k.idleSince = now
	if t := k.ten; t != nil {
		if t.nback--; t.nback == 0 {
			t.idleSince = now
		}
	}
}

// weight returns k's weight, at least 1: with tenants, its tenant's.
func (f *fair) weight(k *fkey) uint32 {
	if t := k.ten; t != nil {
		return t.sflow.Weight()
	}
	if f.stfq {
		return k.sflow.Weight()
	}
	return k.flow.Weight()
}

// entitled returns k's entitled share of q's deliveries were k
// backlogged (0 to 1): its weight over the sum of the weights of q's
// backlogged keys, k's included; with tenants, its tenant's share so
// computed over the backlogged tenants, split evenly among the tenant's
// backlogged keys. O(keys).
func (f *fair) entitled(q *queue, k *fkey) float64 {
	return f.shares(q, k)(k)
}

// shares returns a function giving, for each key of q with messages
// pending (and for also, which is counted as if it had), its entitled
// share, as entitled describes. O(keys) to build, O(1) a call.
func (f *fair) shares(q *queue, also *fkey) func(*fkey) float64 {
	backlogged := func(k *fkey) bool { return k.pending > 0 || k == also }
	var sum float64
	if f.sep == "" {
		for _, k := range q.keys {
			if backlogged(k) {
				sum += float64(f.weight(k))
			}
		}
		return func(k *fkey) float64 { return float64(f.weight(k)) / sum }
	}
	n := make(map[*tenant]int, len(f.tenants))
	for _, k := range q.keys {
		if backlogged(k) {
			if n[k.ten]++; n[k.ten] == 1 {
				sum += float64(k.ten.sflow.Weight())
			}
		}
	}
	return func(k *fkey) float64 {
		return float64(k.ten.sflow.Weight()) / sum / float64(max(n[k.ten], 1))
	}
}

// lane names where backlogged key k waits (FairnessKeyStats.Lane).
func (f *fair) lane(k *fkey) string {
	switch {
	case k.inLat:
		return LaneLatency
	case k.nrun == 0:
		return LaneBlocked
	}
	return LaneFair
}

// setWeight sets k's weight: with tenants, its tenant's, its keys
// sharing the tenant's at equal weights.
func (f *fair) setWeight(k *fkey, w uint32) {
	f.drr.SetWeight(k, w)
	if t := k.ten; t != nil {
		f.top.SetWeight(t, w)
		return
	}
	f.fq.SetWeight(k, w)
}

// active reports whether k is in the scheduler.
func (f *fair) active(k *fkey) bool {
	if f.stfq {
		return k.sflow.Active() || k.inLat
	}
	return k.flow.Active()
}

// position returns where k waits: its lane ("latency" or "throughput"
// for stfq, "round" for drr) and how many keys go before it. It walks
// the keys: O(keys), for explanations, not hot paths.
func (f *fair) position(k *fkey) (lane string, ahead uint64) {
	if !f.stfq {
		return "round", uint64(f.drr.Ahead(k))
	}
	if k.inLat {
		for x := f.lhead; x != nil && x != k; x = x.lnext {
			ahead++
		}
		return "latency", ahead
	}
	ahead = uint64(f.nlat) // the latency lane goes first, while it has credit
	if t := k.ten; t != nil {
		// The tenants served first, then its own keys before it.
		return "throughput", ahead + uint64(f.top.Ahead(t)) + uint64(t.keys.Ahead(k))
	}
	return "throughput", ahead + uint64(f.fq.Ahead(k))
}

// len returns the number of keys in the scheduler. O(tenants).
func (f *fair) len() int {
	if !f.stfq {
		return f.drr.Len()
	}
	n := f.fq.Len() + f.nlat
	for _, t := range f.tenants {
		n += t.keys.Len()
	}
	return n
}

// lag returns how far k's tag is ahead of its scheduler's virtual time,
// in messages at weight 1 (FairnessKeyStats.Lag); with tenants, its
// tenant's lag plus its own among the tenant's keys.
func (f *fair) lag(k *fkey) float64 {
	if t := k.ten; t != nil {
		return f.top.Lag(t) + t.keys.Lag(k)
	}
	return f.fq.Lag(k)
}

// name returns the policy's name.
func (f *fair) name() string {
	if f.stfq {
		return PolicySTFQ
	}
	return PolicyDRR
}
