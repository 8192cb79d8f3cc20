// Command compare sets Fila beside NATS JetStream and RabbitMQ on this
// machine: it builds fila-server, the fila CLI and nats-server, starts
// each broker in turn as its own process on 127.0.0.1 with storage in a
// temporary directory, runs the same workloads against each (same
// payloads, client counts, windows and durations), and prints a Markdown
// table of the figures and the ratios of Fila's to each other broker's.
//
// NATS runs twice: with JetStream's default sync (fsync every two
// minutes: an acknowledged message may be lost on power failure) and with
// sync_interval: always (an fsync per write, the durability Fila gives
// every acknowledged enqueue and ack).
//
// RabbitMQ runs with a durable quorum queue, which fsyncs each message
// before it confirms the publish. It is not built here: the harness runs
// the installed rabbitmq-server (apt-get install rabbitmq-server) as a
// node of its own (see proc.StartRabbitMQ), and where it is not installed
// its column reads "skipped" and the run goes on.
//
// Fila's figures come from "fila bench" itself, run as a process; the
// NATS workloads (package natsbench) and the RabbitMQ ones (package
// rabbitbench) mirror it. NATS and RabbitMQ publish one message at a
// time (PublishAsync; basic.publish with publisher confirms), so on the
// 1 KiB produce workloads Fila runs twice, to tell what comes from its
// batch-native protocol from what comes from the broker: with SendBatch
// calls (-batch) and with single-message Send calls, as many in flight
// per producer as the others keep (-outstanding), which the Go SDK
// coalesces into frames as it does any concurrent Sends. Run from the
// bench module's directory:
//
//	go run ./cmd/compare -out results
//
// With -cluster each broker runs as a cluster of three nodes on
// 127.0.0.1 instead, every queue or stream replicated on all three, and
// Fila also alone on the same workloads (see cluster.go); the report goes
// to compare-cluster.md and compare-cluster.json:
//
//	go run ./cmd/compare -cluster -out results
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fila-mq/fila/bench/internal/natsbench"
	"github.com/fila-mq/fila/bench/internal/proc"
	"github.com/fila-mq/fila/bench/internal/rabbitbench"
)

// A workload is one row group of the comparison.
type workload struct {
	name      string
	kind      string // "produce", "consume", "lifecycle" or "latency"
	producers int
	size      int
	// single, on a produce workload, runs Fila a second time with
	// single-message sends (batch 1), its figure under the workload's
	// name with singleSuffix.
	single bool
}

// The names of the workloads the targets are stated on.
const (
	produce3 = "produce 1 KiB, 3 producers"
	consume1 = "consume+ack 1 KiB backlog, 1 consumer"
	latency1 = "e2e latency 1 KiB"
)

// singleSuffix ends the name of a figure of Fila's single-message sends
// (see workload.single).
const singleSuffix = ", single-message sends"

var workloads = []workload{
	{name: "produce 1 KiB, 1 producer", kind: "produce", producers: 1, size: 1024, single: true},
	{name: produce3, kind: "produce", producers: 3, size: 1024, single: true},
	{name: "produce 64 B, 3 producers", kind: "produce", producers: 3, size: 64},
	{name: "produce 64 KiB, 3 producers", kind: "produce", producers: 3, size: 64 << 10},
	{name: consume1, kind: "consume", size: 1024},
	{name: latency1, kind: "latency", size: 1024},
}

// figures are one broker's results, by row name.
type figures map[string]float64

// The brokers, in the order they run and the table's columns.
const (
	fila = iota
	natsDefault
	natsAlways
	rabbit
)

// figureTable writes the head of a table of the runs' figures: a column
// per broker, then the ratio of the first broker's figure to each other's,
// and returns the table, to write its rows into w.
func figureTable(w io.Writer, cols []column, runs []run) *table {
	header := "| workload | unit |"
	sep := "|---|---|"
	for _, b := range cols {
		header += " " + b.name + " |"
		sep += "---:|"
	}
	for _, b := range cols[1:] {
		header += " " + cols[0].short + " ÷ " + b.short + " |"
		sep += "---:|"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, sep)
	return &table{w: w, runs: runs}
}

