package bench

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

// The replay's modes, in their default order: how a mode's queue shares
// its consumers and which fairness key each job carries.
var replayModes = []struct{ name, policy string }{
	{"fifo", fila.PolicyDRR}, // one fairness key for every job
	{"drr", fila.PolicyDRR},  // the job's own key
	{"stfq", fila.PolicySTFQ},
	{"tenants", fila.PolicySTFQ}, // tenant, then the job's key
}

// tenantSep is the tenant separator of the tenants mode's queue: a byte
// no tenant name of a trace holds.
const tenantSep = "\x1f"

// modePolicy returns the scheduling policy of mode's queue, "" for an
// unknown mode.
func modePolicy(mode string) string {
	for _, m := range replayModes {
		if m.name == mode {
			return m.policy
		}
	}
	return ""
}

// replayConfig are the replay's parameters, in trace time.
type replayConfig struct {
	tracePath string
	// layout is --trace-format: layoutAuto, layoutGoogle or layoutCSV.
	layout string
	limit  int
	// modes are the modes to run, one after another.
	modes   []string
	speedup float64
	// capacity is what the consumers together process, jobs per trace
	// hour: each of the consumers takes consumers / capacity hours of
	// trace time per job that has no cost of its own.
	capacity  float64
	consumers int
	// providers is the number of throttle keys jobs of the Google layout
	// map to (0: none); each is a token bucket of providerRate jobs per
	// trace hour and providerBurst jobs, unless rates name it.
	providers     int
	providerRate  float64
	providerBurst float64
	// throttleFlags are the --throttle-rate values and throttleFile the
	// --throttle-rates file; rates is what they give.
	throttleFlags []string
	throttleFile  string
	rates         []ThrottleRate
	size          int
	noisy         string
	minJobs       int
	bin           time.Duration
	reportDir     string
	attribution   string
	// maxLateness bounds the p99 of enqueue lateness in trace time (0:
	// one job's processing time, service()); minBusy is the least share
	// of a backlog's time the consumers must be busy.
	maxLateness time.Duration
	minBusy     float64
	strict      bool
	// merge are earlier results to combine instead of replaying.
	merge []string
}

// service is one job's processing time in trace time, for a job without
// a cost of its own.
func (c *replayConfig) service() time.Duration {
	return time.Duration(float64(c.consumers) / c.capacity * float64(time.Hour))
}

