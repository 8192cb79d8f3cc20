// Command replay runs "fila bench replay" against a fila-server of its
// own: it builds fila-server and the fila CLI, starts the server on
// 127.0.0.1 with its storage in a temporary directory, replays the trace
// with DRR and with FIFO, writes the report, and stops the server. Flags
// after "--" go to "fila bench replay" unchanged. Run from the bench
// module's directory:
//
//	go run ./cmd/replay -out results/replay -- --speedup 600
//
// The default trace is the Google cluster-usage trace extract kept beside
// the repository (../../shared/data/); it is CC-BY 4.0, see its README.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"

	"github.com/fila-mq/fila/bench/internal/proc"
)

func main() {
	trace := flag.String("trace", "../../shared/data/google_clusterdata2011_job_submits_days16-18.csv", "trace file")
	out := flag.String("out", "results/replay", "report directory (replay.md, replay-wait.svg, replay.json)")
	filaServer := flag.String("fila-server", "", "fila-server binary (default: built)")
	filaCLI := flag.String("fila", "", "fila CLI binary (default: built)")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("replay: ")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	tmp, err := os.MkdirTemp("", "fila-replay-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	for _, b := range []struct {
		path      *string
		pkg, name string
	}{
		{filaServer, "github.com/fila-mq/fila/broker/cmd/fila-server", "fila-server"},
		{filaCLI, "github.com/fila-mq/fila/cli/cmd/fila", "fila"},
	} {
		if *b.path == "" {
			if *b.path, err = proc.Build(".", b.pkg, filepath.Join(tmp, b.name)); err != nil {
				log.Fatal(err)
			}
		}
	}
	srv, err := proc.StartFila(*filaServer, tmp)
	if err != nil {
		log.Fatal(err)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		srv.Stop()
		log.Fatal(err)
	}
	args := append([]string{"--addr", srv.Addr, "bench", "replay", "--trace", *trace, "--report-dir", *out}, flag.Args()...)
	log.Printf("fila %v", args)
	cmd := exec.CommandContext(ctx, *filaCLI, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	err = cmd.Run()
	srv.Stop()
	if err != nil {
		log.Fatal(err)
	}
}
