package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeClusterRuns returns runs of the cluster comparison in which every
// figure of broker i is i+1, and the headline produce rates are fila3
// (Fila on three nodes), fila1 (on one), natsAlways (NATS R3, sync
// always) and rabbit (RabbitMQ).
func fakeClusterRuns(fila3Rate, fila1Rate, natsAlwaysRate, rabbitRate float64) []run {
	runs := make([]run, len(clusterBrokers))
	for i := range runs {
		f := figures{"peak rss": float64(i + 1), "peak rss sum": float64(3 * (i + 1))}
		for _, w := range clusterWorkloads {
			for _, k := range []string{"", " produce", " consume", " unloaded p50", " unloaded p99", " loaded p50", " loaded p99"} {
				f[w.name+k] = float64(i + 1)
			}
		}
		runs[i].figures = f
	}
	p := clusterWorkloads[0].name
	runs[fila3].figures[p] = fila3Rate
	runs[fila1].figures[p] = fila1Rate
	runs[nats3Always].figures[p] = natsAlwaysRate
	runs[rabbit3].figures[p] = rabbitRate
	runs[rabbit3].version = "3.10.8 on Erlang 25.2.3"
	return runs
}

func TestReportCluster(t *testing.T) {
	cfg := &config{duration: 10 * time.Second, outstanding: 256, batch: 64, prefetch: 1024,
		latCount: 2000, latRate: 1000, latDuration: 5 * time.Second, cluster: true}
	tests := []struct {
		name string
		runs []run
		want []string
		not  []string
	}{
		{
			name: "targets met",
			runs: fakeClusterRuns(60000, 120000, 2000, 25000),
			want: []string{
				"| workload | unit | Fila, 3 nodes | Fila, 1 node | NATS JetStream R3, default sync | NATS JetStream R3, sync always | RabbitMQ quorum queue, 3 nodes | Fila 3 ÷ Fila 1 | Fila 3 ÷ NATS default | Fila 3 ÷ NATS always | Fila 3 ÷ RabbitMQ |",
				"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
				"| produce 1 KiB, 3 producers, 256 outstanding each | msgs/s | 60,000 | 120,000 | 3 | 2,000 | 25,000 | 0.50 | 20000.00 | 30.00 | 2.40 |",
				"| lifecycle 1 KiB, 3 producers, 1 consumer: produce | msgs/s | 1 | 2 | 3 | 4 | 5 | 0.50 | 0.33 | 0.25 | 0.20 |",
				"| lifecycle 1 KiB, 3 producers, 1 consumer: consume+ack | msgs/s | 1 | 2 | 3 | 4 | 5 |",
				"| e2e latency 1 KiB, unloaded, p99 | ms | 1.000 | 2.000 | 3.000 | 4.000 | 5.000 |",
				"| e2e latency 1 KiB, at 1,000 msgs/s, p99 | ms |",
				"| broker peak RSS over these runs, largest node | MiB | 1 | 2 | 3 | 4 | 5 |",
				"| broker peak RSS over these runs, nodes added up | MiB | 3 | 6 | 9 | 12 | 15 |",
				"- durable produce, 1 KiB, 3 producers, Fila on 3 nodes ≥ 0.40 × Fila on 1 node: met (60,000 vs 120,000 msgs/s, 0.50 ×)",
				"- the same ≥ 1.5 × NATS JetStream R3 with sync always: met (60,000 vs 2,000 msgs/s, 30.00 ×)",
				"- the same ≥ 1.0 × RabbitMQ quorum queue on 3 nodes: met (60,000 vs 25,000 msgs/s, 2.40 ×)",
				"RabbitMQ 3.10.8 on Erlang 25.2.3: three nodes joined with `rabbitmqctl join_cluster`",
				"RabbitMQ set no resource alarm (memory or disk) on any node",
				"Lifecycle: the same producers for 10s while one consumer with prefetch 1024",
			},
		},
		{
			name: "targets not met, with an alarm",
			runs: func() []run {
				rs := fakeClusterRuns(40000, 120000, 30000, 50000)
				rs[rabbit3].alarms = []string{"memory resource limit alarm set on node x"}
				return rs
			}(),
			want: []string{
				"- durable produce, 1 KiB, 3 producers, Fila on 3 nodes ≥ 0.40 × Fila on 1 node: NOT met (40,000 vs 120,000 msgs/s, 0.33 ×)",
				"- the same ≥ 1.5 × NATS JetStream R3 with sync always: NOT met (40,000 vs 30,000 msgs/s, 1.33 ×)",
				"- the same ≥ 1.0 × RabbitMQ quorum queue on 3 nodes: NOT met (40,000 vs 50,000 msgs/s, 0.80 ×)",
				"- `memory resource limit alarm set on node x`",
			},
		},
		{
			name: "RabbitMQ skipped",
			runs: func() []run {
				rs := fakeClusterRuns(60000, 120000, 2000, 0)
				rs[rabbit3] = run{skipped: "rabbitmq-server not installed (apt-get install rabbitmq-server)"}
				return rs
			}(),
			want: []string{
				"| produce 1 KiB, 3 producers, 256 outstanding each | msgs/s | 60,000 | 120,000 | 3 | 2,000 | skipped | 0.50 | 20000.00 | 30.00 | — |",
				"- the same ≥ 1.0 × RabbitMQ quorum queue on 3 nodes: skipped, rabbitmq-server not installed (apt-get install rabbitmq-server)",
			},
			not: []string{"RabbitMQ set", "join_cluster"},
		},
		{
			name: "Fila on one node measured nothing",
			runs: fakeClusterRuns(60000, 0, 2000, 25000),
			want: []string{
				"- durable produce, 1 KiB, 3 producers, Fila on 3 nodes ≥ 0.40 × Fila on 1 node: NOT met (60,000 vs 0 msgs/s, — ×)",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			reportCluster(&b, cfg, tt.runs, 3000, time.Minute)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("reportCluster() has no line %q; got:\n%s", w, b.String())
				}
			}
			for _, n := range tt.not {
				if strings.Contains(b.String(), n) {
					t.Errorf("reportCluster() mentions %q; got:\n%s", n, b.String())
				}
			}
		})
	}
}