// A table is a table of figures whose head figureTable wrote.
type table struct {
	w    io.Writer
	runs []run
}

// row writes one row: its name and unit, each run's figure under key
// with prec decimals ("skipped" for a run that has none), and the ratios
// of the first run's to each other's ("—" where the other's is 0).
func (t *table) row(name, key, unit string, prec int) {
	t.rowFirst(name, key, key, unit, prec)
}

// rowFirst writes a row as row does, but with the first run's figure
// under firstKey: a figure of the first broker's measured another way
// beside the others' figures under key.
func (t *table) rowFirst(name, firstKey, key, unit string, prec int) {
	first := t.runs[0].figures[firstKey]
	line := "| " + name + " | " + unit + " |"
	for i, r := range t.runs {
		switch {
		case r.skipped != "":
			line += " skipped |"
		case i == 0:
			line += " " + num(first, prec) + " |"
		default:
			line += " " + num(r.figures[key], prec) + " |"
		}
	}
	for _, r := range t.runs[1:] {
		ratio := "—"
		if v := r.figures[key]; v > 0 {
			ratio = strconv.FormatFloat(first/v, 'f', 2, 64)
		}
		line += " " + ratio + " |"
	}
	fmt.Fprintln(t.w, line)
}

// A column is one broker's column of a report's table.
type column struct {
	name  string // column heading
	short string // in the ratio's heading: "<first's short> ÷ <short>"
}

var brokers = []column{
	fila:        {"Fila", "Fila"},
	natsDefault: {"NATS JetStream, default sync", "default sync"},
	natsAlways:  {"NATS JetStream, sync always", "sync always"},
	rabbit:      {"RabbitMQ quorum queue", "RabbitMQ"},
}

// A run is what one broker yielded: figures, or why it has none.
type run struct {
	figures figures
	// skipped, if set, says why the broker was not measured.
	skipped string
	// alarms are RabbitMQ's resource alarm log lines, if any was set.
	alarms []string
	// version is the broker's own account of its version, if known.
	version string
}

type config struct {
	duration    time.Duration
	outstanding int
	batch       int
	backlog     int64
	prefetch    int
	ackBatch    int
	latCount    int
	latRate     float64
	latDuration time.Duration
	out         string
	cluster     bool
	filaServer  string
	filaCLI     string
	natsServer  string
}

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "length of each produce run (and of the producers' part of each lifecycle run), and bound on the backlog's fill")
	flag.IntVar(&cfg.outstanding, "outstanding", 256, "messages in flight per producer")
	flag.IntVar(&cfg.batch, "batch", 64, "Fila: messages per SendBatch (the outstanding window is kept in batches; the rows of single-message sends use Send instead); lifecycle: also deliveries per AckAll (Fila) / per basic.ack with multiple set (RabbitMQ)")
	flag.Int64Var(&cfg.backlog, "backlog", 300000, "messages in the backlog of the consume workload (fewer if the fill's time runs out; not run with -cluster)")
	flag.IntVar(&cfg.prefetch, "prefetch", 1024, "consume and lifecycle: delivery credit (Fila) / PullMaxMessages (NATS) / basic.qos prefetch count (RabbitMQ)")
	flag.IntVar(&cfg.ackBatch, "ack-batch", 256, "consume: deliveries per AckAll (Fila) / per basic.ack with multiple set (RabbitMQ)")
	flag.IntVar(&cfg.latCount, "latency-count", 2000, "messages of the unloaded latency phase")
	flag.Float64Var(&cfg.latRate, "latency-rate", 1000, "offered rate of the loaded latency phase, msgs/s")
	flag.DurationVar(&cfg.latDuration, "latency-duration", 5*time.Second, "length of the loaded latency phase")
	flag.StringVar(&cfg.out, "out", "", "directory to write compare.md and compare.json into, with -cluster compare-cluster.md and compare-cluster.json (default: stdout only)")
	flag.BoolVar(&cfg.cluster, "cluster", false, "run each broker as a cluster of three nodes (and Fila also alone) on the cluster workloads: produce, lifecycle, latency")
	flag.StringVar(&cfg.filaServer, "fila-server", "", "fila-server binary (default: built)")
	flag.StringVar(&cfg.filaCLI, "fila", "", "fila CLI binary (default: built)")
	flag.StringVar(&cfg.natsServer, "nats-server", "", "nats-server binary (default: built from the module's nats-server requirement)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("compare: ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := compare(ctx, &cfg); err != nil {
		log.Fatal(err)
	}
}

