package fila

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// Administrator manages queues, runtime config and API keys, and reads
// the cluster's status. Get it from Client.Admin.
type Administrator struct {
	c *Client
}

// QueueSpec describes a queue to create, built with NewQueueSpec and its
// setters. Settings left unset, or set to zero, take the broker's [queue]
// settings. Durations travel in milliseconds: a duration that is not a
// whole number of milliseconds is rounded up, so a positive one never
// becomes 0 (the default); a negative one is 0. CreateQueue fails with
// INVALID_ARGUMENT for a value out of the broker's range.
type QueueSpec struct {
	f wire.CreateQueue
}

// NewQueueSpec returns a spec for a queue named name.
func NewQueueSpec(name string) *QueueSpec { return &QueueSpec{f: wire.CreateQueue{Name: name}} }

// VisibilityTimeout sets the lease length of deliveries, rounded up to a
// millisecond: at most the broker's [queue] max_lease_extension (12h by
// default). The default is the broker's [queue] visibility_timeout (30s
// by default).
func (q *QueueSpec) VisibilityTimeout(d time.Duration) *QueueSpec {
	q.f.VisibilityTimeoutMS = ms(d)
	return q
}

// OnEnqueue sets the Lua source defining on_enqueue(msg).
func (q *QueueSpec) OnEnqueue(script string) *QueueSpec { q.f.OnEnqueue = script; return q }

// OnFailure sets the Lua source defining on_failure(msg).
func (q *QueueSpec) OnFailure(script string) *QueueSpec { q.f.OnFailure = script; return q }

// MaxAttempts sets how many deliveries a message gets before it is
// dead-lettered under the default failure policy, 1 to 1,000,000 (default:
// the broker's [queue] max_attempts, 3 by default).
func (q *QueueSpec) MaxAttempts(n uint32) *QueueSpec { q.f.MaxAttempts = n; return q }

// Backoff sets the default failure policy's delay after the first failure
// (doubling after each further one) and its cap, each rounded up to a
// millisecond and at most 24h, with base at most max. A zero takes the
// broker's [queue] backoff_base or backoff_max (1s and 60s by default)
// before the comparison, so a base above the broker's max needs a max.
func (q *QueueSpec) Backoff(base, max time.Duration) *QueueSpec {
	q.f.BackoffBaseMS, q.f.BackoffMaxMS = ms(base), ms(max)
	return q
}

// DedupWindow sets how long idempotency keys are remembered, rounded up to
// a millisecond, at most 7 days (default: the broker's [queue]
// dedup_window, 5m by default).
func (q *QueueSpec) DedupWindow(d time.Duration) *QueueSpec { q.f.DedupWindowMS = ms(d); return q }

// The fair scheduling policies a queue may name (QueueSpec.Policy).
const (
	// PolicyDRR is deficit round robin: weighted shares hold over whole
	// rounds, in payload bytes.
	PolicyDRR = "drr"
	// PolicySTFQ is start-time fair queueing: weighted shares hold at
	// every time scale, in messages.
	PolicySTFQ = "stfq"
)

// Policy sets the queue's fair scheduling policy across its fairness
// keys, PolicyDRR or PolicySTFQ; unset, the queue follows the broker's
// [scheduler] policy. Another name fails CreateQueue with *StatusError
// (INVALID_ARGUMENT).
func (q *QueueSpec) Policy(name string) *QueueSpec { q.f.Policy = name; return q }

// LatencyLane sets the latency lane of a PolicySTFQ queue: a fairness key
// that becomes backlogged after having nothing pending for at least idle
// (rounded up to a whole millisecond), or that has not been served more
// than its share, is served budget messages ahead of the backlogged keys. 0 for either takes the broker's
// [scheduler] latency_budget (10) or latency_idle (100ms). The broker
// refuses a budget above 1,000,000 or an idle time above an hour with
// *StatusError (INVALID_ARGUMENT).
func (q *QueueSpec) LatencyLane(budget uint32, idle time.Duration) *QueueSpec {
	q.f.LatencyBudget, q.f.LatencyIdleMS = budget, ms(idle)
	return q
}

// TenantSeparator makes the queue schedule in two levels, tenants and
// then each tenant's fairness keys: a key's tenant is the key up to the
// first sep (all of it if it holds none), as "acme" of "acme/report-7"
// with sep "/". A tenant's weight is that of its last enqueued message,
// and its share is split evenly among its backlogged keys, so a tenant
// spreading its messages over 1,000 keys gets one share, not 1,000. The
// latency lane is then per tenant. It needs PolicySTFQ (a queue that
// names no policy gets it); the broker refuses it with PolicyDRR, or
// longer than 16 bytes, with *StatusError (INVALID_ARGUMENT). "" (the
// default): no hierarchy.
func (q *QueueSpec) TenantSeparator(sep string) *QueueSpec { q.f.TenantSeparator = sep; return q }

// CostByTime makes the queue share consumer time rather than deliveries:
// a delivery is charged the lease time it held, from delivery to ack,
// nack, release or expiry, so that a fairness key (or tenant) whose jobs
// take ten times longer gets a tenth of the deliveries and the same
// consumer time. Each key's FairnessKeyStats.Lag is then in
// milliseconds. It needs PolicySTFQ (a queue that names no policy gets
// it); the broker refuses it with PolicyDRR with *StatusError
// (INVALID_ARGUMENT).
func (q *QueueSpec) CostByTime() *QueueSpec { q.f.CostByTime = true; return q }

