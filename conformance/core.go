package conformance

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/fila-mq/fila/sdk/core"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// CoreOptions configures ReplayCore.
type CoreOptions struct {
	// Rewrite replaces the transcript's events blocks with the events the
	// core reports, instead of checking them.
	Rewrite bool

	// Exec, when set, is a command line (run with sh -c) whose program
	// is the core under test instead of the Go core: a driver that speaks
	// the JSON-lines protocol of docs/conformance.md on its stdin and
	// stdout. It is started once per transcript. Cluster conversations
	// (nodes), which replay against the Go core's Router, are skipped:
	// ReplayCore returns an error wrapping ErrSkipped.
	Exec string

	// outFilter, when set, transforms every chunk the core writes before
	// it is compared: the tests use it to stand in for a broken codec.
	outFilter func([]byte) []byte
}

// ErrSkipped is returned by ReplayCore for a transcript the target cannot
// replay: a cluster conversation against a core given by CoreOptions.Exec.
var ErrSkipped = errors.New("conformance: skipped")

// A coreTarget is the client core under test: the Go core (goCore), or a
// foreign core behind a driver program (execCore). The replay asks it for
// what a shell would, and renders what it reports.
type coreTarget interface {
	receive(b []byte)
	tick(now core.Time)
	send(f wire.Frame) error
	subscribe(f *wire.Subscribe) error
	unsubscribe(sub uint32) error
	settle(sub uint32, leases []uint64)
	close()
	// drain calls each with every Ready the core has, in order; a Ready
	// is valid only during the call.
	drain(each func(core.Ready))
	// stop ends the core (a driver's process).
	stop()
}

// goCore is the Go core, sdk/core's Conn.
type goCore struct{ c *core.Conn }

func newGoCore(hs *wire.Handshake) *goCore {
	return &goCore{core.New(core.Config{
		ClientName:   hs.ClientName,
		APIKey:       hs.APIKey,
		Capabilities: hs.Capabilities,
		MaxFrameSize: int(hs.MaxFrameSize),
	})}
}

func (g *goCore) receive(b []byte)   { g.c.Receive(b) } // a failure shows in the state events
func (g *goCore) tick(now core.Time) { g.c.Tick(now) }
func (g *goCore) send(f wire.Frame) error {
	_, err := g.c.Send(f)
	return err
}
func (g *goCore) subscribe(f *wire.Subscribe) error {
	_, err := g.c.SubscribeLease(f.Queue, f.Prefetch, f.RateLimits, f.LeaseTimeoutMS)
	return err
}
func (g *goCore) unsubscribe(sub uint32) error {
	_, err := g.c.Unsubscribe(sub)
	return err
}
func (g *goCore) settle(sub uint32, leases []uint64) { g.c.Settle(sub, leases...) }
func (g *goCore) close()                             { g.c.Close() }
func (g *goCore) stop()                              {}
func (g *goCore) drain(each func(core.Ready)) {
	for g.c.HasReady() {
		rd := g.c.Ready()
		each(rd)
		g.c.Advance(rd)
	}
}

// ReplayCore replays t against the sans-io client core (sdk/core) with a
// fake clock. The server's frames are fed to the core with Receive; for
// each client frame, the bytes the core has already written must be that
// frame, or else the core is asked to send it (Send, Subscribe,
// Unsubscribe, Settle for a Credit, Close for a GoAway) and must write
// exactly its bytes. After every block the core's events (completions,
// deliveries, ended subscriptions, redirects, state changes) must be the
// ones the following events block lists.
//
// It returns a *Failure listing every mismatch. With opts.Rewrite it
// rewrites the events blocks in t (not the file) and reports whether they
// changed.
func ReplayCore(t *Transcript, opts CoreOptions) (changed bool, err error) {
	if !t.Applies("core") {
		return false, nil
	}
	if _, err := t.CheckHex(false); err != nil {
		return false, err
	}
	if opts.Exec != "" && len(t.Nodes) > 0 {
		return false, fmt.Errorf("%w: %s is a cluster conversation, which replays against the Go core's Router only", ErrSkipped, t.Name)
	}
	r := &coreRun{t: t, opts: opts, b: newBindings(), held: map[uint32][]uint64{},
		outs: map[string][]byte{}, nodeStates: map[string]core.State{}}
	r.run()
	if r.c != nil {
		r.c.stop()
		if x, ok := r.c.(*execCore); ok && x.err != nil {
			r.mismatch(nil, x.err.Error())
		}
	}
	if opts.Rewrite {
		return r.changed, nil
	}
	if len(r.mm) > 0 {
		return false, &Failure{Transcript: t.Name, Target: "core", Mismatches: r.mm}
	}
	return false, nil
}

