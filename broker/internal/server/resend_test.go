package server

import (
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// TestResendFromProducer: an idempotent producer's Enqueue resent on a
// new connection (its result was lost with the first) gets the IDs of the
// first, with duplicate set, and stores nothing new; chunks included (a
// frame over enqueueChunkBytes). A frame whose sequences would overflow
// fails as a whole.
func TestResendFromProducer(t *testing.T) {
	dial := pipeServer(t, Config{})
	c := dial()
	if hs := handshakeWith(c, "idempotent-producers"); !slices.Contains(hs.Capabilities, "idempotent-producers") {
		t.Fatalf("HandshakeOk capabilities %q; want idempotent-producers granted", hs.Capabilities)
	}
	c.send(2, &wire.CreateQueue{Name: "q"})
	expect[*wire.CreateQueueOk](c, 2)

	producer := [16]byte{0x01, 0x9a, 15: 1}
	frame := func(seq uint64, n, size int) *wire.Enqueue {
		f := &wire.Enqueue{ProducerID: producer, Sequence: seq}
		for i := range n {
			payload := fmt.Appendf(nil, "m%d", i)
			f.Messages = append(f.Messages, wire.EnqueueMessage{Queue: "q", Payload: append(payload, make([]byte, size)...)})
		}
		if n > 1 {
			f.Messages[1].Queue = "nope" // fails alone, and is not remembered
		}
		return f
	}
	ready := func(c *pipeClient, id uint32) uint64 {
		t.Helper()
		c.send(id, &wire.QueueStats{Name: "q"})
		return expect[*wire.QueueStatsResult](c, id).Ready
	}

	for _, tc := range []struct {
		name    string
		seq     uint64
		n, size int
	}{
		{"one message", 100, 1, 0},
		{"a batch", 200, 3, 0},
		{"in chunks", 1_000, 30, enqueueChunkBytes / 10},
	} {
		c := dial()
		c.handshake()
		c.send(3, frame(tc.seq, tc.n, tc.size))
		first := expect[*wire.EnqueueResult](c, 3).Results
		before := ready(c, 4)
		c.nc.Close() // the connection is lost; the producer resends on a new one

		c = dial()
		c.handshake()
		c.send(3, frame(tc.seq, tc.n, tc.size))
		again := expect[*wire.EnqueueResult](c, 3).Results
		for i, r := range again {
			f := first[i]
			switch {
			case f.Code != wire.CodeOK:
				if r.Code != f.Code {
					t.Errorf("%s: message %d resent: %v %q; want %v again", tc.name, i, r.Code, r.Message, f.Code)
				}
			case f.Duplicate || r.Code != wire.CodeOK || !r.Duplicate || r.ID != f.ID:
				t.Errorf("%s: message %d: first %+v, resent %+v; want the first ID, duplicate", tc.name, i, f, r)
			}
		}
		if after := ready(c, 4); after != before {
			t.Errorf("%s: %d messages ready after the resend; want %d", tc.name, after, before)
		}
		// A frame overlapping the last one's last message.
		c.send(5, frame(tc.seq+uint64(tc.n)-1, 2, 0))
		if next := expect[*wire.EnqueueResult](c, 5).Results; !next[0].Duplicate || next[0].ID != first[tc.n-1].ID {
			t.Errorf("%s: overlapping frame: %+v; want its first message a duplicate of %+v", tc.name, next[0], first[tc.n-1])
		}
	}

	// Without a producer nothing is remembered: a resend is a new message.
	c.send(6, &wire.Enqueue{Messages: []wire.EnqueueMessage{{Queue: "q", Payload: []byte("x")}}})
	a := expect[*wire.EnqueueResult](c, 6).Results[0]
	c.send(7, &wire.Enqueue{Messages: []wire.EnqueueMessage{{Queue: "q", Payload: []byte("x")}}})
	if b := expect[*wire.EnqueueResult](c, 7).Results[0]; b.Duplicate || b.ID == a.ID {
		t.Errorf("a resend without a producer: %+v after %+v; want a new message", b, a)
	}

	c.send(8, &wire.Enqueue{ProducerID: producer, Sequence: math.MaxUint64, Messages: frame(0, 2, 0).Messages})
	if ef := expect[*wire.ErrorFrame](c, 8); ef.Code != wire.CodeInvalidArgument {
		t.Errorf("sequences overflowing: %v %q; want INVALID_ARGUMENT", ef.Code, ef.Message)
	}
}

func handshakeWith(c *pipeClient, caps ...string) *wire.HandshakeOk {
	c.t.Helper()
	c.send(1, &wire.Handshake{MaxVersion: wire.ProtocolVersion, MinVersion: wire.MinProtocolVersion, ClientName: "pipe-test", Capabilities: caps})
	return expect[*wire.HandshakeOk](c, 1)
}