// Shards splits the queue, in a cluster, into n shards (2 to 256), each
// its own Raft group with its own leader, for throughput beyond one
// group's. Shard i is the queue "<name>~<i>". The client spreads messages
// over the shards by the hash of their fairness key (of their tenant,
// with TenantSeparator), so each key's messages stay in one shard and in
// order; a Subscription of the queue consumes every shard, sharing its
// prefetch among them by backlog. Fairness holds within each shard, and
// across shards only approximately (see docs/cluster-scaling.md). 0 or
// 1: not sharded. A broker in single-node mode refuses more than 1 with
// *StatusError (NOT_SUPPORTED); more than 256 is INVALID_ARGUMENT.
func (q *QueueSpec) Shards(n uint32) *QueueSpec { q.f.Shards = n; return q }

// MessageTTL sets the time to live of the queue's messages that have no
// TTL of their own (Message.TTL), counted from enqueue and rounded up to a
// millisecond: a message not delivered within it expires, and is
// dead-lettered with fila-error "expired", or dropped (ExpiredAction). A
// message leased when its TTL passes expires only if it comes back to be
// delivered again. At most 30 days; above, the broker refuses the queue
// with *StatusError (INVALID_ARGUMENT). 0 (the default): none.
func (q *QueueSpec) MessageTTL(d time.Duration) *QueueSpec { q.f.MessageTTLMS = ms(d); return q }

// The actions on an expired message (QueueSpec.ExpiredAction).
const (
	// ExpireDeadLetter moves an expired message to the queue's DLQ, with
	// fila-error "expired". It is the default.
	ExpireDeadLetter = "dead-letter"
	// ExpireDrop deletes an expired message.
	ExpireDrop = "drop"
)

// ExpiredAction sets what happens to the queue's messages that expire:
// ExpireDeadLetter (the default) or ExpireDrop. The broker refuses any
// other value with *StatusError (INVALID_ARGUMENT).
func (q *QueueSpec) ExpiredAction(action string) *QueueSpec { q.f.ExpiredAction = action; return q }

// Name returns the queue name.
func (q *QueueSpec) Name() string { return q.f.Name }

// ms converts d to the protocol's milliseconds, rounding up: a positive
// duration never becomes 0, which the broker reads as "the default" or
// "none". Zero and negative durations are 0.
func ms(d time.Duration) uint64 {
	if d <= 0 {
		return 0
	}
	n := uint64(d / time.Millisecond)
	if d%time.Millisecond != 0 {
		n++
	}
	return n
}

// CreateQueue creates a queue and its dead-letter queue "<name>.dlq". It
// returns *CreateQueueError (QUEUE_EXISTS; SCRIPT_ERROR for a Lua script
// that does not compile, with the line number) or *StatusError
// (INVALID_ARGUMENT for a bad name or a setting out of range, the message
// naming it; errors.Is(err, ErrInvalidArgument)).
func (a *Administrator) CreateQueue(ctx context.Context, spec *QueueSpec) error {
	f := spec.f
	_, err := a.c.request(ctx, &f, spec.f.Name)
	return err
}

// DeleteQueue deletes a queue, its messages and its DLQ. It returns
// *DeleteQueueError (QUEUE_NOT_FOUND) or *StatusError.
func (a *Administrator) DeleteQueue(ctx context.Context, name string) error {
	_, err := a.c.request(ctx, &wire.DeleteQueue{Name: name}, name)
	return err
}

// QueueInfo summarises one queue.
type QueueInfo struct {
	Name string
	// Ready counts messages deliverable now (including those waiting for
	// throttle tokens); Delayed those not yet due; Leased those delivered
	// and not yet settled.
	Ready, Delayed, Leased uint64
	// DeadLetterQueue is this queue's DLQ; empty for a DLQ.
	DeadLetterQueue string
	// Parent is, for a DLQ, the queue it belongs to.
	Parent string
	// Shards is a sharded queue's number of shards (its DLQ's too), the
	// counts then summing the shards' as far as the answering node holds
	// replicas of them; 0 for a queue that is not sharded.
	Shards uint32
}

// ListQueues returns every queue, sorted by name.
func (a *Administrator) ListQueues(ctx context.Context) ([]QueueInfo, error) {
	resp, err := a.c.request(ctx, &wire.ListQueues{}, "")
	if err != nil {
		return nil, err
	}
	qs := resp.(*wire.ListQueuesResult).Queues
	out := make([]QueueInfo, len(qs))
	for i, q := range qs {
		out[i] = QueueInfo{Name: q.Name, Ready: q.Ready, Delayed: q.Delayed, Leased: q.Leased, DeadLetterQueue: q.DeadLetterQueue, Parent: q.Parent, Shards: q.Shards}
	}
	return out, nil
}

