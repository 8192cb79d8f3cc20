package fila

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// An ID is a message ID: a UUIDv7 (RFC 9562), so IDs sort by enqueue time.
// It is 16 raw bytes on the wire; String gives the canonical text form.
type ID [16]byte

// String returns the ID as "xxxxxxxx-xxxx-7xxx-xxxx-xxxxxxxxxxxx".
func (id ID) String() string { return uuid.UUID(id).String() }

// ParseID parses the text form of an ID.
func ParseID(s string) (ID, error) {
	u, err := uuid.Parse(s)
	if err != nil {
		return ID{}, fmt.Errorf("fila: parse id %q: %w", s, err)
	}
	return ID(u), nil
}

// Time returns the time encoded in the ID (millisecond precision).
func (id ID) Time() time.Time {
	sec, nsec := uuid.UUID(id).Time().UnixTime()
	return time.Unix(sec, nsec)
}

// Message is a message to enqueue, built with NewMessage and its setters:
//
//	fila.NewMessage("orders", payload).
//		Header("tenant", "acme").
//		FairnessKey("acme").
//		Weight(3).
//		ThrottleKey("provider:stripe").
//		Delay(30 * time.Second)
//
// Setters return the message so calls chain. A Message may be sent once
// and must not be changed while a Send is in flight.
type Message struct {
	m wire.EnqueueMessage
}

// NewMessage returns a message for queue with payload (not copied: do not
// modify it until Send returns).
func NewMessage(queue string, payload []byte) *Message {
	return &Message{m: wire.EnqueueMessage{Queue: queue, Payload: payload}}
}

// Header adds an application header. Keys starting with "fila-" are
// reserved for the broker.
func (m *Message) Header(key, value string) *Message {
	m.m.Headers = append(m.m.Headers, wire.MessageHeader{Key: key, Value: value})
	return m
}

// FairnessKey sets the DRR fairness key (default "default"): keys share
// delivery bandwidth in proportion to their weights.
func (m *Message) FairnessKey(key string) *Message { m.m.FairnessKey = key; return m }

// Weight sets the fairness key's DRR weight (default 1).
func (m *Message) Weight(w uint32) *Message { m.m.Weight = w; return m }

// ThrottleKey adds a token bucket the message must take a token from before
// it is delivered; the bucket's rate is the runtime config key
// "throttle.<key>". May be called more than once.
func (m *Message) ThrottleKey(key string) *Message {
	m.m.ThrottleKeys = append(m.m.ThrottleKeys, key)
	return m
}

// Delay makes the message deliverable no earlier than d after enqueue,
// rounded up to a millisecond (0 or negative: no delay).
func (m *Message) Delay(d time.Duration) *Message {
	m.m.DelayMS = ms(d)
	return m
}

// TTL sets the message's time to live, counted from enqueue and rounded up
// to a millisecond: if it is not delivered within it, it expires, and is
// dead-lettered with fila-error "expired" or dropped, as its queue's
// QueueSpec.ExpiredAction says. A message leased when its TTL passes
// expires only if it comes back to be delivered again (a nack, a retry,
// its lease expiring). 0 (the default): the queue's QueueSpec.MessageTTL,
// none if it has none. At most 30 days; above, the message's result
// fails with INVALID_ARGUMENT (errors.Is(err, ErrInvalidArgument)).
func (m *Message) TTL(d time.Duration) *Message {
	m.m.TTLMS = ms(d)
	return m
}

// Priority sets the message's priority within its fairness key, 0 (lowest)
// to 9 (highest); the default is 4. Among the ready messages of one
// fairness key, a higher priority is delivered first, first in first out
// within a priority. It never changes the key's share against other keys,
// and messages with an ordering key keep their order whatever their
// priorities. Outside 0 to 9, the message's result fails with
// INVALID_ARGUMENT (errors.Is(err, ErrInvalidArgument)).
func (m *Message) Priority(p int) *Message {
	if p < 0 || p > 9 {
		m.m.Priority = 255 // out of range: refused by the broker
	} else {
		m.m.Priority = uint8(p) + 1
	}
	return m
}

// IdempotencyKey deduplicates: a second message with the same key on the
// same queue within the queue's dedup window is not enqueued, and its
// result carries the first message's ID.
func (m *Message) IdempotencyKey(key string) *Message { m.m.IdempotencyKey = key; return m }

// OrderingKey makes messages with the same key be delivered one at a time,
// in enqueue order.
func (m *Message) OrderingKey(key string) *Message { m.m.OrderingKey = key; return m }

// Queue returns the message's queue.
func (m *Message) Queue() string { return m.m.Queue }

// Producer enqueues messages. Get it from Client.Producer.
type Producer struct {
	c *Client
}

