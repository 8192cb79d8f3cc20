package sched

import (
	"fmt"
	"time"
)

// Message TTLs. A message's TTL (Message.TTL, else its queue's
// QueueSpec.MessageTTL) counts from its enqueue time. A message that is
// ready or delayed when its TTL passes expires: it is dead-lettered with
// reason ReasonExpired, or dropped, as its queue's ExpiredAction says,
// and counted in QueueCounts.TTLExpired.
//
//   - A leased message does not expire while it is leased: a consumer is
//     working on it. If it comes back (nack, retry, lease expiry,
//     release, a decision of on_failure) after its expiry, it expires
//     then, instead of being delivered again; a retry backoff that would
//     end after the expiry ends at it.
//   - A delay or backoff that outlasts the TTL ends in expiry at the TTL.
//   - In a DLQ messages do not expire. A redrive takes the TTL away: a
//     redriven message no longer expires (its TTL counted from an
//     enqueue time long past, so it would expire again at once), which a
//     state record with stateNoTTL keeps across a restart.
//
// Cost. A message without a TTL has nothing more: no extension record,
// no timer. A message with one holds an extension record (its TTL, in
// milliseconds from its enqueue time, fits in msgExt's last four bytes)
// and, while ready or delayed, one entry in the timer heap: its expiry
// when ready, the earlier of its due time and its expiry when delayed.
// Expiry is that timer firing; nothing scans.

// MaxTTL bounds a message's TTL and a queue's message TTL: 30 days.
const MaxTTL = 30 * 24 * time.Hour

// The actions on an expired message (QueueSpec.ExpiredAction).
const (
	// ExpireDeadLetter moves an expired message to the queue's DLQ, its
	// last error ReasonExpired. It is the default ("").
	ExpireDeadLetter = "dead-letter"
	// ExpireDrop deletes an expired message.
	ExpireDrop = "drop"
)

// ReasonExpired is the last error of a message dead-lettered because
// its TTL passed.
const ReasonExpired = "expired"

// checkTTL checks a queue's TTL settings.
func checkTTL(spec *QueueSpec) error {
	if spec.MessageTTL < 0 || spec.MessageTTL > MaxTTL {
		return fmt.Errorf("message_ttl %s: want a duration from 0 (none) to %s", FormatDuration(spec.MessageTTL), FormatDuration(MaxTTL))
	}
	switch spec.ExpiredAction {
	case "", ExpireDeadLetter, ExpireDrop:
		return nil
	}
	return fmt.Errorf("expired_action %q: want %q or %q", spec.ExpiredAction, ExpireDeadLetter, ExpireDrop)
}

// ttlMillis returns d in milliseconds, rounded up; d is at most MaxTTL.
func ttlMillis(d time.Duration) uint32 {
	return uint32((d + time.Millisecond - 1) / time.Millisecond)
}

// expiresAt returns when m expires: 0 if it has no TTL, or is in a DLQ,
// where TTLs do not apply.
func (s *Sched) expiresAt(m *msg) Time {
	if m.ext == 0 {
		return 0
	}
	e := s.exts.at(uint32(m.ext))
	if e.ttl == 0 || s.queueOf(m).parent != nil {
		return 0
	}
	return m.enq.Add(time.Duration(e.ttl) * time.Millisecond)
}

// expired reports whether m has a TTL that has passed.
func (s *Sched) expired(m *msg) bool {
	exp := s.expiresAt(m)
	return exp != 0 && exp <= s.now
}

// setDelay sets the timer of message x, its record m, delayed until due:
// at its expiry instead if that comes first.
func (s *Sched) setDelay(x mref, m *msg, due Time) {
	if exp := s.expiresAt(m); exp != 0 && exp < due {
		due = exp
	}
	s.setTimer(x, m, due)
}

// untime takes m out of the timer heap if it is in it (a delayed
// message whose timer fired is not).
func (s *Sched) untime(m *msg) {
	if m.ext != 0 && s.exts.at(uint32(m.ext)).heap != 0 {
		s.timers.remove(m.ext)
	}
}

// expire handles message x, its record m, ready or delayed (or in no
// state) with its TTL passed: it leaves its state and is dead-lettered
// with reason ReasonExpired, or dropped, as its queue's ExpiredAction
// says.
func (s *Sched) expire(x mref, m *msg) {
	q := s.queueOf(m)
	q.counts.TTLExpired++
	s.leave(x, m)
	if q.spec.ExpiredAction == ExpireDrop {
		s.remove(x, m)
		return
	}
	s.setReason(x, m, ReasonExpired)
	s.deadLetter(x, m)
}

// dropTTL takes message x's TTL away as it is redriven; m is its record.
// It marks the message fNoTTL if its stored record holds an expiry, so
// that its state record says it no longer expires.
func (s *Sched) dropTTL(m *msg) {
	if m.ext == 0 {
		return
	}
	e := s.exts.at(uint32(m.ext))
	if e.ttl == 0 {
		return
	}
	e.ttl = 0
	m.flags |= fNoTTL
}
