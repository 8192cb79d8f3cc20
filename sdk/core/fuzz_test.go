package core

import (
	"errors"
	"testing"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// FuzzReceive feeds arbitrary server bytes, in arbitrary splits, to a
// handshaken connection with a subscription and requests in flight. The
// core must never panic, must fail the connection on any error it returns,
// and must keep its credit invariant (checkCredit), expiries included.
func FuzzReceive(f *testing.F) {
	seed := func(frames ...func([]byte) []byte) []byte {
		var b []byte
		for _, fn := range frames {
			b = fn(b)
		}
		return b
	}
	// Request IDs in the harness below: 1 handshake, 2 subscribe, 3 enqueue.
	f.Add(seed(
		func(b []byte) []byte { return wire.AppendFrame(b, 1, &wire.HandshakeOk{Version: 1}) },
		func(b []byte) []byte { return wire.AppendFrame(b, 2, &wire.SubscribeOk{Prefetch: 4}) },
		func(b []byte) []byte { return wire.AppendFrame(b, 2, delivery(2)) },
		func(b []byte) []byte {
			return wire.AppendFrame(b, 2, &wire.LeaseExpired{Leases: []wire.ExpiredLease{{Lease: 1}, {Lease: 7}}})
		},
		func(b []byte) []byte {
			return wire.AppendFrame(b, 3, &wire.EnqueueResult{Results: []wire.EnqueueItemResult{{}}})
		},
		func(b []byte) []byte { return wire.AppendFrame(b, 9, &wire.Ping{Nonce: 1}) },
	), uint8(5))
	f.Add(seed(
		func(b []byte) []byte { return wire.AppendFrame(b, 1, &wire.HandshakeOk{Version: 1}) },
		func(b []byte) []byte { return wire.AppendFrame(b, 2, &wire.ErrorFrame{Code: wire.CodeQueueNotFound}) },
		func(b []byte) []byte { return wire.AppendFrame(b, 0, &wire.GoAway{}) },
	), uint8(1))
	f.Fuzz(func(t *testing.T, data []byte, chunk uint8) {
		c := New(Config{})
		c.Tick(1)
		sub, _ := c.Subscribe("q", 4, nil)
		c.Enqueue([]wire.EnqueueMessage{{Queue: "q"}})
		step := int(chunk%32) + 1
		for len(data) > 0 {
			n := min(step, len(data))
			err := c.Receive(data[:n])
			data = data[n:]
			if err != nil && !c.State().Failed {
				t.Fatalf("Receive returned %v but the connection is not failed", err)
			}
			for c.HasReady() {
				rd := c.Ready()
				for _, d := range rd.Deliveries {
					for _, m := range d.Messages {
						c.Settle(d.Subscription, m.Lease)
					}
				}
				c.Advance(rd)
			}
			if err := checkCredit(c, sub); err != nil {
				t.Fatalf("credit invariant: %v", err)
			}
		}
	})
}

// FuzzRouter drives a Router over three nodes with calls, dial outcomes,
// connection losses, time and broker frames chosen by the input: answers
// to the requests in flight (results, NOT_LEADER with and without a hint,
// other errors), deliveries, GoAway, and raw bytes. The Router must never
// panic, must complete every request and every first Subscribe at most
// once and only those it was given, and must keep each connection's
// credit invariant.
func FuzzRouter(f *testing.F) {
	f.Add([]byte{0, 6, 9, 0, 9, 1, 9, 3, 2, 9, 4, 8, 5, 6, 9, 0})
	f.Add([]byte{2, 6, 9, 0, 9, 2, 9, 5, 9, 3, 4, 3, 11})
	f.Add([]byte{0, 1, 6, 9, 0, 9, 6, 9, 7, 10, 1, 2, 3, 5, 5, 6, 9, 1})
	nodes := []string{"a:1", "b:1", "c:1"}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := NewRouter(RouterConfig{Seeds: nodes[:1], ProducerID: testProducer, JitterSeed: 1,
			Conn: Config{KeepaliveInterval: time.Second}})
		now := Time(1)
		r.Tick(now)
		next := func() byte {
			if len(data) == 0 {
				return 0
			}
			b := data[0]
			data = data[1:]
			return b
		}
		issued := map[uint32]bool{}
		done := map[uint32]bool{}
		var subs []uint32
		var dials []string
		var leases []uint64
		drain := func() {
			for r.HasReady() {
				rd := r.Ready()
				dials = append(dials, rd.Dial...)
				for _, cp := range rd.Completions {
					if !issued[cp.RequestID] || done[cp.RequestID] {
						t.Fatalf("completion of request %d, issued %v, done %v", cp.RequestID, issued[cp.RequestID], done[cp.RequestID])
					}
					done[cp.RequestID] = true
				}
				for _, d := range rd.Deliveries {
					for _, m := range d.Messages {
						leases = append(leases, m.Lease)
					}
				}
				r.Advance(rd)
			}
			for _, n := range r.order {
				if n.conn == nil {
					continue
				}
				for id := range n.conn.subs {
					if err := checkCredit(n.conn, id); err != nil {
						t.Fatalf("%s subscription %d: %v", n.addr, id, err)
					}
				}
			}
		}
		queues := []string{"x", "y", "x.dlq"}
		for len(data) > 0 {
			switch next() % 12 {
			case 0:
				n := int(next()%3) + 1
				ms := make([]wire.EnqueueMessage, n)
				for i := range ms {
					ms[i].Queue = queues[int(next())%len(queues)]
				}
				if id, err := r.Enqueue(ms, now.Add(time.Duration(next())*100*time.Millisecond)); err == nil {
					issued[id] = true
				}
			case 1:
				if id, err := r.Send(&wire.Ack{Items: []wire.LeaseRef{{Queue: queues[int(next())%len(queues)], Lease: uint64(next())}}}, 0); err == nil {
					issued[id] = true
				}
			case 2:
				if id, err := r.Subscribe(queues[int(next())%2], uint32(next()%4), nil, 0); err == nil {
					issued[id] = true
					subs = append(subs, id)
				}
			case 3:
				if len(subs) > 0 {
					if id, err := r.Unsubscribe(subs[int(next())%len(subs)]); err == nil {
						issued[id] = true
					}
				}
			case 4:
				if len(subs) > 0 && len(leases) > 0 {
					r.Settle(subs[int(next())%len(subs)], leases[int(next())%len(leases)])
				}
			case 5:
				now = now.Add(time.Duration(next()) * 20 * time.Millisecond)
				r.Tick(now)
			case 6:
				if len(dials) > 0 {
					r.Connected(dials[0])
					dials = dials[1:]
				}
			case 7:
				if len(dials) > 0 {
					r.DialFailed(dials[0], errors.New("refused"))
					dials = dials[1:]
				}
			case 8:
				r.ConnLost(nodes[int(next())%len(nodes)], errors.New("EOF"))
			case 9:
				addr := nodes[int(next())%len(nodes)]
				id := uint32(next() % 8)
				var fr wire.Frame
				switch next() % 10 {
				case 0:
					fr = &wire.HandshakeOk{Version: 1, MaxBatchSize: uint32(next() % 3)}
				case 1:
					fr = &wire.ErrorFrame{Code: wire.CodeNotLeader, LeaderHint: nodes[int(next())%len(nodes)]}
				case 2:
					fr = &wire.ErrorFrame{Code: wire.CodeNotLeader}
				case 3:
					fr = &wire.SubscribeOk{Prefetch: uint32(next() % 4)}
				case 4:
					fr = &wire.Delivery{Messages: []wire.DeliveredMessage{{Lease: uint64(next())}}}
				case 5:
					fr = &wire.EnqueueResult{Results: make([]wire.EnqueueItemResult, next()%4)}
				case 6:
					fr = &wire.AckResult{Results: make([]wire.ItemResult, next()%2)}
				case 7:
					fr = &wire.GoAway{LeaderHint: nodes[int(next())%len(nodes)]}
				case 8:
					fr = &wire.UnsubscribeOk{}
				default:
					fr = &wire.ErrorFrame{Code: wire.CodeQueueNotFound}
				}
				r.Receive(addr, wire.AppendFrame(nil, id, fr))
			case 10:
				n := int(next() % 16)
				b := make([]byte, 0, n)
				for range n {
					b = append(b, next())
				}
				r.Receive(nodes[int(next())%len(nodes)], b)
			case 11:
				r.Close()
			}
			drain()
		}
		// Closing and losing every connection ends everything.
		r.Close()
		for _, a := range nodes {
			r.ConnLost(a, errors.New("EOF"))
		}
		drain()
		for id := range issued {
			if !done[id] {
				t.Fatalf("request %d never completed", id)
			}
		}
		if r.InFlight() != 0 {
			t.Fatalf("InFlight() = %d after Close and every connection lost", r.InFlight())
		}
	})
}