// QueueStats is a queue's state: depths, DRR state per fairness key,
// token buckets per throttle key, Lua hook counters.
type QueueStats struct {
	Name                   string
	Ready, Delayed, Leased uint64
	DeadLettered           uint64
	// Bytes is the payload bytes of the queue's messages and its DLQ's,
	// as enqueued (headers not counted); 0 from a broker that predates
	// it.
	Bytes             uint64
	Subscriptions     uint32
	VisibilityTimeout time.Duration
	MaxAttempts       uint32
	Policy            string // PolicyDRR or PolicySTFQ; "drr" from a broker that predates policies
	// LatencyBudget (deliveries per key) and LatencyIdle are a PolicySTFQ
	// queue's latency lane; zeros when it has none.
	LatencyBudget uint32
	LatencyIdle   time.Duration
	// TenantSeparator is the queue's tenant separator ("" for none);
	// with one, a key's Weight and EntitledShare are its tenant's weight
	// and the tenant's share split among its backlogged keys.
	TenantSeparator string
	// CostByTime reports whether the queue shares consumer time rather
	// than deliveries.
	CostByTime bool
	// MessageTTL is the queue's message TTL, 0 for none; ExpiredAction is
	// ExpireDeadLetter or ExpireDrop ("" from a broker that predates
	// TTLs). MessagesExpired counts the messages that expired since the
	// broker (or the queue's replica) started.
	MessageTTL      time.Duration
	ExpiredAction   string
	MessagesExpired uint64
	// FairnessKeys lists the most pending fairness keys (WithTopKeys),
	// most pending first; BackloggedKeys counts all keys with pending
	// messages.
	FairnessKeys   []FairnessKeyStats
	BackloggedKeys uint64
	// Window is the length of the stats window the window figures and
	// dwell percentiles cover (the last 30 to 60 s); WindowDelivered
	// counts the queue's deliveries over it.
	Window          time.Duration
	WindowDelivered uint64
	// JainIndex is Jain's fairness index over the backlogged keys
	// delivered to in the window, of each key's window share over its
	// entitled share: 1 when every key got its entitled share, 1/n when
	// one got everything; 0 when none was delivered to.
	JainIndex    float64
	ThrottleKeys []ThrottleKeyStats
	// Shards is a sharded queue's number of shards, 0 for a queue that
	// is not sharded. The stats of a sharded queue (or of its DLQ) join
	// its shards': counts and hook counters summed, settings from shard
	// 0, fairness keys and throttle keys merged (a key lives in one
	// shard; a throttle key's buckets, one per shard, are listed once
	// each), and JainIndex computed over the fairness keys listed.
	Shards                       int
	OnEnqueueCalls, OnEnqueueErr uint64
	OnFailureCalls, OnFailureErr uint64
	CircuitOpen                  bool
	CircuitTrips                 uint64
	// Redrive is the throttled redrive under way from the queue's
	// dead-letter queue (or from this queue, a DLQ); nil for none.
	Redrive *RedriveProgress
	// Purged counts the messages PurgeQueue removed since the broker (or
	// the queue's replica) started.
	Purged uint64
}

// FairnessKeyStats is the state of one fairness key with pending
// messages. Deficit is in cost units (payload bytes), drr queues only;
// Delivered counts deliveries since the key last became backlogged.
type FairnessKeyStats struct {
	Key       string
	Pending   uint64
	Weight    uint32
	Deficit   int64
	Delivered uint64
	// EntitledShare is the key's weight over the sum of the backlogged
	// keys' weights; WindowShare its share of the queue's deliveries over
	// the stats window (WindowDelivered of them). Both 0 to 1.
	EntitledShare   float64
	WindowShare     float64
	WindowDelivered uint64
	// Lane is where the key waits: LaneLatency, LaneFair or LaneBlocked
	// ("" from a broker that predates it).
	Lane string
	// Lag is, in a PolicySTFQ queue, how far the key's start tag is ahead
	// of the queue's virtual time, in messages at weight 1.
	Lag float64
	// DwellP50 and DwellP99 estimate the median and 99th percentile time
	// from enqueue to delivery of the key's messages over the window (to
	// within a factor of two, at millisecond resolution).
	DwellP50, DwellP99 time.Duration
}

// The lanes of FairnessKeyStats.Lane.
const (
	// LaneLatency is a PolicySTFQ queue's latency lane: a key that was
	// idle, served its latency budget ahead of the others.
	LaneLatency = "latency"
	// LaneFair is the fair order across keys.
	LaneFair = "fair"
	// LaneBlocked is a key whose ready messages all wait for a throttle
	// token or behind a message of their ordering key.
	LaneBlocked = "blocked"
)

// MaxTopKeys is the most fairness keys QueueStats lists.
const MaxTopKeys = 1000

// A StatsOption changes what QueueStats asks for.
type StatsOption func(*wire.QueueStats)

// WithTopKeys makes QueueStats list the n most pending fairness keys, 1
// to MaxTopKeys (default MaxTopKeys; 0 or more than MaxTopKeys means
// MaxTopKeys).
func WithTopKeys(n int) StatsOption {
	return func(f *wire.QueueStats) {
		if n > 0 && n <= MaxTopKeys {
			f.TopKeys = uint32(n)
		}
	}
}

// ThrottleKeyStats is the state of one token bucket: Rate in tokens per
// second, Burst and Tokens in tokens, Waiting messages of the queue.
type ThrottleKeyStats struct {
	Key                 string
	Rate, Burst, Tokens float64
	Waiting             uint64
}

// QueueStats inspects a queue; of a sharded queue, every shard (see
// QueueStats.Shards). It returns *QueueStatsError (QUEUE_NOT_FOUND) or
// *StatusError.
func (a *Administrator) QueueStats(ctx context.Context, name string, opts ...StatsOption) (*QueueStats, error) {
	req := &wire.QueueStats{Name: name}
	for _, o := range opts {
		o(req)
	}
	resp, err := a.c.request(ctx, req, name)
	if errors.Is(err, ErrQueueSharded) {
		return a.shardedStats(ctx, name, req.TopKeys)
	}
	if err != nil {
		return nil, err
	}
	return statsOf(resp.(*wire.QueueStatsResult)), nil
}

