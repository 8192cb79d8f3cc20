package history

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"
	"strings"
)

// The kinds of Violation.
const (
	// KindLost: an enqueue the broker acknowledged was never delivered.
	KindLost = "lost"
	// KindUnknownToken: a delivery carried a token no enqueue had been
	// invoked with, before it.
	KindUnknownToken = "unknown-token"
	// KindDuplicate: one token became more than one message ID: the
	// message was stored twice.
	KindDuplicate = "duplicate"
	// KindIDReused: one message ID was given to more than one token.
	KindIDReused = "id-reused"
	// KindDeliveredAfterAck: a delivery was recorded after an ack of its
	// message was confirmed.
	KindDeliveredAfterAck = "delivered-after-ack"
	// KindDeliveredAfterFailure: a message was delivered although every
	// enqueue of its token failed definitely.
	KindDeliveredAfterFailure = "delivered-after-failure"
	// KindTooManyAttempts: a delivery's attempt exceeded the maximum.
	KindTooManyAttempts = "too-many-attempts"
)

// A Violation is one way a History breaks the broker's guarantees.
type Violation struct {
	// Kind is one of the Kind constants, such as "duplicate".
	Kind string
	// Token is the token of the message concerned, if known.
	Token string
	// ID is the message ID concerned, if any.
	ID [16]byte
	// Detail says what happened, naming the events by their Seq ("#12").
	Detail string
}

// String returns the violation on one line: "kind token=T id=ID: detail".
func (v Violation) String() string {
	return fmt.Sprintf("%s token=%s id=%s: %s", v.Kind, v.Token, FormatID(v.ID), v.Detail)
}

// A Report is the result of Check: what the history holds, and what it
// breaks.
type Report struct {
	// Enqueued counts the distinct tokens whose enqueue was invoked.
	Enqueued int
	// Acknowledged counts the distinct tokens with an acknowledged enqueue.
	Acknowledged int
	// Delivered counts the distinct message IDs delivered at least once.
	Delivered int
	// Redelivered counts the deliveries beyond the first of each message.
	Redelivered int
	// Acked counts the distinct message IDs with a confirmed ack.
	Acked int
	// Violations lists every violation found, sorted by Kind, Token, ID
	// and Detail; empty if the history is clean.
	Violations []Violation
}

// maxListed bounds the violations Report.String lists.
const maxListed = 20

// String summarizes the report: its counts on one line, then up to 20
// violations, one a line.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "history: %d enqueued, %d acknowledged, %d delivered (%d redelivered), %d acked; ",
		r.Enqueued, r.Acknowledged, r.Delivered, r.Redelivered, r.Acked)
	switch len(r.Violations) {
	case 0:
		b.WriteString("no violations")
		return b.String()
	case 1:
		b.WriteString("1 violation:")
	default:
		fmt.Fprintf(&b, "%d violations:", len(r.Violations))
	}
	for i, v := range r.Violations {
		if i == maxListed {
			fmt.Fprintf(&b, "\n  … and %d more", len(r.Violations)-maxListed)
			break
		}
		b.WriteString("\n  ")
		b.WriteString(v.String())
	}
	return b.String()
}

// tokenState is what Check learns of one token.
type tokenState struct {
	// Its enqueues invoked, and their outcomes.
	invoked, ok, definite, unknown int

	ids       [][16]byte // distinct, in order of first appearance
	firstSeen []uint64   // the Seq at which each of ids was first seen
	acked     []Event    // the first OpEnqueueOK of each acknowledged ID
	delivered *Event     // its first delivery
}

func (t *tokenState) addID(id [16]byte, seq uint64) {
	if !slices.Contains(t.ids, id) {
		t.ids = append(t.ids, id)
		t.firstSeen = append(t.firstSeen, seq)
	}
}

// messageState is what Check learns of one message ID.
type messageState struct {
	tokens     []string // distinct, in order of first appearance
	deliveries int
	lastTry    map[string]uint32 // consumer → attempt of its latest delivery
	ackOK      *Event            // its first confirmed ack
	ackTry     uint32            // the attempt ackOK's consumer had last received
}

func (m *messageState) addToken(token string) {
	if !slices.Contains(m.tokens, token) {
		m.tokens = append(m.tokens, token)
	}
}

