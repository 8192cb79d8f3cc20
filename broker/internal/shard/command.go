package shard

import (
	"fmt"
	"slices"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched"
)

// A Command is one change to a shard's state. The set is closed: the
// types in this file, each with a stable binary encoding (AppendCommand,
// DecodeCommand). A command is data, so it can be logged, replicated and
// replayed. Commands carry everything their application depends on: the
// time enters in Tick, message IDs in Enqueue, the lease tokens' origin in
// LeaseEpoch. Applying the same commands, in the same order, to two fresh
// shards gives the same state and the same effects.
//
// Reads (ListQueues, QueueStats) change nothing and are not commands.
type Command interface {
	// Kind returns the command's type tag, the first byte of its
	// encoding.
	Kind() Kind
}

// Kind is a Command's type tag. The values are part of the encoding: never
// renumber one, only add.
type Kind uint8

// The command kinds.
const (
	KindTick           Kind = 1
	KindLeaseEpoch     Kind = 2
	KindCreateQueue    Kind = 3
	KindDeleteQueue    Kind = 4
	KindEnqueue        Kind = 5
	KindSubscribe      Kind = 6
	KindUnsubscribe    Kind = 7
	KindAddCredit      Kind = 8
	KindAck            Kind = 9
	KindNack           Kind = 10
	KindRetryAfter     Kind = 11
	KindExtend         Kind = 12
	KindRelease        Kind = 13
	KindRedrive        Kind = 14
	KindDecide         Kind = 15
	KindSetThrottle    Kind = 16
	KindRemoveThrottle Kind = 17
	KindDeliver        Kind = 18
	// KindEnqueueSeq tags an Enqueue whose items carry idempotent
	// producers' IDs and sequences; one without any keeps KindEnqueue
	// and its encoding from before producers.
	KindEnqueueSeq Kind = 19

	// The message lifecycle: purge, a throttled redrive's cancellation.
	KindPurgeQueue    Kind = 20
	KindCancelRedrive Kind = 21
	// KindSubscribeLease tags a Subscribe with its own lease length, and
	// KindRedriveWith a Redrive with a rate or a fairness key; those
	// without keep KindSubscribe and KindRedrive and their encodings
	// from before.
	KindSubscribeLease Kind = 22
	KindRedriveWith    Kind = 23
	// KindEnqueueLife tags an Enqueue whose items carry a TTL or a
	// priority: each item ends with the producer fields of
	// KindEnqueueSeq, then its TTL and its priority. KindCreateQueueTTL
	// tags a CreateQueue with a message TTL or an expired action, whose
	// optional fields are then all written. Those without keep their
	// older kinds and encodings.
	KindEnqueueLife    Kind = 24
	KindCreateQueueTTL Kind = 25
)

var kindNames = [...]string{
	KindTick: "Tick", KindLeaseEpoch: "LeaseEpoch", KindCreateQueue: "CreateQueue",
	KindDeleteQueue: "DeleteQueue", KindEnqueue: "Enqueue", KindSubscribe: "Subscribe",
	KindUnsubscribe: "Unsubscribe", KindAddCredit: "AddCredit", KindAck: "Ack", KindNack: "Nack",
	KindRetryAfter: "RetryAfter", KindExtend: "Extend", KindRelease: "Release", KindRedrive: "Redrive",
	KindDecide: "Decide", KindSetThrottle: "SetThrottle", KindRemoveThrottle: "RemoveThrottle",
	KindDeliver: "Deliver", KindEnqueueSeq: "EnqueueSeq",
	KindPurgeQueue: "PurgeQueue", KindCancelRedrive: "CancelRedrive",
	KindSubscribeLease: "SubscribeLease", KindRedriveWith: "RedriveWith",
	KindEnqueueLife: "EnqueueLife", KindCreateQueueTTL: "CreateQueueTTL",
}

// String returns the kind's name, e.g. "Enqueue".
func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", uint8(k))
}

// Tick advances the scheduler's clock to Now (Unix nanoseconds; an earlier
// time is ignored) and fires what is due: delays, backoffs, lease
// deadlines, token refills, idempotency-key expiry.
type Tick struct{ Now sched.Time }

