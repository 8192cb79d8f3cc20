package rabbitbench

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
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

	q, err := NewQueue(ctx, addr, Name(1), 0)
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

	q, err = NewQueue(ctx, addr, Name(3), 0)
	if err != nil {
		t.Fatal(err)
	}
	lc, err := Lifecycle(ctx, q, ProduceSpec{Producers: 2, Outstanding: 32, Size: 64, Count: 500}, 64, 10)
	if err != nil {
		t.Fatal(err)
	}
	if lc.Produce.Messages != 500 || lc.Consume.Messages != 500 || lc.Consume.Elapsed <= 0 {
		t.Errorf("Lifecycle(count 500) = %+v; want 500 produced, 500 consumed", lc)
	}
	if n, err := q.Pending(ctx); err != nil || n != 0 {
		t.Errorf("Pending() after Lifecycle = %d, %v; want 0", n, err)
	}
	if err := q.Delete(ctx); err != nil {
		t.Fatal(err)
	}

	q, err = NewQueue(ctx, addr, Name(2), 0)
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

// TestCluster runs the lifecycle workload on a quorum queue of three
// members on a cluster of three nodes, at a tiny size. It is skipped
// where rabbitmq-server is not installed, and under -short.
func TestCluster(t *testing.T) {
	if _, err := proc.LookRabbitMQ(); err != nil {
		t.Skipf("skipped: %v", err)
	}
	if testing.Short() {
		t.Skip("skipped under -short: starts three RabbitMQ nodes")
	}
	c, err := proc.StartRabbitMQCluster(t.TempDir(), 3)
	if errors.Is(err, proc.ErrNoRabbitMQ) {
		t.Skipf("skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	q, err := NewQueue(ctx, c.Nodes[0].Addr, Name(1), 3)
	if err != nil {
		t.Fatal(err)
	}
	// Every node holds the queue: each answers for it.
	for i, s := range c.Nodes {
		if _, err := (&Queue{Name: q.Name, addr: s.Addr}).Pending(ctx); err != nil {
			t.Errorf("node %d: %v", i+1, err)
		}
	}
	out, err := c.RabbitMQCtl(ctx, 0, "list_queues", "name", "members", "leader", "--formatter", "json")
	if err != nil {
		t.Fatal(err)
	}
	var qs []struct {
		Name    string   `json:"name"`
		Members []string `json:"members"`
		Leader  string   `json:"leader"`
	}
	if err := json.Unmarshal(out, &qs); err != nil || len(qs) != 1 || len(qs[0].Members) != 3 || !strings.HasSuffix(qs[0].Leader, "-1@localhost") {
		t.Errorf("list_queues = %s (%v); want one queue of three members, led by node 1", out, err)
	}
	r, err := Lifecycle(ctx, q, ProduceSpec{Producers: 2, Outstanding: 32, Size: 64, Count: 500}, 64, 10)
	if err != nil {
		t.Fatal(err)
	}
	if r.Produce.Messages != 500 || r.Consume.Messages != 500 {
		t.Errorf("Lifecycle(count 500) = %+v; want 500 produced, 500 consumed", r)
	}
}