func compare(ctx context.Context, cfg *config) error {
	began := time.Now()
	tmp, err := os.MkdirTemp("", "fila-compare-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	log.Print("building fila-server, fila and nats-server")
	build := func(path *string, pkg, name string) error {
		if *path != "" {
			return nil
		}
		p, err := proc.Build(".", pkg, filepath.Join(tmp, name))
		*path = p
		return err
	}
	if err := build(&cfg.filaServer, "github.com/fila-mq/fila/broker/cmd/fila-server", "fila-server"); err != nil {
		return err
	}
	if err := build(&cfg.filaCLI, "github.com/fila-mq/fila/cli/cmd/fila", "fila"); err != nil {
		return err
	}
	if err := build(&cfg.natsServer, "github.com/nats-io/nats-server/v2", "nats-server"); err != nil {
		return err
	}

	fsyncs, err := proc.FsyncRate(tmp, 2*time.Second)
	if err != nil {
		return fmt.Errorf("fsync probe: %w", err)
	}
	log.Printf("disk: %.0f fsyncs/s (1 KiB write + fsync)", fsyncs)

	if cfg.cluster {
		return compareCluster(ctx, cfg, tmp, fsyncs, began)
	}
	runs := make([]run, len(brokers))
	for i, br := range brokers {
		name := br.name
		dir := filepath.Join(tmp, strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var (
			srv *proc.Server
			err error
		)
		switch i {
		case fila:
			srv, err = proc.StartFila(cfg.filaServer, dir)
		case natsDefault, natsAlways:
			srv, err = proc.StartNATS(name, cfg.natsServer, dir, i == natsAlways)
		case rabbit:
			srv, err = proc.StartRabbitMQ(dir)
			if errors.Is(err, proc.ErrNoRabbitMQ) {
				runs[i].skipped = err.Error()
				log.Printf("RabbitMQ: skipped, %s", runs[i].skipped)
				continue
			}
		}
		if err != nil {
			return err
		}
		log.Printf("%s: listening on %s", name, srv.Addr)
		var f figures
		switch i {
		case fila:
			f, err = runFila(ctx, cfg, srv.Addr, workloads)
		case natsDefault, natsAlways:
			f, err = runNATS(ctx, cfg, srv.Addr, 1, workloads)
		case rabbit:
			f, err = runRabbitMQ(ctx, cfg, srv.Addr, 0, workloads)
		}
		var mem proc.Memory
		if err == nil {
			mem, err = srv.Memory()
		}
		srv.Stop()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		f["peak rss"] = float64(mem.PeakRSS) / (1 << 20)
		runs[i].figures = f
		if i == rabbit {
			runs[i].alarms = rabbitAlarms(srv.Log())
			runs[i].version = rabbitVersion(srv.Log())
			for _, a := range runs[i].alarms {
				log.Printf("RabbitMQ alarm: %s", a)
			}
		}
	}

	var b strings.Builder
	report(&b, cfg, runs, fsyncs, time.Since(began))
	fmt.Print(b.String())
	names := make([]string, len(brokers))
	for i, br := range brokers {
		names[i] = br.name
	}
	return write(cfg, "compare", b.String(), results(names, runs, map[string]any{
		"rabbitmq_alarms": runs[rabbit].alarms, "targets": targets(runs),
		"fsyncs_per_s": fsyncs, "duration_s": cfg.duration.Seconds(), "outstanding": cfg.outstanding,
		"fila_batch": cfg.batch, "fila_single_message_figures": singleKeys(workloads),
		"backlog": cfg.backlog, "prefetch": cfg.prefetch, "ack_batch": cfg.ackBatch,
		"latency_count": cfg.latCount, "latency_rate": cfg.latRate, "latency_duration_s": cfg.latDuration.Seconds(),
	}))
}

// results returns the JSON form of runs of the brokers named names: the
// names, each one's figures and why any was skipped, with the fields of
// extra.
func results(names []string, runs []run, extra map[string]any) map[string]any {
	figs := make([]figures, len(runs))
	skipped := map[string]string{}
	for i, r := range runs {
		figs[i] = r.figures
		if r.skipped != "" {
			skipped[names[i]] = r.skipped
		}
	}
	m := map[string]any{"brokers": names, "figures": figs, "skipped": skipped}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// write writes the report md and the results js into cfg.out as
// <base>.md and <base>.json; without cfg.out it writes nothing.
func write(cfg *config, base, md string, js map[string]any) error {
	if cfg.out == "" {
		return nil
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(cfg.out, base+".md"), []byte(md), 0o644); err != nil {
		return err
	}
	b, err := json.MarshalIndent(js, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(cfg.out, base+".json"), append(b, '\n'), 0o644)
}

// runFila runs workloads ws with "fila bench" against addr: one node's
// address, or several nodes' of a cluster, comma-separated.
func runFila(ctx context.Context, cfg *config, addr string, ws []workload) (figures, error) {
	f := figures{}
	bench := func(v any, args ...string) error {
		args = append([]string{"--addr", addr, "-o", "json", "bench"}, append(args, "--no-progress")...)
		log.Printf("  fila %s", strings.Join(args[4:], " "))
		out, err := proc.Run(ctx, cfg.filaCLI, args...)
		if err != nil {
			return err
		}
		return json.Unmarshal(out, v)
	}
	for _, w := range ws {
		switch w.kind {
		case "produce":
			// With --batch 1 "fila bench produce" keeps its window as
			// concurrent single-message Sends.
			produce := func(batch int) (float64, error) {
				var r struct {
					Produce struct {
						Rate float64 `json:"msgs_per_s"`
					} `json:"produce"`
				}
				err := bench(&r, "produce", "--producers", strconv.Itoa(w.producers), "--outstanding", strconv.Itoa(cfg.outstanding),
					"--batch", strconv.Itoa(batch), "--size", strconv.Itoa(w.size), "--duration", cfg.duration.String())
				return r.Produce.Rate, err
			}
			var err error
			if f[w.name], err = produce(cfg.batch); err != nil {
				return nil, err
			}
			if w.single {
				if f[w.name+singleSuffix], err = produce(1); err != nil {
					return nil, err
				}
			}
		case "consume":
			var r struct {
				Fill struct {
					Messages int64 `json:"messages"`
				} `json:"fill"`
				Consume struct {
					Rate float64 `json:"msgs_per_s"`
				} `json:"consume"`
			}
			if err := bench(&r, "consume", "--count", strconv.FormatInt(cfg.backlog, 10), "--duration", cfg.duration.String(),
				"--size", strconv.Itoa(w.size), "--consumers", "1", "--prefetch", strconv.Itoa(cfg.prefetch),
				"--batch", strconv.Itoa(cfg.ackBatch)); err != nil {
				return nil, err
			}
			f[w.name] = r.Consume.Rate
			f[w.name+" backlog"] = float64(r.Fill.Messages)
		case "lifecycle":
			var r struct {
				Produce struct {
					Rate float64 `json:"msgs_per_s"`
				} `json:"produce"`
				Consume struct {
					Rate float64 `json:"msgs_per_s"`
				} `json:"consume"`
			}
			if err := bench(&r, "lifecycle", "--producers", strconv.Itoa(w.producers), "--outstanding", strconv.Itoa(cfg.outstanding),
				"--batch", strconv.Itoa(cfg.batch), "--size", strconv.Itoa(w.size), "--duration", cfg.duration.String(),
				"--consumers", "1", "--prefetch", strconv.Itoa(cfg.prefetch)); err != nil {
				return nil, err
			}
			f[w.name+" produce"], f[w.name+" consume"] = r.Produce.Rate, r.Consume.Rate
		case "latency":
			type lat struct {
				P50 float64 `json:"p50_ms"`
				P99 float64 `json:"p99_ms"`
			}
			var r struct {
				Unloaded lat     `json:"unloaded"`
				Loaded   lat     `json:"loaded"`
				Achieved float64 `json:"achieved_rate"`
			}
			if err := bench(&r, "latency", "--size", strconv.Itoa(w.size), "--count", strconv.Itoa(cfg.latCount),
				"--rate", strconv.FormatFloat(cfg.latRate, 'f', -1, 64), "--duration", cfg.latDuration.String()); err != nil {
				return nil, err
			}
			f[w.name+" unloaded p50"], f[w.name+" unloaded p99"] = r.Unloaded.P50, r.Unloaded.P99
			f[w.name+" loaded p50"], f[w.name+" loaded p99"] = r.Loaded.P50, r.Loaded.P99
		}
	}
	return f, nil
}

// runNATS runs workloads ws with natsbench against addr (one server's
// address, or a cluster's, comma-separated), each on a new stream with
// replicas replicas.
func runNATS(ctx context.Context, cfg *config, addr string, replicas int, ws []workload) (figures, error) {
	f := figures{}
	for i, w := range ws {
		s, err := natsbench.NewStream(ctx, addr, natsbench.Name(i), replicas)
		if err != nil {
			return nil, err
		}
		log.Printf("  nats %s", w.name)
		switch w.kind {
		case "produce":
			r, err := natsbench.Produce(ctx, s, natsbench.ProduceSpec{
				Producers: w.producers, Outstanding: cfg.outstanding, Size: w.size, Duration: cfg.duration,
			})
			if err != nil {
				return nil, err
			}
			f[w.name] = r.PerSecond()
		case "consume":
			fill, err := natsbench.Produce(ctx, s, natsbench.ProduceSpec{
				Producers: 4, Outstanding: 256, Size: w.size, Count: cfg.backlog, Duration: cfg.duration,
			})
			if err != nil {
				return nil, err
			}
			r, err := natsbench.Consume(ctx, s, 1, cfg.prefetch, fill.Messages)
			if err != nil {
				return nil, err
			}
			f[w.name] = r.PerSecond()
			f[w.name+" backlog"] = float64(fill.Messages)
		case "lifecycle":
			r, err := natsbench.Lifecycle(ctx, s, natsbench.ProduceSpec{
				Producers: w.producers, Outstanding: cfg.outstanding, Size: w.size, Duration: cfg.duration,
			}, cfg.prefetch)
			if err != nil {
				return nil, err
			}
			f[w.name+" produce"], f[w.name+" consume"] = r.Produce.PerSecond(), r.Consume.PerSecond()
		case "latency":
			r, err := natsbench.MeasureLatency(ctx, s, w.size, cfg.latCount, cfg.latRate, cfg.latDuration)
			if err != nil {
				return nil, err
			}
			ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
			f[w.name+" unloaded p50"], f[w.name+" unloaded p99"] = ms(r.Unloaded.P50), ms(r.Unloaded.P99)
			f[w.name+" loaded p50"], f[w.name+" loaded p99"] = ms(r.Loaded.P50), ms(r.Loaded.P99)
		}
		if err := s.Delete(ctx); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// runRabbitMQ runs workloads ws with rabbitbench against the node at
// addr, each on a new quorum queue with members members (0: every node).
func runRabbitMQ(ctx context.Context, cfg *config, addr string, members int, ws []workload) (figures, error) {
	f := figures{}
	for i, w := range ws {
		q, err := rabbitbench.NewQueue(ctx, addr, rabbitbench.Name(i), members)
		if err != nil {
			return nil, err
		}
		log.Printf("  rabbitmq %s", w.name)
		switch w.kind {
		case "produce":
			r, err := rabbitbench.Produce(ctx, q, rabbitbench.ProduceSpec{
				Producers: w.producers, Outstanding: cfg.outstanding, Size: w.size, Duration: cfg.duration,
			})
			if err != nil {
				return nil, err
			}
			f[w.name] = r.PerSecond()
		case "consume":
			fill, err := rabbitbench.Produce(ctx, q, rabbitbench.ProduceSpec{
				Producers: 4, Outstanding: 256, Size: w.size, Count: cfg.backlog, Duration: cfg.duration,
			})
			if err != nil {
				return nil, err
			}
			r, err := rabbitbench.Consume(ctx, q, cfg.prefetch, cfg.ackBatch, fill.Messages)
			if err != nil {
				return nil, err
			}
			f[w.name] = r.PerSecond()
			f[w.name+" backlog"] = float64(fill.Messages)
		case "lifecycle":
			r, err := rabbitbench.Lifecycle(ctx, q, rabbitbench.ProduceSpec{
				Producers: w.producers, Outstanding: cfg.outstanding, Size: w.size, Duration: cfg.duration,
			}, cfg.prefetch, cfg.batch)
			if err != nil {
				return nil, err
			}
			f[w.name+" produce"], f[w.name+" consume"] = r.Produce.PerSecond(), r.Consume.PerSecond()
		case "latency":
			r, err := rabbitbench.MeasureLatency(ctx, q, w.size, cfg.latCount, cfg.latRate, cfg.latDuration)
			if err != nil {
				return nil, err
			}
			ms := func(d time.Duration) float64 { return float64(d) / 1e6 }
			f[w.name+" unloaded p50"], f[w.name+" unloaded p99"] = ms(r.Unloaded.P50), ms(r.Unloaded.P99)
			f[w.name+" loaded p50"], f[w.name+" loaded p99"] = ms(r.Loaded.P50), ms(r.Loaded.P99)
		}
		if err := q.Delete(ctx); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// rabbitAlarms returns the lines of a RabbitMQ node's log that set a
// resource alarm (memory or disk), which block every publisher while
// they last.
func rabbitAlarms(log string) []string {
	var a []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "resource limit alarm set") {
			a = append(a, strings.TrimSpace(line))
		}
	}
	return a
}

// rabbitVersion returns "<version> on Erlang <version>" from a RabbitMQ
// node's log ("?" if it is not there).
func rabbitVersion(log string) string {
	m := regexp.MustCompile(`Starting RabbitMQ (\S+) on Erlang (\S+)`).FindStringSubmatch(log)
	if m == nil {
		return "?"
	}
	return m[1] + " on Erlang " + m[2]
}

// report writes the Markdown tables.
func report(w io.Writer, cfg *config, runs []run, fsyncs float64, took time.Duration) {
	fmt.Fprintf(w, "## Fila, NATS JetStream and RabbitMQ on this machine\n\n")
	fmt.Fprintf(w, "%s; disk %s fsyncs/s (1 KiB write + fsync); %s; %s. Each broker alone, on 127.0.0.1, storage in a temporary directory.\n\n",
		machine(), group(fsyncs), runtime.Version(), goos())
	fmt.Fprintf(w, "Produce runs last %v each with %d messages outstanding per producer. Fila sends them in SendBatch calls of %d and, on the rows of \"Fila single-message sends\", "+
		"as %d concurrent single-message Send calls per producer, which the Go SDK coalesces into frames as it does any concurrent sends; the other brokers' figures on both rows come from the same run. "+
		"NATS publishes one message at a time (PublishAsync, PublishAsyncMaxPending %d); RabbitMQ publishes one message at a time too (basic.publish with publisher confirms, %d unconfirmed). ",
		cfg.duration, cfg.outstanding, cfg.batch, cfg.outstanding, cfg.outstanding, cfg.outstanding)
	fmt.Fprintf(w, "The consume backlog is up to %s messages filled in at most %v; one consumer with prefetch %d (Fila: AckAll of up to %d, durable; NATS: Msg.Ack per message, unconfirmed; RabbitMQ: basic.ack with multiple set every %d, unconfirmed). ",
		group(float64(cfg.backlog)), cfg.duration, cfg.prefetch, cfg.ackBatch, cfg.ackBatch)
	fmt.Fprintf(w, "Latency: %s messages one at a time, then %s msgs/s offered for %v. ", group(float64(cfg.latCount)), group(cfg.latRate), cfg.latDuration)
	fmt.Fprintf(w, "Peak RSS: each broker's VmHWM over all its runs (Fila's single-message ones included; for RabbitMQ, its Erlang VM's).")
	if r := runs[rabbit]; r.skipped == "" {
		fmt.Fprintf(w, " RabbitMQ %s: a durable quorum queue, which fsyncs each message before confirming it.", r.version)
	}
	fmt.Fprintf(w, "\n\n")

	t := figureTable(w, brokers, runs)
	for _, wl := range workloads {
		switch wl.kind {
		case "produce":
			name := wl.name + ", " + strconv.Itoa(cfg.outstanding) + " outstanding each"
			if !wl.single {
				t.row(name, wl.name, "msgs/s", 0)
				continue
			}
			t.row(name+": Fila batched (SendBatch of "+strconv.Itoa(cfg.batch)+")", wl.name, "msgs/s", 0)
			t.rowFirst(name+": Fila single-message sends", wl.name+singleSuffix, wl.name, "msgs/s", 0)
		case "consume":
			t.row(wl.name, wl.name, "msgs/s", 0)
			t.row("  (backlog consumed)", wl.name+" backlog", "msgs", 0)
		case "latency":
			t.row(wl.name+", unloaded, p50", wl.name+" unloaded p50", "ms", 3)
			t.row(wl.name+", unloaded, p99", wl.name+" unloaded p99", "ms", 3)
			t.row(wl.name+", at "+group(cfg.latRate)+" msgs/s, p50", wl.name+" loaded p50", "ms", 3)
			t.row(wl.name+", at "+group(cfg.latRate)+" msgs/s, p99", wl.name+" loaded p99", "ms", 3)
		}
	}
	t.row("broker peak RSS over these runs", "peak rss", "MiB", 0)

	fmt.Fprintf(w, "\nTargets (Fila against the others in this run):\n\n")
	for _, tg := range targets(runs) {
		fmt.Fprintf(w, "- %s\n", tg)
	}
	if r := runs[rabbit]; r.skipped == "" {
		if len(r.alarms) == 0 {
			fmt.Fprintf(w, "\nRabbitMQ set no resource alarm (memory or disk) during its runs.\n")
		} else {
			fmt.Fprintf(w, "\nRabbitMQ set resource alarms during its runs, blocking its publishers while they lasted:\n\n")
			for _, a := range r.alarms {
				fmt.Fprintf(w, "- `%s`\n", a)
			}
		}
	}
	fmt.Fprintf(w, "\nThe whole comparison took %s.\n", took.Round(time.Second))
}

// A target is one of the targets the report checks, with the figures it
// was checked on; its JSON form goes into compare.json.
type target struct {
	// What states the target.
	What string `json:"target"`
	// Met says whether the run met it (false when it was skipped).
	Met bool `json:"met"`
	// Skipped, if set, says why the target was not checked.
	Skipped string `json:"skipped,omitempty"`
	// Fila and Other are the figures set against each other, in Unit.
	Fila  float64 `json:"fila"`
	Other float64 `json:"other"`
	Unit  string  `json:"unit"`
	// Ratio is Fila ÷ Other (0 where Other is 0).
	Ratio float64 `json:"ratio"`
}

// String renders the target as an item of the report's list: the
// target, "met" or "NOT met" and the figures, or why it was skipped.
func (t target) String() string {
	if t.Skipped != "" {
		return t.What + ": skipped, " + t.Skipped
	}
	mark := "met"
	if !t.Met {
		mark = "NOT met"
	}
	prec := 0
	if t.Unit == "ms" {
		prec = 3
	}
	ratio := "—"
	if t.Other > 0 {
		ratio = strconv.FormatFloat(t.Ratio, 'f', 2, 64)
	}
	return fmt.Sprintf("%s: %s (%s vs %s %s, %s ×)", t.What, mark, num(t.Fila, prec), num(t.Other, prec), t.Unit, ratio)
}

// compared returns target what on Fila's figure fila against other's,
// in unit, with its ratio; Met is left for the caller.
func compared(what string, fila, other float64, unit string) target {
	t := target{What: what, Fila: fila, Other: other, Unit: unit}
	if other > 0 {
		t.Ratio = fila / other
	}
	return t
}

// targets checks the single-node comparison's targets on runs: Fila's
// produce (batched, and with single-message sends) and consume+ack rates
// and peak RSS against NATS JetStream with default sync, its batched
// produce against RabbitMQ's quorum queue (skipped where RabbitMQ was),
// and its unloaded latency against NATS with sync always. A target of
// "at least k ×" needs a figure from Fila above 0; one of "at most" a
// figure from the other above 0.
func targets(runs []run) []target {
	fl, nd, na, rq := runs[fila].figures, runs[natsDefault].figures, runs[natsAlways].figures, runs[rabbit].figures
	atLeast := func(what string, k, a, b float64, unit string) target {
		t := compared(what, a, b, unit)
		t.Met = a > 0 && a >= k*b
		return t
	}
	atMost := func(what string, k, a, b float64, unit string) target {
		t := compared(what, a, b, unit)
		t.Met = b > 0 && a <= k*b
		return t
	}
	ts := []target{
		atLeast("durable produce, 1 KiB, 3 producers, batched sends ≥ 1.5 × NATS default sync", 1.5, fl[produce3], nd[produce3], "msgs/s"),
		atLeast("durable produce, 1 KiB, 3 producers, single-message sends ≥ 1.0 × NATS default sync", 1, fl[produce3+singleSuffix], nd[produce3], "msgs/s"),
	}
	rt := atLeast("durable produce, 1 KiB, 3 producers, batched sends ≥ 3 × RabbitMQ quorum queues", 3, fl[produce3], rq[produce3], "msgs/s")
	if r := runs[rabbit]; r.skipped != "" {
		rt = target{What: rt.What, Skipped: r.skipped, Unit: rt.Unit}
	}
	return append(ts, rt,
		atLeast("consume+ack ≥ 2 × NATS default sync", 2, fl[consume1], nd[consume1], "msgs/s"),
		atMost("Fila's peak RSS over the run ≤ 3 × NATS default sync's", 3, fl["peak rss"], nd["peak rss"], "MiB"),
		atMost("e2e latency p99, unloaded ≤ NATS sync always", 1, fl[latency1+" unloaded p99"], na[latency1+" unloaded p99"], "ms"),
	)
}

// singleKeys returns the names of the figures of Fila's single-message
// sends among ws (see workload.single).
func singleKeys(ws []workload) []string {
	var keys []string
	for _, w := range ws {
		if w.kind == "produce" && w.single {
			keys = append(keys, w.name+singleSuffix)
		}
	}
	return keys
}

// num formats v with prec decimals, or grouped as an integer for prec 0.
func num(v float64, prec int) string {
	if prec == 0 {
		return group(v)
	}
	return strconv.FormatFloat(v, 'f', prec, 64)
}

// group formats v rounded to an integer with thousands separators.
func group(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// machine describes the processor and memory from /proc (Linux).
func machine() string {
	model := "unknown processor"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if rest, ok := strings.CutPrefix(line, "MemTotal:"); ok {
				if f := strings.Fields(rest); len(f) > 0 {
					kb, _ := strconv.ParseFloat(f[0], 64)
					mem = fmt.Sprintf(", %.0f GiB memory", kb/(1<<20))
				}
			}
		}
	}
	return fmt.Sprintf("%d × %s%s", runtime.NumCPU(), model, mem)
}

// goos names the kernel.
func goos() string {
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		return runtime.GOOS + " " + strings.TrimSpace(string(b))
	}
	return runtime.GOOS
}