// LeaseEpoch starts a new run of lease tokens: the next delivery's token
// is above Base (and above every token handed out before). The shard
// proposes one when it starts, with Base from the boot time, so that a
// token never repeats across restarts; a replicated queue's new leader
// will propose one per term.
type LeaseEpoch struct{ Base uint64 }

// CreateQueue creates a queue and its dead-letter queue. Result: Created,
// or Err wrapping fault.ErrQueueExists or fault.ErrInvalidArgument.
type CreateQueue struct{ Spec sched.QueueSpec }

// DeleteQueue deletes a queue, its DLQ and their messages. Result: Err nil,
// or wrapping fault.ErrQueueNotFound or fault.ErrInvalidArgument (a DLQ).
type DeleteQueue struct{ Name string }

// Enqueue enqueues a batch. Every item's Msg.ID is set (the shard's
// Enqueue sets them before proposing). Result: Enqueued, one result per
// item.
type Enqueue struct{ Items []sched.EnqueueItem }

// Subscribe opens subscription Sub on Queue with Credit deliveries of
// initial credit (math.MaxUint32: sched.Config.MaxUnsettled) and the
// consumer's rate limits. Result: Subscribed, or Err wrapping
// fault.ErrQueueNotFound or fault.ErrInvalidArgument.
type Subscribe struct {
	Sub    sched.SubID
	Queue  string
	Credit uint32
	Limits []sched.RateLimit
	// Lease is the subscription's lease length; 0 means the queue's
	// visibility timeout (sched.Sched.SubscribeLease).
	Lease time.Duration
}

// Unsubscribe closes subscription Sub. With Release its leased messages
// return to their queue at once (the consumer disconnected); without, they
// keep their leases. Result: Err nil or wrapping
// fault.ErrSubscriptionNotFound.
type Unsubscribe struct {
	Sub     sched.SubID
	Release bool
}

// AddCredit grants subscription Sub N more deliveries, never more than
// sched.Config.MaxUnsettled leases held. No result.
type AddCredit struct {
	Sub sched.SubID
	N   uint32
}

// Ack deletes acknowledged deliveries. Result: Items, one error (or nil)
// per item.
type Ack struct{ Items []sched.LeaseRef }

// Nack fails deliveries with a reason. Result: Items.
type Nack struct{ Items []sched.NackItem }

// RetryAfter fails deliveries and redelivers each after its delay. Result:
// Items.
type RetryAfter struct{ Items []sched.RetryItem }

// Extend moves lease deadlines. Result: Extended, one per item.
type Extend struct{ Items []sched.ExtendItem }

// Release gives deliveries back unsettled, their attempt not counted.
// Result: Items.
type Release struct{ Items []sched.LeaseRef }

// Redrive moves up to N messages (0: all) from a dead-letter queue back to
// its parent, all at once, or with Rate (messages per second) in the
// background; only FairnessKey's unless it is empty
// (sched.Sched.RedriveWith). Result: Redriven, or Err wrapping
// fault.ErrQueueNotFound, fault.ErrNotADLQ or fault.ErrInvalidArgument.
type Redrive struct {
	DLQ         string
	N           uint64
	Rate        uint32
	FairnessKey string
}

// CancelRedrive stops a dead-letter queue's throttled redrive. Result:
// Redriven (what it moved and left), or Err wrapping
// fault.ErrQueueNotFound or fault.ErrNotADLQ.
type CancelRedrive struct{ DLQ string }

// PurgeQueue removes a queue's (or DLQ's) ready and delayed messages,
// and with IncludeLeased its leased ones (sched.Sched.PurgeQueue).
// Result: Purged, or Err wrapping fault.ErrQueueNotFound.
type PurgeQueue struct {
	Name          string
	IncludeLeased bool
}

// Decide applies an on_failure verdict to a failed message waiting for
// one. No result.
type Decide struct {
	Queue    string
	ID       [16]byte
	Decision sched.Decision
}

