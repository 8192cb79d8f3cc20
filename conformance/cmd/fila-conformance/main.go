// Command fila-conformance replays the conformance transcripts of the Fila
// wire protocol against a client core, a broker or any client, and records
// new ones.
//
// Usage:
//
//	fila-conformance core    [-rewrite] [transcript or directory ...]
//	fila-conformance broker  [-addr host:port | -server-bin path] [transcript or directory ...]
//	fila-conformance client  -listen host:port [transcript or directory ...]
//	fila-conformance record  [-addr host:port | -server-bin path] [-dir testdata] [scenario ...]
//	fila-conformance rewrite [transcript or directory ...]
//	fila-conformance list    [-target core|broker|client] [transcript or directory ...]
//
// Without transcript arguments the corpus in ./testdata is used. Exit
// status: 0 when everything matched, 1 when something did not, 2 for a
// usage error. See docs/conformance.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/fila-mq/fila/conformance"
	"github.com/fila-mq/fila/conformance/scenario"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: fila-conformance core|broker|client|record|rewrite|list [flags] [transcript or directory ...]
run "fila-conformance <command> -h" for a command's flags`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return 2
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("fila-conformance "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", conformance.DefaultTimeout, "how long to wait for the side under test")
	var (
		rewrite   *bool
		execCmd   *string
		live      *bool
		addr      *string
		serverBin *string
		listen    *string
		dir       *string
		target    *string
	)
	switch cmd {
	case "core":
		rewrite = fs.Bool("rewrite", false, "rewrite the hex and events blocks instead of checking them")
		execCmd = fs.String("exec", "", "replay against the core behind this driver command line (JSON lines on its stdin and stdout; see docs/conformance.md) instead of the Go core")
	case "broker", "record":
		addr = fs.String("addr", "", "a running broker to use (it must hold none of the transcripts' queues); default: start fila-server for each configuration")
		serverBin = fs.String("server-bin", os.Getenv("FILA_TEST_SERVER_BIN"), "the fila-server binary to start (default $FILA_TEST_SERVER_BIN, else built with go build)")
		if cmd == "record" {
			dir = fs.String("dir", "testdata", "the corpus directory to write transcripts to")
		}
	case "client":
		listen = fs.String("listen", "127.0.0.1:5555", "where the fake broker listens")
		execCmd = fs.String("exec", "", "run this client program for each transcript, as `CMD <transcript name> <addr>`, against a fake broker on a free port (exit status 77: skipped); see docs/conformance.md")
		live = fs.Bool("live", false, "with -exec: run the program against a live fila-server (one per configuration) instead of the fake broker, for the transcripts a live broker produces; it must exit 0")
		serverBin = fs.String("server-bin", os.Getenv("FILA_TEST_SERVER_BIN"), "with -live: the fila-server binary to start (default $FILA_TEST_SERVER_BIN, else built with go build)")
	case "rewrite":
	case "list":
		target = fs.String("target", "", "list only the transcripts for this target: core, broker or client")
	default:
		fmt.Fprintln(stderr, usage)
		return 2
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx := context.Background()
	if cmd == "record" {
		return record(ctx, fs.Args(), *dir, *addr, *serverBin, stdout, stderr)
	}
	ts, err := load(fs.Args())
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 2
	}
	switch cmd {
	case "core":
		if *execCmd != "" && *rewrite {
			fmt.Fprintln(stderr, "fila-conformance core: -rewrite regenerates from the Go core; it does not go with -exec")
			return 2
		}
		return replayCore(ts, *rewrite, *execCmd, stdout, stderr)
	case "broker":
		return replayBroker(ctx, ts, *addr, *serverBin, *timeout, stdout, stderr)
	case "client":
		if *execCmd != "" && *live {
			return execLive(ctx, ts, *execCmd, *serverBin, stdout, stderr)
		}
		if *execCmd != "" {
			return execClient(ctx, ts, *execCmd, *timeout, stdout, stderr)
		}
		return serveClient(ctx, ts, *listen, *timeout, stdout, stderr)
	case "rewrite":
		return rewriteAll(ts, stdout, stderr)
	case "list":
		for _, t := range ts {
			if *target == "" || t.Applies(*target) {
				fmt.Fprintln(stdout, t.Name)
			}
		}
	}
	return 0
}

// load reads the transcripts named by args: files, or directories read as
// corpora; ./testdata when there are none.
func load(args []string) ([]*conformance.Transcript, error) {
	if len(args) == 0 {
		args = []string{"testdata"}
	}
	var ts []*conformance.Transcript
	for _, a := range args {
		st, err := os.Stat(a)
		if err != nil {
			return nil, err
		}
		if st.IsDir() {
			// Name transcripts from the corpus root (testdata), so a
			// subdirectory's read the same as in the whole corpus.
			root, sub := corpusRoot(a)
			c, err := conformance.Corpus(root)
			if err != nil {
				return nil, err
			}
			for _, t := range c {
				if sub == "" || strings.HasPrefix(t.Name, sub+"/") {
					ts = append(ts, t)
				}
			}
			continue
		}
		name := strings.TrimSuffix(filepath.ToSlash(a), ".txt")
		if i := strings.Index(name, "testdata/"); i >= 0 {
			name = name[i+len("testdata/"):]
		}
		t, err := conformance.ReadFile(a, name)
		if err != nil {
			return nil, err
		}
		ts = append(ts, t)
	}
	return ts, nil
}

