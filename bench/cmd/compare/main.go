// Command compare sets Fila beside NATS JetStream on this machine: it
// builds fila-server, the fila CLI and nats-server, starts each broker in
// turn as its own process on 127.0.0.1 with storage in a temporary
// directory, runs the same workloads against each (same payloads, client
// counts, windows and durations), and prints a Markdown table of the
// figures and the ratios Fila ÷ NATS.
//
// NATS runs twice: with JetStream's default sync (fsync every two
// minutes: an acknowledged message may be lost on power failure) and with
// sync_interval: always (an fsync per write, the durability Fila gives
// every acknowledged enqueue and ack).
//
// Fila's figures come from "fila bench" itself, run as a process; the
// NATS workloads (package natsbench) mirror it. Run from the bench
// module's directory:
//
//	go run ./cmd/compare -out results
//
// RabbitMQ is reported as skipped: this harness has no AMQP driver.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fila-mq/fila/bench/internal/natsbench"
	"github.com/fila-mq/fila/bench/internal/proc"
)

// A workload is one row group of the comparison.
type workload struct {
	name      string
	kind      string // "produce", "consume" or "latency"
	producers int
	size      int
}

var workloads = []workload{
	{name: "produce 1 KiB, 1 producer", kind: "produce", producers: 1, size: 1024},
	{name: "produce 1 KiB, 3 producers", kind: "produce", producers: 3, size: 1024},
	{name: "produce 64 B, 3 producers", kind: "produce", producers: 3, size: 64},
	{name: "produce 64 KiB, 3 producers", kind: "produce", producers: 3, size: 64 << 10},
	{name: "consume+ack 1 KiB backlog, 1 consumer", kind: "consume", size: 1024},
	{name: "e2e latency 1 KiB", kind: "latency", size: 1024},
}

// figures are one broker's results, by row name.
type figures map[string]float64

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
	filaServer  string
	filaCLI     string
	natsServer  string
}