// Check verifies h against the broker's guarantees and returns the counts
// and every violation:
//
//  1. Every enqueue the broker acknowledged (OpEnqueueOK) is delivered at
//     least once, under the ID it was acknowledged with (else KindLost).
//  2. Every delivery carries a token an enqueue was invoked with earlier
//     (else KindUnknownToken); a token becomes at most one message ID,
//     whether its enqueues succeeded, failed or had unknown outcomes, and
//     however often they were retried (else KindDuplicate); and an ID
//     belongs to one token (else KindIDReused). A token whose enqueues
//     all failed definitely is never delivered (else
//     KindDeliveredAfterFailure); one with an unknown outcome may be
//     delivered or not.
//  3. No delivery is recorded after a confirmed ack (OpAckOK) of its
//     message (else KindDeliveredAfterAck). A failed ack counts for
//     nothing, and redelivery before the ack, after a lease expired, is
//     fine. A delivery the broker sent before the ack but that was
//     received after it (held up in a paused node's socket) is reported
//     too: the Detail gives its attempt and that of the acked delivery,
//     to tell it from a redelivery.
//  4. If maxAttempts is not 0, no delivery's attempt exceeds it (else
//     KindTooManyAttempts).
//
// Events are taken in Seq order, and in slice order among equal Seqs.
// Check does not modify h.
func Check(h History, maxAttempts uint32) Report {
	events := slices.Clone(h.Events)
	slices.SortStableFunc(events, func(a, b Event) int { return cmp.Compare(a.Seq, b.Seq) })

	var r Report
	var vs []Violation
	tokens := make(map[string]*tokenState)
	messages := make(map[[16]byte]*messageState)
	tokenOf := func(t string) *tokenState {
		s := tokens[t]
		if s == nil {
			s = &tokenState{}
			tokens[t] = s
		}
		return s
	}
	messageOf := func(id [16]byte) *messageState {
		m := messages[id]
		if m == nil {
			m = &messageState{}
			messages[id] = m
		}
		return m
	}
	unknownSeen := make(map[string]map[[16]byte]bool) // token → IDs reported unknown

	for i := range events {
		e := &events[i]
		switch e.Op {
		case OpEnqueueInvoked:
			tokenOf(e.Token).invoked++
		case OpEnqueueOK:
			t := tokenOf(e.Token)
			t.ok++
			if !slices.ContainsFunc(t.acked, func(a Event) bool { return a.ID == e.ID }) {
				t.acked = append(t.acked, *e)
			}
			t.addID(e.ID, e.Seq)
			messageOf(e.ID).addToken(e.Token)
		case OpEnqueueFailed:
			t := tokenOf(e.Token)
			if e.Definite {
				t.definite++
			} else {
				t.unknown++
			}
		case OpDelivered:
			m := messageOf(e.ID)
			m.deliveries++
			if m.lastTry == nil {
				m.lastTry = make(map[string]uint32)
			}
			m.lastTry[e.Process] = e.Attempt
			if m.deliveries > 1 {
				r.Redelivered++
			}
			if maxAttempts != 0 && e.Attempt > maxAttempts {
				vs = append(vs, Violation{Kind: KindTooManyAttempts, Token: e.Token, ID: e.ID,
					Detail: fmt.Sprintf("delivered to %s as attempt %d at #%d; at most %d allowed", e.Process, e.Attempt, e.Seq, maxAttempts)})
			}
			if a := m.ackOK; a != nil {
				vs = append(vs, Violation{Kind: KindDeliveredAfterAck, Token: e.Token, ID: e.ID,
					Detail: fmt.Sprintf("delivered to %s as attempt %d at #%d, after %s's ack of attempt %d was confirmed at #%d",
						e.Process, e.Attempt, e.Seq, a.Process, m.ackTry, a.Seq)})
			}
			t := tokens[e.Token]
			if t == nil || t.invoked == 0 {
				if unknownSeen[e.Token] == nil {
					unknownSeen[e.Token] = make(map[[16]byte]bool)
				}
				if !unknownSeen[e.Token][e.ID] {
					unknownSeen[e.Token][e.ID] = true
					vs = append(vs, Violation{Kind: KindUnknownToken, Token: e.Token, ID: e.ID,
						Detail: fmt.Sprintf("delivered to %s at #%d, but no enqueue of the token was invoked before", e.Process, e.Seq)})
				}
				continue
			}
			if t.delivered == nil {
				t.delivered = e
			}
			t.addID(e.ID, e.Seq)
			m.addToken(e.Token)
		case OpAckOK:
			if m := messageOf(e.ID); m.ackOK == nil {
				m.ackOK, m.ackTry = e, m.lastTry[e.Process]
			}
		}
	}

	for name, t := range tokens {
		if t.invoked > 0 {
			r.Enqueued++
		}
		if t.ok > 0 {
			r.Acknowledged++
		}
		if len(t.ids) > 1 {
			seen := make([]string, len(t.ids))
			for i, id := range t.ids {
				seen[i] = fmt.Sprintf("%s (#%d)", FormatID(id), t.firstSeen[i])
			}
			vs = append(vs, Violation{Kind: KindDuplicate, Token: name, ID: t.ids[1],
				Detail: fmt.Sprintf("the token became %d messages: %s", len(t.ids), strings.Join(seen, ", "))})
		}
		for _, a := range t.acked {
			if messages[a.ID].deliveries == 0 {
				vs = append(vs, Violation{Kind: KindLost, Token: name, ID: a.ID,
					Detail: fmt.Sprintf("enqueue acknowledged to %s at #%d, never delivered", a.Process, a.Seq)})
			}
		}
		pending := t.invoked - t.ok - t.definite - t.unknown
		if d := t.delivered; d != nil && t.definite > 0 && t.ok == 0 && t.unknown == 0 && pending <= 0 {
			vs = append(vs, Violation{Kind: KindDeliveredAfterFailure, Token: name, ID: d.ID,
				Detail: fmt.Sprintf("delivered to %s at #%d, but all %d enqueues of the token failed definitely", d.Process, d.Seq, t.definite)})
		}
	}
	for id, m := range messages {
		if m.deliveries > 0 {
			r.Delivered++
		}
		if m.ackOK != nil {
			r.Acked++
		}
		if len(m.tokens) > 1 {
			vs = append(vs, Violation{Kind: KindIDReused, Token: m.tokens[1], ID: id,
				Detail: fmt.Sprintf("the ID was given to %d tokens: %s", len(m.tokens), strings.Join(m.tokens, ", "))})
		}
	}

	slices.SortFunc(vs, func(a, b Violation) int {
		return cmp.Or(strings.Compare(a.Kind, b.Kind), strings.Compare(a.Token, b.Token),
			bytes.Compare(a.ID[:], b.ID[:]), strings.Compare(a.Detail, b.Detail))
	})
	r.Violations = vs
	return r
}
