package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeRuns returns runs in which every figure of broker i is i+1 (Fila's
// single-message sends 10), but for those the targets are checked on,
// which are set by f (Fila), nd (NATS default sync), na (NATS sync
// always) and rq (RabbitMQ).
func fakeRuns(f, nd, na, rq figures) []run {
	runs := make([]run, len(brokers))
	for i := range runs {
		fs := figures{"peak rss": float64(i + 1)}
		for _, w := range workloads {
			for _, k := range []string{"", " backlog", " unloaded p50", " unloaded p99", " loaded p50", " loaded p99"} {
				fs[w.name+k] = float64(i + 1)
			}
			if i == fila && w.single {
				fs[w.name+singleSuffix] = 10
			}
		}
		runs[i].figures = fs
	}
	for i, set := range []figures{fila: f, natsDefault: nd, natsAlways: na, rabbit: rq} {
		for k, v := range set {
			runs[i].figures[k] = v
		}
	}
	runs[rabbit].version = "3.10.8 on Erlang 25.2.3"
	return runs
}

// metRuns returns runs in which Fila meets every target.
func metRuns() []run {
	return fakeRuns(
		figures{produce3: 160000, produce3 + singleSuffix: 110000, consume1: 200000, "peak rss": 300, latency1 + " unloaded p99": 1.5},
		figures{produce3: 100000, consume1: 90000, "peak rss": 127},
		figures{produce3: 3000, latency1 + " unloaded p99": 2},
		figures{produce3: 30000},
	)
}

// unmetRuns returns runs in which Fila misses every target.
func unmetRuns() []run {
	return fakeRuns(
		figures{produce3: 140000, produce3 + singleSuffix: 90000, consume1: 150000, "peak rss": 1950, latency1 + " unloaded p99": 1.9},
		figures{produce3: 100000, consume1: 90000, "peak rss": 127},
		figures{produce3: 3000, latency1 + " unloaded p99": 1.5},
		figures{produce3: 50000},
	)
}

func TestReport(t *testing.T) {
	cfg := &config{duration: 10 * time.Second, outstanding: 256, batch: 64, backlog: 300000, prefetch: 1024,
		ackBatch: 256, latCount: 2000, latRate: 1000, latDuration: 5 * time.Second}
	tests := []struct {
		name string
		runs func() []run
		want []string
		not  []string
	}{
		{
			name: "measured",
			runs: metRuns,
			want: []string{
				"| workload | unit | Fila | NATS JetStream, default sync | NATS JetStream, sync always | RabbitMQ quorum queue | Fila ÷ default sync | Fila ÷ sync always | Fila ÷ RabbitMQ |",
				"Fila sends them in SendBatch calls of 64 and, on the rows of \"Fila single-message sends\", as 256 concurrent single-message Send calls per producer",
				"NATS publishes one message at a time (PublishAsync, PublishAsyncMaxPending 256); RabbitMQ publishes one message at a time too (basic.publish with publisher confirms, 256 unconfirmed).",
				"| produce 1 KiB, 1 producer, 256 outstanding each: Fila batched (SendBatch of 64) | msgs/s | 1 | 2 | 3 | 4 | 0.50 | 0.33 | 0.25 |",
				"| produce 1 KiB, 1 producer, 256 outstanding each: Fila single-message sends | msgs/s | 10 | 2 | 3 | 4 | 5.00 | 3.33 | 2.50 |",
				"| produce 1 KiB, 3 producers, 256 outstanding each: Fila batched (SendBatch of 64) | msgs/s | 160,000 | 100,000 | 3,000 | 30,000 | 1.60 | 53.33 | 5.33 |",
				"| produce 1 KiB, 3 producers, 256 outstanding each: Fila single-message sends | msgs/s | 110,000 | 100,000 | 3,000 | 30,000 | 1.10 | 36.67 | 3.67 |",
				"| produce 64 B, 3 producers, 256 outstanding each | msgs/s | 1 | 2 | 3 | 4 |",
				"| broker peak RSS over these runs | MiB | 300 | 127 | 3 | 4 | 2.36 | 100.00 | 75.00 |",
				"- durable produce, 1 KiB, 3 producers, batched sends ≥ 1.5 × NATS default sync: met (160,000 vs 100,000 msgs/s, 1.60 ×)",
				"- durable produce, 1 KiB, 3 producers, single-message sends ≥ 1.0 × NATS default sync: met (110,000 vs 100,000 msgs/s, 1.10 ×)",
				"- durable produce, 1 KiB, 3 producers, batched sends ≥ 3 × RabbitMQ quorum queues: met (160,000 vs 30,000 msgs/s, 5.33 ×)",
				"- consume+ack ≥ 2 × NATS default sync: met (200,000 vs 90,000 msgs/s, 2.22 ×)",
				"- Fila's peak RSS over the run ≤ 3 × NATS default sync's: met (300 vs 127 MiB, 2.36 ×)",
				"- e2e latency p99, unloaded ≤ NATS sync always: met (1.500 vs 2.000 ms, 0.75 ×)",
				"the other brokers' figures on both rows come from the same run.",
				"Peak RSS: each broker's VmHWM over all its runs (Fila's single-message ones included; for RabbitMQ, its Erlang VM's).",
				"RabbitMQ 3.10.8 on Erlang 25.2.3: a durable quorum queue",
				"RabbitMQ set no resource alarm",
			},
			not: []string{"NOT met", "| produce 64 B, 3 producers, 256 outstanding each: Fila"},
		},
		{
			name: "targets not met, with an alarm",
			runs: func() []run {
				rs := unmetRuns()
				rs[rabbit].alarms = []string{"memory resource limit alarm set on node x"}
				return rs
			},
			want: []string{
				"- durable produce, 1 KiB, 3 producers, batched sends ≥ 1.5 × NATS default sync: NOT met (140,000 vs 100,000 msgs/s, 1.40 ×)",
				"- durable produce, 1 KiB, 3 producers, single-message sends ≥ 1.0 × NATS default sync: NOT met (90,000 vs 100,000 msgs/s, 0.90 ×)",
				"- durable produce, 1 KiB, 3 producers, batched sends ≥ 3 × RabbitMQ quorum queues: NOT met (140,000 vs 50,000 msgs/s, 2.80 ×)",
				"- consume+ack ≥ 2 × NATS default sync: NOT met (150,000 vs 90,000 msgs/s, 1.67 ×)",
				"- Fila's peak RSS over the run ≤ 3 × NATS default sync's: NOT met (1,950 vs 127 MiB, 15.35 ×)",
				"- e2e latency p99, unloaded ≤ NATS sync always: NOT met (1.900 vs 1.500 ms, 1.27 ×)",
				"- `memory resource limit alarm set on node x`",
			},
			not: []string{": met"},
		},
		{
			name: "skipped",
			runs: func() []run {
				rs := metRuns()
				rs[rabbit] = run{skipped: "rabbitmq-server not installed (apt-get install rabbitmq-server)"}
				return rs
			},
			want: []string{
				"| produce 1 KiB, 3 producers, 256 outstanding each: Fila batched (SendBatch of 64) | msgs/s | 160,000 | 100,000 | 3,000 | skipped | 1.60 | 53.33 | — |",
				"| produce 1 KiB, 3 producers, 256 outstanding each: Fila single-message sends | msgs/s | 110,000 | 100,000 | 3,000 | skipped | 1.10 | 36.67 | — |",
				"- durable produce, 1 KiB, 3 producers, batched sends ≥ 3 × RabbitMQ quorum queues: skipped, rabbitmq-server not installed (apt-get install rabbitmq-server)",
				"- durable produce, 1 KiB, 3 producers, single-message sends ≥ 1.0 × NATS default sync: met",
			},
			not: []string{"RabbitMQ set", "RabbitMQ 3.10.8"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b strings.Builder
			report(&b, cfg, tt.runs(), 3000, time.Minute)
			for _, w := range tt.want {
				if !strings.Contains(b.String(), w) {
					t.Errorf("report() has no line %q; got:\n%s", w, b.String())
				}
			}
			for _, n := range tt.not {
				if strings.Contains(b.String(), n) {
					t.Errorf("report() mentions %q; got:\n%s", n, b.String())
				}
			}
		})
	}
}

// TestTargets checks the targets' verdicts and figures, and that a
// target against a figure of 0 is not met by default.
func TestTargets(t *testing.T) {
	got := targets(metRuns())
	if len(got) != 6 {
		t.Fatalf("targets() = %d targets; want 6:\n%v", len(got), got)
	}
	for _, tg := range got {
		if !tg.Met || tg.Skipped != "" {
			t.Errorf("targets(metRuns()): %v; want met", tg)
		}
	}
	if s := got[1]; s.Fila != 110000 || s.Other != 100000 || s.Unit != "msgs/s" || s.Ratio != 1.1 {
		t.Errorf("single-message target = %+v; want 110,000 vs 100,000 msgs/s, ratio 1.1", s)
	}
	if r := got[4]; r.Fila != 300 || r.Other != 127 || r.Unit != "MiB" {
		t.Errorf("peak RSS target = %+v; want 300 vs 127 MiB", r)
	}
	for _, tg := range targets(unmetRuns()) {
		if tg.Met {
			t.Errorf("targets(unmetRuns()): %v; want not met", tg)
		}
	}
	// Nothing measured: nothing met, no ratio of 0 ÷ 0.
	empty := make([]run, len(brokers))
	for _, tg := range targets(empty) {
		if tg.Met || tg.Ratio != 0 {
			t.Errorf("targets(nothing measured): %+v; want not met, ratio 0", tg)
		}
		if !strings.Contains(tg.String(), "—") {
			t.Errorf("targets(nothing measured): %q; want the ratio shown as —", tg)
		}
	}
}

// TestResultsJSON checks that compare.json carries what the table shows:
// Fila's single-message figures beside the batched ones, which figures
// those are, and the targets with their verdicts.
func TestResultsJSON(t *testing.T) {
	dir := t.TempDir()
	runs := metRuns()
	names := []string{"Fila", "NATS default", "NATS always", "RabbitMQ"}
	if err := write(&config{out: dir}, "compare", "# report\n", results(names, runs, map[string]any{
		"targets": targets(runs), "fila_single_message_figures": singleKeys(workloads),
	})); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "compare.json"))
	if err != nil {
		t.Fatal(err)
	}
	var js struct {
		Figures []map[string]float64 `json:"figures"`
		Single  []string             `json:"fila_single_message_figures"`
		Targets []struct {
			Target string  `json:"target"`
			Met    bool    `json:"met"`
			Fila   float64 `json:"fila"`
			Other  float64 `json:"other"`
			Unit   string  `json:"unit"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	want := []string{"produce 1 KiB, 1 producer, single-message sends", "produce 1 KiB, 3 producers, single-message sends"}
	if strings.Join(js.Single, "|") != strings.Join(want, "|") {
		t.Errorf("fila_single_message_figures = %q; want %q", js.Single, want)
	}
	if v := js.Figures[fila][want[1]]; v != 110000 {
		t.Errorf("Fila's %q = %v; want 110000", want[1], v)
	}
	if len(js.Targets) != 6 || !js.Targets[1].Met || js.Targets[1].Fila != 110000 || js.Targets[1].Other != 100000 ||
		!strings.Contains(js.Targets[1].Target, "single-message sends") {
		t.Errorf("targets = %+v; want 6, the second the single-message one, met, 110,000 vs 100,000", js.Targets)
	}
}

func TestRabbitLog(t *testing.T) {
	log := "2026-01-01 [info] <0.223.0>  Starting RabbitMQ 3.10.8 on Erlang 25.2.3 [jit]\n" +
		"2026-01-01 [warning] <0.1.0> disk resource limit alarm set on node 'x@localhost'.\n" +
		"2026-01-01 [info] <0.1.0> disk resource limit alarm cleared on node 'x@localhost'\n"
	if got, want := rabbitVersion(log), "3.10.8 on Erlang 25.2.3"; got != want {
		t.Errorf("rabbitVersion = %q; want %q", got, want)
	}
	if got := rabbitVersion("nothing"); got != "?" {
		t.Errorf("rabbitVersion(no banner) = %q; want ?", got)
	}
	if got := rabbitAlarms(log); len(got) != 1 || !strings.Contains(got[0], "disk resource limit alarm set") {
		t.Errorf("rabbitAlarms = %q; want the one line that sets an alarm", got)
	}
}
