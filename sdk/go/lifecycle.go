package fila

import (
	"context"
	"errors"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// PurgeOption configures PurgeQueue.
type PurgeOption func(*wire.PurgeQueue)

// IncludeLeased makes PurgeQueue remove leased messages too; their
// consumers' acks then fail with MESSAGE_NOT_FOUND.
func IncludeLeased() PurgeOption { return func(f *wire.PurgeQueue) { f.IncludeLeased = true } }

// PurgeQueue removes every ready and delayed message of a queue or a
// dead-letter queue (delayed includes messages backing off after a
// failure), leaving leased messages to finish unless IncludeLeased is
// given, and returns how many it removed. The broker deletes them by key
// range, a few storage records whatever the queue holds. Idempotency
// keys are kept. It needs the admin permission on the queue and returns
// *PurgeQueueError (QUEUE_NOT_FOUND) or *StatusError. A sharded queue
// is purged shard by shard, the counts summed.
func (a *Administrator) PurgeQueue(ctx context.Context, name string, opts ...PurgeOption) (uint64, error) {
	f := &wire.PurgeQueue{Name: name}
	for _, o := range opts {
		o(f)
	}
	resp, err := a.c.request(ctx, f, name)
	if errors.Is(err, ErrQueueSharded) {
		shards, terr := a.Topology(ctx, name)
		if terr != nil {
			return 0, terr
		}
		var n uint64
		for _, s := range shards {
			m, err := a.PurgeQueue(ctx, s.Queue, opts...)
			n += m
			if err != nil {
				return n, err
			}
		}
		return n, nil
	}
	if err != nil {
		return 0, err
	}
	return resp.(*wire.PurgeQueueResult).Purged, nil
}

// PeekOption configures Peek.
type PeekOption func(*wire.Peek)

// PeekCount lists at most n messages (1 to 1000; 0 means 1000).
func PeekCount(n uint32) PeekOption { return func(f *wire.Peek) { f.Count = n } }

// PeekAfter lists the messages after id: the previous page's Next.
func PeekAfter(id ID) PeekOption { return func(f *wire.Peek) { f.After = id } }

// PeekKey lists only the messages of fairness key key.
func PeekKey(key string) PeekOption { return func(f *wire.Peek) { f.FairnessKey = key } }

// PeekedMessage is one message listed by Peek.
type PeekedMessage struct {
	ID          ID
	FairnessKey string
	// State is "ready" (including waiting for a throttle token or
	// behind its ordering key), "delayed", "deciding" (waiting for the
	// on_failure hook) or "leased".
	State    string
	Attempts uint32 // failed attempts so far
	Enqueued time.Time
	// Due is when a delayed message becomes ready, or a leased one's
	// lease ends; zero otherwise.
	Due time.Time
	// Headers are the message's headers, followed in a dead-letter
	// queue by fila-attempts and fila-error (its last failure's reason).
	Headers map[string]string
	// Size is the payload's full length in bytes; Preview its first 256
	// bytes at most.
	Size    uint32
	Preview []byte
}

// PeekPage is a page of Peek.
type PeekPage struct {
	Messages []PeekedMessage // by increasing ID (enqueue order)
	// Next is the PeekAfter of the next page; zero when this page is the
	// last.
	Next ID
}

// Peek lists messages of a queue or dead-letter queue without leasing
// them, by ID (enqueue order), a page at a time: pass the page's Next to
// PeekAfter for the next one. A page holds at most PeekCount messages
// (default and most 1000), fewer when the answer would pass 4 MiB. It
// changes nothing and needs the admin permission on the queue, as
// QueueStats does. It returns *PeekError (QUEUE_NOT_FOUND;
// QUEUE_SHARDED for a sharded queue: peek its shards, named by
// Topology) or *StatusError.
func (a *Administrator) Peek(ctx context.Context, queue string, opts ...PeekOption) (*PeekPage, error) {
	f := &wire.Peek{Queue: queue}
	for _, o := range opts {
		o(f)
	}
	resp, err := a.c.request(ctx, f, queue)
	if err != nil {
		return nil, err
	}
	r := resp.(*wire.PeekResult)
	page := &PeekPage{Next: r.NextAfter, Messages: make([]PeekedMessage, len(r.Messages))}
	for i, m := range r.Messages {
		p := PeekedMessage{ID: m.ID, FairnessKey: m.FairnessKey, State: m.State, Attempts: m.Attempts,
			Enqueued: time.UnixMilli(int64(m.EnqueuedAtMS)), Size: m.PayloadSize, Preview: m.Preview}
		if m.DueAtMS > 0 {
			p.Due = time.UnixMilli(int64(m.DueAtMS))
		}
		if len(m.Headers) > 0 {
			p.Headers = make(map[string]string, len(m.Headers))
			for _, h := range m.Headers {
				p.Headers[h.Key] = h.Value
			}
		}
		page.Messages[i] = p
	}
	return page, nil
}

// RedriveOption configures RedriveWith.
type RedriveOption func(*wire.Redrive)

// RedriveCount moves at most n messages (0: all).
func RedriveCount(n uint64) RedriveOption { return func(f *wire.Redrive) { f.Count = n } }

// RedriveRate makes the redrive a throttled one, moving perSecond
// messages a second in the background (at most 1,000,000).
func RedriveRate(perSecond uint32) RedriveOption {
	return func(f *wire.Redrive) { f.Rate = perSecond }
}

// RedriveKey moves only the dead letters of fairness key key.
func RedriveKey(key string) RedriveOption { return func(f *wire.Redrive) { f.FairnessKey = key } }

// RedriveStatus is the outcome of RedriveWith or CancelRedrive.
type RedriveStatus struct {
	// Moved counts the messages moved back to the queue.
	Moved uint64
	// Pending is, for a throttled redrive, the messages it has still to
	// move (for CancelRedrive, those it left in the DLQ).
	Pending uint64
}

// RedriveWith moves messages from a dead-letter queue back to its queue,
// oldest first, each keeping its fairness key, with attempts reset: so
// that a large redrive is shared fairly with live traffic by the queue's
// fair scheduling. With RedriveRate it runs in the background at that
// rate, shows in QueueStats.Redrive and can be stopped with
// CancelRedrive; a broker restart stops it too. It returns
// *RedriveError (QUEUE_NOT_FOUND, NOT_A_DLQ) or *StatusError
// (INVALID_ARGUMENT for a rate too high). A sharded queue's DLQ must be
// named by shard (Topology).
func (a *Administrator) RedriveWith(ctx context.Context, dlq string, opts ...RedriveOption) (*RedriveStatus, error) {
	f := &wire.Redrive{DeadLetterQueue: dlq}
	for _, o := range opts {
		o(f)
	}
	return a.redrive(ctx, f)
}

// CancelRedrive stops the throttled redrive of a dead-letter queue,
// leaving the messages it has not moved there, and returns what it moved
// and left (zeros when none was running). Errors are as RedriveWith's.
func (a *Administrator) CancelRedrive(ctx context.Context, dlq string) (*RedriveStatus, error) {
	return a.redrive(ctx, &wire.Redrive{DeadLetterQueue: dlq, Cancel: true})
}

func (a *Administrator) redrive(ctx context.Context, f *wire.Redrive) (*RedriveStatus, error) {
	resp, err := a.c.request(ctx, f, f.DeadLetterQueue)
	if err != nil {
		return nil, err
	}
	r := resp.(*wire.RedriveResult)
	return &RedriveStatus{Moved: r.Moved, Pending: r.Pending}, nil
}

// RedriveProgress is a throttled redrive under way (QueueStats.Redrive).
type RedriveProgress struct {
	Rate        uint32 // messages per second
	FairnessKey string // the key redriven; empty for all
	Moved       uint64 // moved so far
	Remaining   uint64 // still to move
}

// SendFanout enqueues a copy of m to each of queues, in one batch
// (SendBatch): the way to fan a message out to several consumer groups,
// one queue per group, each with its own fairness, leases, retries and
// dead-letter queue. m's own queue is ignored. Each copy is a message of
// its own, with its own ID; one queue's refusal fails only its copy.
// Results are in the order of queues; errors are SendBatch's.
func (p *Producer) SendFanout(ctx context.Context, m *Message, queues ...string) ([]SendResult, error) {
	wm := make([]wire.EnqueueMessage, len(queues))
	for i, q := range queues {
		wm[i] = m.m
		wm[i].Queue = q
	}
	return p.send(ctx, wm)
}