// TestWriteCluster checks that the cluster results go to their own files
// and leave the single-node ones alone.
func TestWriteCluster(t *testing.T) {
	dir := t.TempDir()
	single := filepath.Join(dir, "compare.md")
	if err := os.WriteFile(single, []byte("single"), 0o644); err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b"}
	runs := []run{{figures: figures{"x": 1}}, {skipped: "not installed"}}
	if err := write(&config{out: dir}, "compare-cluster", "# report\n", results(names, runs, map[string]any{"nodes": 3})); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "compare-cluster.md")); err != nil || string(b) != "# report\n" {
		t.Errorf("compare-cluster.md = %q, %v; want the report", b, err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "compare-cluster.json"))
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Brokers []string          `json:"brokers"`
		Figures []map[string]any  `json:"figures"`
		Skipped map[string]string `json:"skipped"`
		Nodes   int               `json:"nodes"`
	}
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	if len(js.Brokers) != 2 || js.Figures[0]["x"] != 1.0 || js.Figures[1] != nil || js.Skipped["b"] != "not installed" || js.Nodes != 3 {
		t.Errorf("compare-cluster.json = %s; want both brokers, a's figures, b skipped, 3 nodes", b)
	}
	if b, _ := os.ReadFile(single); string(b) != "single" {
		t.Errorf("compare.md = %q after writing the cluster results; want it untouched", b)
	}
	if err := write(&config{}, "compare-cluster", "x", nil); err != nil {
		t.Errorf("write without -out = %v; want nil (nothing written)", err)
	}
}