// lateness is the largest p99 of enqueue lateness a valid run has.
func (c *replayConfig) lateness() time.Duration { return cmp.Or(c.maxLateness, c.service()) }

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
	// TraceFormat is the trace's layout: "google" or "csv".
	TraceFormat string `json:"trace_format"`
	// Attribution is the credit the trace's licence requires, carried by
	// everything derived from it.
	Attribution string `json:"attribution,omitempty"`
	// Valid is false when a mode's run did not measure what it claims
	// (see ReplayValidity); InvalidReasons then say why, each after its
	// mode's name.
	Valid          bool     `json:"valid"`
	InvalidReasons []string `json:"invalid_reasons,omitempty"`
	Jobs           int      `json:"jobs"`
	// Users are the Google layout's users, the generic layout's tenants.
	Users int `json:"users"`
	// SpanHours is the time from the first submission to the last.
	SpanHours float64 `json:"span_hours"`
	Speedup   float64 `json:"speedup"`
	Capacity  float64 `json:"capacity_jobs_per_hour"`
	Consumers int     `json:"consumers"`
	// ServiceSeconds is the processing time of a job without a cost of
	// its own; JobCosts says whether any job has one (the csv layout's
	// cost column), MeanCostSeconds is the mean over all jobs.
	ServiceSeconds  float64 `json:"service_seconds"`
	JobCosts        bool    `json:"job_costs"`
	MeanCostSeconds float64 `json:"mean_cost_seconds"`
	// Providers, ProviderRate and ProviderBurst are the Google layout's
	// throttle keys (see replay's --providers).
	Providers     int     `json:"providers"`
	ProviderRate  float64 `json:"provider_rate_jobs_per_hour"`
	ProviderBurst float64 `json:"provider_burst"`
	// ThrottleKeys counts the distinct throttle keys jobs carry;
	// ThrottleRates are the buckets of those given a rate with
	// --throttle-rate or --throttle-rates (the others: providers at
	// ProviderRate, or unlimited).
	ThrottleKeys  int            `json:"throttle_keys"`
	ThrottleRates []ThrottleRate `json:"throttle_rates,omitempty"`
	PayloadSize   int            `json:"payload_size"`
	// Noisy is the flooding user: its first and last submissions bound
	// the flood.
	Noisy          string  `json:"noisy_user"`
	FloodFromHours float64 `json:"flood_from_hours"`
	FloodToHours   float64 `json:"flood_to_hours"`
	// MinJobs is how many jobs a user needs both before and during the
	// flood to be judged against the 2× criterion.
	MinJobs int `json:"min_jobs"`
	// BinSeconds is the width of the plot's bins.
	BinSeconds float64 `json:"bin_seconds"`
	// MaxLatenessSeconds and MinBusy are the validity thresholds: the
	// largest p99 of enqueue lateness, and the least share of the
	// backlogged time the consumers must be busy.
	MaxLatenessSeconds float64 `json:"max_lateness_p99_s"`
	MinBusy            float64 `json:"min_consumers_busy"`
	// WallSeconds is the wall-clock time of all modes' runs together.
	WallSeconds    float64      `json:"wall_seconds"`
	Modes          []ReplayMode `json:"modes"`
	ReportMarkdown string       `json:"report_markdown,omitempty"`
	ReportPlot     string       `json:"report_plot,omitempty"`
}

