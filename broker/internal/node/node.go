// Package node is the broker's operations layer, between the wire
// (package server: frames, handshake, flow control, replies) and the
// shards (package shard: the goroutine around each scheduler). For each
// operation it:
//
//   - checks the caller's permissions (package auth);
//   - routes it to the shard of its queue (today the node has one shard);
//   - runs the queue's Lua hooks: on_enqueue before a message is
//     proposed, on_failure for the shard's failed messages (package hook);
//   - turns the request into shard commands, and their results into
//     answers.
//
// It also owns the stored message body format (body.go), and the admin
// operations on the runtime config (package rtconf) and API keys. In a
// cluster it is where an operation on a queue led by another node is
// answered NotLeader.
//
// The import direction is cmd → server → node → shard → {sched, hook,
// store}, with auth and rtconf under node; broker/internal/archlint
// checks it.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/cluster"
	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/hook"
	"github.com/fila-mq/fila/broker/internal/rtconf"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// The node's vocabulary: the scheduler's and the shard's types, under the
// names the layer above uses.
type (
	// EnqueueItem is one message to enqueue and its queue.
	EnqueueItem = sched.EnqueueItem
	// EnqueueResult is one enqueued item's outcome.
	EnqueueResult = sched.EnqueueResult
	// Message is a message as the scheduler takes it.
	Message = sched.Message
	// LeaseRef names one delivery.
	LeaseRef = sched.LeaseRef
	// NackItem fails one delivery with a reason.
	NackItem = sched.NackItem
	// RetryItem fails one delivery and asks for redelivery after a delay.
	RetryItem = sched.RetryItem
	// ExtendItem moves one lease's deadline.
	ExtendItem = sched.ExtendItem
	// ExtendResult is one ExtendItem's outcome.
	ExtendResult = sched.ExtendResult
	// RateLimit is a consumer-declared limit on a subscription.
	RateLimit = sched.RateLimit
	// SubID identifies a subscription, unique within the node.
	SubID = sched.SubID
	// Delivered is one message leased to a subscription.
	Delivered = sched.Delivered
	// ExpiredLease is a lease that ended without a settle.
	ExpiredLease = sched.ExpiredLease
	// QueueSpec is a queue's definition.
	QueueSpec = sched.QueueSpec
	// QueueCreated names a created queue and its DLQ.
	QueueCreated = sched.QueueCreated
	// QueueSummary is one queue in ListQueues' result.
	QueueSummary = sched.QueueSummary
	// QueueStats is QueueStats' result.
	QueueStats = sched.QueueStats
	// Explanation is Explain's result.
	Explanation = sched.Explanation
	// Result is a shard command's outcome.
	Result = shard.Result
	// Sink receives a subscription's deliveries, expired leases and end.
	Sink = shard.Sink
	// Principal is who a connection authenticated as.
	Principal = auth.Principal
	// HookStats counts a queue's hook calls and failures.
	HookStats = hook.Stats
	// ClusterStatus is a cluster node's view of the cluster.
	ClusterStatus = cluster.Status
)

// Config configures a Node.
type Config struct {
	// NodeID names this node; Topology answers it as every queue's
	// leader.
	NodeID string
	// MaxMessageSize bounds a message's headers and payload, in bytes; 0
	// means 16 MiB.
	MaxMessageSize int
	// Hooks compiles and runs the queues' Lua hooks; nil means a registry
	// with the default limits and no runtime config for fila.get.
	Hooks *Hooks
	// Runtime is the runtime config; nil refuses its operations with
	// NOT_SUPPORTED. The node checks throttle.* values and applies them
	// to the shards, the stored ones at New and each change after.
	Runtime *rtconf.Store
	// Keys holds the API keys and their ACLs; nil refuses their
	// operations with NOT_SUPPORTED.
	Keys *auth.Store
	// Logger receives hook failures.
	Logger *slog.Logger
	// Cluster, if set, is the node's cluster membership: queues are
	// replicated, each on its own shard, and an operation on a queue led
	// by another node fails with a *fault.NotLeader. The shard New is
	// given is then unused (nil is fine).
	Cluster *cluster.Node
}

// Node runs operations on its shards for the connections of one broker.
// Its methods are safe for concurrent use. Methods that take done call it
// once, on the shard's storage completion goroutine (it must not block),
// unless they return an error, which answers the whole operation.
type Node struct {
	cfg Config
	sh  *shard.Shard
	log *slog.Logger
}