// corpusRoot splits a directory into the corpus root it is in (the
// directory named testdata) and its path below it.
func corpusRoot(dir string) (root, sub string) {
	dir = filepath.ToSlash(filepath.Clean(dir))
	if i := strings.LastIndex(dir, "testdata"); i >= 0 {
		root = dir[:i+len("testdata")]
		sub = strings.Trim(dir[i+len("testdata"):], "/")
		return filepath.FromSlash(root), sub
	}
	return filepath.FromSlash(dir), ""
}

// tally prints a summary line and returns the exit status.
func tally(stdout io.Writer, passed, failed, skipped int) int {
	fmt.Fprintf(stdout, "%d passed, %d failed, %d skipped\n", passed, failed, skipped)
	if failed > 0 {
		return 1
	}
	return 0
}

func replayCore(ts []*conformance.Transcript, rewrite bool, execCmd string, stdout, stderr io.Writer) int {
	passed, failed, skipped := 0, 0, 0
	for _, t := range ts {
		if !t.Applies("core") {
			skipped++
			continue
		}
		if rewrite {
			if code := rewriteOne(t, stdout, stderr); code != 0 {
				failed++
				continue
			}
			passed++
			continue
		}
		if _, err := conformance.ReplayCore(t, conformance.CoreOptions{Exec: execCmd}); errors.Is(err, conformance.ErrSkipped) {
			fmt.Fprintf(stdout, "skip %s: a cluster conversation (nodes), replayed against the Go core's Router only\n", t.Name)
			skipped++
			continue
		} else if err != nil {
			fmt.Fprintf(stdout, "FAIL %s\n%v\n", t.Name, err)
			failed++
			continue
		}
		fmt.Fprintf(stdout, "ok   %s\n", t.Name)
		passed++
	}
	return tally(stdout, passed, failed, skipped)
}

func rewriteAll(ts []*conformance.Transcript, stdout, stderr io.Writer) int {
	status := 0
	for _, t := range ts {
		status = max(status, rewriteOne(t, stdout, stderr))
	}
	return status
}

// rewriteOne regenerates t's hex from the codec and its events from the
// core, and writes the file if they changed.
func rewriteOne(t *conformance.Transcript, stdout, stderr io.Writer) int {
	changed, err := t.CheckHex(true)
	if err == nil && t.Applies("core") {
		var c bool
		c, err = conformance.ReplayCore(t, conformance.CoreOptions{Rewrite: true})
		changed = changed || c
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", t.Name, err)
		return 1
	}
	if changed {
		if err := t.WriteFile(); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "rewrote %s\n", t.Path)
	}
	return 0
}

// brokers starts and reuses brokers: one per configuration, and one for
// each transcript that needs a fresh one.
type brokers struct {
	bin     string
	addr    string // a broker given with -addr
	running map[string]*conformance.Broker
	all     []*conformance.Broker
}

func newBrokers(addr, bin string) (*brokers, error) {
	bs := &brokers{addr: addr, bin: bin, running: map[string]*conformance.Broker{}}
	if addr == "" && bin == "" {
		dir, err := os.MkdirTemp("", "fila-conformance-bin")
		if err != nil {
			return nil, err
		}
		if bs.bin, err = conformance.BuildBroker(dir); err != nil {
			return nil, err
		}
	}
	return bs, nil
}

// get returns the address of a broker configured with env.
func (bs *brokers) get(env []string, fresh bool) (string, error) {
	if bs.addr != "" {
		return bs.addr, nil
	}
	key := strings.Join(env, " ")
	if b, ok := bs.running[key]; ok && !fresh {
		return b.Addr, nil
	}
	b, err := conformance.StartBroker(bs.bin, env)
	if err != nil {
		return "", err
	}
	bs.all = append(bs.all, b)
	if !fresh {
		bs.running[key] = b
	}
	return b.Addr, nil
}

func (bs *brokers) stop() {
	for _, b := range bs.all {
		b.Stop()
	}
}

func replayBroker(ctx context.Context, ts []*conformance.Transcript, addr, bin string, timeout time.Duration, stdout, stderr io.Writer) int {
	bs, err := newBrokers(addr, bin)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer bs.stop()
	passed, failed, skipped := 0, 0, 0
	for _, t := range ts {
		if !t.Applies("broker") {
			skipped++
			continue
		}
		if addr != "" && (t.Fresh || len(t.BrokerEnv) > 0) {
			fmt.Fprintf(stdout, "skip %s: needs a broker started with %s\n", t.Name, strings.Join(append(t.BrokerEnv, freshWord(t)...), " "))
			skipped++
			continue
		}
		a, err := bs.get(t.BrokerEnv, t.Fresh)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if err := conformance.ReplayBroker(ctx, t, a, conformance.BrokerOptions{Timeout: timeout}); err != nil {
			fmt.Fprintf(stdout, "FAIL %s\n%v\n", t.Name, err)
			failed++
			continue
		}
		fmt.Fprintf(stdout, "ok   %s\n", t.Name)
		passed++
	}
	return tally(stdout, passed, failed, skipped)
}

