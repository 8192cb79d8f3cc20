package core

import (
	"testing"

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