// New returns a node over sh. It registers the hooks of the queues sh
// recovered and, with a runtime config, applies its throttle rates.
func New(cfg Config, sh *shard.Shard) *Node {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.MaxMessageSize <= 0 {
		cfg.MaxMessageSize = 16 << 20
	}
	if cfg.Hooks == nil {
		cfg.Hooks = NewHooks(hook.Limits{}, nil, cfg.Logger)
	}
	n := &Node{cfg: cfg, sh: sh, log: cfg.Logger}
	if sh != nil {
		cfg.Hooks.RestoreHooks(sh.RestoredSpecs())
	}
	if rt := cfg.Runtime; rt != nil {
		rt.RegisterValidator(rtconf.ThrottlePrefix, func(_, value string) error {
			_, _, err := sched.ParseThrottle(value)
			return err
		})
		rt.Watch(rtconf.ThrottlePrefix, n.applyThrottle) // replays the stored entries first
	}
	return n
}

// applyThrottle applies a change of the runtime config key
// throttle.<key> to the token bucket of throttle key <key>.
func (n *Node) applyThrottle(key, value string, deleted bool) {
	tk := key[len(rtconf.ThrottlePrefix):]
	var cmd shard.Command = &shard.RemoveThrottle{Key: tk}
	if !deleted {
		rate, burst, err := sched.ParseThrottle(value)
		if err != nil {
			n.log.Error("ignoring invalid stored throttle", "key", key, "err", err)
			return
		}
		cmd = &shard.SetThrottle{Key: tk, Rate: rate, Burst: burst}
	}
	if c := n.cfg.Cluster; c != nil {
		// Each queue's leader proposes the rate into its group's log; a
		// new leader proposes every rate again (leading).
		for _, sh := range c.Shards() {
			sh.Submit(context.Background(), cmd, nil)
		}
		return
	}
	n.sh.Submit(context.Background(), cmd, nil)
}

// NodeID returns the node's ID.
func (n *Node) NodeID() string { return n.cfg.NodeID }

// shardFor returns the shard of queue: on a single node the only one;
// in a cluster the queue's own, when this node leads it, else an error
// (a *fault.NotLeader, or wrapping fault.ErrQueueNotFound).
func (n *Node) shardFor(queue string) (*shard.Shard, error) {
	if c := n.cfg.Cluster; c != nil {
		return c.Route(queue)
	}
	return n.sh, nil
}

// submit submits cmd to queue's shard.
func (n *Node) submit(ctx context.Context, queue string, cmd shard.Command, done func(Result)) error {
	sh, err := n.shardFor(queue)
	if err != nil {
		return err
	}
	return sh.Submit(ctx, cmd, done)
}

// Admit checks one message of an Enqueue for p before it is enqueued: the
// enqueue permission on its queue, the reserved "fila-" header prefix, at
// most 1024 headers, and MaxMessageSize; and that the node knows the
// queue. It then runs the queue's on_enqueue hook, which may set the
// fairness key, weight and throttle keys (a failing hook is logged and
// leaves the producer's values). It returns the message to enqueue,
// without ID or body, or an error wrapping fault.ErrForbidden,
// fault.ErrUnauthorized, fault.ErrInvalidArgument,
// fault.ErrMessageTooLarge, fault.ErrQueueNotFound or, for a sharded
// queue named by its own name, fault.ErrQueueSharded (the server then
// fails the whole Enqueue).
func (n *Node) Admit(ctx context.Context, p Principal, m *wire.EnqueueMessage) (Message, error) {
	if err := p.Authorize(auth.OpEnqueue, m.Queue); err != nil {
		return Message{}, err
	}
	size := len(m.Payload)
	for _, h := range m.Headers {
		size += len(h.Key) + len(h.Value)
		if strings.HasPrefix(h.Key, "fila-") {
			return Message{}, fmt.Errorf("header %q: the fila- prefix is reserved: %w", h.Key, fault.ErrInvalidArgument)
		}
	}
	if size > n.cfg.MaxMessageSize {
		return Message{}, fmt.Errorf("enqueue %s: message of %d bytes exceeds %d: %w", m.Queue, size, n.cfg.MaxMessageSize, fault.ErrMessageTooLarge)
	}
	if len(m.Headers) > 1024 {
		return Message{}, fmt.Errorf("%d headers: at most 1024: %w", len(m.Headers), fault.ErrInvalidArgument)
	}
	// A queue this node does not know yet may be being created: its hooks
	// are registered with it, so a message admitted before then must not
	// reach it without them.
	r, known := n.cfg.Hooks.Lookup(m.Queue)
	if !known {
		if c := n.cfg.Cluster; c != nil {
			if _, err := c.Route(m.Queue); errors.Is(err, fault.ErrQueueSharded) {
				return Message{}, fmt.Errorf("enqueue: %w", err)
			}
		}
		return Message{}, fmt.Errorf("enqueue %s: %w", m.Queue, fault.ErrQueueNotFound)
	}
	fk, weight, tks := m.FairnessKey, m.Weight, m.ThrottleKeys
	if r != nil && r.HasOnEnqueue() {
		in := hook.EnqueueInput{Queue: m.Queue, PayloadSize: len(m.Payload), FairnessKey: fk, Weight: weight, ThrottleKeys: tks}
		in.Headers = make([]hook.Header, len(m.Headers))
		for j, h := range m.Headers {
			in.Headers[j] = hook.Header{Key: h.Key, Value: h.Value}
		}
		out, err := r.OnEnqueue(ctx, in)
		// An open circuit breaker bypasses the hook for every message
		// until it closes; the breaker logs its openings and closings.
		if err != nil && !errors.Is(err, hook.ErrCircuitOpen) {
			n.log.Warn("on_enqueue failed; using the producer's values", "queue", m.Queue, "err", err)
		}
		fk, weight, tks = out.FairnessKey, out.Weight, out.ThrottleKeys
	}
	return Message{
		FairnessKey:    fk,
		Weight:         weight,
		ThrottleKeys:   tks,
		OrderingKey:    m.OrderingKey,
		IdempotencyKey: m.IdempotencyKey,
		Delay:          msDur(m.DelayMS),
		TTL:            msDur(m.TTLMS),
		Priority:       m.Priority,
		PayloadSize:    uint32(len(m.Payload)),
	}, nil
}