func statsOf(r *wire.QueueStatsResult) *QueueStats {
	st := &QueueStats{
		Name: r.Name, Ready: r.Ready, Delayed: r.Delayed, Leased: r.Leased, DeadLettered: r.DeadLettered,
		Subscriptions: r.Subscriptions, VisibilityTimeout: time.Duration(r.VisibilityTimeoutMS) * time.Millisecond,
		MaxAttempts:   r.MaxAttempts,
		Policy:        cmp.Or(r.Policy, PolicyDRR),
		LatencyBudget: r.LatencyBudget, LatencyIdle: time.Duration(r.LatencyIdleMS) * time.Millisecond,
		TenantSeparator: r.TenantSeparator, CostByTime: r.CostByTime, Bytes: r.Bytes,
		MessageTTL: time.Duration(r.MessageTTLMS) * time.Millisecond, ExpiredAction: r.ExpiredAction, MessagesExpired: r.MessagesExpired,
		OnEnqueueCalls: r.Hooks.OnEnqueueCalls, OnEnqueueErr: r.Hooks.OnEnqueueFailures,
		OnFailureCalls: r.Hooks.OnFailureCalls, OnFailureErr: r.Hooks.OnFailureFailures,
		CircuitOpen: r.Hooks.CircuitOpen, CircuitTrips: r.Hooks.CircuitTrips,
		BackloggedKeys: r.BackloggedKeys, Window: time.Duration(r.WindowMS) * time.Millisecond,
		WindowDelivered: r.WindowDelivered, JainIndex: r.JainIndex,
	}
	for _, k := range r.FairnessKeys {
		st.FairnessKeys = append(st.FairnessKeys, FairnessKeyStats{
			Key: k.Key, Pending: k.Pending, Weight: k.Weight, Deficit: k.Deficit, Delivered: k.Delivered,
			EntitledShare: k.EntitledShare, WindowShare: k.WindowShare, WindowDelivered: k.WindowDelivered,
			Lane: k.Lane, Lag: k.Lag,
			DwellP50: time.Duration(k.DwellP50MS) * time.Millisecond, DwellP99: time.Duration(k.DwellP99MS) * time.Millisecond,
		})
	}
	for _, k := range r.ThrottleKeys {
		st.ThrottleKeys = append(st.ThrottleKeys, ThrottleKeyStats{Key: k.Key, Rate: k.Rate, Burst: k.Burst, Tokens: k.Tokens, Waiting: k.Waiting})
	}
	st.Purged = r.MessagesPurged
	if r.RedriveRate > 0 {
		st.Redrive = &RedriveProgress{Rate: r.RedriveRate, FairnessKey: r.RedriveKey, Moved: r.RedriveMoved, Remaining: r.RedriveRemaining}
	}
	return st
}

// SetConfig sets a runtime-config key. Keys under "throttle." take
// "rate,burst" (tokens per second, bucket size) and change the bucket live.
// It returns *SetConfigError (INVALID_CONFIG_VALUE, naming the expected
// form) or *StatusError.
func (a *Administrator) SetConfig(ctx context.Context, key, value string) error {
	_, err := a.c.request(ctx, &wire.SetConfig{Key: key, Value: value}, key)
	return err
}

// GetConfig reads a runtime-config key; found is false when it is not set.
func (a *Administrator) GetConfig(ctx context.Context, key string) (value string, found bool, err error) {
	resp, err := a.c.request(ctx, &wire.GetConfig{Key: key}, key)
	if err != nil {
		return "", false, err
	}
	r := resp.(*wire.GetConfigResult)
	return r.Value, r.Found, nil
}

// ConfigEntry is one runtime-config entry.
type ConfigEntry struct{ Key, Value string }

// ListConfig returns the runtime-config entries whose keys start with
// prefix, sorted by key ("throttle." lists every rate limit).
func (a *Administrator) ListConfig(ctx context.Context, prefix string) ([]ConfigEntry, error) {
	resp, err := a.c.request(ctx, &wire.ListConfig{Prefix: prefix}, prefix)
	if err != nil {
		return nil, err
	}
	es := resp.(*wire.ListConfigResult).Entries
	out := make([]ConfigEntry, len(es))
	for i, e := range es {
		out[i] = ConfigEntry{Key: e.Key, Value: e.Value}
	}
	return out, nil
}

// DeleteConfig deletes a runtime-config key (deleting "throttle.K" removes
// the limit on K) and reports whether it existed.
func (a *Administrator) DeleteConfig(ctx context.Context, key string) (existed bool, err error) {
	resp, err := a.c.request(ctx, &wire.DeleteConfig{Key: key}, key)
	if err != nil {
		return false, err
	}
	return resp.(*wire.DeleteConfigOk).Existed, nil
}

// Redrive moves up to n messages (0: all) from a dead-letter queue back to
// its parent, oldest first, with attempts reset, and returns how many
// moved. It returns *RedriveError (QUEUE_NOT_FOUND, NOT_A_DLQ) or
// *StatusError.
//
// The DLQ of a sharded queue is redriven shard by shard, each shard's
// dead letters back to that shard, until n have moved.
func (a *Administrator) Redrive(ctx context.Context, dlq string, n uint64) (uint64, error) {
	resp, err := a.c.request(ctx, &wire.Redrive{DeadLetterQueue: dlq, Count: n}, dlq)
	if errors.Is(err, ErrQueueSharded) {
		shards, terr := a.Topology(ctx, dlq)
		if terr != nil {
			return 0, terr
		}
		var moved uint64
		for _, s := range shards {
			left := uint64(0)
			if n > 0 {
				if moved >= n {
					break
				}
				left = n - moved
			}
			m, err := a.Redrive(ctx, s.Queue, left)
			moved += m
			if err != nil {
				return moved, err
			}
		}
		return moved, nil
	}
	if err != nil {
		return 0, err
	}
	return resp.(*wire.RedriveResult).Moved, nil
}

// Permission is one ACL entry: a kind of access on a queue pattern. Make
// them with Produce, Consume and Admin, so an invalid kind does not
// compile.
type Permission struct {
	kind    wire.PermissionKind
	pattern string
}

// Produce allows enqueueing to queues matching pattern: an exact name, a
// prefix wildcard such as "orders.*" (matching "orders.eu", not "orders"),
// or "*".
func Produce(pattern string) Permission {
	return Permission{kind: wire.PermissionKindProduce, pattern: pattern}
}

// Consume allows subscribing to matching queues and settling their
// deliveries.
func Consume(pattern string) Permission {
	return Permission{kind: wire.PermissionKindConsume, pattern: pattern}
}

