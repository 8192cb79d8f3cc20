package bench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

// replayConfig are the replay's parameters, in trace time.
type replayConfig struct {
	tracePath string
	limit     int
	speedup   float64
	// capacity is what the consumers together process, jobs per trace
	// hour: each of the consumers takes consumers / capacity hours of
	// trace time per job.
	capacity  float64
	consumers int
	// providers is the number of throttle keys jobs map to (0: none);
	// each is a token bucket of providerRate jobs per trace hour and
	// providerBurst jobs.
	providers     int
	providerRate  float64
	providerBurst float64
	size          int
	noisy         string
	minJobs       int
	bin           time.Duration
	reportDir     string
	attribution   string
}

// service is one job's processing time in trace time.
func (c *replayConfig) service() time.Duration {
	return time.Duration(float64(c.consumers) / c.capacity * float64(time.Hour))
}

// wall converts a span of trace time to wall-clock time at the speed-up.
func (c *replayConfig) wall(d time.Duration) time.Duration {
	return time.Duration(float64(d) / c.speedup)
}

// ReplayResult is the outcome of "fila bench replay". Times are in trace
// time (wall-clock time × speed-up), in seconds, or hours since the
// trace's first submission where named so.
type ReplayResult struct {
	Workload string `json:"workload"`
	Trace    string `json:"trace"`
	// Attribution is the credit the trace's licence requires, carried by
	// everything derived from it.
	Attribution string `json:"attribution,omitempty"`
	Jobs        int    `json:"jobs"`
	Users       int    `json:"users"`
	// SpanHours is the time from the first submission to the last.
	SpanHours      float64 `json:"span_hours"`
	Speedup        float64 `json:"speedup"`
	Capacity       float64 `json:"capacity_jobs_per_hour"`
	Consumers      int     `json:"consumers"`
	ServiceSeconds float64 `json:"service_seconds"`
	Providers      int     `json:"providers"`
	ProviderRate   float64 `json:"provider_rate_jobs_per_hour"`
	ProviderBurst  float64 `json:"provider_burst"`
	PayloadSize    int     `json:"payload_size"`
	// Noisy is the flooding user: its first and last submissions bound
	// the flood.
	Noisy          string  `json:"noisy_user"`
	FloodFromHours float64 `json:"flood_from_hours"`
	FloodToHours   float64 `json:"flood_to_hours"`
	// MinJobs is how many jobs a user needs both before and during the
	// flood to be judged against the 2× criterion.
	MinJobs int `json:"min_jobs"`
	// BinSeconds is the width of the plot's bins.
	BinSeconds     float64      `json:"bin_seconds"`
	WallSeconds    float64      `json:"wall_seconds"`
	Modes          []ReplayMode `json:"modes"`
	ReportMarkdown string       `json:"report_markdown,omitempty"`
	ReportPlot     string       `json:"report_plot,omitempty"`
}

// ReplayMode is one way of scheduling the replay: "drr", fairness key =
// user, or "fifo", one fairness key for every job.
type ReplayMode struct {
	Mode  string `json:"mode"`
	Queue string `json:"queue"`
	// NoisyFloodShare is the noisy user's share of the deliveries made
	// during the flood.
	NoisyFloodShare float64 `json:"noisy_flood_share"`
	// Others is everyone but the noisy user together.
	Others ReplayUser `json:"others"`
	// Judged users had at least MinJobs jobs before and during the
	// flood; Within of them kept their flood p99 within 2× of their p99
	// before it (waits under one service time count as one service
	// time).
	Judged     int          `json:"judged"`
	Within     int          `json:"within_2x"`
	WorstUser  string       `json:"worst_user"`
	WorstRatio float64      `json:"worst_ratio"`
	Users      []ReplayUser `json:"users"`
	Bins       []ReplayBin  `json:"bins"`
}