// Enqueue enqueues admitted messages (see Admit), each with its body set
// (EncodeBody). done receives Result.Enqueued, one result per item, or
// Result.Err. items and their bodies are the node's until done runs.
func (n *Node) Enqueue(ctx context.Context, items []EnqueueItem, done func(Result)) error {
	if len(items) == 0 {
		done(Result{})
		return nil
	}
	if n.cfg.Cluster == nil {
		return n.sh.Submit(ctx, &shard.Enqueue{Items: items}, done)
	}
	return byQueue(items, func(it EnqueueItem) string { return it.Queue },
		func(queue string, part []EnqueueItem, partDone func(Result)) error {
			return n.submit(ctx, queue, &shard.Enqueue{Items: part}, partDone)
		},
		func(r Result, j int) Result {
			if r.Err != nil {
				return Result{Enqueued: []EnqueueResult{{Err: r.Err}}}
			}
			return Result{Enqueued: r.Enqueued[j : j+1]}
		},
		func(parts []Result) Result {
			out := Result{Enqueued: make([]EnqueueResult, 0, len(items))}
			for _, p := range parts {
				out.Enqueued = append(out.Enqueued, p.Enqueued...)
			}
			return out
		}, done)
}

// Barrier runs fn after every operation the caller submitted before it.
// fn must not block.
func (n *Node) Barrier(ctx context.Context, fn func()) error {
	if c := n.cfg.Cluster; c != nil {
		return barrierAll(ctx, c.Shards(), fn)
	}
	return n.sh.Barrier(ctx, fn)
}

// Subscribe opens subscription sub on queue for p (subscribe permission)
// with credit deliveries of initial credit (math.MaxUint32: the node's
// cap on unsettled deliveries) and limits; its deliveries go to sink.
// done receives Result.Subscribed or Result.Err.
func (n *Node) Subscribe(ctx context.Context, p Principal, sub SubID, queue string, credit uint32, limits []RateLimit, sink Sink, done func(Result)) error {
	return n.SubscribeLease(ctx, p, sub, queue, credit, limits, 0, sink, done)
}

// SubscribeLease is Subscribe with the subscription's own lease length
// (a per-consumer lease timeout); 0 means the queue's visibility
// timeout. One above the broker's max_lease_extension fails with
// Result.Err wrapping fault.ErrInvalidArgument.
func (n *Node) SubscribeLease(ctx context.Context, p Principal, sub SubID, queue string, credit uint32, limits []RateLimit, lease time.Duration, sink Sink, done func(Result)) error {
	if err := p.Authorize(auth.OpSubscribe, queue); err != nil {
		return err
	}
	sh, err := n.shardFor(queue)
	if err != nil {
		return err
	}
	return sh.Subscribe(ctx, &shard.Subscribe{Sub: sub, Queue: queue, Credit: credit, Limits: limits, Lease: lease}, sink, done)
}

// Unsubscribe closes subscription sub of queue. With release its leased
// messages return to the queue at once; without, they keep their leases.
// done (may be nil) receives Result.Err.
func (n *Node) Unsubscribe(ctx context.Context, sub SubID, queue string, release bool, done func(Result)) error {
	return n.submit(ctx, queue, &shard.Unsubscribe{Sub: sub, Release: release}, done)
}

// AddCredit grants subscription sub of queue k more deliveries, once p
// may still consume from queue. The error wraps fault.ErrForbidden (the
// key lost consume: the caller ends the subscription) or
// fault.ErrUnauthorized (revoked).
func (n *Node) AddCredit(ctx context.Context, p Principal, sub SubID, queue string, k uint32) error {
	if err := p.Authorize(auth.OpCredit, queue); err != nil {
		return err
	}
	if k == 0 {
		return nil
	}
	return n.submit(ctx, queue, &shard.AddCredit{Sub: sub, N: k}, nil)
}

