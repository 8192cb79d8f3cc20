package natsbench

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// startServer runs a JetStream server in process on a free port of
// 127.0.0.1, its store in a temporary directory.
func startServer(t *testing.T) string {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		t.Fatal("nats-server not ready in 30s")
	}
	t.Cleanup(s.Shutdown)
	return s.Addr().String()
}

// TestWorkloads runs each workload at a tiny size and checks the counts;
// nothing about speed.
func TestWorkloads(t *testing.T) {
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	s, err := NewStream(ctx, addr, Name(1))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Produce(ctx, s, ProduceSpec{Producers: 2, Outstanding: 32, Size: 64, Count: 500})
	if err != nil {
		t.Fatal(err)
	}
	if p.Messages != 500 || p.Elapsed <= 0 {
		t.Errorf("Produce(count 500) = %d messages in %v; want 500", p.Messages, p.Elapsed)
	}
	if n, err := s.Pending(ctx); err != nil || n != 500 {
		t.Errorf("Pending() = %d, %v; want 500", n, err)
	}
	c, err := Consume(ctx, s, 2, 64, 500)
	if err != nil {
		t.Fatal(err)
	}
	if c.Messages != 500 {
		t.Errorf("Consume(500) = %d messages; want 500", c.Messages)
	}
	// Acks are not confirmed: wait for the work queue to empty.
	for deadline := time.Now().Add(30 * time.Second); ; {
		n, err := s.Pending(ctx)
		if err == nil && n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Pending() after Consume = %d, %v; want 0", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Delete(ctx); err != nil {
		t.Fatal(err)
	}

	s, err = NewStream(ctx, addr, Name(2))
	if err != nil {
		t.Fatal(err)
	}
	l, err := MeasureLatency(ctx, s, 16, 10, 200, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if l.Unloaded.Count != 10 || l.Loaded.Count != 50 {
		t.Errorf("MeasureLatency = %d unloaded, %d loaded samples; want 10, 50", l.Unloaded.Count, l.Loaded.Count)
	}
	for _, lat := range []Latency{l.Unloaded, l.Loaded} {
		if !(0 < lat.P50 && lat.P50 <= lat.P95 && lat.P95 <= lat.P99 && lat.P99 <= lat.Max) {
			t.Errorf("MeasureLatency percentiles = %+v; want 0 < p50 ≤ p95 ≤ p99 ≤ max", lat)
		}
	}
}
