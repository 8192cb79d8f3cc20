package main

import (
	"strings"
	"testing"
	"time"
)

// fakeRuns returns runs in which every figure of broker i is i+1, Fila's
// 3-producer produce rate is fila3 and RabbitMQ's rabbit3.
func fakeRuns(fila3, rabbit3 float64) []run {
	runs := make([]run, len(brokers))
	for i := range runs {
		f := figures{"peak rss": float64(i + 1)}
		for _, w := range workloads {
			for _, k := range []string{"", " backlog", " unloaded p50", " unloaded p99", " loaded p50", " loaded p99"} {
				f[w.name+k] = float64(i + 1)
			}
		}
		runs[i].figures = f
	}
	runs[fila].figures[workloads[1].name] = fila3
	runs[rabbit].figures[workloads[1].name] = rabbit3
	runs[rabbit].version = "3.10.8 on Erlang 25.2.3"
	return runs
}

func TestReport(t *testing.T) {
	cfg := &config{duration: 10 * time.Second, outstanding: 256, batch: 64, backlog: 300000, prefetch: 1024,
		ackBatch: 256, latCount: 2000, latRate: 1000, latDuration: 5 * time.Second}
	tests := []struct {
		name string
		runs func() []run
		want []string
	}{
		{
			name: "measured",
			runs: func() []run { return fakeRuns(90000, 30000) },
			want: []string{
				"| workload | unit | Fila | NATS JetStream, default sync | NATS JetStream, sync always | RabbitMQ quorum queue | Fila ÷ default sync | Fila ÷ sync always | Fila ÷ RabbitMQ |",
				"| produce 1 KiB, 3 producers, 256 outstanding each | msgs/s | 90,000 | 2 | 3 | 30,000 | 45000.00 | 30000.00 | 3.00 |",
				"| broker peak RSS over these runs | MiB | 1 | 2 | 3 | 4 | 0.50 | 0.33 | 0.25 |",
				"- durable produce, 1 KiB, 3 producers ≥ 3 × RabbitMQ quorum queues: met (90,000 vs 30,000 msgs/s, 3.00 ×)",
				"RabbitMQ 3.10.8 on Erlang 25.2.3: a durable quorum queue",
				"RabbitMQ set no resource alarm",
			},
		},
		{
			name: "below 3x, with an alarm",
			runs: func() []run {
				rs := fakeRuns(80000, 40000)
				rs[rabbit].alarms = []string{"memory resource limit alarm set on node x"}
				return rs
			},
			want: []string{
				"- durable produce, 1 KiB, 3 producers ≥ 3 × RabbitMQ quorum queues: NOT met (80,000 vs 40,000 msgs/s, 2.00 ×)",
				"- `memory resource limit alarm set on node x`",
			},
		},
		{
			name: "skipped",
			runs: func() []run {
				rs := fakeRuns(90000, 0)
				rs[rabbit] = run{skipped: "rabbitmq-server not installed (apt-get install rabbitmq-server)"}
				return rs
			},
			want: []string{
				"| produce 1 KiB, 3 producers, 256 outstanding each | msgs/s | 90,000 | 2 | 3 | skipped | 45000.00 | 30000.00 | — |",
				"- durable produce, 1 KiB, 3 producers ≥ 3 × RabbitMQ quorum queues: skipped, rabbitmq-server not installed (apt-get install rabbitmq-server)",
			},
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
			if tt.name == "skipped" && strings.Contains(b.String(), "RabbitMQ set") {
				t.Errorf("report() with RabbitMQ skipped mentions its alarms:\n%s", b.String())
			}
		})
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