// Ack acknowledges deliveries. done receives one error per item (nil for
// success; refused by p's permissions, or the scheduler's), or err for
// the whole operation.
func (n *Node) Ack(ctx context.Context, p Principal, items []LeaseRef, done func(errs []error, err error)) error {
	return settle(ctx, n, p, auth.OpAck, items, func(r LeaseRef) LeaseRef { return r },
		func(keep []LeaseRef) shard.Command { return &shard.Ack{Items: keep} }, done)
}

// Nack fails deliveries with a reason; as Ack.
func (n *Node) Nack(ctx context.Context, p Principal, items []NackItem, done func(errs []error, err error)) error {
	return settle(ctx, n, p, auth.OpNack, items, func(it NackItem) LeaseRef { return it.LeaseRef },
		func(keep []NackItem) shard.Command { return &shard.Nack{Items: keep} }, done)
}

// RetryAfter fails deliveries and redelivers each after its delay; as Ack.
func (n *Node) RetryAfter(ctx context.Context, p Principal, items []RetryItem, done func(errs []error, err error)) error {
	return settle(ctx, n, p, auth.OpRetryAfter, items, func(it RetryItem) LeaseRef { return it.LeaseRef },
		func(keep []RetryItem) shard.Command { return &shard.RetryAfter{Items: keep} }, done)
}

// Release gives deliveries back unsettled; as Ack.
func (n *Node) Release(ctx context.Context, p Principal, items []LeaseRef, done func(errs []error, err error)) error {
	return settle(ctx, n, p, auth.OpRelease, items, func(r LeaseRef) LeaseRef { return r },
		func(keep []LeaseRef) shard.Command { return &shard.Release{Items: keep} }, done)
}

// allowed returns the items p may run op on (their queue from queue),
// and the index in items of each; refuse gets the others.
func allowed[T any](p Principal, op auth.Op, items []T, queue func(T) string, refuse func(i int, err error)) (keep []T, idx []int) {
	keep = make([]T, 0, len(items))
	idx = make([]int, 0, len(items))
	for i, it := range items {
		if err := p.Authorize(op, queue(it)); err != nil {
			refuse(i, err)
			continue
		}
		keep = append(keep, it)
		idx = append(idx, i)
	}
	return keep, idx
}

// settle checks each item's queue for op, submits the allowed ones as one
// command, and merges the refusals with the scheduler's results.
func settle[T any](ctx context.Context, n *Node, p Principal, op auth.Op, items []T, ref func(T) LeaseRef,
	cmd func([]T) shard.Command, done func(errs []error, err error)) error {
	errs := make([]error, len(items))
	keep, idx := allowed(p, op, items, func(it T) string { return ref(it).Queue }, func(i int, err error) { errs[i] = err })
	if len(keep) == 0 {
		done(errs, nil)
		return nil
	}
	merge := func(r Result) {
		if r.Err != nil {
			done(nil, r.Err)
			return
		}
		for j, err := range r.Items {
			errs[idx[j]] = err
		}
		done(errs, nil)
	}
	if n.cfg.Cluster == nil {
		return n.sh.Submit(ctx, cmd(keep), merge)
	}
	return byQueue(keep, func(it T) string { return ref(it).Queue },
		func(queue string, part []T, partDone func(Result)) error {
			return n.submit(ctx, queue, cmd(part), partDone)
		},
		func(r Result, j int) Result {
			if r.Err != nil {
				return Result{Items: []error{r.Err}}
			}
			return Result{Items: r.Items[j : j+1]}
		},
		func(parts []Result) Result {
			out := Result{Items: make([]error, 0, len(keep))}
			for _, p := range parts {
				out.Items = append(out.Items, p.Items...)
			}
			return out
		}, merge)
}

// ExtendLease moves lease deadlines. done receives one result per item
// (refused items carry their error), or err for the whole operation.
func (n *Node) ExtendLease(ctx context.Context, p Principal, items []ExtendItem, done func(res []ExtendResult, err error)) error {
	res := make([]ExtendResult, len(items))
	keep, idx := allowed(p, auth.OpExtendLease, items, func(it ExtendItem) string { return it.Queue }, func(i int, err error) { res[i].Err = err })
	if len(keep) == 0 {
		done(res, nil)
		return nil
	}
	merge := func(r Result) {
		if r.Err != nil {
			done(nil, r.Err)
			return
		}
		for j, e := range r.Extended {
			res[idx[j]] = e
		}
		done(res, nil)
	}
	if n.cfg.Cluster == nil {
		return n.sh.Submit(ctx, &shard.Extend{Items: keep}, merge)
	}
	return byQueue(keep, func(it ExtendItem) string { return it.Queue },
		func(queue string, part []ExtendItem, partDone func(Result)) error {
			return n.submit(ctx, queue, &shard.Extend{Items: part}, partDone)
		},
		func(r Result, j int) Result {
			if r.Err != nil {
				return Result{Extended: []ExtendResult{{Err: r.Err}}}
			}
			return Result{Extended: r.Extended[j : j+1]}
		},
		func(parts []Result) Result {
			out := Result{Extended: make([]ExtendResult, 0, len(keep))}
			for _, p := range parts {
				out.Extended = append(out.Extended, p.Extended...)
			}
			return out
		}, merge)
}