// Admin allows every admin operation on matching queues; Admin("*") also
// allows runtime config and API key management, ClusterStatus, MoveQueue,
// DrainNode, UndrainNode, Rebalance, AddNode and RemoveNode.
func Admin(pattern string) Permission {
	return Permission{kind: wire.PermissionKindAdmin, pattern: pattern}
}

// ParsePermission parses the CLI's form "kind:pattern", such as
// "produce:orders.*", where kind is produce, consume or admin (any case).
// It fails for another kind or an empty pattern.
func ParsePermission(s string) (Permission, error) {
	kind, pattern, ok := strings.Cut(s, ":")
	if !ok || pattern == "" {
		return Permission{}, fmt.Errorf("fila: parse permission %q: want kind:pattern, such as produce:orders.*", s)
	}
	switch strings.ToLower(kind) {
	case "produce":
		return Produce(pattern), nil
	case "consume":
		return Consume(pattern), nil
	case "admin":
		return Admin(pattern), nil
	}
	return Permission{}, fmt.Errorf("fila: parse permission %q: kind %q: want produce, consume or admin", s, kind)
}

// Kind returns "produce", "consume" or "admin".
func (p Permission) Kind() string { return p.kind.String() }

// Pattern returns the queue pattern.
func (p Permission) Pattern() string { return p.pattern }

// String returns "kind:pattern", the form ParsePermission reads.
func (p Permission) String() string { return p.Kind() + ":" + p.pattern }

func toWire(ps []Permission) []wire.Permission {
	out := make([]wire.Permission, len(ps))
	for i, p := range ps {
		out[i] = wire.Permission{Kind: p.kind, Pattern: p.pattern}
	}
	return out
}

func fromWire(ps []wire.Permission) []Permission {
	out := make([]Permission, len(ps))
	for i, p := range ps {
		out[i] = Permission{kind: p.Kind, pattern: p.Pattern}
	}
	return out
}

// APIKeySpec describes an API key to mint.
type APIKeySpec struct {
	name  string
	perms []Permission
}

// NewAPIKeySpec returns a spec for a key labelled name.
func NewAPIKeySpec(name string) *APIKeySpec { return &APIKeySpec{name: name} }

// Permissions sets the key's initial ACL.
func (s *APIKeySpec) Permissions(ps ...Permission) *APIKeySpec { s.perms = ps; return s }

// APIKey is a freshly minted key. Secret is shown only here: the broker
// keeps only its hash.
type APIKey struct {
	ID     string
	Secret string
}

// CreateAPIKey mints an API key.
func (a *Administrator) CreateAPIKey(ctx context.Context, spec *APIKeySpec) (APIKey, error) {
	resp, err := a.c.request(ctx, &wire.CreateAPIKey{Name: spec.name, Permissions: toWire(spec.perms)}, spec.name)
	if err != nil {
		return APIKey{}, err
	}
	r := resp.(*wire.CreateAPIKeyResult)
	return APIKey{ID: r.KeyID, Secret: r.Secret}, nil
}

// RevokeAPIKey revokes a key; connections using it get UNAUTHORIZED on
// their next request. It returns *RevokeAPIKeyError (API_KEY_NOT_FOUND) or
// *StatusError.
func (a *Administrator) RevokeAPIKey(ctx context.Context, keyID string) error {
	_, err := a.c.request(ctx, &wire.RevokeAPIKey{KeyID: keyID}, keyID)
	return err
}

// APIKeyInfo describes a key without its secret.
type APIKeyInfo struct {
	ID          string
	Name        string
	CreatedAt   time.Time
	Permissions []Permission
}

// ListAPIKeys lists the keys, sorted by ID.
func (a *Administrator) ListAPIKeys(ctx context.Context) ([]APIKeyInfo, error) {
	resp, err := a.c.request(ctx, &wire.ListAPIKeys{}, "")
	if err != nil {
		return nil, err
	}
	ks := resp.(*wire.ListAPIKeysResult).Keys
	out := make([]APIKeyInfo, len(ks))
	for i, k := range ks {
		out[i] = APIKeyInfo{ID: k.KeyID, Name: k.Name, CreatedAt: time.UnixMilli(int64(k.CreatedAtMS)), Permissions: fromWire(k.Permissions)}
	}
	return out, nil
}

// SetACL replaces a key's permissions.
func (a *Administrator) SetACL(ctx context.Context, keyID string, perms ...Permission) error {
	_, err := a.c.request(ctx, &wire.SetACL{KeyID: keyID, Permissions: toWire(perms)}, keyID)
	return err
}

// GetACL returns a key's permissions.
func (a *Administrator) GetACL(ctx context.Context, keyID string) ([]Permission, error) {
	resp, err := a.c.request(ctx, &wire.GetACL{KeyID: keyID}, keyID)
	if err != nil {
		return nil, err
	}
	return fromWire(resp.(*wire.GetACLResult).Permissions), nil
}

// Shard is one shard of a queue and the node that leads it.
type Shard struct {
	// Number is the shard number, from 0.
	Number uint32
	// LeaderNodeID and LeaderAddr (host:port) locate the shard's leader;
	// empty when unknown.
	LeaderNodeID, LeaderAddr string
	// Term is the Raft term of the leader's election (0 on a single node).
	Term uint64
	// Queue is the name to address the shard by: "<queue>~<number>" for
	// a sharded queue (its DLQ's shards: "<queue>~<number>.dlq"), the
	// queue's own name otherwise.
	Queue string
}