// ReplayUser is one user's jobs in one mode: counts, and waits from
// enqueue to delivery in trace seconds.
type ReplayUser struct {
	User      string `json:"user"`
	Jobs      int    `json:"jobs"`
	PreJobs   int    `json:"pre_flood_jobs"`
	FloodJobs int    `json:"flood_jobs"`
	// FloodShare is the user's share of the deliveries made during the
	// flood.
	FloodShare   float64 `json:"flood_share"`
	P50          float64 `json:"p50_s"`
	P99          float64 `json:"p99_s"`
	PreP50       float64 `json:"pre_flood_p50_s"`
	PreP99       float64 `json:"pre_flood_p99_s"`
	FloodP50     float64 `json:"flood_p50_s"`
	FloodP99     float64 `json:"flood_p99_s"`
	Ratio        float64 `json:"flood_vs_pre_p99,omitempty"`
	Judged       bool    `json:"judged"`
	WithinTwoX   bool    `json:"within_2x"`
	deliveriesIn int     // deliveries during the flood
}

// ReplayBin is the wait of jobs enqueued in one span of trace time.
type ReplayBin struct {
	FromHours   float64 `json:"from_hours"`
	NoisyJobs   int     `json:"noisy_jobs"`
	NoisyP99    float64 `json:"noisy_p99_s"`
	OthersJobs  int     `json:"others_jobs"`
	OthersP99   float64 `json:"others_p99_s"`
	OthersP50   float64 `json:"others_p50_s"`
	NoisyP50    float64 `json:"noisy_p50_s"`
	Undelivered int     `json:"undelivered,omitempty"`
}

func newReplayCmd(e *env) *cobra.Command {
	cfg := replayConfig{}
	cmd := &cobra.Command{
		Use:   "replay --trace FILE",
		Short: "Replay a job-submission trace with DRR (key = user) and with FIFO; report per-user waits",
		Long: `Replays a job-submission trace (the job_events layout of Google's
clusterdata-2011-2 trace: timestamp in µs, user, logical_job_name) twice
at once, on two queues: "drr", fairness key = user, and "fifo", one
fairness key for every job. Each job is one message, enqueued at its
submission time divided by --speedup.

Each queue has --consumers consumers of fixed capacity: together they
process --capacity jobs per trace hour (each job takes consumers /
capacity hours of trace time, then is acked), so when submissions
outrun them a backlog forms and the scheduler decides who waits. Each
consumer holds one job at a time (prefetch 1).

Every job also carries a throttle key, its "provider": FNV-1a of its
logical_job_name mod --providers, a token bucket of --provider-rate jobs
per trace hour and --provider-burst jobs (per queue). Within a fairness
key, jobs of different providers are taken in turn and each provider's
are FIFO; with --providers 0 jobs carry no throttle key.

Wait is from a job's scheduled submission to its delivery, in trace
time. The flooding user (--noisy, default the user with the most jobs)
defines the flood: from its first submission to its last. A user is
judged if it has --min-jobs jobs both before and during the flood; it
passes if its p99 wait during the flood is within 2× of its p99 before
(waits shorter than one job's processing time count as that time).

Writes replay.md (parameters, summary, per-user table), replay-wait.svg
(wait over trace time, the noisy user against everyone else, DRR and
FIFO) and replay.json (the result) to --report-dir, each with
--attribution: the trace's licence requires the credit wherever its data
or figures derived from it appear.`,
		Example: `  fila bench replay --trace google_clusterdata2011_job_submits_days16-18.csv --speedup 600 --report-dir report
  fila bench replay --trace jobs.csv --limit 2000 --speedup 3600`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cfg.check(); err != nil {
				return err
			}
			f, err := os.Open(cfg.tracePath)
			if err != nil {
				return fmt.Errorf("bench: replay: %w", err)
			}
			tr, err := readTrace(f, cfg.limit)
			f.Close()
			if err != nil {
				return fmt.Errorf("bench: replay: %s: %w", cfg.tracePath, err)
			}
			if err := cfg.checkTrace(tr); err != nil {
				return err
			}
			res, err := replay(cmd.Context(), e, &cfg, tr)
			if err != nil {
				return err
			}
			if cfg.reportDir != "" {
				if err := writeReport(&cfg, res); err != nil {
					return err
				}
			}
			return e.emit(res)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.tracePath, "trace", "", "trace file (CSV with timestamp, user and logical_job_name columns; required)")
	fl.IntVar(&cfg.limit, "limit", 0, "replay only the first N jobs (0: all)")
	fl.Float64Var(&cfg.speedup, "speedup", 600, "trace seconds per wall-clock second")
	fl.Float64Var(&cfg.capacity, "capacity", 2000, "jobs per trace hour all consumers of a queue process together")
	fl.IntVar(&cfg.consumers, "consumers", 8, "consumers per queue, one job at a time each")
	fl.IntVar(&cfg.providers, "providers", 8, "throttle keys: FNV-1a(logical_job_name) mod N (0: no throttle keys)")
	fl.Float64Var(&cfg.providerRate, "provider-rate", 1000, "each provider's token rate, jobs per trace hour")
	fl.Float64Var(&cfg.providerBurst, "provider-burst", 20, "each provider's bucket size, jobs")
	fl.IntVar(&cfg.size, "size", 64, "payload bytes per job (at least 8)")
	fl.StringVar(&cfg.noisy, "noisy", "", "the flooding user (default: the user with the most jobs)")
	fl.IntVar(&cfg.minJobs, "min-jobs", 10, "jobs a user needs before and during the flood to be judged")
	fl.DurationVar(&cfg.bin, "bin", 30*time.Minute, "width of the plot's bins, trace time")
	fl.StringVar(&cfg.reportDir, "report-dir", "replay-report", "directory for replay.md, replay-wait.svg and replay.json (empty: no report)")
	fl.StringVar(&cfg.attribution, "attribution", googleAttribution, "credit line the trace's licence requires on the report and the plot (empty: none)")
	return cmd
}