// CreateQueue creates a queue and its DLQ for p (create-queue
// permission), after checking that its hooks compile (an error wrapping
// fault.ErrScriptError). With shards above 1 (at most sched.MaxShards),
// in a cluster, it creates a sharded queue: one queue per shard
// (cluster.Node.CreateShardedQueue). The node admits messages to the
// queue once it is created, durably, and with its hooks registered. done
// receives Result.Created or Result.Err. The error wraps
// fault.ErrInvalidArgument for a name holding sched.ShardSep or too many
// shards, or fault.ErrNotSupported for shards on a single node.
func (n *Node) CreateQueue(ctx context.Context, p Principal, spec QueueSpec, shards int, done func(Result)) error {
	if err := p.Authorize(auth.OpCreateQueue, spec.Name); err != nil {
		return err
	}
	if strings.Contains(spec.Name, sched.ShardSep) {
		return fmt.Errorf("create queue %q: %q is reserved for the names of shards: %w", spec.Name, sched.ShardSep, fault.ErrInvalidArgument)
	}
	if shards > sched.MaxShards {
		return fmt.Errorf("create queue %s: %d shards: at most %d: %w", spec.Name, shards, sched.MaxShards, fault.ErrInvalidArgument)
	}
	if shards > 1 && n.cfg.Cluster == nil {
		return fmt.Errorf("create queue %s: %d shards: a sharded queue needs cluster mode (each shard is a Raft group): %w", spec.Name, shards, fault.ErrNotSupported)
	}
	var prog *hook.Program
	if spec.OnEnqueue != "" || spec.OnFailure != "" {
		pr, err := n.cfg.Hooks.Compile(spec.OnEnqueue, spec.OnFailure)
		if err != nil {
			return fmt.Errorf("create queue %s: %w", spec.Name, err)
		}
		prog = pr
	}
	if c := n.cfg.Cluster; c != nil {
		// Every node registers the queue's hooks as it applies the
		// creation (QueueCreated).
		go func() {
			var created sched.QueueCreated
			var err error
			if shards > 1 {
				created, err = c.CreateShardedQueue(context.WithoutCancel(ctx), spec, shards)
			} else {
				created, err = c.CreateQueue(context.WithoutCancel(ctx), spec)
			}
			done(Result{Created: created, Err: err})
		}()
		return nil
	}
	return n.sh.Submit(ctx, &shard.CreateQueue{Spec: spec}, func(r Result) {
		if r.Err == nil {
			n.cfg.Hooks.Add(r.Created.Name, prog)
			n.cfg.Hooks.Add(r.Created.DLQ, nil)
		}
		done(r)
	})
}

// DeleteQueue deletes a queue, its DLQ and their messages, for p
// (delete-queue permission), and drops its hooks. done receives
// Result.Err.
func (n *Node) DeleteQueue(ctx context.Context, p Principal, name string, done func(Result)) error {
	if err := p.Authorize(auth.OpDeleteQueue, name); err != nil {
		return err
	}
	if c := n.cfg.Cluster; c != nil {
		go func() { done(Result{Err: c.DeleteQueue(context.WithoutCancel(ctx), name)}) }()
		return nil
	}
	return n.sh.Submit(ctx, &shard.DeleteQueue{Name: name}, func(r Result) {
		if r.Err == nil {
			n.cfg.Hooks.Remove(name)
			n.cfg.Hooks.Remove(name + sched.DLQSuffix)
		}
		done(r)
	})
}

// ListQueues lists the queues p may see. done receives Result.Queues.
func (n *Node) ListQueues(ctx context.Context, p Principal, done func(Result)) error {
	list := n.sh.ListQueues
	if c := n.cfg.Cluster; c != nil {
		list = func(ctx context.Context, done func(Result)) error {
			return listAll(ctx, c.Shards(), func(r Result) {
				r.Queues = mergeShards(r.Queues, c.ShardCount)
				done(r)
			})
		}
	}
	return list(ctx, func(r Result) {
		if r.Err == nil {
			visible := r.Queues[:0]
			for _, q := range r.Queues {
				if p.Visible(q.Name) {
					visible = append(visible, q)
				}
			}
			r.Queues = visible
		}
		done(r)
	})
}

// QueueStats reads a queue's statistics for p (stats permission). done
// receives Result.Stats or Result.Err.
func (n *Node) QueueStats(ctx context.Context, p Principal, name string, top int, done func(Result)) error {
	if err := p.Authorize(auth.OpQueueStats, name); err != nil {
		return err
	}
	sh, err := n.localShard(name)
	if err != nil {
		return err
	}
	return sh.QueueStats(ctx, name, top, done)
}