// ReplayMode is one way of scheduling the replay, run alone: "fifo",
// one fairness key for every job on a drr queue; "drr", each job's own
// fairness key (its user in the Google layout) on a drr queue;
// "stfq", the same keys on an stfq queue with the broker's default
// latency lane; or "tenants", the same on an stfq queue with a tenant
// hierarchy, each job's key under its tenant (its user).
type ReplayMode struct {
	Mode   string `json:"mode"`
	Policy string `json:"policy"`
	Queue  string `json:"queue"`
	// WallSeconds is the mode's run, from its first enqueue to its last
	// ack, in wall-clock time.
	WallSeconds float64        `json:"wall_seconds"`
	Validity    ReplayValidity `json:"validity"`
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
		Short: "Replay a job-submission trace with FIFO, DRR and STFQ, one after another; report per-user waits",
		Long: `Replays a job-submission trace once per mode, one mode after another,
each on a queue of its own that is deleted afterwards (unless --keep):

  fifo  one fairness key for every job, on a drr queue
  drr   each job's fairness key, on a drr queue
  stfq  each job's fairness key, on an stfq queue (the broker's default
        latency lane)
  tenants  as stfq, with the queue's tenant hierarchy on: a tenant's
        fairness keys share one tenant's share (differs from stfq only
        for a csv trace whose tenants use several keys)

--mode picks them (repeatable or comma-separated; default fifo,drr,stfq,
in that order). Each job is one message, enqueued at its submission time
divided by --speedup. Run against a broker that does nothing else: the
modes are run apart so that none shares the broker or the CPU with
another. (make replay, bench/cmd/replay, goes further: a fresh
fila-server for each mode.)

The trace is a CSV file in one of two layouts, told apart by its header
(--trace-format auto) or named (google, csv):

  google  the job_events layout of Google's clusterdata-2011-2 trace: a
          header naming at least timestamp (µs), user and
          logical_job_name. The fairness key is the user. Every job
          carries a throttle key, its "provider": FNV-1a of its
          logical_job_name mod --providers (0: none), named
          provider-<n>, each a token bucket of --provider-rate jobs per
          trace hour and --provider-burst jobs.
  csv     the header time_s,tenant,fairness_key,throttle_key[,cost]:
          time in seconds from any origin (a decimal number), the tenant
          (a user in the report), the fairness key (empty: the tenant),
          one throttle key (empty: none) and the job's consumer time in
          seconds of trace time (empty or no column: the time
          --capacity implies). A throttle key without a rate is
          unlimited.

Rows must be in time order. --throttle-rate key=rate[:burst]
(repeatable) and --throttle-rates FILE (lines "key rate [burst]"; # starts
a comment line) give throttle keys their buckets, rate in jobs per trace
hour, burst in jobs (default --provider-burst); for the google layout
they override --provider-rate for the providers they name. Each mode's
buckets are its own: the broker's keys are throttle.<queue>.<key>. Within
a fairness key, jobs of different throttle keys are taken in turn and
each key's are FIFO.

Each queue has --consumers consumers of fixed capacity: together they
process --capacity jobs per trace hour (each job takes consumers /
capacity hours of trace time, or its cost, then is acked), so when
submissions outrun them a backlog forms and the scheduler decides who
waits. Each consumer holds one job at a time (prefetch 1), and hides up
to a quarter of a job's time of the round trip from its ack to its next
delivery, as a consumer holding the next job already would.

Wait is from a job's scheduled submission to its delivery, in trace
time. The flooding user (--noisy, default the user with the most jobs)
defines the flood: from its first submission to its last. A user is
judged if it has --min-jobs jobs both before and during the flood; it
passes if its p99 wait during the flood is within 2× of its p99 before
(waits shorter than one job's processing time count as that time).

Each mode's run judges itself, and is invalid when:

  - its consumers did not keep up: while the broker held enough
    deliverable jobs to keep every consumer busy (asked every 100 ms of
    wall-clock time, less often if the broker is slow to answer; jobs
    waiting for a throttle token do not count), the consumers were busy
    less than --min-busy of the time (default 0.95, that is 1,900 of
    2,000 jobs per trace hour). Untested when such a backlog lasted less
    than 20 jobs' processing time.
  - the machine did not hold the offered rate: the p99 of enqueue
    lateness, from a job's scheduled submission to the broker's
    acceptance of it, is above --max-lateness of trace time (default
    one job's processing time, 14.4 s at the default --capacity: the
    wait below which the 2× criterion does not look).

An invalid run still writes its report, which says "INVALID" and why at
the top (the JSON: valid false, invalid_reasons), and prints the reasons
on standard error; with --strict the command then fails (exit 1).

Writes replay.md (parameters, validity, summary, per-user table),
replay-wait.svg (wait over trace time, one line per mode: everyone
else's p99 and p50 and the noisy user's p99) and replay.json (the
result) to --report-dir, each with --attribution (for the google layout
by default: its licence requires the credit wherever its data or figures
derived from it appear).

--merge FILE (repeatable) replays nothing and connects to nothing: it
combines the replay.json of earlier runs of the same trace and
parameters, each of other modes, into one report in --report-dir.`,
		Example: `  fila bench replay --trace google_clusterdata2011_job_submits_days16-18.csv --speedup 600 --report-dir report
  fila bench replay --trace jobs.csv --mode drr,stfq --throttle-rate stripe=600:10 --limit 2000 --speedup 3600
  fila bench replay --merge fifo/replay.json --merge drr/replay.json --merge stfq/replay.json --report-dir report`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			var res *ReplayResult
			if len(cfg.merge) > 0 {
				if err := cfg.checkMerge(cmd); err != nil {
					return err
				}
				r, err := mergeResults(cfg.merge)
				if err != nil {
					return err
				}
				res = r
			} else {
				if err := cfg.check(); err != nil {
					return err
				}
				tr, err := cfg.load(cmd)
				if err != nil {
					return err
				}
				if res, err = replay(cmd.Context(), e, &cfg, tr); err != nil {
					return err
				}
			}
			if cfg.reportDir != "" {
				if err := writeReport(cfg.reportDir, res); err != nil {
					return err
				}
			}
			if !res.Valid {
				for _, why := range res.InvalidReasons {
					fmt.Fprintf(e.stderr, "bench: replay: INVALID: %s\n", why)
				}
			}
			if err := e.emit(res); err != nil {
				return err
			}
			if cfg.strict && !res.Valid {
				return fmt.Errorf("bench: replay: invalid run (--strict): %s", strings.Join(res.InvalidReasons, "; "))
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&cfg.tracePath, "trace", "", "trace file (CSV, google or csv layout; required unless --merge)")
	fl.StringVar(&cfg.layout, "trace-format", layoutAuto, "trace layout: auto (by the header), google or csv")
	fl.StringSliceVar(&cfg.modes, "mode", []string{"fifo", "drr", "stfq"}, "modes to run, one after another: fifo, drr, stfq, tenants (repeatable or comma-separated)")
	fl.IntVar(&cfg.limit, "limit", 0, "replay only the first N jobs (0: all)")
	fl.Float64Var(&cfg.speedup, "speedup", 600, "trace seconds per wall-clock second")
	fl.Float64Var(&cfg.capacity, "capacity", 2000, "jobs per trace hour all consumers of a queue process together")
	fl.IntVar(&cfg.consumers, "consumers", 8, "consumers per queue, one job at a time each")
	fl.IntVar(&cfg.providers, "providers", 8, "google layout: throttle keys FNV-1a(logical_job_name) mod N (0: no throttle keys)")
	fl.Float64Var(&cfg.providerRate, "provider-rate", 1000, "google layout: each provider's token rate, jobs per trace hour")
	fl.Float64Var(&cfg.providerBurst, "provider-burst", 20, "each provider's bucket size, jobs; the burst of a throttle rate that names none")
	fl.StringArrayVar(&cfg.throttleFlags, "throttle-rate", nil, "a throttle key's bucket, key=rate[:burst], rate in jobs per trace hour (repeatable)")
	fl.StringVar(&cfg.throttleFile, "throttle-rates", "", "file of throttle keys' buckets, lines \"key rate [burst]\"")
	fl.IntVar(&cfg.size, "size", 64, "payload bytes per job (at least 8)")
	fl.StringVar(&cfg.noisy, "noisy", "", "the flooding user (default: the user with the most jobs)")
	fl.IntVar(&cfg.minJobs, "min-jobs", 10, "jobs a user needs before and during the flood to be judged")
	fl.DurationVar(&cfg.bin, "bin", 30*time.Minute, "width of the plot's bins, trace time")
	fl.DurationVar(&cfg.maxLateness, "max-lateness", 0, "validity: largest p99 of enqueue lateness, trace time (0: one job's processing time at --capacity)")
	fl.Float64Var(&cfg.minBusy, "min-busy", 0.95, "validity: least share of the backlogged time the consumers must be busy, 0 to 1")
	fl.BoolVar(&cfg.strict, "strict", false, "fail (exit 1) when the run is invalid, after writing the report")
	fl.StringArrayVar(&cfg.merge, "merge", nil, "combine the replay.json of an earlier run into the report instead of replaying (repeatable)")
	fl.StringVar(&cfg.reportDir, "report-dir", "replay-report", "directory for replay.md, replay-wait.svg and replay.json (empty: no report)")
	fl.StringVar(&cfg.attribution, "attribution", googleAttribution, "credit line the trace's licence requires on the report and the plot (default for the csv layout: none)")
	return cmd
}

