package sched

import (
	"fmt"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// MaxRedriveRate bounds a throttled redrive's rate, in messages per
// second.
const MaxRedriveRate = 1_000_000

// A RedriveSpec says what Redrive moves, and how fast.
type RedriveSpec struct {
	// N is the most messages to move; 0 means all the DLQ holds ready
	// (of FairnessKey, if set) when the redrive starts.
	N uint64
	// Rate, if not zero, makes the redrive a throttled one: it runs in
	// the background and moves Rate messages per second, at most
	// MaxRedriveRate; 0 moves them all at once.
	Rate uint32
	// FairnessKey, if not empty, moves only that fairness key's dead
	// letters.
	FairnessKey string
}

// Redriven is Redrive's and CancelRedrive's result.
type Redriven struct {
	Moved uint64 // messages moved back to the parent queue
	// Pending is, for a throttled redrive, the messages it has still to
	// move (some may be skipped when their turn comes: a message leased
	// or backing off in the DLQ by then stays, one gone is passed over).
	Pending uint64
}

// RedriveProgress is a throttled redrive under way (QueueStats.Redrive).
type RedriveProgress struct {
	Rate        uint32 // messages per second
	FairnessKey string // the key redriven; empty for all
	Moved       uint64 // messages moved so far
	Remaining   uint64 // messages still to move
}

// A redrive is a throttled redrive of a DLQ: the IDs still to move, by
// increasing ID, and the time the next one is due. It runs off Tick;
// Sched.redrives lists the DLQs running one, in the order they started.
type redrive struct {
	rate     uint32
	key      string
	ids      [][16]byte
	moved    uint64
	next     Time
	interval time.Duration
}

// Redrive moves up to n messages (0: all) from the DLQ dlq back to its
// queue, at once. It is RedriveWith without a rate or a key.
func (s *Sched) Redrive(ref Ref, dlq string, n uint64) {
	s.RedriveWith(ref, dlq, RedriveSpec{N: n})
}

// RedriveWith moves messages from the DLQ dlq back to its queue, oldest
// (lowest ID) first, with attempts and last error reset, ready at once,
// each keeping its fairness key, weight, throttle keys and ordering key:
// a large redrive is shared with live traffic by the queue's fair
// scheduling. Messages leased or backing off in the DLQ stay.
//
// Without a rate the messages move in this command and the reply's
// Moved counts them. With a rate the messages to move are chosen now
// (Pending counts them) and move one by one as Tick passes their time,
// Rate a second, with a burst of at most one second's worth after a gap
// in the ticks; one moves in this command. The redrive replaces a
// throttled redrive the DLQ was running, shows in QueueStats.Redrive,
// and ends when it has taken every chosen message in turn, with
// CancelRedrive, or with the queue. It is not stored: a restart ends it,
// leaving the messages it had not moved in the DLQ (AppendImage keeps it
// in a replicated queue's images).
//
// The reply is a Redriven, or an error wrapping fault.ErrQueueNotFound,
// fault.ErrNotADLQ or fault.ErrInvalidArgument (a rate above
// MaxRedriveRate). It costs O(m log m) for m messages in the DLQ.
func (s *Sched) RedriveWith(ref Ref, dlq string, spec RedriveSpec) {
	d := s.queues[dlq]
	if d == nil {
		s.reply(ref, fmt.Errorf("redrive %s: %w", dlq, fault.ErrQueueNotFound))
		return
	}
	if d.parent == nil {
		s.reply(ref, fmt.Errorf("redrive %s: %w", dlq, fault.ErrNotADLQ))
		return
	}
	if spec.Rate > MaxRedriveRate {
		s.reply(ref, fmt.Errorf("redrive %s: rate %d: want at most %d messages a second: %w", dlq, spec.Rate, MaxRedriveRate, fault.ErrInvalidArgument))
		return
	}
	var ready []mref
	for x := range d.msgs.all() {
		m := s.msg(x)
		if m.state == stReady && (spec.FairnessKey == "" || s.laneOf(m).key.name == spec.FairnessKey) {
			ready = append(ready, x)
		}
	}
	s.sortByID(ready)
	if spec.N > 0 && uint64(len(ready)) > spec.N {
		ready = ready[:spec.N]
	}
	if spec.Rate == 0 {
		for _, x := range ready {
			s.moveBack(d, x, s.msg(x))
		}
		s.reply(ref, Redriven{Moved: uint64(len(ready))})
		return
	}
	s.stopRedrive(d)
	r := &redrive{rate: spec.Rate, key: spec.FairnessKey, next: s.now, interval: time.Second / time.Duration(spec.Rate)}
	r.ids = make([][16]byte, len(ready))
	for i, x := range ready {
		r.ids[i] = s.msg(x).id
	}
	d.redrive = r
	s.redrives = append(s.redrives, d)
	s.runRedrive(d)
	if d.redrive == nil {
		s.reply(ref, Redriven{Moved: r.moved})
		return
	}
	s.reply(ref, Redriven{Moved: r.moved, Pending: uint64(len(r.ids))})
}

// CancelRedrive stops the throttled redrive of the DLQ dlq, leaving the
// messages it has not moved in the DLQ. The reply is a Redriven: what it
// moved and what it left (zeros when none was running), or an error
// wrapping fault.ErrQueueNotFound or fault.ErrNotADLQ.
func (s *Sched) CancelRedrive(ref Ref, dlq string) {
	d := s.queues[dlq]
	if d == nil {
		s.reply(ref, fmt.Errorf("cancel redrive %s: %w", dlq, fault.ErrQueueNotFound))
		return
	}
	if d.parent == nil {
		s.reply(ref, fmt.Errorf("cancel redrive %s: %w", dlq, fault.ErrNotADLQ))
		return
	}
	var out Redriven
	if r := d.redrive; r != nil {
		out = Redriven{Moved: r.moved, Pending: uint64(len(r.ids))}
	}
	s.stopRedrive(d)
	s.reply(ref, out)
}

// stopRedrive ends d's throttled redrive, if any.
func (s *Sched) stopRedrive(d *queue) {
	if d.redrive == nil {
		return
	}
	d.redrive = nil
	for i, q := range s.redrives {
		if q == d {
			s.redrives = append(s.redrives[:i], s.redrives[i+1:]...)
			break
		}
	}
}

// runRedrives runs the throttled redrives due by now.
func (s *Sched) runRedrives() {
	for i := 0; i < len(s.redrives); {
		d := s.redrives[i]
		s.runRedrive(d)
		if d.redrive != nil {
			i++
		}
	}
}

// runRedrive moves the messages of d's throttled redrive whose time has
// come, one per interval, and ends it when it has none left.
func (s *Sched) runRedrive(d *queue) {
	r := d.redrive
	if floor := s.now - Time(time.Second); r.next < floor {
		r.next = floor // a gap in the ticks: catch up one second at most
	}
	for r.next <= s.now && len(r.ids) > 0 {
		id := r.ids[0]
		r.ids = r.ids[1:]
		x := d.msgs.get(&s.recs, id)
		if x == 0 || s.msg(x).state != stReady {
			continue // gone, leased or backing off: passed over
		}
		s.moveBack(d, x, s.msg(x))
		r.moved++
		r.next = r.next.Add(r.interval)
	}
	if len(r.ids) == 0 {
		s.stopRedrive(d)
	}
}

// redriveDeadline returns the earliest time a throttled redrive is due,
// 0 for none.
func (s *Sched) redriveDeadline() Time {
	var t Time
	for _, d := range s.redrives {
		if n := max(d.redrive.next, 1); t == 0 || n < t {
			t = n
		}
	}
	return t
}

// moveBack moves message x, its record m, ready in the DLQ d, back to
// d's queue, ready, with its attempts and last error reset.
func (s *Sched) moveBack(d *queue, x mref, m *msg) {
	p := d.parent
	s.leave(x, m)
	old := s.laneOf(m)
	s.moveTo(x, m, s.laneFor(p, old.key.name, old.ts, old.okey, old.prio))
	m.flags &^= fDead
	if m.ext != 0 {
		s.exts.at(uint32(m.ext)).attempts = 0
	}
	s.setReason(x, m, "")
	s.dropTTL(m) // a redriven message no longer expires (ttl.go)
	if m.flags&fNoTTL != 0 {
		s.persistState(x, m) // which says so
	} else if m.flags&fState != 0 {
		b := s.cur
		s.del(appendStateKey(b.alloc(stateKeyLen(p.name))[:0], p.name, m.id))
		m.flags &^= fState
	}
	s.makeReady(x, m)
	d.counts.Redriven++
	p.counts.Redriven++
}

// redriveProgress returns the progress of the throttled redrive of q's
// DLQ (or of q, a DLQ), nil for none.
func (q *queue) redriveProgress() *RedriveProgress {
	d := q
	if q.dlq != nil {
		d = q.dlq
	}
	r := d.redrive
	if r == nil {
		return nil
	}
	return &RedriveProgress{Rate: r.rate, FairnessKey: r.key, Moved: r.moved, Remaining: uint64(len(r.ids))}
}
