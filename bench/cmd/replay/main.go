// Command replay runs "fila bench replay" with each mode alone on a
// fila-server of its own: it builds fila-server and the fila CLI, and
// for each mode in turn (-mode, default fifo, drr, stfq) starts a fresh
// server on 127.0.0.1 with its storage in a temporary directory, replays
// the trace in that mode, and stops the server. It then combines the
// modes' results into one report (fila bench replay --merge) in -out.
// Flags after "--" go to every mode's "fila bench replay" unchanged. Run
// from the bench module's directory:
//
//	go run ./cmd/replay -- --speedup 600
//
// The report goes to a new directory, results/replay-<UTC time>, unless
// -out names another. It never overwrites report files that git tracks
// (the reference run in results/replay), nor, where git cannot tell,
// report files that exist, unless -force is given:
//
//	go run ./cmd/replay -force -out results/replay -- --speedup 600
//
// With -strict it exits 1 when the combined report is invalid (see
// "fila bench replay --help"); the report is written either way.
//
// The default trace is the Google cluster-usage trace extract kept beside
// the repository (../../shared/data/); it is CC-BY 4.0, see its README.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/fila-mq/fila/bench/internal/proc"
)

// reportFiles are the files "fila bench replay" writes into its report
// directory.
var reportFiles = []string{"replay.md", "replay.json", "replay-wait.svg"}

// reserved are the flags of "fila bench replay" that this command sets
// itself, per mode or for the merge: after "--" they would contradict it.
var reserved = []string{"--trace", "--mode", "--report-dir", "--merge", "--strict", "--addr", "--output", "-o"}