// check checks the flags before the trace is read.
func (c *replayConfig) check() error {
	switch {
	case c.tracePath == "":
		return usagef("bench: replay: --trace is required")
	case c.layout != layoutAuto && c.layout != layoutGoogle && c.layout != layoutCSV:
		return usagef("bench: replay: --trace-format %q: want auto, google or csv", c.layout)
	case !positive(c.speedup):
		return usagef("bench: replay: --speedup %g: want a positive number", c.speedup)
	case !positive(c.capacity):
		return usagef("bench: replay: --capacity %g: want a positive number", c.capacity)
	case c.consumers < 1:
		return usagef("bench: replay: --consumers %d: want 1 or more", c.consumers)
	case c.providers < 0:
		return usagef("bench: replay: --providers %d: want 0 or more", c.providers)
	case !positive(c.providerRate) || !(c.providerBurst >= 1) || math.IsInf(c.providerBurst, 1):
		return usagef("bench: replay: want a finite --provider-rate > 0 and --provider-burst ≥ 1")
	case c.size < 8:
		return usagef("bench: replay: --size %d: want at least 8 (the payload carries the job's number)", c.size)
	case c.limit < 0 || c.minJobs < 1 || c.bin <= 0:
		return usagef("bench: replay: want --limit ≥ 0, --min-jobs ≥ 1 and --bin > 0")
	case c.maxLateness < 0 || !(c.minBusy >= 0 && c.minBusy <= 1):
		return usagef("bench: replay: want --max-lateness ≥ 0 and --min-busy from 0 to 1")
	case len(c.modes) == 0:
		return usagef("bench: replay: --mode: want at least one of fifo, drr, stfq, tenants")
	}
	for i, m := range c.modes {
		if modePolicy(m) == "" {
			return usagef("bench: replay: --mode %q: want fifo, drr, stfq or tenants", m)
		}
		if slices.Contains(c.modes[:i], m) {
			return usagef("bench: replay: --mode %s given twice", m)
		}
	}
	var file io.Reader
	if c.throttleFile != "" {
		b, err := os.ReadFile(c.throttleFile)
		if err != nil {
			return usagef("bench: replay: --throttle-rates: %w", err)
		}
		file = strings.NewReader(string(b))
	}
	rates, err := throttleRates(c.throttleFlags, file, c.providerBurst)
	if err != nil {
		return usagef("bench: replay: %w", err)
	}
	c.rates = rates
	return checkSize(c.size, 8)
}