type coreRun struct {
	t    *Transcript
	opts CoreOptions
	b    *bindings
	c    coreTarget
	now  core.Time

	// A cluster conversation's Router (see corerouter.go), what it wrote
	// to each node and not yet matched, and each node's last state.
	rt         *core.Router
	outs       map[string][]byte
	nodeStates map[string]core.State

	out    []byte   // written by the core, not yet matched
	events []string // reported by the core, not yet matched
	state  core.State
	pos    int // index in t.Blocks of the block being replayed
	// held lists, by subscription, the leases of the deliveries the core
	// reported and the replay has not settled, in delivery order, less
	// those the broker expired: what a Credit frame may settle.
	held map[uint32][]uint64

	mm      []*Mismatch
	changed bool
}

func (r *coreRun) mismatch(bl *Block, what string) *Mismatch {
	m := &Mismatch{Transcript: r.t.Name, What: what}
	if bl != nil {
		m.Line = bl.Line
	}
	r.mm = append(r.mm, m)
	return m
}

func (r *coreRun) run() {
	var blocks []*Block
	for i, bl := range r.t.Blocks {
		if bl.kind == bEvents {
			if r.opts.Rewrite {
				continue // regenerated below
			}
			r.checkEvents(bl)
			blocks = append(blocks, bl)
			continue
		}
		if len(r.events) > 0 && !r.opts.Rewrite {
			r.checkEvents(nil)
		}
		blocks = append(blocks, bl)
		r.pos = i
		if !r.step(bl) {
			return
		}
		r.drain()
		if r.opts.Rewrite && len(r.events) > 0 {
			ev := &Block{Directive: "events", kind: bEvents, hasSep: true, Output: r.events}
			if i+1 < len(r.t.Blocks) && r.t.Blocks[i+1].kind == bEvents {
				old := r.t.Blocks[i+1]
				ev.pre, ev.Line = old.pre, old.Line
				r.changed = r.changed || !slicesEqual(old.Output, r.events)
			} else {
				ev.pre = []string{""}
				r.changed = true
			}
			blocks = append(blocks, ev)
			r.events = nil
		} else if r.opts.Rewrite && i+1 < len(r.t.Blocks) && r.t.Blocks[i+1].kind == bEvents {
			r.changed = true // an events block the core no longer reports
		}
	}
	if r.opts.Rewrite {
		r.t.Blocks = blocks
		return
	}
	if len(r.events) > 0 {
		r.checkEvents(nil)
	}
	if len(r.out) > 0 {
		m := r.mismatch(nil, "the core wrote bytes after the transcript's last client frame")
		m.Got = r.describeOut(r.out)
	}
	for _, n := range r.t.Nodes {
		if out := r.outs[n.Addr]; len(out) > 0 {
			m := r.mismatch(nil, "the router wrote bytes to node "+n.Name+" after the transcript's last client frame")
			m.Got = r.describeOut(out)
		}
	}
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// step runs one block; false stops the replay.
func (r *coreRun) step(bl *Block) bool {
	switch bl.kind {
	case bClientFrame:
		if r.cluster() {
			return r.routerClientFrame(bl)
		}
		return r.clientFrame(bl)
	case bServerFrame:
		raw, err := bl.frame.encode(r.b)
		if err != nil {
			r.mismatch(bl, err.Error())
			return false
		}
		if r.cluster() {
			return r.routerStep(bl, raw)
		}
		return r.receive(bl, raw)
	case bServerRaw:
		if r.cluster() {
			return r.routerStep(bl, bl.raw)
		}
		return r.receive(bl, bl.raw)
	case bServerClose, bClientClose:
		if r.cluster() {
			return r.routerStep(bl, nil)
		}
	case bClientRaw:
		r.mismatch(bl, "raw client bytes cannot come from the core: the transcript should not target core")
		return false
	case bTick:
		r.now = r.now.Add(bl.dur)
		switch {
		case r.rt != nil:
			r.rt.Tick(r.now)
		case r.c != nil:
			r.c.tick(r.now)
		}
	}
	return true
}

func (r *coreRun) receive(bl *Block, raw []byte) bool {
	if r.c == nil {
		r.mismatch(bl, "a server frame before the client's Handshake")
		return false
	}
	r.c.receive(raw)
	return true
}

func (r *coreRun) clientFrame(bl *Block) bool {
	if r.c == nil {
		f, err := bl.frame.frame(r.b)
		if err != nil {
			r.mismatch(bl, err.Error())
			return false
		}
		hs, ok := f.(*wire.Handshake)
		if !ok {
			r.mismatch(bl, fmt.Sprintf("the first client frame is %v; the core always starts with Handshake", bl.frame.op))
			return false
		}
		if r.opts.Exec != "" {
			x, err := startExecCore(r.opts.Exec, hs)
			if err != nil {
				r.mismatch(bl, err.Error())
				return false
			}
			r.c = x
		} else {
			r.c = newGoCore(hs)
		}
		r.c.tick(r.now)
	} else if r.drain(); len(r.out) == 0 {
		if !r.invoke(bl) {
			return true
		}
	}
	r.drain()
	got, ok := nextFrame(r.out)
	if !ok {
		m := r.mismatch(bl, "the core wrote no "+bl.frame.op.String())
		m.Want = strings.Join(bl.Input, "\n")
		m.Got = r.describeOut(r.out)
		r.out = nil
		return true
	}
	r.out = r.out[len(got):]
	r.compareClient(bl, got)
	return true
}

// compareClient checks got, one logical frame the core wrote, against bl.
func (r *coreRun) compareClient(bl *Block, got []byte) {
	m := newMatcher(r.b)
	h, f, derr := decodeLogical(got)
	if derr == nil {
		m.matchFrame(bl.frame, h, f)
	}
	diffs := m.diffs
	m.commit()
	want, err := bl.frame.encode(r.b)
	if err != nil {
		r.mismatch(bl, err.Error())
		return
	}
	if derr == nil && len(diffs) == 0 && bytes.Equal(want, got) {
		return
	}
	mm := r.mismatch(bl, "the core wrote a different "+bl.frame.op.String())
	mm.Fields = fieldLines(diffs)
	mm.Bytes = byteDiff(want, got)
	mm.Want = strings.Join(bl.Input, "\n")
	mm.Got = describeFrame(got, derr, h, f)
}

// invoke asks the core to send bl's frame; false if it cannot.
func (r *coreRun) invoke(bl *Block) bool {
	f, err := bl.frame.frame(r.b)
	if err != nil {
		r.mismatch(bl, err.Error())
		return false
	}
	switch f := f.(type) {
	case *wire.Subscribe:
		err = r.c.subscribe(f)
	case *wire.Unsubscribe:
		err = r.c.unsubscribe(f.Subscription)
	case *wire.Credit:
		r.c.settle(f.Subscription, r.settleable(f.Subscription, int(f.Credits)))
	case *wire.GoAway:
		r.c.close()
	case *wire.Handshake:
		err = errors.New("the core sends Handshake only once, first")
	case *wire.Pong:
		err = errors.New("the core answers a Ping by itself and did not")
	default:
		if f.Opcode().Kind() != wire.KindRequest {
			err = fmt.Errorf("a client does not send %v", f.Opcode())
			break
		}
		err = r.c.send(f)
	}
	if err != nil {
		m := r.mismatch(bl, "the core cannot send "+bl.frame.op.String()+": "+err.Error())
		m.Want = strings.Join(bl.Input, "\n")
		return false
	}
	return true
}

// settleable picks n leases of sub for a Credit frame to settle: first
// those the transcript's next settling requests (Ack, Nack, RetryAfter,
// Release) name, as an SDK settles a delivery just before acking it; then
// the oldest the core holds. It takes them from r.held.
func (r *coreRun) settleable(sub uint32, n int) []uint64 {
	held := r.held[sub]
	var pick []uint64
	take := func(l uint64) {
		if i := slices.Index(held, l); i >= 0 && len(pick) < n {
			pick = append(pick, l)
			held = slices.Delete(held, i, i+1)
		}
	}
	for _, bl := range r.t.Blocks[r.pos+1:] {
		if len(pick) == n {
			break
		}
		if bl.kind != bClientFrame {
			continue
		}
		f, err := bl.frame.frame(r.b)
		if err != nil {
			continue // names values not bound yet
		}
		switch f := f.(type) {
		case *wire.Ack:
			for _, it := range f.Items {
				take(it.Lease)
			}
		case *wire.Release:
			for _, it := range f.Items {
				take(it.Lease)
			}
		case *wire.Nack:
			for _, it := range f.Items {
				take(it.Lease)
			}
		case *wire.RetryAfter:
			for _, it := range f.Items {
				take(it.Lease)
			}
		}
	}
	for len(pick) < n && len(held) > 0 {
		pick = append(pick, held[0])
		held = held[1:]
	}
	r.held[sub] = held
	return pick
}

// drain collects the core's Readys: bytes into out, events into events.
func (r *coreRun) drain() {
	if r.rt != nil {
		r.drainRouter()
		return
	}
	if r.c == nil {
		return
	}
	r.c.drain(func(rd core.Ready) {
		o := rd.Out
		if r.opts.outFilter != nil && len(o) > 0 {
			o = r.opts.outFilter(append([]byte(nil), o...))
		}
		r.out = append(r.out, o...)
		r.record(rd)
	})
}

// record renders a Ready's events, one line each.
func (r *coreRun) record(rd core.Ready) {
	rn := renderer{n: bound{r.b}}
	str := func(s string) string { return strconv.Quote(r.b.interpolate(s)) }
	errText := r.errText
	for _, cp := range rd.Completions {
		line := fmt.Sprintf("completion req=%d %v", cp.RequestID, cp.Op)
		if cp.Err != nil {
			line += " " + errText(cp.Err)
		} else {
			line += " " + cp.Response.Opcode().String()
		}
		r.events = append(r.events, line)
	}
	for _, d := range rd.Deliveries {
		ids := make([]string, len(d.Messages))
		for i := range d.Messages {
			ids[i] = rn.value("id", reflect.Value{}, reflect.ValueOf(d.Messages[i].ID))
			r.held[d.Subscription] = append(r.held[d.Subscription], d.Messages[i].Lease)
		}
		r.events = append(r.events, fmt.Sprintf("delivery sub=%d ids=[%s]", d.Subscription, strings.Join(ids, " ")))
	}
	for _, e := range rd.Expired {
		ids := make([]string, len(e.Leases))
		for i, l := range e.Leases {
			ids[i] = rn.value("id", reflect.Value{}, reflect.ValueOf(l.ID))
			if held := r.held[e.Subscription]; slices.Contains(held, l.Lease) {
				r.held[e.Subscription] = slices.DeleteFunc(held, func(x uint64) bool { return x == l.Lease })
			}
		}
		r.events = append(r.events, fmt.Sprintf("expired sub=%d ids=[%s]", e.Subscription, strings.Join(ids, " ")))
	}
	for _, e := range rd.Ended {
		line := fmt.Sprintf("ended sub=%d", e.Subscription)
		if e.Err != nil {
			line += " " + errText(e.Err)
		}
		r.events = append(r.events, line)
	}
	for _, rdr := range rd.Redirects {
		r.events = append(r.events, fmt.Sprintf("redirect req=%d %v leader_hint=%s", rdr.RequestID, rdr.Op, str(rdr.LeaderHint)))
	}
	if st := rd.State; st != nil {
		prev := r.state
		r.state = *st
		r.stateEvents("", prev, *st)
	}
}

// errText renders an error of an event.
func (r *coreRun) errText(err error) string {
	str := func(s string) string { return strconv.Quote(r.b.interpolate(s)) }
	if errors.Is(err, core.ErrConnectionLost) {
		// Lost with the connection: the text says why.
		return "error=" + str(err.Error())
	}
	var re *core.RequestError
	if errors.As(err, &re) {
		s := "error=" + re.Code.String()
		if re.Message != "" {
			s += " message=" + str(re.Message)
		}
		if re.LeaderHint != "" {
			s += " leader_hint=" + str(re.LeaderHint)
		}
		return s
	}
	var ce *wire.ConnError
	if errors.As(err, &ce) {
		return "error=" + ce.Code.String() + " reason=" + str(ce.Reason)
	}
	return "error=" + str(err.Error())
}

// stateEvents renders a connection's state changes from prev to st, each
// line starting with prefix.
func (r *coreRun) stateEvents(prefix string, prev, st core.State) {
	rn := renderer{n: bound{r.b}}
	str := func(s string) string { return strconv.Quote(r.b.interpolate(s)) }
	add := func(line string) { r.events = append(r.events, prefix+line) }
	{
		if st.Handshaken && !prev.Handshaken {
			caps := make([]string, len(st.Capabilities))
			for i, c := range st.Capabilities {
				caps[i] = strconv.Quote(c)
			}
			add(fmt.Sprintf("handshaken version=%d node_id=%s server_name=%s max_frame_size=%d capabilities=[%s]",
				st.Version, rn.value("node_id", reflect.Value{}, reflect.ValueOf(st.NodeID)),
				rn.value("server_name", reflect.Value{}, reflect.ValueOf(st.ServerName)),
				st.ServerMaxFrame, strings.Join(caps, " ")))
		}
		if st.GoingAway && !prev.GoingAway {
			line := "going-away"
			if st.GoAwayCode != wire.CodeOK || st.GoAwayMessage != "" {
				line += " code=" + st.GoAwayCode.String() + " message=" + str(st.GoAwayMessage)
			}
			if st.LeaderHint != "" {
				line += " leader_hint=" + str(st.LeaderHint)
			}
			add(line)
		}
		if st.Failed && !prev.Failed {
			add("failed " + r.errText(st.Err))
		}
	}
}

// checkEvents compares the events reported since the last check with bl,
// or with none when bl is nil.
func (r *coreRun) checkEvents(bl *Block) {
	var want []string
	if bl != nil {
		want = bl.Output
	}
	got := r.events
	r.events = nil
	if slicesEqual(want, got) {
		return
	}
	line := 0
	what := "the core reported other events"
	if bl == nil {
		what = "the core reported events the transcript does not list"
		if len(r.mm) == 0 {
			line = r.lastLine()
		}
	} else {
		line = bl.Line
	}
	m := r.mismatch(nil, what)
	m.Line = line
	m.Want = strings.Join(want, "\n")
	m.Got = strings.Join(got, "\n")
}

func (r *coreRun) lastLine() int {
	if n := len(r.t.Blocks); n > 0 {
		return r.t.Blocks[n-1].Line
	}
	return 0
}

func (r *coreRun) describeOut(out []byte) string {
	var parts []string
	for len(out) > 0 {
		fr, ok := nextFrame(out)
		if !ok {
			parts = append(parts, "incomplete bytes "+shortHex(out))
			break
		}
		h, f, err := decodeLogical(fr)
		parts = append(parts, describeFrame(fr, err, h, f))
		out = out[len(fr):]
	}
	return strings.Join(parts, "\n")
}

// nextFrame returns the bytes of the first logical frame of b: one
// physical frame, or a run of them joined by FlagContinued.
func nextFrame(b []byte) ([]byte, bool) {
	off := 0
	for {
		if len(b)-off < wire.HeaderSize {
			return nil, false
		}
		h, _ := wire.ParseHeader(b[off:])
		end := off + wire.HeaderSize + int(h.Length)
		if int(h.Length) > len(b) || end > len(b) {
			return nil, false
		}
		off = end
		if !h.Flags.Has(wire.FlagContinued) {
			return b[:off], true
		}
	}
}

// decodeLogical decodes the bytes of one logical frame.
func decodeLogical(b []byte) (wire.Header, wire.Frame, error) {
	ps := splitPhysical(b)
	h := ps[0].h
	h.Flags &^= wire.FlagContinued
	body := logicalBody(b, ps)
	h.Length = uint32(len(body))
	f, err := wire.DecodeFrame(h.Opcode, body)
	return h, f, err
}

func describeFrame(b []byte, err error, h wire.Header, f wire.Frame) string {
	if err != nil {
		return fmt.Sprintf("undecodable %v req=%d (%v): %s", h.Opcode, h.RequestID, err, shortHex(b))
	}
	if uf, ok := f.(*wire.UnknownFrame); ok {
		return fmt.Sprintf("frame of unknown opcode 0x%04x req=%d body=%s", uint16(uf.Op), h.RequestID, shortHex(uf.Body))
	}
	return renderFrame(h, f)
}
