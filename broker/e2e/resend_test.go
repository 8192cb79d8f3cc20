package e2e

import (
	"fmt"
	"slices"
	"testing"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// TestResendAfterCrash: an idempotent producer's Enqueue whose answer
// was lost with the broker (killed after the frame was stored), resent on
// a new connection to the restarted broker, gets the first IDs back as
// duplicates and enqueues nothing; the producer's next frame is new.
func TestResendAfterCrash(t *testing.T) {
	srv := filatest.Start(t)
	dial := func() *rawConn {
		rc := dialRaw(t, srv.Addr, false)
		rc.send(1, &wire.Handshake{MaxVersion: 1, MinVersion: 1, ClientName: "raw", Capabilities: []string{"idempotent-producers"}})
		_, f := rc.recv()
		if ok, _ := f.(*wire.HandshakeOk); ok == nil || !slices.Contains(ok.Capabilities, "idempotent-producers") {
			t.Fatalf("handshake answered %+v; want idempotent-producers granted", f)
		}
		return rc
	}
	rc := dial()
	rc.send(2, &wire.CreateQueue{Name: "orders"})
	if _, f := rc.recv(); f.Opcode() != wire.OpCreateQueueOk {
		t.Fatalf("CreateQueue answered %+v", f)
	}
	producer := [16]byte{0x01, 0x9a, 0x7f, 15: 42}
	frame := func(seq uint64, n int) *wire.Enqueue {
		f := &wire.Enqueue{ProducerID: producer, Sequence: seq}
		for i := range n {
			f.Messages = append(f.Messages, wire.EnqueueMessage{Queue: "orders", Payload: fmt.Appendf(nil, "order %d", seq+uint64(i))})
		}
		return f
	}
	enqueue := func(rc *rawConn, id uint32, f *wire.Enqueue) []wire.EnqueueItemResult {
		t.Helper()
		rc.send(id, f)
		_, r := rc.recv()
		res, ok := r.(*wire.EnqueueResult)
		if !ok || len(res.Results) != len(f.Messages) {
			t.Fatalf("Enqueue answered %+v", r)
		}
		return res.Results
	}
	ready := func(rc *rawConn) uint64 {
		t.Helper()
		rc.send(9, &wire.QueueStats{Name: "orders"})
		_, f := rc.recv()
		st, ok := f.(*wire.QueueStatsResult)
		if !ok {
			t.Fatalf("QueueStats answered %+v", f)
		}
		return st.Ready
	}

	first := enqueue(rc, 3, frame(7, 5))
	for i, r := range first {
		if r.Code != wire.CodeOK || r.Duplicate {
			t.Fatalf("message %d: %+v", i, r)
		}
	}
	srv.Kill()
	srv.Restart(t)

	rc = dial()
	again := enqueue(rc, 3, frame(7, 5))
	for i, r := range again {
		if r.Code != wire.CodeOK || !r.Duplicate || r.ID != first[i].ID {
			t.Errorf("message %d resent: %+v; want %x, duplicate", i, r, first[i].ID)
		}
	}
	if n := ready(rc); n != 5 {
		t.Errorf("%d messages ready after the resend; want 5", n)
	}
	next := enqueue(rc, 4, frame(12, 2))
	if next[0].Duplicate || next[1].Duplicate || next[0].ID == first[4].ID {
		t.Errorf("the next frame: %+v; want new messages", next)
	}
	if n := ready(rc); n != 7 {
		t.Errorf("%d messages ready; want 7", n)
	}
}
