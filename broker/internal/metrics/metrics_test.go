package metrics

import (
	"context"
	"math"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// TestNilMetrics: a server without metrics calls the methods on nil.
func TestNilMetrics(t *testing.T) {
	var m *Metrics
	m.ConnAccepted()
	m.ConnClosed()
	m.Refused("max_connections")
	m.HandshakeFailed("tls")
	m.Received(10)
	m.Sent(10)
	m.Request(wire.OpEnqueue, wire.CodeOK, time.Millisecond)
	m.Commit(3, time.Millisecond, time.Millisecond)
}

// TestRequestCounts: requests count by operation and code, and a pair
// seen before costs no allocation.
func TestRequestCounts(t *testing.T) {
	m := New("test")
	m.Request(wire.OpEnqueue, wire.CodeOK, time.Millisecond)
	m.Request(wire.OpEnqueue, wire.CodeQueueNotFound, time.Millisecond)
	if allocs := testing.AllocsPerRun(100, func() { m.Request(wire.OpEnqueue, wire.CodeOK, time.Millisecond) }); allocs != 0 {
		t.Errorf("Request allocates %v times; want 0", allocs)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("Enqueue", "OK")); got != 102 {
		t.Errorf("Enqueue OK = %v; want 102", got)
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("Enqueue", "QUEUE_NOT_FOUND")); got != 1 {
		t.Errorf("Enqueue QUEUE_NOT_FOUND = %v; want 1", got)
	}
	m.ConnAccepted()
	m.ConnAccepted()
	m.ConnClosed()
	if got := testutil.ToFloat64(m.connsOpen); got != 1 {
		t.Errorf("connections open = %v; want 1", got)
	}
	m.Commit(5, time.Millisecond, 0)
	want := `
# HELP fila_store_commit_records Records (puts and deletes) per commit, each commit one log write and at most one fsync: how well group commit amortises the fsync.
# TYPE fila_store_commit_records histogram
fila_store_commit_records_bucket{le="1"} 0
fila_store_commit_records_bucket{le="4"} 0
fila_store_commit_records_bucket{le="16"} 1
fila_store_commit_records_bucket{le="64"} 1
fila_store_commit_records_bucket{le="256"} 1
fila_store_commit_records_bucket{le="1024"} 1
fila_store_commit_records_bucket{le="4096"} 1
fila_store_commit_records_bucket{le="16384"} 1
fila_store_commit_records_bucket{le="+Inf"} 1
fila_store_commit_records_sum 5
fila_store_commit_records_count 1
`
	if err := testutil.GatherAndCompare(m.Registry(), strings.NewReader(want), "fila_store_commit_records"); err != nil {
		t.Error(err)
	}
}

// TestQueuesCollector: the queue gatherer exports each queue's gauges
// and counters, per-key series for the top keys only, and throttle
// series for configured buckets only, beside the registry's metrics.
func TestQueuesCollector(t *testing.T) {
	m := New("test")
	m.AddGatherer(&Queues{TopKeys: 2, Source: func(_ context.Context, top int) ([]sched.QueueStats, error) {
		if top != 2 {
			t.Errorf("source asked for %d keys; want 2", top)
		}
		return []sched.QueueStats{{
			Name: "q", Ready: 7, Counts: sched.QueueCounts{Enqueued: 9, Acked: 2},
			FairnessKeys: []sched.FairnessKeyStats{{Key: "a", Pending: 4}, {Key: "b", Pending: 2}, {Key: "c", Pending: 1}},
			ThrottleKeys: []sched.ThrottleKeyStats{
				{Key: "limited", Rate: 5, Burst: 10, Tokens: 3, Waiting: 1, HeldBack: 6},
				{Key: "free", Rate: math.Inf(1), Burst: math.Inf(1), Tokens: math.Inf(1)},
			},
		}}, nil
	}})
	for name, want := range map[string]int{
		"fila_queue_ready_messages":          1,
		"fila_queue_enqueued_total":          1,
		"fila_fairness_key_pending_messages": 2,
		"fila_throttle_waiting_messages":     2,
		"fila_throttle_held_back_total":      1,
		"fila_throttle_rate":                 1,
	} {
		if n, err := testutil.GatherAndCount(m.Gatherer(), name); err != nil || n != want {
			t.Errorf("%s: %d series, %v; want %d", name, n, err, want)
		}
	}
	want := `
# HELP fila_queue_enqueued_total Messages accepted (duplicates not counted).
# TYPE fila_queue_enqueued_total counter
fila_queue_enqueued_total{queue="q"} 9
`
	if err := testutil.GatherAndCompare(m.Gatherer(), strings.NewReader(want), "fila_queue_enqueued_total"); err != nil {
		t.Error(err)
	}
}

// TestDocsListEveryMetric: docs/operations.md names every fila_ metric.
func TestDocsListEveryMetric(t *testing.T) {
	doc, err := os.ReadFile("../../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	m := New("test")
	m.Register(&Store{}, &Hooks{})
	ch := make(chan *prometheus.Desc, 1000)
	for _, c := range []prometheus.Collector{m.Registry(), &Store{}, &Hooks{}} {
		c.Describe(ch)
	}
	(&Queues{}).Describe(ch)
	close(ch)
	name := regexp.MustCompile(`fqName: "(fila_[a-z_]+)"`)
	n := 0
	for d := range ch {
		sm := name.FindStringSubmatch(d.String())
		if sm == nil {
			continue
		}
		n++
		if !strings.Contains(string(doc), "`"+sm[1]+"`") {
			t.Errorf("docs/operations.md does not list %s", sm[1])
		}
	}
	if n < 50 {
		t.Errorf("found %d fila_ metrics; want the whole set", n)
	}
}

// BenchmarkRequest is the per-request cost of the request metrics.
func BenchmarkRequest(b *testing.B) {
	m := New("bench")
	b.ReportAllocs()
	for b.Loop() {
		m.Request(wire.OpEnqueue, wire.CodeOK, time.Millisecond)
	}
}