// checkMerge checks that --merge comes with no flag of a replay's own.
func (c *replayConfig) checkMerge(cmd *cobra.Command) error {
	if c.tracePath != "" {
		return usagef("bench: replay: --merge replays nothing: give it no --trace")
	}
	var bad []string
	for _, name := range []string{"trace-format", "mode", "limit", "speedup", "capacity", "consumers", "providers",
		"provider-rate", "provider-burst", "throttle-rate", "throttle-rates", "size", "noisy", "min-jobs", "bin",
		"max-lateness", "min-busy", "attribution"} {
		if cmd.Flags().Changed(name) {
			bad = append(bad, "--"+name)
		}
	}
	if len(bad) > 0 {
		return usagef("bench: replay: --merge replays nothing: it takes --report-dir and --strict, not %s", strings.Join(bad, ", "))
	}
	return nil
}

// load reads the trace and checks the flags whose meaning depends on it.
func (c *replayConfig) load(cmd *cobra.Command) (*trace, error) {
	f, err := os.Open(c.tracePath)
	if err != nil {
		return nil, fmt.Errorf("bench: replay: %w", err)
	}
	tr, err := readTrace(f, c.limit, c.layout)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("bench: replay: %s: %w", c.tracePath, err)
	}
	fl := cmd.Flags()
	if tr.layout == layoutCSV {
		for _, name := range []string{"providers", "provider-rate"} {
			if fl.Changed(name) {
				return nil, usagef("bench: replay: --%s: for the google layout only; give the csv layout's throttle keys --throttle-rate", name)
			}
		}
		if !fl.Changed("attribution") {
			c.attribution = ""
		}
	} else {
		tr.assignProviders(c.providers)
	}
	for _, r := range c.rates {
		if !slices.Contains(tr.throttles, r.Key) {
			fmt.Fprintf(cmd.ErrOrStderr(), "bench: replay: note: throttle key %q has a rate but no job of the trace carries it\n", r.Key)
		}
	}
	if err := c.checkTrace(tr); err != nil {
		return nil, err
	}
	return tr, nil
}

// maxReplayBins bounds the bins of the replay's plot.
const maxReplayBins = 100_000

// maxJobWall bounds a job's processing time in wall-clock time: its
// lease lasts twice as long, within the broker's largest lease (12 h by
// default).
const maxJobWall = 5 * time.Hour

