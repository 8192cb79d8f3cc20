package rabbitbench

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fila-mq/fila/bench/internal/proc"
)

// startServer runs a RabbitMQ node as its own process on free ports of
// 127.0.0.1, its data in a temporary directory; the test is skipped
// where rabbitmq-server is not installed.
func startServer(t *testing.T) string {
	t.Helper()
	s, err := proc.StartRabbitMQ(t.TempDir())
	if errors.Is(err, proc.ErrNoRabbitMQ) {
		t.Skipf("skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s.Addr
}

// TestWorkloads runs each workload at a tiny size and checks the counts;
// nothing about speed.
func TestWorkloads(t *testing.T) {
	addr := startServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	q, err := NewQueue(ctx, addr, Name(1))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Produce(ctx, q, ProduceSpec{Producers: 2, Outstanding: 32, Size: 64, Count: 500})
	if err != nil {
		t.Fatal(err)
	}
	if p.Messages != 500 || p.Elapsed <= 0 {
		t.Errorf("Produce(count 500) = %d messages in %v; want 500", p.Messages, p.Elapsed)
	}
	if n, err := q.Pending(ctx); err != nil || n != 500 {
		t.Errorf("Pending() = %d, %v; want 500", n, err)
	}
	d, err := Produce(ctx, q, ProduceSpec{Producers: 1, Outstanding: 8, Size: 16, Duration: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if d.Messages <= 0 || d.Elapsed < 200*time.Millisecond {
		t.Errorf("Produce(200ms) = %d messages in %v; want some, in at least 200ms", d.Messages, d.Elapsed)
	}
	total := 500 + d.Messages
	c, err := Consume(ctx, q, 64, 10, total)
	if err != nil {
		t.Fatal(err)
	}
	if c.Messages != total {
		t.Errorf("Consume(%d) = %d messages; want %[1]d", total, c.Messages)
	}
	if n, err := q.Pending(ctx); err != nil || n != 0 {
		t.Errorf("Pending() after Consume = %d, %v; want 0", n, err)
	}
	if err := q.Delete(ctx); err != nil {
		t.Fatal(err)
	}

	q, err = NewQueue(ctx, addr, Name(2))
	if err != nil {
		t.Fatal(err)
	}
	l, err := MeasureLatency(ctx, q, 16, 10, 200, 250*time.Millisecond)
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
	if err := q.Delete(ctx); err != nil {
		t.Fatal(err)
	}
}
