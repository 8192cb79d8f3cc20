// Package history records what clients saw of a broker, operation by
// operation, and checks the record against the broker's delivery
// guarantees: an acknowledged message is delivered, a message is one
// message however often its enqueue was retried, nothing is delivered
// once its ack was confirmed, and no message is tried more often than
// its queue allows.
//
// End-to-end cluster tests record with a Recorder while they run clients
// against brokers under faults, then call Check on the History. Each
// operation is recorded twice, when it is invoked and when its outcome is
// known, so that an operation whose outcome is unknown (a timeout, a lost
// connection) is told apart from one that failed. A History can be saved
// with WriteJSON and read back with ReadJSON, so that a failing run keeps
// the evidence.
//
// The package does no I/O of its own and starts no goroutines; Recorder
// is safe for concurrent use and the rest is plain data.
package history

import (
	"encoding/hex"
	"fmt"
	"sync"
)

// An Op is the kind of an Event.
type Op uint8

// The events, named in JSON by their String.
const (
	// OpEnqueueInvoked: a client is about to send the enqueue of Token.
	OpEnqueueInvoked Op = iota + 1
	// OpEnqueueOK: the broker acknowledged the enqueue of Token as message
	// ID.
	OpEnqueueOK
	// OpEnqueueFailed: the enqueue of Token failed, definitely (the broker
	// refused it) or with an unknown outcome (Definite false).
	OpEnqueueFailed
	// OpDelivered: a consumer received message ID, carrying Token, as
	// delivery attempt Attempt.
	OpDelivered
	// OpAckInvoked: a consumer is about to ack message ID.
	OpAckInvoked
	// OpAckOK: the broker confirmed the ack of message ID.
	OpAckOK
	// OpAckFailed: the ack of message ID failed or its outcome is unknown.
	OpAckFailed
)

var opNames = [...]string{
	OpEnqueueInvoked: "enqueue-invoked",
	OpEnqueueOK:      "enqueue-ok",
	OpEnqueueFailed:  "enqueue-failed",
	OpDelivered:      "delivered",
	OpAckInvoked:     "ack-invoked",
	OpAckOK:          "ack-ok",
	OpAckFailed:      "ack-failed",
}