// check checks the flags before the trace is read.
func (c *replayConfig) check() error {
	switch {
	case c.tracePath == "":
		return usagef("bench: replay: --trace is required")
	case !positive(c.speedup):
		return usagef("bench: replay: --speedup %g: want a positive number", c.speedup)
	case !positive(c.capacity):
		return usagef("bench: replay: --capacity %g: want a positive number", c.capacity)
	case c.consumers < 1:
		return usagef("bench: replay: --consumers %d: want 1 or more", c.consumers)
	case c.providers < 0:
		return usagef("bench: replay: --providers %d: want 0 or more", c.providers)
	case c.providers > 0 && (!positive(c.providerRate) || !(c.providerBurst >= 1) || math.IsInf(c.providerBurst, 1)):
		return usagef("bench: replay: want a finite --provider-rate > 0 and --provider-burst ≥ 1")
	case c.size < 8:
		return usagef("bench: replay: --size %d: want at least 8 (the payload carries the job's number)", c.size)
	case c.limit < 0 || c.minJobs < 1 || c.bin <= 0:
		return usagef("bench: replay: want --limit ≥ 0, --min-jobs ≥ 1 and --bin > 0")
	}
	return checkSize(c.size, 8)
}

// maxReplayBins bounds the bins of the replay's plot.
const maxReplayBins = 100_000

// checkTrace checks the flags whose bounds depend on the trace: the
// payloads of both modes, built ahead, and the plot's bins.
func (c *replayConfig) checkTrace(tr *trace) error {
	if held := 2 * float64(len(tr.jobs)) * float64(c.size); held > maxPayloadMemory {
		return usagef("bench: replay: --size %d × %d jobs × 2 modes: want at most %d payload bytes (1 GiB)", c.size, len(tr.jobs), maxPayloadMemory)
	}
	if bins := tr.span/c.bin + 1; bins > maxReplayBins {
		return usagef("bench: replay: --bin %v: %d bins over the trace's %v; want at most %d", c.bin, bins, tr.span, maxReplayBins)
	}
	return nil
}

// replayRun is one mode's replay in progress: when each job was
// delivered, in time since epoch (0: not yet).
type replayRun struct {
	mode      string
	queue     string
	delivered []time.Duration
	got       atomic.Int64 // jobs acked
	// ctx ends the run's consumers once every job was acked.
	ctx    context.Context
	cancel context.CancelFunc
}

