package main

// The -cluster comparison: each broker as a cluster of three nodes on
// 127.0.0.1, every queue or stream replicated on all three, and Fila
// also as a single node on the same workloads.
//
//   - Fila: three fila-server processes (node IDs 1 to 3, replication
//     factor 3, data under the run's temporary directory); "fila bench"
//     gets the three client addresses, and its SDK sends each queue's
//     operations to the queue's leader. An enqueue is answered once a
//     majority of the replicas fsynced it.
//   - NATS JetStream: three nats-servers routed to each other, streams
//     with 3 replicas; run with the default sync and with
//     sync_interval: always, under which each replica fsyncs every write
//     to its Raft log (a batch of messages). The clients connect to the
//     stream leader's server.
//   - RabbitMQ: three nodes of the installed rabbitmq-server joined with
//     rabbitmqctl join_cluster, quorum queues of 3 members led by the
//     node the clients connect to.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/fila-mq/fila/bench/internal/proc"
)

// clusterNodes is the size of each broker's cluster.
const clusterNodes = 3

// clusterWorkloads are the rows of the cluster comparison. The first is
// the headline the targets are stated on.
var clusterWorkloads = []workload{
	{name: "produce 1 KiB, 3 producers", kind: "produce", producers: 3, size: 1024},
	{name: "lifecycle 1 KiB, 3 producers, 1 consumer", kind: "lifecycle", producers: 3, size: 1024},
	{name: "e2e latency 1 KiB", kind: "latency", size: 1024},
}

// The brokers of the cluster comparison, in the order they run and the
// table's columns.
const (
	fila3 = iota
	fila1
	nats3Default
	nats3Always
	rabbit3
)

var clusterBrokers = []column{
	fila3:        {"Fila, 3 nodes", "Fila 3"},
	fila1:        {"Fila, 1 node", "Fila 1"},
	nats3Default: {"NATS JetStream R3, default sync", "NATS default"},
	nats3Always:  {"NATS JetStream R3, sync always", "NATS always"},
	rabbit3:      {"RabbitMQ quorum queue, 3 nodes", "RabbitMQ"},
}