// SetThrottle sets the token bucket of throttle key Key to Rate tokens a
// second and Burst tokens (runtime config throttle.<key>). No result.
type SetThrottle struct {
	Key         string
	Rate, Burst float64
}

// RemoveThrottle makes throttle key Key unlimited. No result.
type RemoveThrottle struct{ Key string }

// Deliver decides deliveries now (the scheduler leases messages to the
// subscriptions with credit, by DRR across fairness keys and within token
// buckets) and cuts the effects of the commands since the last Deliver
// into one storage group. Deliveries are decided only here, so where a
// Deliver falls in the command sequence is part of what that sequence
// means. The shard proposes one after each batch of commands it takes
// from its channel. No result.
type Deliver struct{}

// Kind returns KindTick.
func (*Tick) Kind() Kind { return KindTick }

// Kind returns KindLeaseEpoch.
func (*LeaseEpoch) Kind() Kind { return KindLeaseEpoch }

// Kind returns KindCreateQueueTTL if the queue has a message TTL or an
// expired action, else KindCreateQueue.
func (c *CreateQueue) Kind() Kind {
	if c.Spec.MessageTTL != 0 || c.Spec.ExpiredAction != "" {
		return KindCreateQueueTTL
	}
	return KindCreateQueue
}

// Kind returns KindDeleteQueue.
func (*DeleteQueue) Kind() Kind { return KindDeleteQueue }

// Kind returns KindEnqueueLife if an item has a TTL or a priority, else
// KindEnqueueSeq if an item has a producer ID, else KindEnqueue.
func (c *Enqueue) Kind() Kind {
	k := KindEnqueue
	for i := range c.Items {
		m := &c.Items[i].Msg
		if m.TTL != 0 || m.Priority != 0 {
			return KindEnqueueLife
		}
		if m.ProducerID != ([16]byte{}) {
			k = KindEnqueueSeq
		}
	}
	return k
}

// Kind returns KindSubscribeLease if the subscription has its own lease
// length, else KindSubscribe.
func (c *Subscribe) Kind() Kind {
	if c.Lease != 0 {
		return KindSubscribeLease
	}
	return KindSubscribe
}

// Kind returns KindUnsubscribe.
func (*Unsubscribe) Kind() Kind { return KindUnsubscribe }

// Kind returns KindAddCredit.
func (*AddCredit) Kind() Kind { return KindAddCredit }

// Kind returns KindAck.
func (*Ack) Kind() Kind { return KindAck }

// Kind returns KindNack.
func (*Nack) Kind() Kind { return KindNack }

// Kind returns KindRetryAfter.
func (*RetryAfter) Kind() Kind { return KindRetryAfter }

// Kind returns KindExtend.
func (*Extend) Kind() Kind { return KindExtend }

// Kind returns KindRelease.
func (*Release) Kind() Kind { return KindRelease }

// Kind returns KindRedriveWith if the redrive has a rate or a fairness
// key, else KindRedrive.
func (c *Redrive) Kind() Kind {
	if c.Rate != 0 || c.FairnessKey != "" {
		return KindRedriveWith
	}
	return KindRedrive
}

// Kind returns KindCancelRedrive.
func (*CancelRedrive) Kind() Kind { return KindCancelRedrive }

// Kind returns KindPurgeQueue.
func (*PurgeQueue) Kind() Kind { return KindPurgeQueue }

// Kind returns KindDecide.
func (*Decide) Kind() Kind { return KindDecide }

// Kind returns KindSetThrottle.
func (*SetThrottle) Kind() Kind { return KindSetThrottle }

// Kind returns KindRemoveThrottle.
func (*RemoveThrottle) Kind() Kind { return KindRemoveThrottle }

// Kind returns KindDeliver.
func (*Deliver) Kind() Kind { return KindDeliver }