// checkTrace checks the flags whose bounds depend on the trace: the
// payloads of a mode, built ahead, the plot's bins and the longest job.
func (c *replayConfig) checkTrace(tr *trace) error {
	if held := float64(len(tr.jobs)) * float64(c.size); held > maxPayloadMemory {
		return usagef("bench: replay: --size %d × %d jobs: want at most %d payload bytes (1 GiB)", c.size, len(tr.jobs), maxPayloadMemory)
	}
	if bins := tr.span/c.bin + 1; bins > maxReplayBins {
		return usagef("bench: replay: --bin %v: %d bins over the trace's %v; want at most %d", c.bin, bins, tr.span, maxReplayBins)
	}
	if w := c.wall(tr.longest(c.service())); w > maxJobWall {
		return usagef("bench: replay: a job takes %v of wall-clock time at --speedup %g; want at most %v", w, c.speedup, maxJobWall)
	}
	return nil
}

// replayRun is one mode's replay in progress. Times are since epoch
// (0: not yet).
type replayRun struct {
	mode, policy, queue string
	// delivered is when each job was delivered; started when its
	// consumer began it (its delivery, or when the consumer finished its
	// previous job if later); accepted when the broker accepted its
	// enqueue.
	delivered, started, accepted []time.Duration
	// samples are the broker's deliverable backlog over the run.
	samples []backlogSample
	// start is the origin of the run's schedule: job j is due at start
	// + j.at / speed-up; end is when its last job was acked.
	start, end time.Duration
	got        atomic.Int64 // jobs acked
	// ctx ends the run's consumers and sampler once every job was acked.
	ctx    context.Context
	cancel context.CancelFunc
}

// A backlogSample is the broker's answer to one QueueStats during a
// run: at (since epoch while running, trace time since the first
// submission once analysed) is the middle of the call; ready counts
// the jobs deliverable then: ready, less those waiting for a throttle
// token.
type backlogSample struct {
	at    time.Duration
	ready int64
}

// replaySample is how often a run asks the broker for its backlog, in
// wall-clock time, unless the broker takes more than a twentieth of it
// to answer.
const replaySample = 100 * time.Millisecond

// replay runs each mode in turn, each alone on a queue of its own, and
// analyses them.
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
	var runs []*replayRun
	for _, mode := range cfg.modes {
		r, err := replayMode(ctx, e, c, cfg, tr, mode, base+"-"+mode)
		if err != nil {
			return nil, err
		}
		runs = append(runs, r)
	}
	res := analyse(cfg, tr, noisy, runs)
	res.Trace = filepath.Base(cfg.tracePath)
	res.Attribution = cfg.attribution
	return res, nil
}

// buckets returns the token bucket of each of tr's throttle keys, indexed
// like tr.throttles: its --throttle-rate, else for the Google layout's
// providers --provider-rate and --provider-burst; a zero Rate is none.
func (c *replayConfig) buckets(tr *trace) []ThrottleRate {
	out := make([]ThrottleRate, len(tr.throttles))
	for i, k := range tr.throttles {
		out[i].Key = k
		if j := slices.IndexFunc(c.rates, func(r ThrottleRate) bool { return r.Key == k }); j >= 0 {
			out[i] = c.rates[j]
		} else if tr.layout == layoutGoogle {
			out[i].Rate, out[i].Burst = c.providerRate, c.providerBurst
		}
	}
	return out
}

