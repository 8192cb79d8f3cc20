package metrics

import (
	"context"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/otlptest"
	"github.com/fila-mq/fila/broker/internal/sched"
)

// TestOTLPExport: the metrics /metrics serves reach an OTLP/HTTP receiver,
// queue counters and the request histogram included.
func TestOTLPExport(t *testing.T) {
	m := New("test")
	m.AddGatherer(&Queues{TopKeys: 20, Source: func(context.Context, int) ([]sched.QueueStats, error) {
		return []sched.QueueStats{{Name: "q", Ready: 3, Counts: sched.QueueCounts{Enqueued: 9}}}, nil
	}})
	m.Request(1, 0, time.Millisecond)
	recv := otlptest.Start()
	defer recv.Close()
	shutdown, err := m.StartOTLP(OTLP{BaseURL: recv.URL, Interval: 50 * time.Millisecond, NodeID: "n1", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	defer shutdown(context.Background())
	deadline := time.Now().Add(30 * time.Second)
	for {
		enq, _ := recv.Metric("fila_queue_enqueued_total")
		ready, _ := recv.Metric("fila_queue_ready_messages")
		reqs, _ := recv.Metric("fila_request_duration_seconds")
		if enq == 9 && ready == 3 && reqs == 1 {
			break
		}
		if time.Now().After(deadline) {
			n, refused := recv.Exports()
			t.Fatalf("after %d exports (refused: %q): enqueued %v, ready %v, requests %v; want 9, 3, 1", n, refused, enq, ready, reqs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, refused := recv.Exports(); len(refused) > 0 {
		t.Errorf("the receiver refused exports: %q", refused)
	}
}