// Enqueue appends payload to queue and returns its ID once it is durable.
// It is Send of a message with no options. It returns *EnqueueError
// (QUEUE_NOT_FOUND, MESSAGE_TOO_LARGE), *StatusError (FORBIDDEN without
// produce permission; NOT_LEADER when no leader could be reached, see
// "Clusters" in the package documentation), or an error wrapping
// ErrClosed or ctx's error (the message may or may not have been
// enqueued). A connection lost while the message is in flight is not an
// error: the frame is sent again with its producer ID and sequence, and
// the broker does not enqueue it twice.
//
// Each Producer (one per Client) has a random producer ID, a UUIDv4, and
// numbers its messages from 1: every Enqueue frame carries the ID and the
// sequence of its first message (wire.Enqueue's producer_id and
// sequence).
func (p *Producer) Enqueue(ctx context.Context, queue string, payload []byte) (ID, error) {
	return p.Send(ctx, NewMessage(queue, payload))
}

// Send enqueues one message and returns its ID once it is durable. For a
// duplicate of an idempotency key still in the queue's dedup window it
// returns the first message's ID. Errors as for Enqueue.
//
// Concurrent Sends on one client are coalesced into batch frames, so many
// goroutines each sending one message get batch throughput without
// batching themselves. The rule is Nagle's (RFC 896), per queue leader
// (one leader on a single node): a Send with no Enqueue frame in flight to
// its queue's leader goes out at once; while one is in flight, Sends to
// that leader gather into the next frame, which goes out when the response arrives
// (after the goroutines it woke have had a chance to send again) or when
// it is full: 1024 messages or 4 MiB of payload by default
// (WithMaxBatch). WithLinger adds an optional wait (default none). Each
// Send still gets its own result: one message's rejection does not fail
// the others.
func (p *Producer) Send(ctx context.Context, m *Message) (ID, error) {
	res, err := p.send(ctx, []wire.EnqueueMessage{m.m})
	if err != nil {
		return ID{}, err
	}
	if res[0].Err != nil {
		return ID{}, res[0].Err
	}
	return res[0].ID, nil
}

// SendResult is the outcome of one message of SendBatch.
type SendResult struct {
	// ID is the message's ID when Err is nil.
	ID ID
	// Duplicate is true when an earlier message with the same idempotency
	// key was accepted within the dedup window; ID is that message's.
	Duplicate bool
	// Err is *EnqueueError (QUEUE_NOT_FOUND, MESSAGE_TOO_LARGE) or
	// *StatusError (FORBIDDEN) for a message rejected alone, or
	// *StatusError for one whose part of a split batch the broker refused
	// as a whole.
	Err error
}

// SendBatch enqueues msgs, possibly to different queues, and returns one
// result per message, in order, once every accepted message is durable.
// The batch goes in one request, or, when it has more messages than the
// broker accepts in one (its announced max_batch_size, 4096 by default),
// in several, sent in order. A message rejected alone, or with the part
// of the batch it was sent in, has its error in its result; err is non-nil
// only when the whole batch failed: *StatusError, or an error wrapping
// ErrClosed or ctx's error (some, all or none of the messages may have
// been enqueued). Messages to queues led by different nodes of a cluster
// go to each leader in a request of their own, and their results are
// joined in order. The messages may be reused once SendBatch returns.
func (p *Producer) SendBatch(ctx context.Context, msgs []*Message) ([]SendResult, error) {
	wm := make([]wire.EnqueueMessage, len(msgs))
	for i, m := range msgs {
		wm[i] = m.m
	}
	return p.send(ctx, wm)
}

func (p *Producer) send(ctx context.Context, msgs []wire.EnqueueMessage) ([]SendResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	spans := p.c.traceSend(ctx, msgs)
	out, err := p.enqueue(ctx, msgs)
	if spans != nil {
		endSend(spans, out, err)
	}
	return out, err
}

func (p *Producer) enqueue(ctx context.Context, msgs []wire.EnqueueMessage) ([]SendResult, error) {
	r, err := p.c.enqueue(ctx, msgs)
	if err != nil {
		return nil, wrapErr(wire.OpEnqueue, msgs[0].Queue, err)
	}
	if r.err != nil {
		return nil, mapErr(wire.OpEnqueue, msgs[0].Queue, r.err)
	}
	out := make([]SendResult, len(r.items))
	for i, it := range r.items {
		if it.Code != wire.CodeOK {
			out[i].Err = opError(wire.OpEnqueue, it.Code, msgs[i].Queue, it.Message, "")
			continue
		}
		out[i].ID = ID(it.ID)
		out[i].Duplicate = it.Duplicate
	}
	return out, nil
}