// replayMode runs one mode on queue name (created with the mode's
// policy, deleted afterwards unless --keep) and returns its record once
// every job was acked.
func replayMode(ctx context.Context, e *env, c *fila.Client, cfg *replayConfig, tr *trace, mode, name string) (*replayRun, error) {
	r := &replayRun{mode: mode, policy: modePolicy(mode)}
	lease := max(30*time.Second, 2*cfg.wall(tr.longest(cfg.service()))+10*time.Second)
	q, drop, err := createQueue(ctx, c, name, e.keep, func(qs *fila.QueueSpec) {
		qs.Policy(r.policy).VisibilityTimeout(lease)
		if mode == "tenants" {
			qs.TenantSeparator(tenantSep)
		}
	})
	if err != nil {
		return nil, err
	}
	defer drop()
	r.queue = q
	// A queue that existed (--queue) must have the mode's policy.
	st, err := c.Admin().QueueStats(ctx, q)
	if err != nil {
		return nil, err
	}
	if st.Policy != r.policy {
		return nil, fmt.Errorf("bench: replay: queue %s has policy %s; mode %s wants %s", q, st.Policy, mode, r.policy)
	}
	// The slowest bucket's token interval, in wall-clock time: the
	// watchdog allows for it.
	var slowest time.Duration
	for _, b := range cfg.buckets(tr) {
		if b.Rate == 0 {
			continue
		}
		slowest = max(slowest, cfg.wall(time.Duration(float64(time.Hour)/b.Rate)))
		key := "throttle." + throttleKey(q, b.Key)
		if err := c.Admin().SetConfig(ctx, key, b.bucketValue(cfg.speedup)); err != nil {
			return nil, err
		}
		if !e.keep {
			defer c.Admin().DeleteConfig(context.Background(), key)
		}
	}
	n := len(tr.jobs)
	r.delivered = make([]time.Duration, n)
	r.started = make([]time.Duration, n)
	r.accepted = make([]time.Duration, n)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	var wg sync.WaitGroup
	first := firstError{cancel: cancel}
	fail := first.set
	// Consumers first, so the first job finds them subscribed.
	var subscribed sync.WaitGroup
	for range cfg.consumers {
		subscribed.Add(1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := replayConsumer(e, cfg, tr, r, subscribed.Done); err != nil {
				fail(err)
			}
		}()
	}
	subscribed.Wait()
	if err := first.get(); err != nil {
		wg.Wait()
		return nil, err
	}
	msgs := replayMessages(cfg, tr, r)
	producing := make(chan struct{})
	r.start = now()
	wg.Add(2)
	go func() {
		defer wg.Done()
		defer close(producing)
		if err := replayProducer(ctx, e, cfg, tr, r, msgs); err != nil {
			fail(err)
		}
	}()
	go func() {
		defer wg.Done()
		if err := replaySampler(e, r); err != nil {
			fail(err)
		}
	}()
	stop := e.track("replay "+mode, int64(n), r.got.Load)
	// Once every job is enqueued the consumers must keep acking: a run
	// that stops making progress for stall fails.
	stall := max(replayStall, 2*cfg.wall(tr.longest(cfg.service())), 2*slowest)
	watchdog := make(chan struct{})
	go func() {
		select {
		case <-producing:
		case <-watchdog:
			return
		}
		last, at := r.got.Load(), time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			select {
			case <-watchdog:
				return
			case <-tick.C:
			}
			if got := r.got.Load(); got != last {
				last, at = got, time.Now()
			} else if time.Since(at) > stall {
				fail(fmt.Errorf("bench: replay: %s: no job acked for %v, %d of %d acked", mode, stall, got, n))
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
	if r.got.Load() < int64(n) {
		return nil, fmt.Errorf("bench: replay: %s: interrupted: %w", mode, context.Cause(ctx))
	}
	return r, nil
}

// replayStall is how long a run whose jobs are all enqueued may go
// without an ack before it fails, unless its jobs or its throttle
// tokens take longer.
const replayStall = 2 * time.Minute

// throttleKey names a trace's throttle key key for queue q: each queue
// has buckets of its own, so that no mode inherits another's tokens.
func throttleKey(q, key string) string { return q + "." + key }

// replayMessages builds one message per job for run r: the payload's
// first 8 bytes are the job's index.
func replayMessages(cfg *replayConfig, tr *trace, r *replayRun) []*fila.Message {
	payloads := make([]byte, len(tr.jobs)*cfg.size)
	fill(payloads)
	msgs := make([]*fila.Message, len(tr.jobs))
	for i := range tr.jobs {
		j := &tr.jobs[i]
		p := payloads[i*cfg.size:][:cfg.size:cfg.size]
		binary.LittleEndian.PutUint64(p, uint64(i))
		m := fila.NewMessage(r.queue, p)
		switch r.mode {
		case "fifo":
			m.FairnessKey("all")
		case "tenants":
			m.FairnessKey(tr.users[j.user] + tenantSep + tr.fairnessKey(j))
		default:
			m.FairnessKey(tr.fairnessKey(j))
		}
		if k := tr.throttleKey(j); k != "" {
			m.ThrottleKey(throttleKey(r.queue, k))
		}
		msgs[i] = m
	}
	return msgs
}

// replayProducer enqueues each job at r.start + its offset / speed-up,
// all jobs due at once in one SendBatch (at most 1,024), and records
// when the broker accepted each.
func replayProducer(ctx context.Context, e *env, cfg *replayConfig, tr *trace, r *replayRun, msgs []*fila.Message) error {
	c, err := e.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	p := c.Producer()
	for i := 0; i < len(msgs); {
		due := r.start + cfg.wall(tr.jobs[i].at)
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
		for j < len(msgs) && j-i < 1024 && r.start+cfg.wall(tr.jobs[j].at) <= t {
			j++
		}
		res, err := p.SendBatch(ctx, msgs[i:j])
		if err != nil {
			return during("bench: replay", err)
		}
		for _, res := range res {
			if res.Err != nil {
				return during("bench: replay", res.Err)
			}
		}
		done := now()
		for k := i; k < j; k++ {
			r.accepted[k] = done
		}
		i = j
	}
	return nil
}

// replaySampler asks the broker for r's queue's backlog every
// replaySample, or less often when the broker is slow to answer (so that
// the asking takes at most 5 % of the time), until the run ends.
func replaySampler(e *env, r *replayRun) error {
	ctx := r.ctx
	c, err := e.dial(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer c.Close()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		before := now()
		st, err := c.Admin().QueueStats(ctx, r.queue)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return during("bench: replay", err)
		}
		after := now()
		ready := int64(st.Ready)
		for _, t := range st.ThrottleKeys {
			ready -= int64(t.Waiting)
		}
		r.samples = append(r.samples, backlogSample{at: before + (after-before)/2, ready: max(ready, 0)})
		t.Reset(max(replaySample-(after-before), 19*(after-before)))
	}
}

// replayConsumer processes one job at a time until every job of the run
// was acked. It holds one delivery at a time (prefetch 1), so the broker
// decides who goes next only when a consumer is free, and acks in the
// background: the credit returns as the ack is sent, without waiting for
// the ack to be durable, so the consumer's capacity loses only the round
// trip of the credit and the next delivery. Each job takes its cost (or
// the service time) from the moment the consumer takes it, or from when
// it finished the previous one, whichever is later. A job's wait ends
// when the consumer takes it.
func replayConsumer(e *env, cfg *replayConfig, tr *trace, r *replayRun, subscribed func()) error {
	ctx := r.ctx
	jobs := len(tr.jobs)
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
	service := cfg.service()
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
		cost := service
		i := binary.LittleEndian.Uint64(d.Payload())
		if i < uint64(jobs) {
			cost = cmp.Or(tr.jobs[i].cost, service)
		}
		// The job starts when the consumer is free, or when it arrives.
		// A consumer hides up to a quarter of a job's time of the round
		// trip from its ack to its next delivery, as one holding the next
		// job already would: while a backlog waits, the consumers work at
		// --capacity, not below it by that round trip.
		wall := cfg.wall(cost)
		start := max(free, at)
		if at > free && at-free <= wall/4 {
			start = free
		}
		if i < uint64(jobs) && r.delivered[i] == 0 {
			r.delivered[i], r.started[i] = at, start
		}
		free = start + wall
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
			if r.got.Add(1) == int64(jobs) {
				r.end = now()
				r.cancel() // the run is complete: stop its other consumers
			}
		}()
	}
	if p := ackErr.Load(); p != nil {
		return during("bench: replay", *p)
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