func main() {
	var cfg config
	flag.DurationVar(&cfg.duration, "duration", 10*time.Second, "length of each produce run, and bound on the backlog's fill")
	flag.IntVar(&cfg.outstanding, "outstanding", 256, "messages in flight per producer")
	flag.IntVar(&cfg.batch, "batch", 64, "Fila: messages per SendBatch (the outstanding window is kept in batches)")
	flag.Int64Var(&cfg.backlog, "backlog", 300000, "messages in the backlog of the consume workload (fewer if the fill's time runs out)")
	flag.IntVar(&cfg.prefetch, "prefetch", 1024, "consume: delivery credit (Fila) / PullMaxMessages (NATS)")
	flag.IntVar(&cfg.ackBatch, "ack-batch", 256, "Fila: deliveries per AckAll")
	flag.IntVar(&cfg.latCount, "latency-count", 2000, "messages of the unloaded latency phase")
	flag.Float64Var(&cfg.latRate, "latency-rate", 1000, "offered rate of the loaded latency phase, msgs/s")
	flag.DurationVar(&cfg.latDuration, "latency-duration", 5*time.Second, "length of the loaded latency phase")
	flag.StringVar(&cfg.out, "out", "", "directory to write compare.md and compare.json into (default: stdout only)")
	flag.StringVar(&cfg.filaServer, "fila-server", "", "fila-server binary (default: built)")
	flag.StringVar(&cfg.filaCLI, "fila", "", "fila CLI binary (default: built)")
	flag.StringVar(&cfg.natsServer, "nats-server", "", "nats-server binary (default: built from the module's nats-server requirement)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("compare: ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, &cfg); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, cfg *config) error {
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

	brokers := []string{"Fila", "NATS JetStream, default sync", "NATS JetStream, sync always"}
	results := make([]figures, len(brokers))
	memory := make([]proc.Memory, len(brokers))
	for i, name := range brokers {
		dir := filepath.Join(tmp, strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var (
			srv *proc.Server
			err error
		)
		if i == 0 {
			srv, err = proc.StartFila(cfg.filaServer, dir)
		} else {
			srv, err = proc.StartNATS(name, cfg.natsServer, dir, i == 2)
		}
		if err != nil {
			return err
		}
		log.Printf("%s: listening on %s", name, srv.Addr)
		if i == 0 {
			results[i], err = runFila(ctx, cfg, srv.Addr)
		} else {
			results[i], err = runNATS(ctx, cfg, srv.Addr)
		}
		if err == nil {
			memory[i], err = srv.Memory()
		}
		srv.Stop()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		results[i]["peak rss"] = float64(memory[i].PeakRSS) / (1 << 20)
	}

	var b strings.Builder
	report(&b, cfg, brokers, results, fsyncs, time.Since(began))
	fmt.Print(b.String())
	if cfg.out != "" {
		if err := os.MkdirAll(cfg.out, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cfg.out, "compare.md"), []byte(b.String()), 0o644); err != nil {
			return err
		}
		js, _ := json.MarshalIndent(map[string]any{
			"brokers": brokers, "figures": results, "fsyncs_per_s": fsyncs,
			"duration_s": cfg.duration.Seconds(), "outstanding": cfg.outstanding, "fila_batch": cfg.batch,
			"backlog": cfg.backlog, "prefetch": cfg.prefetch, "fila_ack_batch": cfg.ackBatch,
			"latency_count": cfg.latCount, "latency_rate": cfg.latRate, "latency_duration_s": cfg.latDuration.Seconds(),
		}, "", "  ")
		if err := os.WriteFile(filepath.Join(cfg.out, "compare.json"), append(js, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// runFila runs every workload with "fila bench" against addr.
func runFila(ctx context.Context, cfg *config, addr string) (figures, error) {
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
	for _, w := range workloads {
		switch w.kind {
		case "produce":
			var r struct {
				Produce struct {
					Rate float64 `json:"msgs_per_s"`
				} `json:"produce"`
			}
			if err := bench(&r, "produce", "--producers", strconv.Itoa(w.producers), "--outstanding", strconv.Itoa(cfg.outstanding),
				"--batch", strconv.Itoa(cfg.batch), "--size", strconv.Itoa(w.size), "--duration", cfg.duration.String()); err != nil {
				return nil, err
			}
			f[w.name] = r.Produce.Rate
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

// runNATS runs every workload with natsbench against addr, each on a new
// stream.
func runNATS(ctx context.Context, cfg *config, addr string) (figures, error) {
	f := figures{}
	for i, w := range workloads {
		s, err := natsbench.NewStream(ctx, addr, natsbench.Name(i))
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

// report writes the Markdown tables.
func report(w io.Writer, cfg *config, brokers []string, rs []figures, fsyncs float64, took time.Duration) {
	fmt.Fprintf(w, "## Fila and NATS JetStream on this machine\n\n")
	fmt.Fprintf(w, "%s; disk %s fsyncs/s (1 KiB write + fsync); %s; %s. Each broker alone, on 127.0.0.1, storage in a temporary directory.\n\n",
		machine(), group(fsyncs), runtime.Version(), goos())
	fmt.Fprintf(w, "Produce runs last %v each with %d messages outstanding per producer (Fila: in SendBatch calls of %d; NATS: PublishAsync with PublishAsyncMaxPending %d). ",
		cfg.duration, cfg.outstanding, cfg.batch, cfg.outstanding)
	fmt.Fprintf(w, "The consume backlog is up to %s messages filled in at most %v; one consumer with prefetch %d (Fila: AckAll of up to %d, durable; NATS: Msg.Ack per message, unconfirmed). ",
		group(float64(cfg.backlog)), cfg.duration, cfg.prefetch, cfg.ackBatch)
	fmt.Fprintf(w, "Latency: %s messages one at a time, then %s msgs/s offered for %v.\n\n", group(float64(cfg.latCount)), group(cfg.latRate), cfg.latDuration)

	header := "| workload | unit |"
	sep := "|---|---|"
	for _, b := range brokers {
		header += " " + b + " |"
		sep += "---:|"
	}
	for _, b := range brokers[1:] {
		header += " Fila ÷ " + strings.TrimPrefix(b, "NATS JetStream, ") + " |"
		sep += "---:|"
	}
	fmt.Fprintln(w, header)
	fmt.Fprintln(w, sep)
	row := func(name, key, unit string, prec int) {
		line := "| " + name + " | " + unit + " |"
		for _, r := range rs {
			line += " " + num(r[key], prec) + " |"
		}
		for _, r := range rs[1:] {
			ratio := "—"
			if r[key] > 0 {
				ratio = strconv.FormatFloat(rs[0][key]/r[key], 'f', 2, 64)
			}
			line += " " + ratio + " |"
		}
		fmt.Fprintln(w, line)
	}
	for _, wl := range workloads {
		switch wl.kind {
		case "produce":
			row(wl.name+", "+strconv.Itoa(cfg.outstanding)+" outstanding each", wl.name, "msgs/s", 0)
		case "consume":
			row(wl.name, wl.name, "msgs/s", 0)
			row("  (backlog consumed)", wl.name+" backlog", "msgs", 0)
		case "latency":
			row(wl.name+", unloaded, p50", wl.name+" unloaded p50", "ms", 3)
			row(wl.name+", unloaded, p99", wl.name+" unloaded p99", "ms", 3)
			row(wl.name+", at "+group(cfg.latRate)+" msgs/s, p50", wl.name+" loaded p50", "ms", 3)
			row(wl.name+", at "+group(cfg.latRate)+" msgs/s, p99", wl.name+" loaded p99", "ms", 3)
		}
	}
	row("broker peak RSS over these runs", "peak rss", "MiB", 0)

	fmt.Fprintf(w, "\nTargets (Fila against NATS in this run):\n\n")
	check := func(what string, ok bool, detail string) {
		mark := "met"
		if !ok {
			mark = "NOT met"
		}
		fmt.Fprintf(w, "- %s: %s (%s)\n", what, mark, detail)
	}
	p3 := workloads[1].name
	check("durable produce, 1 KiB, 3 producers ≥ NATS default sync", rs[0][p3] >= rs[1][p3],
		fmt.Sprintf("%s vs %s msgs/s", group(rs[0][p3]), group(rs[1][p3])))
	c := workloads[4].name
	check("consume+ack ≥ NATS default sync", rs[0][c] >= rs[1][c],
		fmt.Sprintf("%s vs %s msgs/s", group(rs[0][c]), group(rs[1][c])))
	l := workloads[5].name + " unloaded p99"
	check("e2e latency p99, unloaded ≤ NATS sync always", rs[0][l] <= rs[2][l],
		fmt.Sprintf("%.3f vs %.3f ms", rs[0][l], rs[2][l]))
	if _, err := exec.LookPath("rabbitmq-server"); err != nil {
		fmt.Fprintf(w, "- RabbitMQ quorum queues: skipped, rabbitmq-server is not installed\n")
	} else {
		fmt.Fprintf(w, "- RabbitMQ quorum queues: skipped, this harness has no AMQP driver\n")
	}
	fmt.Fprintf(w, "\nThe whole comparison took %s.\n", took.Round(time.Second))
}

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