// Result is a command's or a read's outcome. Err is set when the whole
// operation failed; otherwise the field named in the command's doc holds
// the outcome. A Result is the receiver's to keep.
type Result struct {
	Err        error
	Enqueued   []sched.EnqueueResult // Enqueue: one per item
	Items      []error               // Ack, Nack, RetryAfter, Release: one per item, nil for success
	Extended   []sched.ExtendResult  // Extend: one per item
	Subscribed sched.Subscribed      // Subscribe
	Created    sched.QueueCreated    // CreateQueue
	Redriven   sched.Redriven        // Redrive, CancelRedrive
	Purged     sched.Purged          // PurgeQueue
	Peeked     sched.PeekPage        // Peek
	Queues     []sched.QueueSummary  // ListQueues
	Stats      sched.QueueStats      // QueueStats
	AllStats   []sched.QueueStats    // AllQueueStats
	Explained  sched.Explanation     // Explain
}

// resultOf turns a scheduler reply into a Result, copying it out of the
// Ready's buffers, which the scheduler reuses after the next Ready.
func resultOf(v any) Result {
	switch v := v.(type) {
	case nil:
		return Result{}
	case error:
		return Result{Err: v}
	case []sched.EnqueueResult:
		return Result{Enqueued: slices.Clone(v)}
	case []error:
		return Result{Items: slices.Clone(v)}
	case []sched.ExtendResult:
		return Result{Extended: slices.Clone(v)}
	case sched.Subscribed:
		return Result{Subscribed: v}
	case sched.QueueCreated:
		return Result{Created: v}
	case sched.Redriven:
		return Result{Redriven: v}
	case sched.Purged:
		return Result{Purged: v}
	case sched.PeekPage:
		return Result{Peeked: v} // built for this reply
	case []sched.QueueSummary:
		return Result{Queues: slices.Clone(v)}
	case sched.Explanation:
		return Result{Explained: v}
	case []sched.QueueStats:
		return Result{AllStats: v} // built for this reply
	case sched.QueueStats:
		v.FairnessKeys = slices.Clone(v.FairnessKeys)
		v.ThrottleKeys = slices.Clone(v.ThrottleKeys)
		return Result{Stats: v}
	}
	panic(fmt.Sprintf("shard: scheduler reply of unknown type %T", v))
}

// apply applies one command to the scheduler: the one place where
// commands change state. It reads no clock and generates nothing; ref
// receives the command's result in a later Ready (0: none wanted).
func apply(s *sched.Sched, ref sched.Ref, c Command) {
	switch c := c.(type) {
	case *Tick:
		s.Tick(c.Now)
	case *LeaseEpoch:
		s.StartLeaseEpoch(c.Base)
	case *CreateQueue:
		s.CreateQueue(ref, c.Spec)
	case *DeleteQueue:
		s.DeleteQueue(ref, c.Name)
	case *Enqueue:
		s.Enqueue(ref, c.Items)
	case *Subscribe:
		s.SubscribeLease(ref, c.Sub, c.Queue, c.Credit, c.Limits, c.Lease)
	case *Unsubscribe:
		s.Unsubscribe(ref, c.Sub, c.Release)
	case *AddCredit:
		s.AddCredit(c.Sub, c.N)
	case *Ack:
		s.Ack(ref, c.Items)
	case *Nack:
		s.Nack(ref, c.Items)
	case *RetryAfter:
		s.RetryAfter(ref, c.Items)
	case *Extend:
		s.ExtendLease(ref, c.Items)
	case *Release:
		s.Release(ref, c.Items)
	case *Redrive:
		s.RedriveWith(ref, c.DLQ, sched.RedriveSpec{N: c.N, Rate: c.Rate, FairnessKey: c.FairnessKey})
	case *CancelRedrive:
		s.CancelRedrive(ref, c.DLQ)
	case *PurgeQueue:
		s.PurgeQueue(ref, c.Name, c.IncludeLeased)
	case *Decide:
		s.Decide(c.Queue, c.ID, c.Decision)
	case *SetThrottle:
		s.SetThrottle(c.Key, c.Rate, c.Burst)
	case *RemoveThrottle:
		s.RemoveThrottle(c.Key)
	case *Deliver:
		// The shell cuts the Ready (Shard.flush), which decides the
		// deliveries.
	default:
		panic(fmt.Sprintf("shard: command of unknown type %T", c))
	}
}