// Topology returns the shards of queue and where each is led, by shard
// number: one for a queue that is not sharded. It returns
// *TopologyError (QUEUE_NOT_FOUND) or *StatusError.
func (a *Administrator) Topology(ctx context.Context, queue string) ([]Shard, error) {
	resp, err := a.c.request(ctx, &wire.Topology{Queue: queue}, queue)
	if err != nil {
		return nil, err
	}
	ss := resp.(*wire.TopologyResult).Shards
	out := make([]Shard, len(ss))
	for i, s := range ss {
		out[i] = Shard{Number: s.Shard, LeaderNodeID: s.LeaderNodeID, LeaderAddr: s.LeaderAddr, Term: s.Term, Queue: cmp.Or(s.Queue, queue)}
	}
	return out, nil
}

// ClusterStatus is one node's view of the cluster, as Administrator's
// ClusterStatus returns it. A broker running as a single node has no
// cluster: its NodeID is 0 and Nodes and Groups are empty.
type ClusterStatus struct {
	// NodeID is the Raft node ID (cluster.node_id) of the node that
	// answered; 0 for a single node.
	NodeID uint64
	// Nodes are the cluster's members, by node ID, the answering node
	// among them.
	Nodes []ClusterNode
	// Groups are the Raft groups the answering node holds a replica of:
	// the meta group first, then the queues' groups by queue name.
	Groups []ClusterGroup
	// Pending are the moves of the last rebalance (Administrator.
	// Rebalance) not yet started, in the order they start; nil when none
	// is left, and from a broker that predates rebalances.
	Pending []RebalanceMove
}

// Clustered reports whether the answering broker runs in a cluster
// (NodeID is not 0).
func (s *ClusterStatus) Clustered() bool { return s.NodeID != 0 }

// ClusterNode is one member of the cluster as the answering node sees it.
type ClusterNode struct {
	// ID is the member's Raft node ID.
	ID uint64
	// Addr is its client address, host:port (its cluster.advertise_addr);
	// empty until the member has registered it with the meta group.
	Addr string
	// PeerAddr is its peer transport address, host:port.
	PeerAddr string
	// Connected is whether the answering node has a peer connection to
	// it; always true for the answering node itself.
	Connected bool
	// State is the member's state as the answering node has applied the
	// meta group's log: NodeActive, NodeDraining or NodeDrained (see
	// Administrator.DrainNode); "" from a broker that predates drains.
	State string
}

// The states of a cluster member, as ClusterNode.State gives them.
const (
	// NodeActive is a member that takes new replicas and leads groups.
	NodeActive = "active"
	// NodeDraining is a member being drained (Administrator.DrainNode)
	// that still holds replicas, which are being moved off it.
	NodeDraining = "draining"
	// NodeDrained is a drained member: it holds no replica of any queue,
	// takes none and leads no group, but still votes in the meta group.
	NodeDrained = "drained"
)

// ClusterGroup is one Raft group as the answering node sees it: the meta
// group (ID 1, Queue "") or a queue's (with its dead-letter queue).
// Commit, Applied and LastIndex are positions in the group's log, from 1,
// on the answering node: the highest index it knows a majority holds, the
// highest it has applied, and the last it holds.
type ClusterGroup struct {
	ID    uint64
	Queue string
	// Leader is the leader's node ID, 0 while none is known (during an
	// election); Term the Raft term the answering node is in.
	Leader, Term               uint64
	Commit, Applied, LastIndex uint64
	// Replicas are the group's members, by node ID.
	Replicas []ClusterReplica
	// FirstIndex is the first index the answering node's log holds: the
	// entries before it were compacted into a snapshot of the queue (1
	// while none was; 0 from a node that does not report it).
	FirstIndex uint64
	// Quiesced is whether the group is idle on the answering node: not
	// ticked and sending no heartbeats until a proposal, a message of
	// the group or the loss of a node it needs wakes it. The meta group
	// never quiesces; a broker that predates quiescence reports false.
	Quiesced bool
	// Target is the replica set, by node ID, that a move under way (see
	// Administrator.MoveQueue) is taking the queue's group to, as the
	// answering node knows the plan; nil when no move is under way, for
	// the meta group, and from a broker that predates moves.
	Target []uint64
	// PreferredLeader is the node a rebalance (Administrator.Rebalance)
	// prefers to lead the queue's group: its leader hands the lead to it
	// once it is a voter caught up with the log. 0 for none.
	PreferredLeader uint64
}

// RebalanceMove is one replica move of a rebalance: Queue's replica on
// node From goes to node To, as Administrator.MoveQueue would move it to
// its replicas without From, with To.
type RebalanceMove struct {
	// Queue is the queue moved, with its dead-letter queue (they share
	// one Raft group).
	Queue string
	// From is the node ID of the node that gives up its replica, and To
	// that of the node that takes it.
	From, To uint64
}

// RebalanceLead is a queue's preferred leader as a rebalance sets it.
type RebalanceLead struct {
	// Queue is the queue.
	Queue string
	// Node is the node ID of the node preferred to lead the queue's
	// group: its leader hands the lead to it once it is a voter caught
	// up with the log.
	Node uint64
}

// RebalancePlan is what a rebalance does (Administrator.Rebalance). Both
// lists are empty when the cluster is balanced.
type RebalancePlan struct {
	// Moves are the replica moves, in the order they start.
	Moves []RebalanceMove
	// Leads are the preferred leaders the plan changes.
	Leads []RebalanceLead
}

func rebalanceMoves(ms []wire.RebalanceMove) []RebalanceMove {
	var out []RebalanceMove
	for _, m := range ms {
		out = append(out, RebalanceMove{Queue: m.Queue, From: m.FromNodeID, To: m.ToNodeID})
	}
	return out
}

// ClusterReplica is one member of a group and how far its log has caught
// up. Only a group's leader tracks that: when the answering node does
// not lead the group, Known is false and Match and Lag are 0.
type ClusterReplica struct {
	NodeID uint64
	Known  bool
	// Match is the highest log index the leader knows the replica holds;
	// Lag how many entries it is behind the leader's LastIndex.
	Match, Lag uint64
	// Learner is whether the replica is a learner: it receives the
	// group's log but does not vote, while a move catches it up before it
	// becomes a voter. False for a voter, and from a broker that predates
	// moves.
	Learner bool
}