// replay runs both modes at once on their own queues and analyses them.
func replay(ctx context.Context, e *env, cfg *replayConfig, tr *trace) (*ReplayResult, error) {
	noisy := tr.heaviest()
	if cfg.noisy != "" {
		i := slices.Index(tr.users, cfg.noisy)
		if i < 0 {
			return nil, usagef("bench: replay: --noisy %q: no such user in the trace", cfg.noisy)
		}
		noisy = int32(i)
	}
	c, err := e.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	base := e.queue
	if base == "" {
		base = "bench-replay-" + randomSuffix()
	}
	runs := []*replayRun{{mode: "drr"}, {mode: "fifo"}}
	for _, r := range runs {
		q, drop, err := createQueue(ctx, c, base+"-"+r.mode, e.keep, nil)
		if err != nil {
			return nil, err
		}
		defer drop()
		r.queue = q
		r.delivered = make([]time.Duration, len(tr.jobs))
		for p := range cfg.providers {
			// Rates are per trace hour; buckets count wall-clock seconds.
			perSecond := cfg.providerRate * cfg.speedup / 3600
			key := "throttle." + providerKey(q, p)
			val := strconv.FormatFloat(perSecond, 'g', 6, 64) + "," + strconv.FormatFloat(cfg.providerBurst, 'g', -1, 64)
			if err := c.Admin().SetConfig(ctx, key, val); err != nil {
				return nil, err
			}
			if !e.keep {
				defer c.Admin().DeleteConfig(context.Background(), key)
			}
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	first := firstError{cancel: cancel}
	fail := first.set
	// Consumers first, so the first job finds them subscribed.
	var subscribed sync.WaitGroup
	for _, r := range runs {
		r.ctx, r.cancel = context.WithCancel(ctx)
		defer r.cancel()
		for range cfg.consumers {
			subscribed.Add(1)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := replayConsumer(e, cfg, r, len(tr.jobs), subscribed.Done); err != nil {
					fail(err)
				}
			}()
		}
	}
	subscribed.Wait()
	if err := first.get(); err != nil {
		wg.Wait()
		return nil, err
	}
	msgs := make([][]*fila.Message, len(runs))
	for i, r := range runs {
		msgs[i] = replayMessages(cfg, tr, r)
	}
	var producing sync.WaitGroup
	start := now()
	for i := range runs {
		wg.Add(1)
		producing.Add(1)
		go func() {
			defer wg.Done()
			defer producing.Done()
			if err := replayProducer(ctx, e, cfg, tr, msgs[i], start); err != nil {
				fail(err)
			}
		}()
	}
	acked := func() int64 { return runs[0].got.Load() + runs[1].got.Load() }
	stop := e.track("replay", int64(2*len(tr.jobs)), acked)
	// Once every job is enqueued the consumers must keep acking: a
	// replay that stops making progress for replayStall fails.
	watchdog := make(chan struct{})
	go func() {
		producing.Wait()
		last, at := acked(), time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-watchdog:
				return
			case <-tick.C:
			}
			if n := acked(); n != last {
				last, at = n, time.Now()
			} else if time.Since(at) > replayStall {
				fail(fmt.Errorf("bench: replay: no job acked for %v, %d of %d acked", replayStall, n, 2*len(tr.jobs)))
				return
			}
		}
	}()
	wg.Wait()
	close(watchdog)
	stop()
	if err := first.get(); err != nil && !errors.Is(err, context.Canceled) {
		return nil, err
	}
	if err := ctx.Err(); err != nil && (runs[0].got.Load() < int64(len(tr.jobs)) || runs[1].got.Load() < int64(len(tr.jobs))) {
		return nil, fmt.Errorf("bench: replay: interrupted: %w", context.Cause(ctx))
	}
	res := analyse(cfg, tr, noisy, start, runs)
	res.WallSeconds = (now() - start).Seconds()
	res.Trace = filepath.Base(cfg.tracePath)
	res.Attribution = cfg.attribution
	return res, nil
}

// replayStall is how long a replay whose jobs are all enqueued may go
// without an ack before it fails.
const replayStall = 2 * time.Minute

// providerKey names provider p's throttle key for queue q: each queue
// has buckets of its own, so the two modes do not share tokens.
func providerKey(q string, p int) string { return q + ".provider-" + strconv.Itoa(p) }

