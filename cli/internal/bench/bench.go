// Package bench implements "fila bench": load generators and measurements
// run against a live broker, modelled on "nats bench". Each subcommand
// creates its own queue (named bench-<workload>-<random>), drives it
// through the Go SDK, prints a table (or, with --output json, one JSON
// object), and deletes the queue unless --keep is given:
//
//	produce    producers enqueue for --duration or --count
//	consume    a backlog is filled, then consumers consume and ack it
//	lifecycle  producers and consumers at once: enqueue, deliver, ack
//	latency    enqueue-to-delivery percentiles, unloaded and at --rate
//	fairness   weighted fairness keys, all backlogged: share vs entitlement
//	throttle   a token bucket's rate and burst against the delivered rate
//	keys       throughput as the number of fairness keys grows
//	replay     a job-submission trace replayed in FIFO, DRR and STFQ, one after another
//
// Measurements use the monotonic clock of this process: a message whose
// latency is measured carries its send time in its first 8 payload bytes,
// and producer and consumer run in the same process. Figures are what
// this client observed, client costs included.
package bench

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"

	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

// ConnectFunc opens a client to the broker named by the CLI's global
// flags (--addr, --api-key, TLS). reconnect says whether the client
// reconnects after a failure; bench clients do not.
type ConnectFunc func(ctx context.Context, reconnect bool) (*fila.Client, error)

// NewCommand returns the "bench" command and its subcommands. connect
// opens every client the benchmarks use; output points at the value of
// the CLI's --output flag ("table" or "json"), read when a subcommand
// runs. Tables go to the command's standard output, progress bars (only
// when standard error is a terminal, and only once a run has lasted a
// second) to its standard error.
func NewCommand(connect ConnectFunc, output *string) *cobra.Command {
	e := &env{connect: connect, output: output}
	var cmd *cobra.Command
	cmd = &cobra.Command{
		Use:   "bench",
		Short: "Measure a broker: throughput, latency, fairness, throttling, trace replay",
		Long: `bench drives a running broker and measures it. Each subcommand creates
its own queue, named bench-<workload>-<random> (or --queue), and deletes
it afterwards unless --keep is given. Results are a table, or one JSON
object with --output json. Figures are what this client observed on
this machine, client work included: run the client where your
applications would run.

Against a cluster, give the global --addr the client addresses of
several nodes, comma-separated: the queue is created through any of them,
and every client sends the queue's operations to its leader, following
NOT_LEADER answers. An enqueue or an ack then counts once a majority of
the queue's replicas have it on disk. Clients do not reconnect: a node
that fails during a run fails the run.

Flags are checked before anything is created: a usage error (exit 2)
leaves the broker as it was. When produce, consume or lifecycle fails
after messages were acknowledged (the broker went away, say), it prints
its result so far, marked partial, before the error (exit 1).`,
		Example: `  fila bench produce --producers 3 --size 1024 --duration 10s
  fila --addr 10.0.0.1:5555,10.0.0.2:5555,10.0.0.3:5555 bench produce --producers 3
  fila bench consume --count 100000 --prefetch 1024
  fila bench latency --rate 1000 --duration 10s
  fila bench fairness --weights 1,2,3,4,5
  fila bench replay --trace jobs.csv --speedup 600 --report-dir report`,
		PersistentPreRunE: func(c *cobra.Command, args []string) error {
			// Cobra runs only the nearest PersistentPreRunE: run the
			// root's too (it checks --output) when bench is not the root.
			if root := c.Root(); root != cmd && root.PersistentPreRunE != nil {
				if err := root.PersistentPreRunE(c, args); err != nil {
					return err
				}
			}
			e.stdout, e.stderr = c.OutOrStdout(), c.ErrOrStderr()
			return nil
		},
	}
	pf := cmd.PersistentFlags()
	pf.StringVar(&e.queue, "queue", "", "queue to use, created if missing (default: a new bench-<workload>-<random>); keys and replay use it as a prefix")
	pf.BoolVar(&e.keep, "keep", false, "keep the queue and its messages afterwards")
	pf.BoolVar(&e.noProgress, "no-progress", false, "never draw a progress bar")
	pf.Uint32Var(&e.shards, "shards", 0, "cluster: create the queue with this many shards (2 to 256), each its own Raft group (0 or 1: not sharded)")
	pf.IntVar(&e.fairnessKeys, "fairness-keys", 0, "produce, consume, lifecycle and latency: spread messages round robin over this many fairness keys (0: none, or 64 with --shards, so that messages spread over the shards)")
	cmd.AddCommand(newProduceCmd(e), newConsumeCmd(e), newLifecycleCmd(e), newLatencyCmd(e),
		newFairnessCmd(e), newThrottleCmd(e), newKeysCmd(e), newReplayCmd(e))
	return cmd
}