// AllQueueStats returns the statistics of every queue and DLQ this node
// serves, by name, each with its top most pending fairness keys (0:
// sched.MaxStatsKeys): on a single node all of them, in a cluster those
// of the groups it leads. It is the metrics scrape's read, and checks
// no permission: the caller (the HTTP listener) does. The error is ctx's,
// or wraps fault.ErrUnavailable if a shard stopped.
func (n *Node) AllQueueStats(ctx context.Context, top int) ([]sched.QueueStats, error) {
	shards := []*shard.Shard{n.sh}
	if c := n.cfg.Cluster; c != nil {
		shards = c.LeaderShards()
	}
	var out []sched.QueueStats
	for _, sh := range shards {
		ch := make(chan shard.Result, 1)
		if err := sh.AllQueueStats(ctx, top, func(r shard.Result) { ch <- r }); err != nil {
			if n.cfg.Cluster != nil && errors.Is(err, fault.ErrUnavailable) {
				continue // a group closed since it was listed
			}
			return nil, err
		}
		select {
		case r := <-ch:
			if r.Err != nil {
				return nil, r.Err
			}
			out = append(out, r.AllStats...)
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	slices.SortFunc(out, func(a, b sched.QueueStats) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// Explain says why message id of queue is not delivered yet, for p (the
// permission of QueueStats: admin on the queue). done receives Result.Explained or
// Result.Err (wrapping fault.ErrQueueNotFound or
// fault.ErrMessageNotFound). In a cluster any replica answers: they hold
// the same state.
func (n *Node) Explain(ctx context.Context, p Principal, queue string, id [16]byte, done func(Result)) error {
	if err := p.Authorize(auth.OpQueueStats, queue); err != nil {
		return err
	}
	sh, err := n.localShard(queue)
	if err != nil {
		return err
	}
	return sh.Explain(ctx, queue, id, done)
}

// localShard returns the shard holding queue on this node, leader or
// not: reads of its state may be served by a follower.
func (n *Node) localShard(queue string) (*shard.Shard, error) {
	if c := n.cfg.Cluster; c != nil {
		return c.Local(queue)
	}
	return n.sh, nil
}

// Redrive moves up to count messages (0: all) of a DLQ back to its
// parent, for p (redrive permission). done receives Result.Redriven or
// Result.Err.
func (n *Node) Redrive(ctx context.Context, p Principal, dlq string, count uint64, done func(Result)) error {
	return n.RedriveWith(ctx, p, dlq, RedriveSpec{N: count}, false, done)
}

// LeaderInfo names the node that leads a queue.
type LeaderInfo struct {
	// NodeID is the leader's node ID ("" while no leader is known);
	// Addr its client address, host:port ("" on a single node: this
	// one); Term the Raft term it leads in (0 on a single node).
	NodeID string
	Addr   string
	Term   uint64
}

// Leader reports, for p (topology permission), the node that leads
// queue: on a single node this one, once the queue exists; in a cluster
// the leader of the queue's group. done receives it, or an error wrapping
// fault.ErrQueueNotFound.
func (n *Node) Leader(ctx context.Context, p Principal, queue string, done func(LeaderInfo, error)) error {
	if err := p.Authorize(auth.OpTopology, queue); err != nil {
		return err
	}
	if c := n.cfg.Cluster; c != nil {
		id, addr, term, err := c.Leader(queue)
		if err != nil {
			return err
		}
		l := LeaderInfo{Addr: addr, Term: term}
		if id != 0 {
			l.NodeID = strconv.FormatUint(id, 10)
		}
		done(l, nil)
		return nil
	}
	return n.sh.QueueStats(ctx, queue, 1, func(r Result) { done(LeaderInfo{NodeID: n.cfg.NodeID}, r.Err) })
}

// ShardLeader is one shard of a queue and the node that leads it.
type ShardLeader struct {
	// Queue is the name to address the shard by: base~i for a sharded
	// queue's shard i, the queue's own name otherwise.
	Queue string
	LeaderInfo
}

// Topology reports, for p (topology permission), the shards of queue
// and the node leading each: for a sharded queue (or its DLQ) one per
// shard in shard order, with the queue's tenant separator (the shard
// hash uses it); otherwise the queue itself, as Leader reports it. done
// receives them, or an error wrapping fault.ErrQueueNotFound.
func (n *Node) Topology(ctx context.Context, p Principal, queue string, done func(shards []ShardLeader, tenantSep string, err error)) error {
	c := n.cfg.Cluster
	if c == nil {
		return n.Leader(ctx, p, queue, func(l LeaderInfo, err error) {
			done([]ShardLeader{{Queue: queue, LeaderInfo: l}}, "", err)
		})
	}
	if err := p.Authorize(auth.OpTopology, queue); err != nil {
		return err
	}
	shards, sep, err := c.Topology(queue)
	if err != nil {
		return err
	}
	out := make([]ShardLeader, len(shards))
	for i, sh := range shards {
		out[i] = ShardLeader{Queue: sh.Queue, LeaderInfo: LeaderInfo{Addr: sh.Addr, Term: sh.Term}}
		if sh.Leader != 0 {
			out[i].NodeID = strconv.FormatUint(sh.Leader, 10)
		}
	}
	done(out, sep, nil)
	return nil
}

// ClusterStatus returns, for p (admin on "*"), this node's view of the
// cluster: its members, and the Raft groups it holds a replica of, as
// its driver sees them now (see cluster.Status). ok is false in
// single-node mode, where there is no cluster to show. The error wraps
// fault.ErrForbidden without the permission, or is the cluster node's
// (wrapping cluster.ErrStopped, so fault.ErrUnavailable) once it has
// stopped.
func (n *Node) ClusterStatus(p Principal) (st ClusterStatus, ok bool, err error) {
	if err := p.Authorize(auth.OpClusterStatus, auth.Everything); err != nil {
		return ClusterStatus{}, false, err
	}
	c := n.cfg.Cluster
	if c == nil {
		return ClusterStatus{}, false, nil
	}
	if st, err = c.Status(); err != nil {
		return ClusterStatus{}, false, err
	}
	return st, true, nil
}

// MoveQueue moves queue's replicas (with its dead-letter queue's, which
// share its Raft group) to the nodes replicas, by Raft node ID
// (cluster.node_id), for p (admin on "*"). It returns once the plan is
// recorded in the meta group and applied on this node; the move then
// runs in the background (see cluster.Node.MoveQueue), and
// ClusterStatus shows it as the group's Target. It blocks until then, so
// a caller that must not block runs it on a goroutine of its own; ctx
// bounds the wait. The error wraps fault.ErrForbidden without the
// permission, fault.ErrNotSupported in single-node mode, or is the
// cluster node's: wrapping fault.ErrQueueNotFound (no such queue),
// fault.ErrInvalidArgument (an empty list, a duplicate, a node that is
// not a member) or fault.ErrUnavailable (no meta leader took the plan in
// time, or the node has stopped).
func (n *Node) MoveQueue(ctx context.Context, p Principal, queue string, replicas []uint64) error {
	if err := p.Authorize(auth.OpMoveQueue, auth.Everything); err != nil {
		return err
	}
	c := n.cfg.Cluster
	if c == nil {
		return fmt.Errorf("move queue %s: a single node has no replicas to move: %w", queue, fault.ErrNotSupported)
	}
	return c.MoveQueue(ctx, queue, replicas)
}

// DrainNode drains the cluster member id, by Raft node ID
// (cluster.node_id), for p (admin on "*"): it marks it draining in the
// meta group and plans a move of every queue it holds a replica of off
// it, and returns the number of queues whose move it planned; with undo,
// id is no longer draining (the moves already planned go on) and the
// number is 0. It returns once the drain is recorded in the meta group
// and applied on this node; the moves then run in the background (see
// cluster.Node.DrainNode), and ClusterStatus shows the node's State. It
// blocks until then, so a caller that must not block runs it on a
// goroutine of its own; ctx bounds the wait. The error wraps
// fault.ErrForbidden without the permission, fault.ErrNotSupported in
// single-node mode, or is the cluster node's: wrapping
// fault.ErrInvalidArgument (a node that is not a member, or no other
// member left that is not draining) or fault.ErrUnavailable (no meta
// leader took the drain in time, or the node has stopped).
func (n *Node) DrainNode(ctx context.Context, p Principal, id uint64, undo bool) (int, error) {
	if err := p.Authorize(auth.OpDrainNode, auth.Everything); err != nil {
		return 0, err
	}
	c := n.cfg.Cluster
	if c == nil {
		return 0, fmt.Errorf("drain node %d: a single node has no other node to move its queues to: %w", id, fault.ErrNotSupported)
	}
	return c.DrainNode(ctx, id, undo)
}

// RebalancePlan is a rebalance's plan (cluster.RebalancePlan), and
// PlannedMove one replica move of it (cluster.PlannedMove).
type (
	RebalancePlan = cluster.RebalancePlan
	PlannedMove   = cluster.PlannedMove
)

// Rebalance evens out the queues' replicas and leaders over the cluster's
// members, for p (admin on "*"): with dryRun it returns the plan and
// changes nothing; otherwise it records the plan in the meta group and
// returns it once this node has applied it, the moves then starting in
// the background, at most one per node at a time (see
// cluster.Node.Rebalance). It blocks until then, so a caller that must
// not block runs it on a goroutine of its own; ctx bounds the wait. The
// error wraps fault.ErrForbidden without the permission,
// fault.ErrNotSupported in single-node mode, or is the cluster node's
// (wrapping fault.ErrUnavailable: no meta leader took the plan in time,
// or the node has stopped).
func (n *Node) Rebalance(ctx context.Context, p Principal, dryRun bool) (RebalancePlan, error) {
	if err := p.Authorize(auth.OpRebalance, auth.Everything); err != nil {
		return RebalancePlan{}, err
	}
	c := n.cfg.Cluster
	if c == nil {
		return RebalancePlan{}, fmt.Errorf("rebalance: a single node has nothing to even out: %w", fault.ErrNotSupported)
	}
	return c.Rebalance(ctx, dryRun)
}

// AddNode adds node id, whose peer transport listens at peerAddr, to the
// cluster, for p (admin on "*"), and returns once this node has applied
// the addition (see cluster.Node.AddNode); it blocks until then. The
// error wraps fault.ErrForbidden without the permission,
// fault.ErrNotSupported in single-node mode, or is the cluster node's:
// wrapping fault.ErrInvalidArgument (ID 0, a member already, a removed
// node, an address that is not host:port) or fault.ErrUnavailable.
func (n *Node) AddNode(ctx context.Context, p Principal, id uint64, peerAddr string) error {
	if err := p.Authorize(auth.OpAddNode, auth.Everything); err != nil {
		return err
	}
	c := n.cfg.Cluster
	if c == nil {
		return fmt.Errorf("add node %d: a single node takes no members: %w", id, fault.ErrNotSupported)
	}
	return c.AddNode(ctx, id, peerAddr)
}

// RemoveNode removes node id from the cluster for good, for p (admin on
// "*"), and returns once this node has applied the removal (see
// cluster.Node.RemoveNode); it blocks until then. The error wraps
// fault.ErrForbidden without the permission, fault.ErrNotSupported in
// single-node mode, or is the cluster node's: wrapping
// fault.ErrInvalidArgument (not a member, the last member, a node that
// still holds replicas) or fault.ErrUnavailable.
func (n *Node) RemoveNode(ctx context.Context, p Principal, id uint64) error {
	if err := p.Authorize(auth.OpRemoveNode, auth.Everything); err != nil {
		return err
	}
	c := n.cfg.Cluster
	if c == nil {
		return fmt.Errorf("remove node %d: a single node has no members to remove: %w", id, fault.ErrNotSupported)
	}
	return c.RemoveNode(ctx, id)
}

// HookStats returns the counters of queue's hooks, and false when it has
// none.
func (n *Node) HookStats(queue string) (HookStats, bool) {
	r := n.cfg.Hooks.Runner(queue)
	if r == nil {
		return HookStats{}, false
	}
	return r.Stats(), true
}

// ReadMessage reads a delivered message's headers and payload from its
// stored record (Delivered.Key), in one step. It fails with an error
// wrapping fault.ErrMessageNotFound once the message is gone (acked or
// deleted meanwhile), or ErrBody for a record that does not decode.
func (n *Node) ReadMessage(d *Delivered) ([]wire.MessageHeader, []byte, error) {
	sh, err := n.localShard(d.Queue)
	if err != nil {
		return nil, nil, err
	}
	rec, err := sh.ReadRecord(d.Key)
	if err != nil {
		return nil, nil, err
	}
	return decodeRecord(rec)
}

// ReadMessages reads the headers and payloads of delivered messages, as
// ReadMessage does each, with fewer reads of the storage: the records of
// a batch of messages enqueued one after another are read at once. It
// calls fn(i, headers, payload, err) exactly once for each ds[i], in no
// particular order, with the errors ReadMessage returns. payload is
// valid only during the call; headers are fn's to keep.
func (n *Node) ReadMessages(ds []Delivered, fn func(i int, headers []wire.MessageHeader, payload []byte, err error)) {
	var keys [][]byte
	var seen []bool
	for lo := 0; lo < len(ds); {
		// A run of messages of one queue, read from its shard at once.
		hi := lo + 1
		for hi < len(ds) && ds[hi].Queue == ds[lo].Queue {
			hi++
		}
		run := ds[lo:hi]
		sh, err := n.localShard(run[0].Queue)
		if err != nil {
			for i := lo; i < hi; i++ {
				fn(i, nil, nil, err)
			}
			lo = hi
			continue
		}
		keys = keys[:0]
		for i := range run {
			keys = append(keys, run[i].Key)
		}
		seen = append(seen[:0], make([]bool, len(run))...)
		base := lo
		err = sh.ReadRecords(keys, func(i int, rec []byte) error {
			seen[i] = true
			h, p, err := decodeRecord(rec)
			fn(base+i, h, p, err)
			return nil
		})
		for i, ok := range seen {
			switch {
			case ok:
			case err != nil:
				fn(base+i, nil, nil, err)
			default:
				fn(base+i, nil, nil, fmt.Errorf("stored record: %w", fault.ErrMessageNotFound))
			}
		}
		lo = hi
	}
}