// String returns the op's JSON name, such as "enqueue-ok", or "op(N)" for
// an unknown op.
func (o Op) String() string {
	if int(o) < len(opNames) && opNames[o] != "" {
		return opNames[o]
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// parseOp is the inverse of Op.String for known ops.
func parseOp(s string) (Op, bool) {
	for i, name := range opNames {
		if name != "" && name == s {
			return Op(i), true
		}
	}
	return 0, false
}

// An Event is one thing a client saw. Which fields are set depends on Op:
// Token for the enqueue events and OpDelivered, ID for all but
// OpEnqueueInvoked and OpEnqueueFailed, Attempt for OpDelivered, Definite
// for OpEnqueueFailed.
type Event struct {
	// Seq orders the events of a History: the Recorder numbers them 1, 2,
	// 3… in the order they were recorded, under its lock. An event is
	// "after" another if its Seq is greater.
	Seq uint64
	// Op is what happened.
	Op Op
	// Process is the client (for enqueues) or the consumer (for
	// deliveries and acks) that saw it.
	Process string
	// Token is the client-chosen tag that identifies a message across
	// retries of its enqueue; tests carry it in the payload.
	Token string
	// ID is the message ID the broker gave the message.
	ID [16]byte
	// Attempt is the delivery attempt the broker reported, from 1.
	Attempt uint32
	// Definite, for OpEnqueueFailed, says the broker refused the enqueue;
	// false means its outcome is unknown.
	Definite bool
}

// String returns the event on one line, such as
// "#7 delivered c1 token=t3 id=0190… attempt=2".
func (e Event) String() string {
	s := fmt.Sprintf("#%d %s %s", e.Seq, e.Op, e.Process)
	switch e.Op {
	case OpEnqueueInvoked:
		s += " token=" + e.Token
	case OpEnqueueOK:
		s += " token=" + e.Token + " id=" + FormatID(e.ID)
	case OpEnqueueFailed:
		s += fmt.Sprintf(" token=%s definite=%t", e.Token, e.Definite)
	case OpDelivered:
		s += fmt.Sprintf(" token=%s id=%s attempt=%d", e.Token, FormatID(e.ID), e.Attempt)
	default:
		s += " id=" + FormatID(e.ID)
	}
	return s
}

// A History is the events of one run, in Seq order when it comes from a
// Recorder.
type History struct {
	Events []Event
}

// A Recorder collects the events of a run. The zero value is ready to use;
// its methods are safe for concurrent use. Record an invocation before the
// request is sent and its outcome after the answer is read, so that the
// order of the events bounds the order of what the broker did.
type Recorder struct {
	mu     sync.Mutex
	events []Event
}

func (r *Recorder) add(e Event) {
	r.mu.Lock()
	e.Seq = uint64(len(r.events)) + 1
	r.events = append(r.events, e)
	r.mu.Unlock()
}

// EnqueueInvoked records that client is about to enqueue the message
// tagged token. A retry of the same message invokes the same token again.
func (r *Recorder) EnqueueInvoked(client, token string) {
	r.add(Event{Op: OpEnqueueInvoked, Process: client, Token: token})
}

// EnqueueOK records that the broker acknowledged client's enqueue of token
// as message id.
func (r *Recorder) EnqueueOK(client, token string, id [16]byte) {
	r.add(Event{Op: OpEnqueueOK, Process: client, Token: token, ID: id})
}

// EnqueueFailed records that client's enqueue of token failed: definite if
// the broker refused it, not definite if its outcome is unknown (a timeout,
// a lost connection).
func (r *Recorder) EnqueueFailed(client, token string, definite bool) {
	r.add(Event{Op: OpEnqueueFailed, Process: client, Token: token, Definite: definite})
}

// Delivered records that consumer received message id, carrying token, as
// delivery attempt attempt.
func (r *Recorder) Delivered(consumer, token string, id [16]byte, attempt uint32) {
	r.add(Event{Op: OpDelivered, Process: consumer, Token: token, ID: id, Attempt: attempt})
}

// AckInvoked records that consumer is about to ack message id.
func (r *Recorder) AckInvoked(consumer string, id [16]byte) {
	r.add(Event{Op: OpAckInvoked, Process: consumer, ID: id})
}

// AckOK records that the broker confirmed consumer's ack of message id.
func (r *Recorder) AckOK(consumer string, id [16]byte) {
	r.add(Event{Op: OpAckOK, Process: consumer, ID: id})
}

// AckFailed records that consumer's ack of message id failed or has an
// unknown outcome; either way it does not count as an ack.
func (r *Recorder) AckFailed(consumer string, id [16]byte) {
	r.add(Event{Op: OpAckFailed, Process: consumer, ID: id})
}

// History returns a copy of the events recorded so far.
func (r *Recorder) History() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	return History{Events: append([]Event(nil), r.events...)}
}

// FormatID writes a message ID as a UUID, 8-4-4-4-12 lower-case hex digits.
func FormatID(id [16]byte) string {
	var b [36]byte
	hex.Encode(b[0:8], id[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], id[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], id[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], id[8:10])
	b[23] = '-'
	hex.Encode(b[24:36], id[10:16])
	return string(b[:])
}

// ParseID reads an ID written by FormatID, or as 32 hex digits without
// dashes.
func ParseID(s string) ([16]byte, error) {
	var id [16]byte
	orig := s
	if len(s) == 36 && s[8] == '-' && s[13] == '-' && s[18] == '-' && s[23] == '-' {
		s = s[0:8] + s[9:13] + s[14:18] + s[19:23] + s[24:36]
	}
	if len(s) != 32 {
		return id, fmt.Errorf("history: message ID %q: want a UUID", orig)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("history: message ID %q: want a UUID", orig)
	}
	return id, nil
}