// replayMessages builds one message per job for run r: the payload's
// first 8 bytes are the job's index.
func replayMessages(cfg *replayConfig, tr *trace, r *replayRun) []*fila.Message {
	payloads := make([]byte, len(tr.jobs)*cfg.size)
	fill(payloads)
	msgs := make([]*fila.Message, len(tr.jobs))
	for i, j := range tr.jobs {
		p := payloads[i*cfg.size:][:cfg.size:cfg.size]
		binary.LittleEndian.PutUint64(p, uint64(i))
		m := fila.NewMessage(r.queue, p)
		if r.mode == "drr" {
			m.FairnessKey(tr.users[j.user])
		} else {
			m.FairnessKey("all")
		}
		if cfg.providers > 0 {
			m.ThrottleKey(providerKey(r.queue, provider(j.logical, cfg.providers)))
		}
		msgs[i] = m
	}
	return msgs
}

// replayProducer enqueues each job at start + its offset / speed-up: all
// jobs due at once go in one SendBatch (at most 1,024).
func replayProducer(ctx context.Context, e *env, cfg *replayConfig, tr *trace, msgs []*fila.Message, start time.Duration) error {
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	p := c.Producer()
	for i := 0; i < len(msgs); {
		due := start + cfg.wall(tr.jobs[i].at)
		if d := due - now(); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		t := now()
		j := i + 1
		for j < len(msgs) && j-i < 1024 && start+cfg.wall(tr.jobs[j].at) <= t {
			j++
		}
		res, err := p.SendBatch(ctx, msgs[i:j])
		if err != nil {
			return fmt.Errorf("bench: replay: enqueue: %w", err)
		}
		for _, r := range res {
			if r.Err != nil {
				return fmt.Errorf("bench: replay: enqueue: %w", r.Err)
			}
		}
		i = j
	}
	return nil
}

// replayConsumer processes one job at a time until every job of the run
// was acked. It holds one delivery at a time (prefetch 1), so the broker
// decides who goes next only when a consumer is free, and acks in the
// background: the credit returns as the ack is sent, without waiting for
// the ack to be durable, so the consumer's capacity loses only the round
// trip of the credit and the next delivery. Each job takes the service
// time from the moment the consumer takes it, or from when it finished
// the previous one, whichever is later. A job's wait ends when the
// consumer takes it.
func replayConsumer(e *env, cfg *replayConfig, r *replayRun, jobs int, subscribed func()) error {
	ctx := r.ctx
	once := sync.OnceFunc(subscribed)
	defer once()
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	sub, err := c.Consumer().Subscribe(ctx, r.queue, fila.Prefetch(1))
	if err != nil {
		return err
	}
	defer sub.Close(context.Background())
	once()
	service := cfg.wall(cfg.service())
	var (
		acks    sync.WaitGroup
		ackErr  atomic.Pointer[error]
		free    time.Duration // when the consumer finishes its current job
		stopped bool
	)
	defer acks.Wait()
	for !stopped {
		if p := ackErr.Load(); p != nil {
			return *p
		}
		d, err := sub.Next(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		at := now()
		if i := binary.LittleEndian.Uint64(d.Payload()); i < uint64(jobs) && r.delivered[i] == 0 {
			r.delivered[i] = at
		}
		free = max(free, at) + service
		if wait := free - now(); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-ctx.Done():
				// The run is complete (or failed): finish this job anyway.
				t.Stop()
				time.Sleep(free - now())
				stopped = true
			}
		}
		acks.Add(1)
		go func() {
			defer acks.Done()
			if err := d.Ack(context.Background()); err != nil {
				ackErr.CompareAndSwap(nil, &err)
				return
			}
			if r.got.Add(1) >= int64(jobs) {
				r.cancel() // the run is complete: stop its other consumers
			}
		}()
	}
	if p := ackErr.Load(); p != nil {
		return fmt.Errorf("bench: replay: ack: %w", *p)
	}
	return nil
}

// firstError keeps the first error of many goroutines and cancels their
// context when it arrives.
type firstError struct {
	err    atomic.Pointer[error]
	cancel context.CancelFunc
}

func (f *firstError) set(err error) {
	if f.err.CompareAndSwap(nil, &err) {
		f.cancel()
	}
}

func (f *firstError) get() error {
	if p := f.err.Load(); p != nil {
		return *p
	}
	return nil
}
