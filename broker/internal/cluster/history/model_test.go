package history

import (
	"fmt"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"strconv"
	"testing"
)

// A model is a tiny correct broker with one queue: it records, through a
// Recorder, what its clients would see, so that its histories are clean
// by construction. Enqueues succeed, fail or end unknown (stored or not);
// deliveries lease a message; leases expire, to redelivery or to the dead
// letters once the attempts are spent; acks succeed, fail or end unknown.
type model struct {
	rng         *rand.Rand
	rec         Recorder
	maxAttempts uint32
	msgs        []*modelMsg
	nextToken   int
	nextID      uint64
	want        Report // the counts Check should report
}

type modelMsg struct {
	token    string
	id       [16]byte
	attempts uint32
	state    int    // one of the msg* constants
	holder   string // the consumer holding the lease
	acked    bool   // an AckOK was recorded
}

const (
	msgReady = iota
	msgLeased
	msgDone // acked or dead-lettered
)

func newModel(seed uint64) *model {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	return &model{rng: rng, maxAttempts: 1 + rng.Uint32N(4)}
}

func (m *model) client() string   { return fmt.Sprintf("p%d", m.rng.IntN(3)) }
func (m *model) consumer() string { return fmt.Sprintf("c%d", m.rng.IntN(3)) }

func (m *model) store(token string) *modelMsg {
	m.nextID++
	var id [16]byte
	id[0], id[1] = 0x01, 0x90
	for i := range 8 {
		id[8+i] = byte(m.nextID >> (56 - 8*i))
	}
	msg := &modelMsg{token: token, id: id}
	m.msgs = append(m.msgs, msg)
	return msg
}

// in returns the messages in state s.
func (m *model) in(s int) []*modelMsg {
	var l []*modelMsg
	for _, msg := range m.msgs {
		if msg.state == s {
			l = append(l, msg)
		}
	}
	return l
}

func (m *model) pick(l []*modelMsg) *modelMsg { return l[m.rng.IntN(len(l))] }

func (m *model) enqueue() {
	m.nextToken++
	token := fmt.Sprintf("t%d", m.nextToken)
	p := m.client()
	m.rec.EnqueueInvoked(p, token)
	m.want.Enqueued++
	switch n := m.rng.IntN(20); {
	case n < 10:
		m.rec.EnqueueOK(p, token, m.store(token).id)
		m.want.Acknowledged++
	case n < 13:
		m.rec.EnqueueFailed(p, token, true)
	case n < 18:
		var msg *modelMsg
		if m.rng.IntN(2) == 0 {
			msg = m.store(token)
		}
		m.rec.EnqueueFailed(p, token, false)
		if m.rng.IntN(2) == 0 {
			// A retry with the same idempotency key: the same message,
			// or the first one if the lost attempt was not stored.
			m.rec.EnqueueInvoked(p, token)
			if msg == nil {
				msg = m.store(token)
			}
			m.rec.EnqueueOK(p, token, msg.id)
			m.want.Acknowledged++
		}
	default:
		if m.rng.IntN(2) == 0 {
			m.store(token) // no answer recorded: the run ended first
		}
	}
}

func (m *model) deliver(msg *modelMsg) {
	msg.attempts++
	msg.state, msg.holder = msgLeased, m.consumer()
	m.rec.Delivered(msg.holder, msg.token, msg.id, msg.attempts)
	if msg.attempts == 1 {
		m.want.Delivered++
	} else {
		m.want.Redelivered++
	}
}

func (m *model) expire(msg *modelMsg) {
	if msg.attempts >= m.maxAttempts {
		msg.state = msgDone // dead-lettered
	} else {
		msg.state = msgReady
	}
}

func (m *model) ack(msg *modelMsg) {
	c := msg.holder
	m.rec.AckInvoked(c, msg.id)
	switch n := m.rng.IntN(10); {
	case n < 6:
		m.rec.AckOK(c, msg.id)
		msg.state = msgDone
		if !msg.acked {
			msg.acked = true
			m.want.Acked++
		}
	case n < 8:
		m.rec.AckFailed(c, msg.id)
	default: // unknown outcome: applied or not
		if m.rng.IntN(2) == 0 {
			msg.state = msgDone
		}
		m.rec.AckFailed(c, msg.id)
	}
}

// staleAck is a consumer whose lease expired acking late: refused.
func (m *model) staleAck(msg *modelMsg) {
	c := m.consumer() + "-late"
	m.rec.AckInvoked(c, msg.id)
	m.rec.AckFailed(c, msg.id)
}

// run takes steps random steps, then drains the queue so that every
// stored message is delivered at least once.
func (m *model) run(steps int) History {
	for range steps {
		switch n := m.rng.IntN(10); {
		case n < 3:
			m.enqueue()
		case n < 6:
			if l := m.in(msgReady); len(l) > 0 {
				m.deliver(m.pick(l))
			}
		case n < 7:
			if l := m.in(msgLeased); len(l) > 0 {
				m.expire(m.pick(l))
			}
		case n < 9:
			if l := m.in(msgLeased); len(l) > 0 {
				m.ack(m.pick(l))
			}
		default:
			if len(m.msgs) > 0 {
				m.staleAck(m.pick(m.msgs))
			}
		}
	}
	for _, msg := range m.msgs {
		if msg.attempts == 0 {
			m.deliver(msg)
		}
	}
	return m.rec.History()
}