// env is what every subcommand shares: the connection, the output, and
// the flags of the bench command itself.
type env struct {
	connect ConnectFunc
	output  *string

	queue        string
	keep         bool
	noProgress   bool
	shards       uint32
	fairnessKeys int

	stdout, stderr io.Writer
}

// result is the outcome of a subcommand: JSON-encodable, and able to
// print itself as tables.
type result interface {
	writeTable(w io.Writer) error
}

// emit prints r as JSON or as its tables.
func (e *env) emit(r result) error {
	if e.output != nil && *e.output == "json" {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	}
	return r.writeTable(e.stdout)
}

// emitFailed prints r, the result so far of a run that failed with err,
// if acked messages were acknowledged before the failure (the broker
// went away, say), and returns err: what was measured is still worth
// having, and the exit code still says the run failed. The caller marks
// r as partial.
func (e *env) emitFailed(r result, acked int64, err error) error {
	if acked > 0 {
		e.emit(r) // the run's error matters more than this one's
	}
	return err
}

// partialNote ends the table of a partial result with a line saying so.
func partialNote(w io.Writer, partial bool) {
	if partial {
		fmt.Fprintln(w, "\npartial result: the run failed; the figures count what was acknowledged before the failure")
	}
}

// dial opens a client that does not reconnect: a lost connection fails
// the benchmark rather than skewing it.
func (e *env) dial(ctx context.Context) (*fila.Client, error) {
	return e.connect(ctx, false)
}

// openQueue creates the queue a run uses and returns its name and a
// function that deletes it (a no-op with --keep or --queue naming a queue
// that existed). spec, if not nil, adjusts the queue's settings.
func (e *env) openQueue(ctx context.Context, c *fila.Client, workload string, spec func(*fila.QueueSpec)) (string, func(), error) {
	name := e.queue
	if name == "" {
		name = "bench-" + workload + "-" + randomSuffix()
	}
	return createQueue(ctx, c, name, e.keep, func(qs *fila.QueueSpec) {
		if e.shards > 1 {
			qs.Shards(e.shards)
		}
		if spec != nil {
			spec(qs)
		}
	})
}

// defaultKeys returns the fairness keys of workloads that set none:
// --fairness-keys of them, key-0 to key-<n-1>, or 64 with --shards.
func (e *env) defaultKeys() []string {
	n := e.fairnessKeys
	if n == 0 && e.shards > 1 {
		n = 64
	}
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "key-" + strconv.Itoa(i)
	}
	return keys
}

// randomSuffix returns 8 random hex digits, to name queues and keys of
// one run apart from those of another.
func randomSuffix() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// createQueue creates queue name and returns a function that deletes it
// again, unless keep is set or the queue already existed.
func createQueue(ctx context.Context, c *fila.Client, name string, keep bool, spec func(*fila.QueueSpec)) (string, func(), error) {
	qs := fila.NewQueueSpec(name)
	if spec != nil {
		spec(qs)
	}
	err := c.Admin().CreateQueue(ctx, qs)
	switch {
	case errors.Is(err, fila.ErrQueueExists):
		return name, func() {}, nil
	case err != nil:
		return "", nil, err
	}
	return name, func() {
		if keep {
			return
		}
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c.Admin().DeleteQueue(dctx, name)
	}, nil
}

// epoch is the origin of the timestamps written into payloads: both ends
// of a measured message live in this process, so its monotonic clock
// measures them.
var epoch = time.Now()

// now returns the time since epoch on the monotonic clock.
func now() time.Duration { return time.Since(epoch) }

// track shows a progress bar while a run lasts, once it has lasted a
// second, if standard error is a terminal. done reports the work done so
// far out of total (in the run's own unit: messages, or milliseconds for
// a run bounded by time). The returned function stops and clears the bar.
func (e *env) track(desc string, total int64, done func() int64) (stop func()) {
	return e.progress(desc, total, done, true)
}