func freshWord(t *conformance.Transcript) []string {
	if t.Fresh {
		return []string{"(fresh)"}
	}
	return nil
}

func serveClient(ctx context.Context, ts []*conformance.Transcript, listen string, timeout time.Duration, stdout, stderr io.Writer) int {
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer ln.Close()
	passed, failed, skipped := 0, 0, 0
	for _, t := range ts {
		if !t.Applies("client") {
			skipped++
			continue
		}
		// The line a driver waits for before it runs the scenario.
		fmt.Fprintf(stdout, "serving %s on %s\n", t.Name, ln.Addr())
		err := conformance.ServeClient(ctx, t, ln, conformance.ClientOptions{Timeout: timeout})
		var f *conformance.Failure
		switch {
		case errors.As(err, &f):
			fmt.Fprintf(stdout, "FAIL %s\n%v\n", t.Name, err)
			failed++
		case err != nil:
			fmt.Fprintln(stderr, err)
			return 1
		default:
			fmt.Fprintf(stdout, "ok   %s\n", t.Name)
			passed++
		}
	}
	return tally(stdout, passed, failed, skipped)
}

// execClient runs the client program for each transcript meant for
// clients, against a fake broker of its own.
func execClient(ctx context.Context, ts []*conformance.Transcript, execCmd string, timeout time.Duration, stdout, stderr io.Writer) int {
	passed, failed, skipped := 0, 0, 0
	for _, t := range ts {
		if !t.Applies("client") {
			skipped++
			continue
		}
		err := conformance.ExecClient(ctx, t, execCmd, conformance.ClientOptions{Timeout: timeout})
		var f *conformance.Failure
		switch {
		case errors.Is(err, conformance.ErrSkipped):
			fmt.Fprintf(stdout, "skip %s: the client does not implement it (exit status %d)\n", t.Name, conformance.SkipStatus)
			skipped++
		case errors.As(err, &f):
			fmt.Fprintf(stdout, "FAIL %s\n%v\n", t.Name, err)
			failed++
		case err != nil:
			fmt.Fprintln(stderr, err)
			return 1
		default:
			fmt.Fprintf(stdout, "ok   %s\n", t.Name)
			passed++
		}
	}
	return tally(stdout, passed, failed, skipped)
}

// execLive runs the client program for each transcript a live broker
// produces (those for both clients and brokers) against a fila-server
// started with the transcript's configuration: live-broker mode. The
// program must exit 0 (or 77: skipped).
func execLive(ctx context.Context, ts []*conformance.Transcript, execCmd, bin string, stdout, stderr io.Writer) int {
	bs, err := newBrokers("", bin)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer bs.stop()
	passed, failed, skipped := 0, 0, 0
	for _, t := range ts {
		if !t.Applies("client") || !t.Applies("broker") {
			skipped++
			continue
		}
		addr, err := bs.get(t.BrokerEnv, t.Fresh)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		out, err := exec.CommandContext(cctx, "sh", "-c", execCmd+" '"+t.Name+"' "+addr).CombinedOutput()
		cancel()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee) && ee.ExitCode() == conformance.SkipStatus:
			fmt.Fprintf(stdout, "skip %s: the client does not implement it (exit status %d)\n", t.Name, conformance.SkipStatus)
			skipped++
		case err != nil:
			fmt.Fprintf(stdout, "FAIL %s (live): %v\n%s", t.Name, err, out)
			failed++
		default:
			fmt.Fprintf(stdout, "ok   %s (live)\n", t.Name)
			passed++
		}
	}
	return tally(stdout, passed, failed, skipped)
}

func record(ctx context.Context, names []string, dir, addr, bin string, stdout, stderr io.Writer) int {
	var scs []conformance.Scenario
	if len(names) == 0 {
		scs = scenario.All()
	}
	for _, n := range names {
		sc, ok := scenario.Lookup(n)
		if !ok {
			fmt.Fprintf(stderr, "no scenario %q\n", n)
			return 2
		}
		scs = append(scs, sc)
	}
	bs, err := newBrokers(addr, bin)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	defer bs.stop()
	status := 0
	for _, sc := range scs {
		if sc.Manual {
			continue
		}
		a, err := bs.get(sc.BrokerEnv, sc.Fresh)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		t, err := conformance.Record(ctx, sc, a, conformance.RecordOptions{})
		if err != nil {
			fmt.Fprintln(stderr, err)
			status = 1
			continue
		}
		t.Path = filepath.Join(dir, filepath.FromSlash(sc.Name)+".txt")
		if err := os.MkdirAll(filepath.Dir(t.Path), 0o755); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		if err := t.WriteFile(); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		fmt.Fprintf(stdout, "recorded %s\n", t.Path)
	}
	return status
}
