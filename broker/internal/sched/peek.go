package sched

import (
	"fmt"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// MaxPeek bounds the messages one Peek lists.
const MaxPeek = 1000

// A Peeked is one message listed by Peek, as the scheduler holds it. The
// body is in storage: read it under Key.
type Peeked struct {
	// Key is the storage key of the message record.
	Key          []byte
	ID           [16]byte
	FairnessKey  string
	Weight       uint32
	ThrottleKeys []string // sorted; shared, do not modify
	OrderingKey  string   // empty for none
	// State is "ready" (including waiting for tokens or behind an
	// ordering key), "delayed" (an enqueue delay or a retry backoff),
	// "deciding" (waiting for the on_failure hook) or "leased".
	State string
	// Attempts and LastError are the failed attempts so far and the last
	// failure's reason; DeadLettered is set in a DLQ.
	Attempts     uint32
	LastError    string
	DeadLettered bool
	PayloadSize  uint32 // bytes, as given at enqueue
	EnqueuedAt   Time
	// Due is when a delayed message becomes ready, or a leased one's
	// lease ends; 0 otherwise.
	Due Time
}

// PeekPage is Peek's result.
type PeekPage struct {
	// Msgs are the messages listed, by increasing ID (enqueue order).
	Msgs []Peeked
	// Next is the ID to pass as after for the next page: the last listed
	// one's when more messages follow it; zero when none do.
	Next [16]byte
}

// Peek lists up to count messages (0, or over MaxPeek: MaxPeek) of a
// queue or DLQ whose IDs are above after (zero: from the first), by
// increasing ID, only those of fairness key key unless it is empty,
// whatever their state, leasing none of them and changing nothing. The
// reply is a PeekPage, or an error wrapping fault.ErrQueueNotFound. It
// costs O(m + k log k) for the queue's m messages, k of them after
// after (a bounded selection would do better on deep queues; a page is
// an operator's read).
func (s *Sched) Peek(ref Ref, name string, after [16]byte, count int, key string) {
	q := s.queues[name]
	if q == nil {
		s.reply(ref, fmt.Errorf("peek %s: %w", name, fault.ErrQueueNotFound))
		return
	}
	if count <= 0 || count > MaxPeek {
		count = MaxPeek
	}
	var ms []mref
	for x := range q.msgs.all() {
		m := s.msg(x)
		if !idAfter(&m.id, &after) {
			continue
		}
		if key != "" && s.laneOf(m).key.name != key {
			continue
		}
		ms = append(ms, x)
	}
	s.sortByID(ms)
	var page PeekPage
	if len(ms) > count {
		ms = ms[:count]
		page.Next = s.msg(ms[count-1]).id
	}
	home := q.home().name
	page.Msgs = make([]Peeked, len(ms))
	for i, x := range ms {
		m := s.msg(x)
		l := s.laneOf(m)
		e := s.ext(m)
		p := Peeked{
			Key:          appendMsgKey(make([]byte, 0, msgKeyLen(home)), home, m.id),
			ID:           m.id,
			FairnessKey:  l.key.name,
			Weight:       s.weightOf(m),
			ThrottleKeys: l.throttleKeys(),
			OrderingKey:  l.okey,
			State:        m.state.String(),
			Attempts:     e.attempts,
			LastError:    s.reason(x, m),
			DeadLettered: m.flags&fDead != 0,
			PayloadSize:  m.cost,
			EnqueuedAt:   m.enq,
		}
		if m.state == stDelayed || m.state == stLeased {
			p.Due = e.due
		}
		page.Msgs[i] = p
	}
	s.reply(ref, page)
}