// progress is track, showing done/total after the bar if count is set
// (it is not for a bar of milliseconds).
func (e *env) progress(desc string, total int64, done func() int64, count bool) (stop func()) {
	if e.noProgress || !isTerminal(e.stderr) {
		return func() {}
	}
	quit := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		show := time.NewTimer(time.Second)
		defer show.Stop()
		select {
		case <-quit:
			return
		case <-show.C:
		}
		opts := []progressbar.Option{
			progressbar.OptionSetWriter(e.stderr),
			progressbar.OptionSetDescription(desc),
			progressbar.OptionSetWidth(30),
			progressbar.OptionThrottle(100 * time.Millisecond),
			progressbar.OptionClearOnFinish(),
		}
		if count {
			opts = append(opts, progressbar.OptionShowCount())
		}
		bar := progressbar.NewOptions64(total, opts...)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			bar.Set64(min(done(), total))
			select {
			case <-quit:
				bar.Finish()
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-exited
		})
	}
}

// trackRun tracks a run bounded by a duration or a count: the bar counts
// messages against count if it is set, else milliseconds against d.
func (e *env) trackRun(desc string, d time.Duration, count int64, n *atomic.Int64) func() {
	if hook := runHook; hook != nil {
		hook(desc, n)
	}
	if count > 0 {
		return e.track(desc, count, n.Load)
	}
	return e.trackTime(desc, d)
}

// runHook, when a test sets it, sees the counter of acknowledged messages
// of each run that trackRun tracks.
var runHook func(desc string, acked *atomic.Int64)

// trackTime tracks a run of length d.
func (e *env) trackTime(desc string, d time.Duration) func() {
	start := time.Now()
	return e.progress(desc, d.Milliseconds(), func() int64 { return time.Since(start).Milliseconds() }, false)
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// table writes rows under a header, aligned in columns.
func table(w io.Writer, header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(header, "\t")+"\t")
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	return tw.Flush()
}

// group formats n with thousands separators: 1234567 is "1,234,567".
func group(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// rate formats a per-second figure with thousands separators.
func rate(v float64) string { return group(int64(v + 0.5)) }

// ms formats a duration in milliseconds with three decimals.
func ms(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }

// pct formats a fraction as a percentage with two decimals.
func pct(f float64) string { return strconv.FormatFloat(f*100, 'f', 2, 64) + "%" }

// parseList parses a comma-separated list of positive integers, each at
// most math.MaxUint32 (a fairness key's weight is a uint32).
func parseList(flag, s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.ReplaceAll(strings.TrimSpace(f), "_", "")
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 || n > math.MaxUint32 {
			return nil, usagef("bench: --%s %q: want a comma-separated list of integers from 1 to %d", flag, s, uint32(math.MaxUint32))
		}
		out = append(out, n)
	}
	return out, nil
}

// Bounds on the flags that size what a run holds in memory. Every
// subcommand checks its flags against them, and all its other ranges,
// before it connects or creates anything.
const (
	// maxSize is the largest --size: the protocol's largest frame body,
	// so no message can be larger. A broker refuses messages over its
	// max_message_size (16 MiB by default) sooner.
	maxSize = wire.MaxReassembledSize
	// maxPayloadMemory bounds the payload bytes a run holds at once:
	// those its producers keep in flight (which the SDK holds, encoded,
	// until they are written), or the replay's messages, built ahead.
	maxPayloadMemory = 1 << 30
	// maxTracked bounds the messages a run keeps a record of each of:
	// the throttle workload's delivery times, the latency workload's
	// loaded samples, the fairness workload's order of deliveries.
	maxTracked = 100_000_000
)

// checkSize checks a --size flag: at least least bytes, at most maxSize.
func checkSize(size, least int) error {
	if size < least || size > maxSize {
		return usagef("bench: --size %d: want %d to %d bytes (the protocol's largest message)", size, least, maxSize)
	}
	return nil
}

// positive reports whether x is a finite number above 0; NaN is not.
func positive(x float64) bool { return x > 0 && !math.IsInf(x, 1) }

// UsageError is an error in how a bench command was called, such as a
// flag value out of range; the CLI exits with status 2 for it.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

func usagef(format string, args ...any) error {
	return UsageError{fmt.Errorf(format, args...)}
}

// during says what the bench was doing when the SDK returned err:
// during("bench: replay", err) reads "bench: replay: enqueue jobs: queue
// not found", without the SDK's own "fila: ", which the CLI puts once at
// the start of the line. errors.Is and errors.As see err.
func during(what string, err error) error {
	return &duringError{what + ": " + strings.TrimPrefix(err.Error(), "fila: "), err}
}

type duringError struct {
	msg string
	err error
}

func (e *duringError) Error() string { return e.msg }
func (e *duringError) Unwrap() error { return e.err }