// compareCluster runs the cluster comparison, its brokers' storage under
// tmp, prints its report and writes it with its results into cfg.out.
// fsyncs is the disk's rate and began the run's start, for the report.
func compareCluster(ctx context.Context, cfg *config, tmp string, fsyncs float64, began time.Time) error {
	runs := make([]run, len(clusterBrokers))
	for i, br := range clusterBrokers {
		dir := filepath.Join(tmp, "cluster-"+strconv.Itoa(i))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		var (
			c   *proc.Cluster
			err error
		)
		switch i {
		case fila3:
			c, err = proc.StartFilaCluster(cfg.filaServer, cfg.filaCLI, dir, clusterNodes)
		case fila1:
			var srv *proc.Server
			if srv, err = proc.StartFila(cfg.filaServer, dir); err == nil {
				c = &proc.Cluster{Name: srv.Name, Nodes: []*proc.Server{srv}}
			}
		case nats3Default, nats3Always:
			c, err = proc.StartNATSCluster(br.name, cfg.natsServer, dir, clusterNodes, i == nats3Always)
		case rabbit3:
			c, err = proc.StartRabbitMQCluster(dir, clusterNodes)
			if errors.Is(err, proc.ErrNoRabbitMQ) {
				runs[i].skipped = err.Error()
				log.Printf("RabbitMQ: skipped, %s", runs[i].skipped)
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("%s: %w", br.name, err)
		}
		log.Printf("%s: listening on %s", br.name, c.Addr())
		var f figures
		switch i {
		case fila3, fila1:
			f, err = runFila(ctx, cfg, c.Addr(), clusterWorkloads)
		case nats3Default, nats3Always:
			f, err = runNATS(ctx, cfg, c.Addr(), len(c.Nodes), clusterWorkloads)
		case rabbit3:
			// The queues' leader is the node their clients connect to.
			f, err = runRabbitMQ(ctx, cfg, c.Nodes[0].Addr, len(c.Nodes), clusterWorkloads)
		}
		var mems []proc.Memory
		if err == nil {
			mems, err = c.Memory()
		}
		c.Stop()
		if err != nil {
			return fmt.Errorf("%s: %w", br.name, err)
		}
		for _, m := range mems {
			mib := float64(m.PeakRSS) / (1 << 20)
			f["peak rss"] = max(f["peak rss"], mib)
			f["peak rss sum"] += mib
		}
		runs[i].figures = f
		if i == rabbit3 {
			for _, s := range c.Nodes {
				runs[i].alarms = append(runs[i].alarms, rabbitAlarms(s.Log())...)
			}
			runs[i].version = rabbitVersion(c.Nodes[0].Log())
			for _, a := range runs[i].alarms {
				log.Printf("RabbitMQ alarm: %s", a)
			}
		}
	}

	var b strings.Builder
	reportCluster(&b, cfg, runs, fsyncs, time.Since(began))
	fmt.Print(b.String())
	names := make([]string, len(clusterBrokers))
	for i, br := range clusterBrokers {
		names[i] = br.name
	}
	return write(cfg, "compare-cluster", b.String(), results(names, runs, map[string]any{
		"nodes": clusterNodes, "rabbitmq_alarms": runs[rabbit3].alarms,
		"fsyncs_per_s": fsyncs, "duration_s": cfg.duration.Seconds(), "outstanding": cfg.outstanding, "fila_batch": cfg.batch,
		"prefetch":      cfg.prefetch,
		"latency_count": cfg.latCount, "latency_rate": cfg.latRate, "latency_duration_s": cfg.latDuration.Seconds(),
	}))
}

// reportCluster writes the cluster comparison's Markdown: its setup,
// the table, and the targets.
func reportCluster(w io.Writer, cfg *config, runs []run, fsyncs float64, took time.Duration) {
	fmt.Fprintf(w, "## Fila, NATS JetStream and RabbitMQ as three-node clusters on this machine\n\n")
	fmt.Fprintf(w, "%s; disk %s fsyncs/s (1 KiB write + fsync); %s; %s. Each broker alone: three nodes on 127.0.0.1, each with its storage in a temporary directory of its own on the one disk; Fila also as a single node on the same workloads.\n\n",
		machine(), group(fsyncs), runtime.Version(), goos())
	fmt.Fprintf(w, "Fila: three fila-server nodes, every queue replicated on all three (replication factor 3); an enqueue or an ack is answered once a majority of the replicas (two of three) fsynced it. `fila bench` is given the three addresses and sends each queue's operations to its leader. ")
	fmt.Fprintf(w, "NATS JetStream: three nats-servers routed to each other, a work-queue stream on file storage with 3 replicas for each workload, acknowledged once a majority stored it; with the default sync (fsync every two minutes: an acknowledged message may be lost if the machines lose power) and with `sync_interval: always`, under which each replica fsyncs every write to its Raft log (one write carries a batch of messages), so that an acknowledged message is on a majority's disks. Its clients connect to the stream leader's server.")
	if r := runs[rabbit3]; r.skipped == "" {
		fmt.Fprintf(w, " RabbitMQ %s: three nodes joined with `rabbitmqctl join_cluster`, a durable quorum queue with 3 members (`x-quorum-initial-group-size`) for each workload, which confirms a publish once a majority fsynced it; its leader is the node its clients connect to.", r.version)
	}
	fmt.Fprintf(w, "\n\n")
	fmt.Fprintf(w, "Produce runs last %v each with %d messages outstanding per producer (Fila: in SendBatch calls of %d; NATS: PublishAsync with PublishAsyncMaxPending %d; RabbitMQ: publisher confirms, %d unconfirmed). ",
		cfg.duration, cfg.outstanding, cfg.batch, cfg.outstanding, cfg.outstanding)
	fmt.Fprintf(w, "Lifecycle: the same producers for %v while one consumer with prefetch %d takes and acks every message (Fila: AckAll of up to %d, durable; NATS: Msg.Ack per message, unconfirmed; RabbitMQ: basic.ack with multiple set every %d deliveries or after 1 ms without one, unconfirmed); its consume rate runs from the consumer's start until it has taken every message produced. ",
		cfg.duration, cfg.prefetch, cfg.batch, cfg.batch)
	fmt.Fprintf(w, "Latency: %s messages one at a time, then %s msgs/s offered for %v.\n\n", group(float64(cfg.latCount)), group(cfg.latRate), cfg.latDuration)

	row := figureTable(w, clusterBrokers, runs).row
	for _, wl := range clusterWorkloads {
		switch wl.kind {
		case "produce":
			row(wl.name+", "+strconv.Itoa(cfg.outstanding)+" outstanding each", wl.name, "msgs/s", 0)
		case "lifecycle":
			row(wl.name+": produce", wl.name+" produce", "msgs/s", 0)
			row(wl.name+": consume+ack", wl.name+" consume", "msgs/s", 0)
		case "latency":
			row(wl.name+", unloaded, p50", wl.name+" unloaded p50", "ms", 3)
			row(wl.name+", unloaded, p99", wl.name+" unloaded p99", "ms", 3)
			row(wl.name+", at "+group(cfg.latRate)+" msgs/s, p50", wl.name+" loaded p50", "ms", 3)
			row(wl.name+", at "+group(cfg.latRate)+" msgs/s, p99", wl.name+" loaded p99", "ms", 3)
		}
	}
	row("broker peak RSS over these runs, largest node", "peak rss", "MiB", 0)
	row("broker peak RSS over these runs, nodes added up", "peak rss sum", "MiB", 0)

	fmt.Fprintf(w, "\nTargets (Fila on three nodes against the others in this run):\n\n")
	check := func(what string, ok bool, detail string) {
		mark := "met"
		if !ok {
			mark = "NOT met"
		}
		fmt.Fprintf(w, "- %s: %s (%s)\n", what, mark, detail)
	}
	versus := func(a, b float64) string {
		ratio := "—"
		if b > 0 {
			ratio = strconv.FormatFloat(a/b, 'f', 2, 64)
		}
		return fmt.Sprintf("%s vs %s msgs/s, %s ×", group(a), group(b), ratio)
	}
	f3, f1, na, rq := runs[fila3].figures, runs[fila1].figures, runs[nats3Always].figures, runs[rabbit3].figures
	p := clusterWorkloads[0].name
	check("durable produce, 1 KiB, 3 producers, Fila on 3 nodes ≥ 0.40 × Fila on 1 node", f1[p] > 0 && f3[p] >= 0.40*f1[p], versus(f3[p], f1[p]))
	check("the same ≥ 1.5 × NATS JetStream R3 with sync always", f3[p] >= 1.5*na[p], versus(f3[p], na[p]))
	if r := runs[rabbit3]; r.skipped != "" {
		fmt.Fprintf(w, "- the same ≥ 1.0 × RabbitMQ quorum queue on 3 nodes: skipped, %s\n", r.skipped)
	} else {
		check("the same ≥ 1.0 × RabbitMQ quorum queue on 3 nodes", f3[p] >= rq[p], versus(f3[p], rq[p]))
	}
	if r := runs[rabbit3]; r.skipped == "" {
		if len(r.alarms) == 0 {
			fmt.Fprintf(w, "\nRabbitMQ set no resource alarm (memory or disk) on any node during its runs.\n")
		} else {
			fmt.Fprintf(w, "\nRabbitMQ set resource alarms during its runs, blocking its publishers while they lasted:\n\n")
			for _, a := range r.alarms {
				fmt.Fprintf(w, "- `%s`\n", a)
			}
		}
	}
	fmt.Fprintf(w, "\nThe whole comparison took %s.\n", took.Round(time.Second))
}