// ClusterStatus returns one node's view of the cluster: its members, and
// the Raft groups it holds with their leaders, terms and log indexes and,
// for the groups it leads, each replica's lag. The node is the one the
// client asks first, the first seed it is connected to (see Connect): it
// answers for itself, whether or not it leads anything, and NodeID names
// it. A broker running as a single node answers NodeID 0 and nothing
// else. It needs admin on "*", and returns *StatusError: FORBIDDEN
// without it, UNAVAILABLE once the node's Raft driver has stopped after
// a storage failure.
func (a *Administrator) ClusterStatus(ctx context.Context) (*ClusterStatus, error) {
	resp, err := a.c.request(ctx, &wire.ClusterStatus{}, "")
	if err != nil {
		return nil, err
	}
	r := resp.(*wire.ClusterStatusResult)
	st := &ClusterStatus{NodeID: r.NodeID, Pending: rebalanceMoves(r.Pending)}
	for _, n := range r.Nodes {
		st.Nodes = append(st.Nodes, ClusterNode{ID: n.NodeID, Addr: n.Addr, PeerAddr: n.PeerAddr, Connected: n.Connected, State: n.State})
	}
	for _, g := range r.Groups {
		cg := ClusterGroup{
			ID: g.GroupID, Queue: g.Queue, Leader: g.LeaderNodeID, Term: g.Term,
			Commit: g.Commit, Applied: g.Applied, LastIndex: g.LastIndex, Quiesced: g.Quiesced, FirstIndex: g.FirstIndex,
			Target: g.Target, PreferredLeader: g.PreferredLeader,
		}
		for _, rp := range g.Replicas {
			cg.Replicas = append(cg.Replicas, ClusterReplica{NodeID: rp.NodeID, Known: rp.Known, Match: rp.Match, Lag: rp.Lag, Learner: rp.Learner})
		}
		st.Groups = append(st.Groups, cg)
	}
	return st, nil
}

// MoveQueue moves queue's replicas, with its dead-letter queue's (they
// share one Raft group), to the cluster members replicas: 1 to 64
// distinct Raft node IDs (cluster.node_id), in any order. It returns
// once the move's plan is recorded in the cluster's meta group and the
// node that took the request has applied it; the move itself then runs
// in the background, one Raft configuration change at a time: each new
// node joins as a learner and catches up, then the listed nodes become
// the voters and the nodes left out delete their copies. ClusterStatus
// shows a move under way as its group's Target, and the new nodes as
// Learner replicas until they vote; the move is done when no node
// reports a Target for the group and its leader lists exactly replicas,
// none a learner. Moving a queue to the replicas it has clears a plan
// under way.
//
// Like ClusterStatus, the request goes to the node the client asks first
// (see Connect): any node takes it. It is not resent after a lost
// connection, since the plan may have been recorded: ClusterStatus tells.
// It needs admin on "*".
//
// It returns *MoveQueueError with MoveQueueQueueNotFound (errors.Is
// ErrQueueNotFound) when no queue has that name (a dead-letter queue is
// moved with its queue, not by its own name), or *StatusError: FORBIDDEN
// without the permission, NOT_SUPPORTED from a broker that runs as a
// single node, INVALID_ARGUMENT for an empty list, a duplicate, a node
// that is not a member or more than 64 IDs, UNAVAILABLE when no meta
// leader took the plan in time (retrying may succeed); or an error
// wrapping ErrConnectionLost, ErrClosed or ctx's error.
func (a *Administrator) MoveQueue(ctx context.Context, queue string, replicas ...uint64) error {
	_, err := a.c.request(ctx, &wire.MoveQueue{Queue: queue, Replicas: replicas}, queue)
	return err
}

// DrainNode drains the cluster member nodeID (its Raft node ID,
// cluster.node_id), such as before taking it out of service: the node
// takes no new replica and leads no group, and each queue it holds a
// replica of is moved (as MoveQueue moves it) to its other replicas plus
// the member holding the fewest replicas that is not draining, if there
// is one (otherwise the queue keeps one replica fewer). It returns the
// number of queues whose move it planned, once the drain is recorded in
// the cluster's meta group and the node that took the request has
// applied it; the moves then run in the background. ClusterStatus shows
// the node's State as NodeDraining while it still holds a replica, then
// NodeDrained (it still votes in the meta group), and each queue's move
// as its group's Target. Draining a node again plans the moves of
// whatever it still holds (a queue moved back onto it since, say; 0 when
// there is none); the drain survives any node's restart. The node that
// takes the request may be the one drained.
//
// Like ClusterStatus, the request goes to the node the client asks first
// (see Connect): any node takes it. It is not resent after a lost
// connection, since the drain may have been recorded: ClusterStatus
// tells. It needs admin on "*".
//
// It returns *StatusError: FORBIDDEN without the permission,
// NOT_SUPPORTED from a broker that runs as a single node,
// INVALID_ARGUMENT for a node that is not a member or when every other
// member is draining, UNAVAILABLE when no meta leader took the drain in
// time (retrying may succeed); or an error wrapping ErrConnectionLost,
// ErrClosed or ctx's error.
func (a *Administrator) DrainNode(ctx context.Context, nodeID uint64) (queues int, err error) {
	resp, err := a.c.request(ctx, &wire.DrainNode{NodeID: nodeID}, strconv.FormatUint(nodeID, 10))
	if err != nil {
		return 0, err
	}
	return int(resp.(*wire.DrainNodeResult).Queues), nil
}

