package metrics

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/fila-mq/fila/broker/internal/sched"
)

// twoQueues is a source of two queues that share fairness and throttle
// key names, with zero and non-zero values.
func twoQueues(context.Context, int) ([]sched.QueueStats, error) {
	return []sched.QueueStats{
		{Name: "a", Ready: 2, JainIndex: 0.5, Counts: sched.QueueCounts{Enqueued: 3},
			FairnessKeys: []sched.FairnessKeyStats{{Key: "z", Pending: 1, Weight: 1}, {Key: "k", Pending: 1, Weight: 2, DwellP99: 1500 * time.Millisecond}},
			ThrottleKeys: []sched.ThrottleKeyStats{{Key: "t", Rate: 2, Burst: 4, Tokens: 1, HeldBack: 5}}},
		{Name: "a.dlq"},
		{Name: "b", Leased: 1,
			FairnessKeys: []sched.FairnessKeyStats{{Key: "k", Pending: 7, Weight: 1}},
			ThrottleKeys: []sched.ThrottleKeyStats{{Key: "t", Rate: math.Inf(1), Burst: math.Inf(1), Tokens: math.Inf(1), Waiting: 3}}},
	}, nil
}

// TestQueuesFamiliesValid: the families the queue gatherer builds itself
// pass the checks a registry applies to its collectors' metrics (valid
// and sorted label pairs, no duplicate series), and the values come out
// as a registry of constant metrics exports them, zeros included.
func TestQueuesFamiliesValid(t *testing.T) {
	q := &Queues{TopKeys: 10, Source: twoQueues}
	// Gatherers checks every metric's consistency, as a registry does.
	fams, err := prometheus.Gatherers{q}.Gather()
	if err != nil {
		t.Fatalf("the gathered families fail the registry's checks: %v", err)
	}
	if len(fams) == 0 {
		t.Fatal("no families")
	}
	want := `
# HELP fila_fairness_key_dwell_p99_seconds A top key's 99th percentile time from enqueue to delivery over the stats window (within a factor of two).
# TYPE fila_fairness_key_dwell_p99_seconds gauge
fila_fairness_key_dwell_p99_seconds{key="k",queue="a"} 1.5
fila_fairness_key_dwell_p99_seconds{key="k",queue="b"} 0
fila_fairness_key_dwell_p99_seconds{key="z",queue="a"} 0
# HELP fila_fairness_key_weight A top key's weight (its most recently enqueued message's).
# TYPE fila_fairness_key_weight gauge
fila_fairness_key_weight{key="k",queue="a"} 2
fila_fairness_key_weight{key="k",queue="b"} 1
fila_fairness_key_weight{key="z",queue="a"} 1
# HELP fila_queue_enqueued_total Messages accepted (duplicates not counted).
# TYPE fila_queue_enqueued_total counter
fila_queue_enqueued_total{queue="a"} 3
fila_queue_enqueued_total{queue="a.dlq"} 0
fila_queue_enqueued_total{queue="b"} 0
# HELP fila_queue_jain_index Jain's fairness index over the backlogged keys' delivered share against their entitled share in the stats window (Jain, Chiu & Hawe, 1984): 1 is exactly fair, 1/n is one key served alone; 0 when nothing was delivered.
# TYPE fila_queue_jain_index gauge
fila_queue_jain_index{queue="a"} 0.5
fila_queue_jain_index{queue="a.dlq"} 0
fila_queue_jain_index{queue="b"} 0
# HELP fila_queue_leased_messages Messages delivered and not yet settled.
# TYPE fila_queue_leased_messages gauge
fila_queue_leased_messages{queue="a"} 0
fila_queue_leased_messages{queue="a.dlq"} 0
fila_queue_leased_messages{queue="b"} 1
# HELP fila_throttle_held_back_total Times a ready message waited for this bucket's token: deliveries held back by the throttle, of every queue that shares the bucket on this node.
# TYPE fila_throttle_held_back_total counter
fila_throttle_held_back_total{key="t",queue="a"} 5
# HELP fila_throttle_waiting_messages The queue's messages waiting for this bucket's token.
# TYPE fila_throttle_waiting_messages gauge
fila_throttle_waiting_messages{key="t",queue="a"} 0
fila_throttle_waiting_messages{key="t",queue="b"} 3
`
	if err := testutil.GatherAndCompare(q, strings.NewReader(want),
		"fila_fairness_key_dwell_p99_seconds", "fila_fairness_key_weight", "fila_queue_enqueued_total", "fila_queue_jain_index",
		"fila_queue_leased_messages", "fila_throttle_held_back_total", "fila_throttle_waiting_messages"); err != nil {
		t.Error(err)
	}
	// Every family Describe names, and only those.
	ch := make(chan *prometheus.Desc, 100)
	q.Describe(ch)
	close(ch)
	described := map[string]bool{}
	for d := range ch {
		described[d.String()] = true
	}
	for _, f := range fams {
		found := false
		for d := range described {
			if strings.Contains(d, fmt.Sprintf("fqName: %q", f.GetName())) {
				found = true
			}
		}
		if !found {
			t.Errorf("family %s is not described", f.GetName())
		}
	}
}

// TestQueuesSourceFails: a failed read of the queues leaves their
// families out and fails nothing else.
func TestQueuesSourceFails(t *testing.T) {
	m := New("test")
	m.AddGatherer(&Queues{Source: func(context.Context, int) ([]sched.QueueStats, error) {
		return nil, context.DeadlineExceeded
	}})
	fams, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if strings.HasPrefix(f.GetName(), "fila_queue_") {
			t.Errorf("family %s exported without the queues' stats", f.GetName())
		}
	}
	if len(fams) == 0 {
		t.Error("the registry's families are missing")
	}
}

// BenchmarkQueuesGather is a scrape's gathering of 10,000 idle queues
// and their DLQs.
func BenchmarkQueuesGather(b *testing.B) {
	all := make([]sched.QueueStats, 20_000)
	for i := range all {
		all[i].Name = fmt.Sprintf("q%05d", i)
	}
	q := &Queues{Source: func(context.Context, int) ([]sched.QueueStats, error) { return all, nil }}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := q.Gather(); err != nil {
			b.Fatal(err)
		}
	}
}
