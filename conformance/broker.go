package conformance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// DefaultTimeout is how long a replayer waits for the side under test by
// default: for a group of server frames (broker mode) or one client frame
// (client mode).
const DefaultTimeout = 10 * time.Second

// BrokerOptions configures ReplayBroker.
type BrokerOptions struct {
	// Timeout bounds the wait for each group of server frames; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Dial opens the connection; nil dials TCP.
	Dial func(ctx context.Context, addr string) (net.Conn, error)
}

// ReplayBroker plays the client's side of t to a live broker at addr and
// checks its replies.
//
// Client frames are sent with their placeholders replaced by the values
// bound so far. The server frames between two client frames form a group
// that is matched as a set, whatever order they arrive in: each frame
// against the group's frame with the same opcode and request ID, and
// Delivery frames message by message, in order for each subscription,
// whatever frames the broker batched them in. A frame that matches nothing
// in its group is kept for the groups after it (a delivery pushed early);
// one left over at the end is a mismatch. Placeholders are bound to the
// broker's values when first seen.
//
// It returns a *Failure listing the mismatches; the replay stops at the
// first group that does not complete within the timeout.
func ReplayBroker(ctx context.Context, t *Transcript, addr string, opts BrokerOptions) error {
	if !t.Applies("broker") {
		return nil
	}
	if _, err := t.CheckHex(false); err != nil {
		return err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	dial := opts.Dial
	if dial == nil {
		var d net.Dialer
		dial = func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	c, err := dial(ctx, addr)
	if err != nil {
		return fmt.Errorf("conformance: %s: connect to the broker: %w", t.Name, err)
	}
	r := &brokerRun{t: t, opts: opts, b: newBindings(), c: c, in: newStream(c),
		granted: map[uint32]uint64{}, delivered: map[uint32]uint64{}, opened: map[uint32]bool{}}
	defer r.in.close()
	r.run()
	if len(r.mm) > 0 {
		return &Failure{Transcript: t.Name, Target: "broker", Mismatches: r.mm}
	}
	return nil
}

type brokerRun struct {
	t    *Transcript
	opts BrokerOptions
	b    *bindings
	c    net.Conn
	in   *stream
	held []*inbound // frames that matched nothing in their group yet
	mm   []*Mismatch

	// Delivery credit, by subscription, as the client granted it: a
	// broker may never have delivered more than granted.
	granted   map[uint32]uint64 // prefetch (or the cap granted for 0) plus Credit frames and expired leases; absent for unlimited
	delivered map[uint32]uint64
	opened    map[uint32]bool // SubscribeOk received
}

func (r *brokerRun) mismatch(line int, what string) *Mismatch {
	m := &Mismatch{Transcript: r.t.Name, Line: line, What: what}
	r.mm = append(r.mm, m)
	return m
}

func (r *brokerRun) run() {
	bs := r.t.Blocks
	for i := 0; i < len(bs); i++ {
		bl := bs[i]
		switch bl.kind {
		case bClientFrame:
			raw, err := bl.frame.encode(r.b)
			if err != nil {
				r.mismatch(bl.Line, err.Error())
				return
			}
			if !r.write(bl, raw) {
				return
			}
			r.grant(bl.frame)
		case bClientRaw:
			if !r.write(bl, bl.raw) {
				return
			}
		case bClientClose:
			closeWrite(r.c)
		case bServerFrame, bServerRaw, bServerClose:
			j := i
			var group []*Block
			for ; j < len(bs) && (bs[j].isServer() || bs[j].kind == bEvents || bs[j].kind == bTick); j++ {
				if bs[j].isServer() {
					group = append(group, bs[j])
				}
			}
			if !r.group(group) {
				return
			}
			i = j - 1
		}
	}
	for _, in := range r.held {
		m := r.mismatch(0, "the broker sent a frame the transcript does not have")
		m.Got = in.String()
	}
	if in := r.in.pending(); in != nil {
		m := r.mismatch(0, "the broker sent a frame after the transcript's end")
		m.Got = in.String()
	}
}

func (r *brokerRun) write(bl *Block, raw []byte) bool {
	r.c.SetWriteDeadline(time.Now().Add(r.opts.Timeout))
	if _, err := r.c.Write(raw); err != nil {
		r.mismatch(bl.Line, "writing to the broker failed: "+err.Error())
		return false
	}
	return true
}

// expected is one frame of a group, or one message of a Delivery.
type expected struct {
	bl      *Block
	msg     *pattern // for a delivered message: its pattern
	index   int      // and its index in the transcript's frame
	matched bool
}

func (e *expected) describe() string {
	if e.msg == nil {
		return fmt.Sprintf("line %d: %s", e.bl.Line, strings.Join(e.bl.Input, " "))
	}
	return fmt.Sprintf("line %d: message %d of %s", e.bl.Line, e.index, strings.Join(e.bl.Input, " "))
}

// group matches the broker's frames against one group of server blocks;
// false stops the replay.
func (r *brokerRun) group(group []*Block) bool {
	var frames []*expected
	deliveries := map[uint32][]*expected{} // by subscription, in order
	expectClose := false
	left := 0
	for _, bl := range group {
		switch bl.kind {
		case bServerRaw:
			r.mismatch(bl.Line, "raw server bytes cannot be expected of a broker: the transcript should not target broker")
			return false
		case bServerClose:
			expectClose = true
		case bServerFrame:
			if bl.frame.op == wire.OpDelivery {
				for k, it := range deliveredItems(bl.frame) {
					deliveries[bl.frame.reqID] = append(deliveries[bl.frame.reqID], &expected{bl: bl, msg: it, index: k})
					left++
				}
				continue
			}
			frames = append(frames, &expected{bl: bl})
			if !bl.optional {
				left++
			}
		}
	}
	held := r.held
	r.held = nil
	for _, in := range held {
		left -= r.place(in, frames, deliveries)
	}
	for left > 0 {
		in, err := r.in.next(r.opts.Timeout)
		if err != nil {
			r.missing(group, frames, deliveries, err)
			return false
		}
		left -= r.place(in, frames, deliveries)
	}
	if !expectClose {
		return true
	}
	for {
		in, err := r.in.next(r.opts.Timeout)
		if in != nil {
			if r.placeOptional(in, frames) {
				continue
			}
			m := r.mismatch(group[len(group)-1].Line, "the broker sent a frame where it should close the connection")
			m.Got = in.String()
			continue
		}
		if errors.Is(err, errTimeout) {
			r.mismatch(group[len(group)-1].Line, fmt.Sprintf("the broker did not close the connection within %v", r.opts.Timeout))
			return false
		}
		if !errors.Is(err, io.EOF) && !isReset(err) {
			r.mismatch(group[len(group)-1].Line, "the connection failed where the broker should close it: "+err.Error())
		}
		return true
	}
}

func isReset(err error) bool {
	var ne *net.OpError
	return errors.As(err, &ne) && strings.Contains(ne.Err.Error(), "connection reset")
}

// missing reports what a group still waited for when err ended the wait.
func (r *brokerRun) missing(group []*Block, frames []*expected, deliveries map[uint32][]*expected, err error) {
	why := fmt.Sprintf("the broker sent nothing more within %v", r.opts.Timeout)
	if !errors.Is(err, errTimeout) {
		why = "the broker closed the connection (" + err.Error() + ")"
	}
	m := r.mismatch(group[0].Line, why+"; still expected:")
	var want []string
	for _, e := range frames {
		if !e.matched && !e.bl.optional {
			want = append(want, e.describe())
		}
	}
	for _, q := range deliveries {
		for _, e := range q {
			if !e.matched {
				want = append(want, e.describe())
			}
		}
	}
	m.Want = strings.Join(want, "\n")
	var got []string
	for _, in := range r.held {
		got = append(got, "unmatched: "+in.String())
	}
	m.Got = strings.Join(got, "\n")
}

// place matches one received frame against the group and returns how
// many expected items it settled; what matches nothing is held.
func (r *brokerRun) place(in *inbound, frames []*expected, deliveries map[uint32][]*expected) int {
	if in.err != nil {
		m := r.mismatch(0, "the broker sent an undecodable frame: "+in.err.Error())
		m.Got = shortHex(in.raw)
		return 0
	}
	if d, ok := in.f.(*wire.Delivery); ok {
		r.spend(in, d)
		return r.placeDelivery(in, d, deliveries)
	}
	if ok, isOK := in.f.(*wire.SubscribeOk); isOK {
		r.opened[in.h.RequestID] = true
		g, limited := r.granted[in.h.RequestID]
		switch {
		case limited && uint64(ok.Prefetch) < g:
			r.granted[in.h.RequestID] = uint64(ok.Prefetch) // the broker capped it
		case !limited && ok.Prefetch > 0:
			r.granted[in.h.RequestID] = uint64(ok.Prefetch) // prefetch 0: the broker's cap
		}
	}
	if e, isExp := in.f.(*wire.LeaseExpired); isExp {
		// The broker gave the credit of each expired lease back.
		if _, limited := r.granted[in.h.RequestID]; limited {
			r.granted[in.h.RequestID] += uint64(len(e.Leases))
		}
	}
	var cand *expected
	for _, e := range frames {
		if !e.matched && e.bl.frame.op == in.h.Opcode && e.bl.frame.reqID == in.h.RequestID {
			cand = e
			break
		}
	}
	if cand == nil {
		for _, e := range frames {
			if !e.matched && e.bl.frame.reqID == in.h.RequestID && in.h.RequestID != 0 {
				cand = e // same request, another frame: an Error for a result, say
				break
			}
		}
	}
	if cand == nil {
		r.held = append(r.held, in)
		return 0
	}
	cand.matched = true
	m := newMatcher(r.b)
	m.matchFrame(cand.bl.frame, in.h, in.f)
	if len(m.diffs) > 0 {
		r.frameMismatch(cand.bl, m, in)
	}
	m.commit()
	if cand.bl.optional {
		return 0 // not counted among the frames the group waits for
	}
	return 1
}

// placeOptional matches a frame that arrived after the required ones
// against the group's optional frames.
func (r *brokerRun) placeOptional(in *inbound, frames []*expected) bool {
	for _, e := range frames {
		if e.bl.optional && !e.matched && in.err == nil && e.bl.frame.op == in.h.Opcode && e.bl.frame.reqID == in.h.RequestID {
			r.place(in, []*expected{e}, nil)
			return true
		}
	}
	return false
}

func (r *brokerRun) frameMismatch(bl *Block, m *matcher, in *inbound) {
	mm := r.mismatch(bl.Line, "the broker's "+in.h.Opcode.String()+" differs from the transcript's")
	mm.Fields = fieldLines(m.diffs)
	if want, err := bl.frame.encode(m.scratch()); err == nil {
		mm.Bytes = byteDiff(want, in.raw)
	}
	mm.Want = strings.Join(bl.Input, "\n")
	mm.Got = in.String()
}

// scratch returns the bindings with the fresh ones added, for building
// the expected bytes of a frame that did not match.
func (m *matcher) scratch() *bindings {
	b := newBindings()
	for _, src := range []*bindings{m.b, m.fresh} {
		for k, v := range src.vals {
			b.bind(k, v, src.field[k])
		}
	}
	return b
}

func (r *brokerRun) placeDelivery(in *inbound, d *wire.Delivery, deliveries map[uint32][]*expected) int {
	n := 0
	q := deliveries[in.h.RequestID]
	for j := range d.Messages {
		var e *expected
		for _, c := range q {
			if !c.matched {
				e = c
				break
			}
		}
		if e == nil {
			rest := &wire.Delivery{Messages: d.Messages[j:]}
			raw := wire.AppendFrame(nil, in.h.RequestID, rest)
			r.held = append(r.held, &inbound{raw: raw, h: in.h, f: rest})
			return n
		}
		e.matched = true
		n++
		m := newMatcher(r.b)
		msg := reflect.ValueOf(&d.Messages[j]).Elem()
		m.match(e.msg, msg, fmt.Sprintf("messages[%d]", e.index))
		if len(m.diffs) > 0 {
			mm := r.mismatch(e.bl.Line, fmt.Sprintf("message %d of the broker's Delivery differs from message %d of the transcript's", j, e.index))
			mm.Fields = fieldLines(m.diffs)
			if wv, err := e.msg.build(m.scratch()); err == nil {
				want := wire.AppendFrame(nil, in.h.RequestID, &wire.Delivery{Messages: []wire.DeliveredMessage{wv.Interface().(wire.DeliveredMessage)}})
				got := wire.AppendFrame(nil, in.h.RequestID, &wire.Delivery{Messages: d.Messages[j : j+1]})
				mm.Bytes = append([]string{"(bytes of a Delivery holding only this message)"}, byteDiff(want, got)...)
			}
			mm.Want = renderer{}.value("messages", reflect.Value{}, reflect.ValueOf(mustBuild(e.msg, m.scratch())))
			mm.Got = renderPlain(msg)
		}
		m.commit()
	}
	return n
}

func mustBuild(p *pattern, b *bindings) any {
	v, err := p.build(b)
	if err != nil {
		return err.Error()
	}
	return v.Interface()
}

// deliveredItems returns the message patterns of a Delivery frame.
func deliveredItems(fp *framePattern) []*pattern {
	if p := fp.body.fields[0]; p != nil {
		return p.items
	}
	return nil
}

// grant accounts for the credit a client frame gives the broker.
func (r *brokerRun) grant(fp *framePattern) {
	switch fp.op {
	case wire.OpSubscribe:
		if p := fp.body.fields[1]; p != nil && p.lit.IsValid() && p.lit.Uint() > 0 {
			r.granted[fp.reqID] = p.lit.Uint()
		}
	case wire.OpCredit:
		sub, credits := fp.body.fields[0], fp.body.fields[1]
		if sub != nil && credits != nil && sub.lit.IsValid() && credits.lit.IsValid() {
			if _, limited := r.granted[uint32(sub.lit.Uint())]; limited {
				r.granted[uint32(sub.lit.Uint())] += credits.lit.Uint()
			}
		}
	}
}

// spend checks a Delivery against its subscription, whatever the
// transcript says: a broker delivers only after SubscribeOk, and never more
// than it was granted.
func (r *brokerRun) spend(in *inbound, d *wire.Delivery) {
	sub := in.h.RequestID
	if !r.opened[sub] {
		m := r.mismatch(0, fmt.Sprintf("the broker delivered to subscription %d before its SubscribeOk", sub))
		m.Got = in.String()
	}
	r.delivered[sub] += uint64(len(d.Messages))
	if g, limited := r.granted[sub]; limited && r.delivered[sub] > g {
		m := r.mismatch(0, fmt.Sprintf("the broker delivered %d messages to subscription %d, which the client granted %d credits so far", r.delivered[sub], sub, g))
		m.Got = in.String()
	}
}