// UndrainNode undoes a drain of the cluster member nodeID (see
// DrainNode): the node is NodeActive again and takes new replicas and
// leads groups. The moves the drain planned go on: moving a queue back
// onto the node is a MoveQueue. Undoing a drain of a node that is not
// draining does nothing. It returns once the change is recorded in the
// cluster's meta group and the node that took the request has applied
// it, and like DrainNode goes to the node the client asks first, is not
// resent after a lost connection, and needs admin on "*".
//
// It returns *StatusError: FORBIDDEN without the permission,
// NOT_SUPPORTED from a broker that runs as a single node,
// INVALID_ARGUMENT for a node that is not a member, UNAVAILABLE when no
// meta leader took the change in time (retrying may succeed); or an
// error wrapping ErrConnectionLost, ErrClosed or ctx's error.
func (a *Administrator) UndrainNode(ctx context.Context, nodeID uint64) error {
	_, err := a.c.request(ctx, &wire.DrainNode{NodeID: nodeID, Undo: true}, strconv.FormatUint(nodeID, 10))
	return err
}

// Rebalance evens out the queues' replicas and leaders over the cluster's
// members that are not draining: it plans replica moves, from the most
// loaded node to the least loaded, until no move of one queue brings them
// closer, then preferred leaders the same way. A queue weighs 1, plus its
// payload bytes over the mean queue's, plus its deliveries of the last 30
// to 60 s over the mean queue's, as the node that takes the request sees
// them; with queues of equal weight, every node ends within one replica,
// and one lead, of every other. A queue with a move under way keeps it.
//
// With dryRun it returns the plan, as the node that took the request
// sees the cluster, and changes nothing. Otherwise it returns the plan
// once it is recorded in the cluster's meta group (replacing the moves
// of an earlier rebalance not yet started) and the node that took the
// request has applied it; the moves then start in order, in the
// background, each once neither of its nodes takes part in another move:
// at most one move per node at a time. A queue's leader hands the lead
// to its preferred leader once that node is caught up. ClusterStatus
// shows the moves not yet started (Pending), each move under way as its
// group's Target, and each group's PreferredLeader.
//
// Like ClusterStatus, the request goes to the node the client asks first
// (see Connect); it is not resent after a lost connection, since the
// plan may have been recorded. It needs admin on "*".
//
// It returns *StatusError: FORBIDDEN without the permission,
// NOT_SUPPORTED from a broker that runs as a single node, UNAVAILABLE
// when no meta leader took the plan in time (retrying may succeed); or
// an error wrapping ErrConnectionLost, ErrClosed or ctx's error.
func (a *Administrator) Rebalance(ctx context.Context, dryRun bool) (*RebalancePlan, error) {
	resp, err := a.c.request(ctx, &wire.Rebalance{DryRun: dryRun}, "")
	if err != nil {
		return nil, err
	}
	r := resp.(*wire.RebalanceResult)
	plan := &RebalancePlan{Moves: rebalanceMoves(r.Moves)}
	for _, l := range r.Leads {
		plan.Leads = append(plan.Leads, RebalanceLead{Queue: l.Queue, Node: l.NodeID})
	}
	return plan, nil
}

// AddNode adds the node nodeID (its Raft node ID, cluster.node_id, never
// used before), whose peer transport listens at peerAddr (host:port, as
// the other nodes dial it), to the cluster. Start the node first with
// cluster.join set and cluster.peers listing members it can reach and
// itself: it waits to be added. Every node then records the new member
// and connects to it, and the meta group's leader adds it to the meta
// group, as a learner until it holds the meta log, then as a voter. The
// new node holds no queue until a move or a rebalance places some on it.
// AddNode returns once the node that took the request has applied the
// addition; ClusterStatus then lists the new member.
//
// Like ClusterStatus, the request goes to the node the client asks first
// and is not resent after a lost connection. It needs admin on "*".
//
// It returns *StatusError: FORBIDDEN without the permission,
// NOT_SUPPORTED from a broker that runs as a single node,
// INVALID_ARGUMENT for ID 0, a member already, a node removed before
// (IDs are never reused) or an address that is not host:port,
// UNAVAILABLE when no meta leader took it in time (retrying may
// succeed); or an error wrapping ErrConnectionLost, ErrClosed or ctx's
// error.
func (a *Administrator) AddNode(ctx context.Context, nodeID uint64, peerAddr string) error {
	_, err := a.c.request(ctx, &wire.AddNode{NodeID: nodeID, PeerAddr: peerAddr}, strconv.FormatUint(nodeID, 10))
	return err
}

// RemoveNode removes the member nodeID from the cluster for good. It must
// hold no replica of any queue: drain it first (DrainNode) and wait
// until ClusterStatus shows it NodeDrained. The meta group's leader takes
// it out of the meta group; every node then forgets it and refuses its
// connections, and the removed node stops taking part, its server
// shutting down. Its ID is never accepted again: AddNode refuses it, and
// the node, restarted on its data directory, refuses to start. RemoveNode returns once the node
// that took the request has applied the removal.
//
// Like ClusterStatus, the request goes to the node the client asks first
// and is not resent after a lost connection. It needs admin on "*".
//
// It returns *StatusError: FORBIDDEN without the permission,
// NOT_SUPPORTED from a broker that runs as a single node,
// INVALID_ARGUMENT for a node that is not a member, the last member, or
// a node that still holds replicas, UNAVAILABLE when no meta leader took
// it in time (retrying may succeed); or an error wrapping
// ErrConnectionLost, ErrClosed or ctx's error.
func (a *Administrator) RemoveNode(ctx context.Context, nodeID uint64) error {
	_, err := a.c.request(ctx, &wire.RemoveNode{NodeID: nodeID}, strconv.FormatUint(nodeID, 10))
	return err
}