func main() {
	log.SetFlags(0)
	log.SetPrefix("replay: ")
	trace := flag.String("trace", "../../shared/data/google_clusterdata2011_job_submits_days16-18.csv", "trace file")
	out := flag.String("out", "", "report directory (replay.md, replay-wait.svg, replay.json; default: a new results/replay-<UTC time>)")
	force := flag.Bool("force", false, "write into -out even if its report files are tracked by git or, where git cannot tell, exist")
	modes := flag.String("mode", "fifo,drr,stfq", "modes, comma-separated, in the order they run, each on a fresh fila-server")
	strict := flag.Bool("strict", false, "exit 1 when the combined report is invalid (it is written either way)")
	filaServer := flag.String("fila-server", "", "fila-server binary (default: built)")
	filaCLI := flag.String("fila", "", "fila CLI binary (default: built)")
	flag.Parse()
	if err := checkPass(flag.Args()); err != nil {
		log.Print(err)
		os.Exit(2)
	}
	modeList, err := parseModes(*modes)
	if err != nil {
		log.Print(err)
		os.Exit(2)
	}
	if *out == "" {
		*out = filepath.Join("results", "replay-"+time.Now().UTC().Format("20060102T150405Z"))
	}
	if err := guard(*out, *force); err != nil {
		log.Print(err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	r := &runner{trace: *trace, out: *out, strict: *strict, filaServer: *filaServer, filaCLI: *filaCLI, pass: flag.Args()}
	code, err := r.run(ctx, modeList)
	if err != nil {
		log.Print(err)
	}
	stop()
	os.Exit(code)
}

// checkPass checks the flags given after "--" for those this command
// sets itself.
func checkPass(args []string) error {
	for _, a := range args {
		name, _, _ := strings.Cut(a, "=")
		for _, r := range reserved {
			if name == r {
				return fmt.Errorf("%s after --: this command sets it (use -trace, -mode, -out or -strict)", r)
			}
		}
	}
	return nil
}

// parseModes parses -mode: fifo, drr and stfq, comma-separated, each at
// most once.
func parseModes(s string) ([]string, error) {
	var out []string
	for _, m := range strings.Split(s, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains([]string{"fifo", "drr", "stfq"}, m) {
			return nil, fmt.Errorf("-mode %q: want fifo, drr or stfq, comma-separated", m)
		}
		if slices.Contains(out, m) {
			return nil, fmt.Errorf("-mode %s given twice", m)
		}
		out = append(out, m)
	}
	return out, nil
}

// guard refuses to let a run write into dir when its report files are
// tracked by git or, where git cannot tell (no git, or dir outside a
// work tree), when any of them exists; force allows either.
func guard(dir string, force bool) error {
	if force {
		return nil
	}
	paths := make([]string, len(reportFiles))
	for i, f := range reportFiles {
		paths[i] = filepath.Join(dir, f)
	}
	tracked, err := gitTracked(paths)
	if err == nil {
		if len(tracked) > 0 {
			return fmt.Errorf("%s: git tracks %s; give -force to overwrite them (make replay FORCE=1), or another -out", dir, strings.Join(tracked, ", "))
		}
		return nil
	}
	for _, p := range paths {
		if _, serr := os.Stat(p); serr == nil {
			return fmt.Errorf("%s exists and git cannot tell whether it is tracked (%v); give -force to overwrite it, or another -out", p, err)
		}
	}
	return nil
}

// gitTracked returns those of paths that git tracks, from "git ls-files"
// run in the current directory. It fails where git is not installed or
// the paths are outside its work tree.
func gitTracked(paths []string) ([]string, error) {
	cmd := exec.Command("git", append([]string{"ls-files", "-z", "--"}, paths...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	var out []string
	for _, p := range strings.Split(string(b), "\x00") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out, nil
}

// A runner runs the modes, each on a fresh server, and merges them.
type runner struct {
	trace, out          string
	strict              bool
	filaServer, filaCLI string
	pass                []string // flags after "--"
	tmp                 string
}

// run replays each of modes in turn and writes the combined report. It
// returns the exit code: 0, 1 for a failure (or an invalid report with
// -strict), or the code of a fila CLI that failed with a usage error.
func (r *runner) run(ctx context.Context, modes []string) (int, error) {
	tmp, err := os.MkdirTemp("", "fila-replay-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(tmp)
	r.tmp = tmp
	for _, b := range []struct {
		path      *string
		pkg, name string
	}{
		{&r.filaServer, "github.com/fila-mq/fila/broker/cmd/fila-server", "fila-server"},
		{&r.filaCLI, "github.com/fila-mq/fila/cli/cmd/fila", "fila"},
	} {
		if *b.path == "" {
			if *b.path, err = proc.Build(".", b.pkg, filepath.Join(tmp, b.name)); err != nil {
				return 1, err
			}
		}
	}
	var merge []string
	for _, mode := range modes {
		res, err := r.mode(ctx, mode)
		if err != nil {
			return exitCode(err), fmt.Errorf("%s: %w", mode, err)
		}
		merge = append(merge, "--merge", res)
	}
	if err := os.MkdirAll(r.out, 0o755); err != nil {
		return 1, err
	}
	args := append([]string{"bench", "replay", "--report-dir", r.out}, merge...)
	if r.strict {
		args = append(args, "--strict")
	}
	cmd := exec.CommandContext(ctx, r.filaCLI, args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		return exitCode(err), fmt.Errorf("merge: %w", err)
	}
	log.Printf("report in %s", r.out)
	return 0, nil
}

// mode runs one mode on a fresh fila-server and returns the path of its
// replay.json.
func (r *runner) mode(ctx context.Context, mode string) (string, error) {
	dir := filepath.Join(r.tmp, mode)
	data := filepath.Join(dir, "server")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return "", err
	}
	defer os.RemoveAll(data)
	srv, err := proc.StartFila(r.filaServer, data)
	if err != nil {
		return "", err
	}
	defer srv.Stop()
	report := filepath.Join(dir, "report")
	args := append([]string{"--addr", srv.Addr, "--output", "json", "bench", "replay",
		"--trace", r.trace, "--mode", mode, "--report-dir", report}, r.pass...)
	log.Printf("%s: fila %s", mode, strings.Join(args, " "))
	cmd := exec.CommandContext(ctx, r.filaCLI, args...)
	cmd.Stderr = os.Stderr // progress, and the reasons of an invalid run
	start := time.Now()
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("fila bench replay: %w", err)
	}
	path := filepath.Join(report, "replay.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	var res struct {
		Valid bool `json:"valid"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	verdict := "valid"
	if !res.Valid {
		verdict = "INVALID"
	}
	log.Printf("%s: done in %v, %s", mode, time.Since(start).Round(time.Second), verdict)
	return path, nil
}

// exitCode returns the exit code of the command that failed with err,
// or 1.
func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.ExitCode() > 0 {
		return ee.ExitCode()
	}
	return 1
}
