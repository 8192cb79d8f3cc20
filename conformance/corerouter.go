package conformance

import (
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"

	"github.com/fila-mq/fila/sdk/core"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// A cluster conversation (a transcript with nodes) replays against the
// client core's Router (core.Router) instead of one Conn: its seeds are
// the nodes, in order; the first client frame, the Handshake on the first
// node, configures it and connects that node, as a shell connects a seed
// first. Every dial the Router asks for is answered at once (the
// connection opens) and reported as an event, so the next frames of that
// node are its Handshake. A client frame the Router has not written is
// asked of it without naming a node (Send, Subscribe, Unsubscribe, Settle
// for a Credit, Close for a GoAway; an Enqueue unstamped, for the Router
// to stamp), and must appear on the block's node. server close is the
// node's connection lost. Events are the Router's: its request and
// subscription IDs, dial NAME, close NAME, and each node's state changes
// as @NAME handshaken, going-away or failed.

// routerProducer is the Router's producer ID: the canonical value of
// $producer1, the placeholder a recording gives a client's producer ID.
var routerProducer = func() [16]byte {
	v := canonical(&pattern{kind: kUUID, typ: reflect.TypeFor[[16]byte](), field: "producer_id", ph: "producer1"})
	return v.Interface().([16]byte)
}()

func (r *coreRun) cluster() bool { return len(r.t.Nodes) > 0 }

// nodeName returns the transcript's name of the node at addr.
func (r *coreRun) nodeName(addr string) string {
	for _, n := range r.t.Nodes {
		if n.Addr == addr {
			return n.Name
		}
	}
	return addr
}

func (r *coreRun) routerClientFrame(bl *Block) bool {
	addr := r.t.addrOf(bl)
	if r.rt == nil {
		f, err := bl.frame.frame(r.b)
		if err != nil {
			r.mismatch(bl, err.Error())
			return false
		}
		hs, ok := f.(*wire.Handshake)
		if !ok || addr != r.t.Nodes[0].Addr {
			r.mismatch(bl, "the first client frame must be the Handshake on the first node: the shell connects the first seed")
			return false
		}
		seeds := make([]string, len(r.t.Nodes))
		for i, n := range r.t.Nodes {
			seeds[i] = n.Addr
		}
		r.rt = core.NewRouter(core.RouterConfig{
			Conn: core.Config{
				ClientName:   hs.ClientName,
				APIKey:       hs.APIKey,
				Capabilities: hs.Capabilities,
				MaxFrameSize: int(hs.MaxFrameSize),
			},
			Seeds:      seeds,
			ProducerID: routerProducer,
			JitterSeed: 1,
		})
		r.rt.Tick(r.now)
		r.rt.Connected(addr)
	} else if r.drain(); len(r.outs[addr]) == 0 {
		if !r.invokeRouter(bl) {
			return true
		}
	}
	r.drain()
	got, ok := nextFrame(r.outs[addr])
	if !ok {
		m := r.mismatch(bl, fmt.Sprintf("the router wrote no %v to node %s", bl.frame.op, r.nodeName(addr)))
		m.Want = strings.Join(bl.Input, "\n")
		var others []string
		for a, out := range r.outs {
			if len(out) > 0 {
				others = append(others, "to "+r.nodeName(a)+": "+r.describeOut(out))
			}
		}
		m.Got = strings.Join(others, "\n")
		delete(r.outs, addr)
		return true
	}
	r.outs[addr] = r.outs[addr][len(got):]
	r.compareClient(bl, got)
	return true
}

// invokeRouter asks the Router for bl's frame; false if it cannot.
func (r *coreRun) invokeRouter(bl *Block) bool {
	addr := r.t.addrOf(bl)
	f, err := bl.frame.frame(r.b)
	if err != nil {
		r.mismatch(bl, err.Error())
		return false
	}
	sub := func(connSub uint32) uint32 {
		id, ok := r.rt.Subscription(addr, connSub)
		if !ok {
			err = fmt.Errorf("node %s has no subscription %d", r.nodeName(addr), connSub)
		}
		return id
	}
	switch f := f.(type) {
	case *wire.Subscribe:
		_, err = r.rt.SubscribeLease(f.Queue, f.Prefetch, f.RateLimits, f.LeaseTimeoutMS, 0)
	case *wire.Unsubscribe:
		if id := sub(f.Subscription); err == nil {
			_, err = r.rt.Unsubscribe(id)
		}
	case *wire.Credit:
		if id := sub(f.Subscription); err == nil {
			r.rt.Settle(id, r.settleable(id, int(f.Credits))...)
		}
	case *wire.GoAway:
		r.rt.Close()
	case *wire.Handshake:
		err = errors.New("the router sends Handshake when it connects a node")
	case *wire.Pong:
		err = errors.New("the core answers a Ping by itself and did not")
	case *wire.Enqueue:
		e := *f
		e.ProducerID, e.Sequence = [16]byte{}, 0 // the Router stamps it
		_, err = r.rt.Send(&e, 0)
	default:
		if f.Opcode().Kind() != wire.KindRequest {
			err = fmt.Errorf("a client does not send %v", f.Opcode())
			break
		}
		_, err = r.rt.Send(f, 0)
	}
	if err != nil {
		m := r.mismatch(bl, "the router cannot send "+bl.frame.op.String()+": "+err.Error())
		m.Want = strings.Join(bl.Input, "\n")
		return false
	}
	return true
}

// routerStep runs a server or close block of a cluster conversation.
func (r *coreRun) routerStep(bl *Block, raw []byte) bool {
	if r.rt == nil {
		r.mismatch(bl, "a server block before the client's Handshake")
		return false
	}
	addr := r.t.addrOf(bl)
	switch bl.kind {
	case bServerClose:
		r.rt.ConnLost(addr, io.EOF)
	case bClientClose:
		r.mismatch(bl, "client close: a router closes connections itself (client GoAway is Close)")
		return false
	default:
		r.rt.Receive(addr, raw) // a failure shows in the state events
	}
	return true
}

// drainRouter collects the Router's Readys: bytes into outs by node,
// events into events. Dials are answered at once.
func (r *coreRun) drainRouter() {
	for r.rt.HasReady() {
		rd := r.rt.Ready()
		for _, w := range rd.Writes {
			o := w.Out
			if r.opts.outFilter != nil && len(o) > 0 {
				o = r.opts.outFilter(append([]byte(nil), o...))
			}
			r.outs[w.Addr] = append(r.outs[w.Addr], o...)
		}
		r.record(core.Ready{Completions: rd.Completions, Deliveries: rd.Deliveries, Expired: rd.Expired, Ended: rd.Ended})
		for _, ns := range rd.Nodes {
			prev := r.nodeStates[ns.Addr]
			r.nodeStates[ns.Addr] = ns.State
			r.stateEvents("@"+r.nodeName(ns.Addr)+" ", prev, ns.State)
		}
		for _, a := range rd.Close {
			r.events = append(r.events, "close "+r.nodeName(a))
			delete(r.outs, a)
		}
		dials := append([]string(nil), rd.Dial...)
		r.rt.Advance(rd)
		for _, a := range dials {
			r.events = append(r.events, "dial "+r.nodeName(a))
			delete(r.nodeStates, a)
			r.rt.Connected(a)
		}
	}
}