// seeds returns the seeds to run: SEED alone if set, else 1…n.
func seeds(t *testing.T, n uint64) []uint64 {
	if s := os.Getenv("SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SEED=%q: %v", s, err)
		}
		return []uint64{seed}
	}
	l := make([]uint64, n)
	for i := range l {
		l[i] = uint64(i) + 1
	}
	return l
}

// TestCheckModelClean: histories of a correct broker have no violations,
// and Check counts what the model did.
func TestCheckModelClean(t *testing.T) {
	for _, seed := range seeds(t, 500) {
		m := newModel(seed)
		h := m.run(300)
		rep := Check(h, m.maxAttempts)
		counts := rep
		counts.Violations = nil
		if len(rep.Violations) != 0 || !reflect.DeepEqual(counts, m.want) {
			t.Fatalf("SEED=%d: Check() = %v\nwant counts %+v and no violations", seed, rep, m.want)
		}
	}
}

// TestCheckModelMutated breaks clean histories in one way each and
// expects exactly the violation that way makes.
func TestCheckModelMutated(t *testing.T) {
	type mutation struct {
		kind string
		// apply breaks h, of model m, and returns the token and ID the
		// violation names, or ok false if h has nothing to break.
		apply func(m *model, h *History) (token string, id [16]byte, ok bool)
	}
	appendEvent := func(h *History, e Event) {
		e.Seq = h.Events[len(h.Events)-1].Seq + 1
		h.Events = append(h.Events, e)
	}
	acknowledged := func(h History) []Event {
		var l []Event
		for _, e := range h.Events {
			if e.Op == OpEnqueueOK && !slices.ContainsFunc(l, func(a Event) bool { return a.ID == e.ID }) {
				l = append(l, e)
			}
		}
		return l
	}
	mutations := []mutation{
		{KindLost, func(m *model, h *History) (string, [16]byte, bool) {
			l := acknowledged(*h)
			if len(l) == 0 {
				return "", [16]byte{}, false
			}
			victim := l[m.rng.IntN(len(l))]
			h.Events = slices.DeleteFunc(h.Events, func(e Event) bool { return e.Op == OpDelivered && e.ID == victim.ID })
			return victim.Token, victim.ID, true
		}},
		{KindDuplicate, func(m *model, h *History) (string, [16]byte, bool) {
			l := acknowledged(*h)
			if len(l) == 0 {
				return "", [16]byte{}, false
			}
			victim := l[m.rng.IntN(len(l))]
			fresh := [16]byte{0xff, 15: 1}
			appendEvent(h, Event{Op: OpDelivered, Process: "c9", Token: victim.Token, ID: fresh, Attempt: 1})
			return victim.Token, fresh, true
		}},
		{KindDeliveredAfterAck, func(m *model, h *History) (string, [16]byte, bool) {
			for _, msg := range m.msgs {
				if msg.acked {
					appendEvent(h, Event{Op: OpDelivered, Process: "c9", Token: msg.token, ID: msg.id, Attempt: 1})
					return msg.token, msg.id, true
				}
			}
			return "", [16]byte{}, false
		}},
		{KindTooManyAttempts, func(m *model, h *History) (string, [16]byte, bool) {
			for _, msg := range m.msgs {
				if !msg.acked {
					appendEvent(h, Event{Op: OpDelivered, Process: "c9", Token: msg.token, ID: msg.id, Attempt: m.maxAttempts + 1})
					return msg.token, msg.id, true
				}
			}
			return "", [16]byte{}, false
		}},
		{KindUnknownToken, func(m *model, h *History) (string, [16]byte, bool) {
			fresh := [16]byte{0xff, 15: 2}
			appendEvent(h, Event{Op: OpDelivered, Process: "c9", Token: "never-enqueued", ID: fresh, Attempt: 1})
			return "never-enqueued", fresh, true
		}},
	}
	for _, seed := range seeds(t, 100) {
		for _, mu := range mutations {
			m := newModel(seed)
			h := m.run(200)
			token, id, ok := mu.apply(m, &h)
			if !ok {
				continue
			}
			rep := Check(h, m.maxAttempts)
			if len(rep.Violations) != 1 {
				t.Fatalf("SEED=%d, %s: Check() = %v; want one %s violation", seed, mu.kind, rep, mu.kind)
			}
			if v := rep.Violations[0]; v.Kind != mu.kind || v.Token != token || v.ID != id {
				t.Fatalf("SEED=%d: Check() = %v; want %s of token %s id %s", seed, v, mu.kind, token, FormatID(id))
			}
		}
	}
}
