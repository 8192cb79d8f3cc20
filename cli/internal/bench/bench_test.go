package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// These tests run every subcommand at a tiny size against a real
// fila-server and check the arithmetic of what it reports: counts,
// shares, sums. They assert nothing about speed.

// runBench runs "bench args..." against srv in process, with --output
// format, and returns its standard output.
func runBench(t *testing.T, srv *filatest.Server, format string, args ...string) []byte {
	t.Helper()
	out, stderr, err := execBench(srv, format, args...)
	if err != nil {
		t.Fatalf("bench %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr)
	}
	return out
}

// execBench runs "bench args..." against srv in process, with --output
// format, and returns its standard output, its standard error and its
// error.
func execBench(srv *filatest.Server, format string, args ...string) (stdout []byte, stderr string, err error) {
	return execBenchAt(srv.Addr, format, args...)
}

// execBenchAt runs "bench args..." in process against the broker at
// addr (one address, or several nodes' of a cluster, comma-separated),
// as execBench does.
func execBenchAt(addr, format string, args ...string) (stdout []byte, stderr string, err error) {
	connect := func(ctx context.Context, reconnect bool) (*fila.Client, error) {
		return fila.Connect(ctx, addr, fila.WithoutReconnect())
	}
	cmd := NewCommand(connect, &format)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true // as the CLI's root does
	var out, errb bytes.Buffer
	cmd.SetArgs(append(args, "--no-progress"))
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	err = cmd.ExecuteContext(ctx)
	return out.Bytes(), errb.String(), err
}

// runJSON runs a subcommand with --output json and decodes its result.
func runJSON(t *testing.T, srv *filatest.Server, v any, args ...string) {
	t.Helper()
	out := runBench(t, srv, "json", args...)
	if err := json.Unmarshal(out, v); err != nil {
		t.Fatalf("bench %s: %v\nstdout: %s", strings.Join(args, " "), err, out)
	}
}

// throughputJSON is Throughput as JSON.
type throughputJSON struct {
	Messages int64   `json:"messages"`
	Bytes    int64   `json:"bytes"`
	Seconds  float64 `json:"seconds"`
	Rate     float64 `json:"msgs_per_s"`
}

// check verifies the figures agree with each other.
func (tp throughputJSON) check(t *testing.T, what string, messages int64, size int) {
	t.Helper()
	if tp.Messages != messages || tp.Bytes != messages*int64(size) {
		t.Errorf("%s = %d messages, %d bytes; want %d, %d", what, tp.Messages, tp.Bytes, messages, messages*int64(size))
	}
	if tp.Seconds <= 0 || math.Abs(tp.Rate-float64(tp.Messages)/tp.Seconds) > 0.1+1e-3*tp.Rate {
		t.Errorf("%s rate = %v over %vs for %d messages; want messages/seconds", what, tp.Rate, tp.Seconds, tp.Messages)
	}
}

type latencyJSON struct {
	Count int     `json:"count"`
	P50   float64 `json:"p50_ms"`
	P95   float64 `json:"p95_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func (l latencyJSON) check(t *testing.T, what string, count int) {
	t.Helper()
	if l.Count != count {
		t.Errorf("%s count = %d; want %d", what, l.Count, count)
	}
	if !(0 <= l.P50 && l.P50 <= l.P95 && l.P95 <= l.P99 && l.P99 <= l.Max) {
		t.Errorf("%s = p50 %v, p95 %v, p99 %v, max %v; want them in order", what, l.P50, l.P95, l.P99, l.Max)
	}
}

func TestProduce(t *testing.T) {
	srv := filatest.Start(t)
	var r struct {
		Producers int            `json:"producers"`
		Produce   throughputJSON `json:"produce"`
		Request   latencyJSON    `json:"request_latency"`
	}
	// 3 producers of 3 batches of 16 in flight: 48 messages per round;
	// 500 is not a multiple, so the last batches are partial.
	runJSON(t, srv, &r, "produce", "--producers", "3", "--outstanding", "48", "--batch", "16", "--size", "100", "--count", "500")
	r.Produce.check(t, "produce", 500, 100)
	if r.Request.Count < 500/16 || r.Request.Count > 500/16+9 {
		t.Errorf("produce request_latency count = %d; want one per SendBatch, 32 to 40", r.Request.Count)
	}
	// With --batch 1 each producer keeps its window as single-message
	// Sends: one request latency sample per message.
	runJSON(t, srv, &r, "produce", "--producers", "2", "--outstanding", "32", "--batch", "1", "--size", "100", "--count", "300")
	r.Produce.check(t, "produce --batch 1", 300, 100)
	if r.Request.Count != 300 {
		t.Errorf("produce --batch 1 request_latency count = %d; want one per Send, 300", r.Request.Count)
	}
	out := string(runBench(t, srv, "table", "produce", "--count", "10", "--size", "8"))
	if !strings.Contains(out, "MSGS/S") || !strings.Contains(out, "      10") {
		t.Errorf("produce table = %q; want a header and 10 messages", out)
	}
}

func TestConsume(t *testing.T) {
	srv := filatest.Start(t)
	var r struct {
		Fill    throughputJSON `json:"fill"`
		Consume throughputJSON `json:"consume"`
	}
	runJSON(t, srv, &r, "consume", "--count", "700", "--size", "50", "--consumers", "2", "--prefetch", "64", "--batch", "10")
	r.Fill.check(t, "fill", 700, 50)
	r.Consume.check(t, "consume", 700, 50)
}

func TestLifecycle(t *testing.T) {
	srv := filatest.Start(t)
	var r struct {
		Produce  throughputJSON `json:"produce"`
		Consume  throughputJSON `json:"consume"`
		EndToEnd latencyJSON    `json:"end_to_end"`
	}
	runJSON(t, srv, &r, "lifecycle", "--count", "400", "--size", "32", "--producers", "2", "--consumers", "2", "--batch", "8", "--outstanding", "32")
	r.Produce.check(t, "produce", 400, 32)
	r.Consume.check(t, "consume", 400, 32)
	r.EndToEnd.check(t, "end_to_end", 400)
}

// TestCluster runs produce, lifecycle and latency against a cluster of
// three nodes, given all three addresses: each run creates its queue
// through whichever node answers and its clients reach the queue's
// leader. It is skipped under -short.
func TestCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three fila-server processes")
	}
	cl := filatest.StartCluster(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := fila.Connect(ctx, cl.Addrs())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Queues can be created once the meta group has a leader.
	for {
		err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("ready"))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("create queue: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	run := func(v any, args ...string) {
		t.Helper()
		out, stderr, err := execBenchAt(cl.Addrs(), "json", args...)
		if err != nil {
			t.Fatalf("bench %s: %v\nstderr: %s", strings.Join(args, " "), err, stderr)
		}
		if err := json.Unmarshal(out, v); err != nil {
			t.Fatalf("bench %s: %v\nstdout: %s", strings.Join(args, " "), err, out)
		}
	}
	var p struct {
		Produce throughputJSON `json:"produce"`
	}
	run(&p, "produce", "--producers", "3", "--outstanding", "48", "--batch", "16", "--size", "100", "--count", "500")
	p.Produce.check(t, "produce", 500, 100)
	var l struct {
		Produce  throughputJSON `json:"produce"`
		Consume  throughputJSON `json:"consume"`
		EndToEnd latencyJSON    `json:"end_to_end"`
	}
	run(&l, "lifecycle", "--count", "400", "--size", "32", "--producers", "2", "--consumers", "1", "--batch", "8", "--outstanding", "32")
	l.Produce.check(t, "produce", 400, 32)
	l.Consume.check(t, "consume", 400, 32)
	l.EndToEnd.check(t, "end_to_end", 400)
	var lat struct {
		Unloaded latencyJSON `json:"unloaded"`
		Loaded   latencyJSON `json:"loaded"`
	}
	run(&lat, "latency", "--count", "20", "--rate", "200", "--duration", "250ms", "--size", "16")
	lat.Unloaded.check(t, "unloaded", 20)
	lat.Loaded.check(t, "loaded", 50)
}

func TestLatency(t *testing.T) {
	srv := filatest.Start(t)
	var r struct {
		Unloaded latencyJSON `json:"unloaded"`
		Loaded   latencyJSON `json:"loaded"`
		Rate     float64     `json:"rate"`
		Achieved float64     `json:"achieved_rate"`
	}
	runJSON(t, srv, &r, "latency", "--count", "20", "--rate", "200", "--duration", "500ms", "--size", "16")
	r.Unloaded.check(t, "unloaded", 20)
	r.Loaded.check(t, "loaded", 100) // 200/s × 0.5s
	if r.Rate != 200 || r.Achieved <= 0 {
		t.Errorf("latency rate, achieved = %v, %v; want 200 and a positive rate", r.Rate, r.Achieved)
	}
}

func TestFairness(t *testing.T) {
	srv := filatest.Start(t)
	var r FairnessResult
	// 1,000 rounded down to whole cycles of Σw = 6: 996 = 166 cycles.
	runJSON(t, srv, &r, "fairness", "--weights", "1,2,3", "--count", "1000", "--size", "64")
	if r.Messages != 996 || len(r.Keys) != 3 {
		t.Fatalf("fairness = %d messages, %d keys; want 996, 3", r.Messages, len(r.Keys))
	}
	var delivered int64
	var share float64
	for i, k := range r.Keys {
		if want := int64(166 * (i + 1)); k.Enqueued != want || int(k.Weight) != i+1 {
			t.Errorf("fairness key %d = %d enqueued, weight %d; want %d, %d", i, k.Enqueued, k.Weight, want, i+1)
		}
		if want := float64(i+1) / 6; math.Abs(k.Entitled-want) > 1e-9 {
			t.Errorf("fairness key %d entitled = %v; want %v", i, k.Entitled, want)
		}
		if math.Abs(k.Deviation-(k.Share-k.Entitled)) > 1e-9 || math.Abs(k.Deviation) > r.MaxDeviation+1e-12 {
			t.Errorf("fairness key %d deviation = %v; want share − entitled = %v, at most max %v", i, k.Deviation, k.Share-k.Entitled, r.MaxDeviation)
		}
		delivered += k.Delivered
		share += k.Share
	}
	if delivered != r.Window || r.Window < 1 || r.Window > r.Messages || math.Abs(share-1) > 1e-9 {
		t.Errorf("fairness window = %d, Σ delivered = %d, Σ share = %v; want Σ delivered = window ≤ 996, Σ share = 1", r.Window, delivered, share)
	}
	// The key that ran out first was delivered whole.
	var full bool
	for _, k := range r.Keys {
		full = full || k.Delivered == k.Enqueued
	}
	if !full {
		t.Errorf("fairness keys = %+v; want one delivered whole (the window ends when a key runs out)", r.Keys)
	}
}

func TestThrottle(t *testing.T) {
	srv := filatest.Start(t)
	var r ThrottleResult
	runJSON(t, srv, &r, "throttle", "--rate", "40", "--burst", "10", "--duration", "1s", "--interval", "250ms")
	if len(r.Intervals) != 4 {
		t.Fatalf("throttle intervals = %d; want 4", len(r.Intervals))
	}
	var sum int64
	for i, iv := range r.Intervals {
		end := 0.25 * float64(i+1)
		sum += iv.Delivered
		if math.Abs(iv.End-end) > 1e-9 || math.Abs(iv.Allowed-(10+40*end)) > 1e-9 || iv.Cumulative != sum {
			t.Errorf("throttle interval %d = %+v; want end %v, allowed %v, cumulative %d", i, iv, end, 10+40*end, sum)
		}
	}
	if r.Delivered != sum || r.Allowed != 50 || r.Enqueued != 155 {
		t.Errorf("throttle = delivered %d, allowed %v, enqueued %d; want %d, 50, 155", r.Delivered, r.Allowed, r.Enqueued, sum)
	}
	// The bucket admits at most burst + rate × t in any span: a property
	// of the broker, not of its speed.
	if r.Delivered > 50+1 {
		t.Errorf("throttle delivered %d in 1s; want at most burst + rate × 1s = 50", r.Delivered)
	}
}

func TestKeys(t *testing.T) {
	srv := filatest.Start(t)
	var r KeysResult
	runJSON(t, srv, &r, "keys", "--keys", "1,10,300", "--count", "200", "--size", "16", "--batch", "32", "--rounds", "2")
	if len(r.Runs) != 3 || r.Base != 1 {
		t.Fatalf("keys = %d runs, base %d; want 3, 1", len(r.Runs), r.Base)
	}
	for i, want := range []struct {
		keys     int
		messages int64
	}{{1, 200}, {10, 200}, {300, 300}} {
		run := r.Runs[i]
		if run.Keys != want.keys || run.Messages != want.messages || run.Enqueue.Messages != want.messages || run.Consume.Messages != want.messages || len(run.ConsumeRates) != 2 {
			t.Errorf("keys run %d = %+v; want %d keys, %d messages enqueued and consumed, 2 rounds", i, run, want.keys, want.messages)
		}
		// The JSON rounds seconds to microseconds: compare to 0.1%.
		if wantRatio := run.Consume.PerSecond() / r.Runs[0].Consume.PerSecond(); math.Abs(run.VsBase/wantRatio-1) > 1e-3 {
			t.Errorf("keys run %d consume_vs_base = %v; want %v", i, run.VsBase, wantRatio)
		}
	}
}

// UnmarshalJSON reads Throughput back, for the tests.
func (t *Throughput) UnmarshalJSON(b []byte) error {
	var v throughputJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*t = Throughput{Messages: v.Messages, Bytes: v.Bytes, Elapsed: time.Duration(v.Seconds * float64(time.Second))}
	return nil
}

// TestReplay replays the first 2,000 jobs of the trace at 3,600× (about
// two seconds a mode) in each mode, one after another, and checks the
// report and its bookkeeping.
func TestReplay(t *testing.T) {
	srv := filatest.Start(t)
	dir := t.TempDir()
	var r ReplayResult
	runJSON(t, srv, &r, "replay", "--trace", filepath.Join("testdata", "google-clusterdata-2011-job-submits-2000.csv"),
		"--speedup", "3600", "--report-dir", dir)
	if r.Jobs != 2000 || r.Users != 91 || r.TraceFormat != layoutGoogle || r.Providers != 8 || r.ThrottleKeys != 8 {
		t.Fatalf("replay = %d jobs, %d users, layout %s, %d providers, %d throttle keys; want 2000, 91, google, 8, 8",
			r.Jobs, r.Users, r.TraceFormat, r.Providers, r.ThrottleKeys)
	}
	checkReplay(t, srv, &r, 2000, 91)
	for _, name := range []string{"replay.md", "replay-wait.svg", "replay.json"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || len(b) == 0 {
			t.Errorf("replay report %s: %v, %d bytes", name, err, len(b))
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, "replay.md"))
	for _, want := range []string{"CC-BY 4.0", "replay-wait.svg", "| " + r.Noisy + " (noisy) |", "## Validity"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("replay.md lacks %q", want)
		}
	}
	if bytes.Contains(md, []byte("INVALID")) == r.Valid {
		t.Errorf("replay.md says INVALID: %v; the result is valid: %v", !r.Valid, r.Valid)
	}
	svg, _ := os.ReadFile(filepath.Join(dir, "replay-wait.svg"))
	if !bytes.Contains(svg, []byte("CC-BY 4.0")) || !strings.Contains(r.Attribution, "CC-BY 4.0") {
		t.Errorf("replay-wait.svg or the result lacks the trace's CC-BY 4.0 attribution")
	}
	var legend []string
	for _, m := range r.Modes {
		name := r.modeName(m.Mode)
		if !m.Validity.Valid {
			name += " INVALID"
		}
		legend = append(legend, name)
	}
	checkLegendOutside(t, filepath.Join(dir, "replay-wait.svg"), legend)
}

// TestReplayGeneric replays a trace of the generic layout, with throttle
// rates from a flag and a file and jobs of their own costs, in each mode,
// the tenant hierarchy's included.
func TestReplayGeneric(t *testing.T) {
	srv := filatest.Start(t)
	dir := t.TempDir()
	rates := filepath.Join(dir, "rates")
	if err := os.WriteFile(rates, []byte("# token buckets\npaypal 1500 5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var r ReplayResult
	runJSON(t, srv, &r, "replay", "--trace", filepath.Join("testdata", "generic-jobs.csv"), "--speedup", "3600",
		"--throttle-rate", "stripe=900", "--throttle-rates", rates, "--bin", "5m", "--report-dir", dir, "--mode", "fifo,drr,stfq,tenants")
	if r.Jobs != 1900 || r.Users != 6 || r.TraceFormat != layoutCSV || r.Noisy != "noisy" || r.Attribution != "" {
		t.Fatalf("replay = %d jobs, %d users, layout %s, noisy %s, attribution %q; want 1900, 6, csv, noisy, none",
			r.Jobs, r.Users, r.TraceFormat, r.Noisy, r.Attribution)
	}
	want := []ThrottleRate{{"paypal", 1500, 5}, {"stripe", 900, 20}}
	if r.Providers != 0 || r.ThrottleKeys != 2 || !slices.Equal(r.ThrottleRates, want) || !r.JobCosts || r.MeanCostSeconds <= r.ServiceSeconds {
		t.Errorf("replay = %d providers, %d throttle keys, rates %+v, job costs %v, mean cost %vs (service %vs); want 0, 2, %+v, true, above the service time",
			r.Providers, r.ThrottleKeys, r.ThrottleRates, r.JobCosts, r.MeanCostSeconds, r.ServiceSeconds, want)
	}
	checkReplay(t, srv, &r, 1900, 6, "fifo", "drr", "stfq", "tenants")
	md, _ := os.ReadFile(filepath.Join(dir, "replay.md"))
	for _, want := range []string{"`csv`", "| DRR (key = fairness_key)", "`stripe` 900 jobs per trace hour, burst 20", "| STFQ (tenant, then fairness_key)"} {
		if !bytes.Contains(md, []byte(want)) {
			t.Errorf("replay.md lacks %q", want)
		}
	}
}

// checkReplay checks what every replay in modes (the three default ones
// if none) reports: the modes in order, each on its own queue of its
// policy, deleted afterwards with its throttle keys; every job delivered
// and counted once; shares that add up; a validity consistent with
// itself.
func checkReplay(t *testing.T, srv *filatest.Server, r *ReplayResult, jobs, users int, modes ...string) {
	t.Helper()
	if len(modes) == 0 {
		modes = []string{"fifo", "drr", "stfq"}
	}
	if len(r.Modes) != len(modes) {
		t.Fatalf("replay = %d modes; want %v", len(r.Modes), modes)
	}
	var reasons []string
	var wall float64
	for i, mode := range modes {
		want := struct{ mode, policy string }{mode, modePolicy(mode)}
		m := r.Modes[i]
		if m.Mode != want.mode || m.Policy != want.policy || !strings.HasSuffix(m.Queue, "-"+want.mode) || m.WallSeconds <= 0 {
			t.Errorf("replay mode %d = %s, policy %s, queue %s, wall %vs; want %s, %s, a queue of its own", i, m.Mode, m.Policy, m.Queue, m.WallSeconds, want.mode, want.policy)
		}
		wall += m.WallSeconds
		var njobs, pre, flood, binned int
		var share float64
		for _, u := range m.Users {
			njobs += u.Jobs
			pre += u.PreJobs
			flood += u.FloodJobs
			share += u.FloodShare
		}
		for _, b := range m.Bins {
			binned += b.NoisyJobs + b.OthersJobs
			if b.Undelivered != 0 {
				t.Errorf("replay %s bin at %vh: %d jobs undelivered", m.Mode, b.FromHours, b.Undelivered)
			}
		}
		if njobs != jobs || binned != jobs || len(m.Users) != users {
			t.Errorf("replay %s: Σ jobs = %d, jobs in bins = %d, users = %d; want %d, %d, %d", m.Mode, njobs, binned, len(m.Users), jobs, jobs, users)
		}
		if pre+flood > jobs || m.Others.Jobs+m.Users[slices.IndexFunc(m.Users, func(u ReplayUser) bool { return u.User == r.Noisy })].Jobs != jobs {
			t.Errorf("replay %s: %d jobs before and %d during the flood, others %d; want the others and the noisy user to make %d", m.Mode, pre, flood, m.Others.Jobs, jobs)
		}
		if math.Abs(share-1) > 1e-9 || math.Abs(m.NoisyFloodShare+m.Others.FloodShare-1) > 1e-9 {
			t.Errorf("replay %s: Σ flood shares = %v, noisy + others = %v; want 1", m.Mode, share, m.NoisyFloodShare+m.Others.FloodShare)
		}
		v := m.Validity
		if v.Samples < 1 || !(0 <= v.LatenessP50 && v.LatenessP50 <= v.LatenessP99 && v.LatenessP99 <= v.LatenessMax) ||
			v.Valid != (len(v.Reasons) == 0) || (v.LatenessP99 > r.MaxLatenessSeconds) == v.Valid && v.LatenessP99 > r.MaxLatenessSeconds ||
			v.CapacityTested != (v.Busy > 0) || v.Busy > 1+1e-9 {
			t.Errorf("replay %s validity = %+v; want samples, lateness in order, reasons iff invalid, busy iff tested and at most 1", m.Mode, v)
		}
		for _, why := range v.Reasons {
			reasons = append(reasons, m.Mode+": "+why)
		}
	}
	if r.Valid != (len(reasons) == 0) || !slices.Equal(r.InvalidReasons, reasons) || math.Abs(r.WallSeconds-wall) > 1e-6 {
		t.Errorf("replay valid %v, reasons %q, wall %vs; want the modes' reasons %q, Σ wall %vs", r.Valid, r.InvalidReasons, r.WallSeconds, reasons, wall)
	}
	if r.MaxLatenessSeconds != r.ServiceSeconds || r.MinBusy != 0.95 {
		t.Errorf("replay thresholds = lateness %vs, busy %v; want one service time (%vs), 0.95", r.MaxLatenessSeconds, r.MinBusy, r.ServiceSeconds)
	}
	// Each mode deleted its queue and its throttle keys.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := fila.Connect(ctx, srv.Addr, fila.WithoutReconnect())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	qs, err := c.Admin().ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if strings.HasPrefix(q.Name, "bench-replay-") {
			t.Errorf("queue %s left after the replay", q.Name)
		}
	}
	if keys, err := c.Admin().ListConfig(ctx, "throttle."); err != nil || len(keys) != 0 {
		t.Errorf("throttle keys left after the replay: %v, %v", keys, err)
	}
}

// TestFlagsCheckedFirst runs subcommands with a flag out of range, NaN
// among them, and checks each fails with a UsageError before it
// connects: a run that fails later has created its queue by then.
func TestFlagsCheckedFirst(t *testing.T) {
	trace := filepath.Join("testdata", "google-clusterdata-2011-job-submits-2000.csv")
	generic := filepath.Join("testdata", "generic-jobs.csv")
	for _, args := range [][]string{
		{"produce", "--size", "-1", "--count", "1"},
		{"produce", "--size", "268435457", "--count", "1"},
		{"produce", "--size", "16777216", "--duration", "1s"}, // 256 × 16 MiB in flight
		{"produce", "--batch", "0", "--count", "1"},
		{"produce", "--duration", "-1s"},
		{"consume", "--size", "-1", "--count", "1"},
		{"consume", "--consumers", "0", "--count", "1"},
		{"lifecycle", "--size", "-1", "--count", "1"},
		{"lifecycle", "--outstanding", "0", "--count", "1"},
		{"lifecycle", "--producers", "8", "--size", "1048576", "--duration", "1s"},
		{"latency", "--size", "4"},
		{"latency", "--size", "268435457"},
		{"latency", "--count", "0"},
		{"latency", "--rate", "NaN"},
		{"latency", "--rate", "+Inf"},
		{"latency", "--rate", "1e12"},
		{"fairness", "--size", "-1"},
		{"fairness", "--weights", "1,4294967296"},
		{"fairness", "--count", "2"},
		{"throttle", "--size", "-1"},
		{"throttle", "--rate", "NaN"},
		{"throttle", "--rate", "+Inf"},
		{"throttle", "--burst", "NaN"},
		{"throttle", "--rate", "1e12"},
		{"throttle", "--interval", "1ns"},
		{"keys", "--size", "-1"},
		{"keys", "--batch", "0"},
		{"keys", "--keys", "0"},
		{"replay"}, // no --trace
		{"replay", "--trace", trace, "--speedup", "NaN"},
		{"replay", "--trace", trace, "--speedup", "-Inf"},
		{"replay", "--trace", trace, "--capacity", "NaN"},
		{"replay", "--trace", trace, "--provider-rate", "NaN"},
		{"replay", "--trace", trace, "--provider-burst", "+Inf"},
		{"replay", "--trace", trace, "--size", "268435457"},
		{"replay", "--trace", trace, "--size", "600000"}, // 2,000 jobs × 600 kB
		{"replay", "--trace", trace, "--bin", "1ms"},     // 6.9 million bins
		{"replay", "--trace", trace, "--mode", "lifo"},
		{"replay", "--trace", trace, "--mode", "drr,drr"},
		{"replay", "--trace", trace, "--mode", ""},
		{"replay", "--trace", trace, "--trace-format", "parquet"},
		{"replay", "--trace", generic, "--providers", "4"},
		{"replay", "--trace", generic, "--provider-rate", "10"},
		{"replay", "--trace", trace, "--throttle-rate", "stripe"},
		{"replay", "--trace", trace, "--throttle-rate", "stripe=0"},
		{"replay", "--trace", trace, "--throttle-rate", "stripe=1", "--throttle-rate", "stripe=2"},
		{"replay", "--trace", trace, "--throttle-rates", "testdata/no-such-file"},
		{"replay", "--trace", trace, "--min-busy", "1.5"},
		{"replay", "--trace", trace, "--min-busy", "NaN"},
		{"replay", "--trace", trace, "--max-lateness", "-1s"},
		{"replay", "--trace", generic, "--speedup", "0.001"}, // a 40 s job takes 11 hours
		{"replay", "--merge", "a.json", "--trace", trace},
		{"replay", "--merge", "a.json", "--speedup", "60"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			connect := func(context.Context, bool) (*fila.Client, error) {
				t.Errorf("bench %s connected; want a usage error first", strings.Join(args, " "))
				return nil, errors.New("no broker here")
			}
			format := "table"
			cmd := NewCommand(connect, &format)
			cmd.SetArgs(append(args, "--no-progress"))
			cmd.SetOut(io.Discard)
			cmd.SetErr(io.Discard)
			var ue UsageError
			if err := cmd.Execute(); !errors.As(err, &ue) {
				t.Errorf("bench %s = %v; want a UsageError", strings.Join(args, " "), err)
			}
		})
	}
}

func TestProduceSpecFit(t *testing.T) {
	for _, tc := range []struct {
		in, want produceSpec
	}{
		{produceSpec{producers: 4, outstanding: 256, batch: 256, size: 1024}, produceSpec{producers: 4, outstanding: 256, batch: 256, size: 1024}},
		{produceSpec{producers: 1, outstanding: 256, batch: 512, size: 1024}, produceSpec{producers: 1, outstanding: 256, batch: 256, size: 1024}},
		// 1 GiB in flight at most: 4 × 16 × 16 MiB.
		{produceSpec{producers: 4, outstanding: 256, batch: 256, size: 16 << 20}, produceSpec{producers: 4, outstanding: 16, batch: 16, size: 16 << 20}},
		{produceSpec{producers: 4, outstanding: 256, batch: 256, size: maxSize}, produceSpec{producers: 4, outstanding: 1, batch: 1, size: maxSize}},
		// No more in flight than the run's messages.
		{produceSpec{producers: 2, outstanding: 256, batch: 64, size: 1024, count: 10}, produceSpec{producers: 2, outstanding: 10, batch: 10, size: 1024, count: 10}},
		{produceSpec{producers: 1, outstanding: 512, batch: 256, size: 0}, produceSpec{producers: 1, outstanding: 512, batch: 256, size: 0}},
	} {
		got := tc.in
		got.fit()
		if got.outstanding != tc.want.outstanding || got.batch != tc.want.batch {
			t.Errorf("%+v.fit() = outstanding %d, batch %d; want %d, %d", tc.in, got.outstanding, got.batch, tc.want.outstanding, tc.want.batch)
		}
	}
}

// TestProduceLargeMessage sends one message larger than the broker
// accepts: it fails with the broker's refusal, having set up buffers for
// one message rather than for every slot in flight.
func TestProduceLargeMessage(t *testing.T) {
	srv := filatest.Start(t)
	_, _, err := execBench(srv, "json", "produce", "--size", "20000000", "--count", "1")
	if !errors.Is(err, fila.ErrMessageTooLarge) {
		t.Errorf("produce --size 20000000 --count 1 = %v; want message too large", err)
	}
}

// TestPartialResult kills the broker in the middle of a run: the run
// fails, and prints what was acknowledged before, marked partial.
func TestPartialResult(t *testing.T) {
	for _, args := range [][]string{
		{"produce", "--duration", "1m"},
		{"consume", "--duration", "1m"},
		{"lifecycle", "--duration", "1m"},
	} {
		t.Run(args[0], func(t *testing.T) {
			srv := filatest.Start(t)
			// Kill the broker once the run has counted an acknowledged
			// message: a message the broker stored may still have its reply
			// on the way.
			counter := make(chan *atomic.Int64, 1)
			runHook = func(_ string, n *atomic.Int64) {
				select {
				case counter <- n:
				default:
				}
			}
			t.Cleanup(func() { runHook = nil })
			type outcome struct {
				stdout []byte
				err    error
			}
			done := make(chan outcome, 1)
			go func() {
				out, _, err := execBench(srv, "json", args...)
				done <- outcome{out, err}
			}()
			waitForAcked(t, counter)
			srv.Kill()
			o := <-done
			if o.err == nil {
				t.Fatalf("bench %s with the broker killed: no error", strings.Join(args, " "))
			}
			var r struct {
				Produce throughputJSON `json:"produce"`
				Fill    throughputJSON `json:"fill"`
				Partial bool           `json:"partial"`
			}
			if err := json.Unmarshal(o.stdout, &r); err != nil {
				t.Fatalf("bench %s failed with %v; stdout %q: %v; want the partial result", strings.Join(args, " "), o.err, o.stdout, err)
			}
			enqueued := r.Produce
			if args[0] == "consume" {
				enqueued = r.Fill
			}
			if !r.Partial || enqueued.Messages <= 0 || enqueued.Bytes != enqueued.Messages*1024 {
				t.Errorf("bench %s partial result = %s; want partial, messages > 0, 1024 bytes each", strings.Join(args, " "), o.stdout)
			}
		})
	}
}

// waitForAcked waits until the run's counter of acknowledged messages,
// received from counter, is above zero.
func waitForAcked(t *testing.T, counter <-chan *atomic.Int64) {
	t.Helper()
	var n *atomic.Int64
	select {
	case n = <-counter:
	case <-time.After(time.Minute):
		t.Fatal("the run did not start in a minute")
	}
	for deadline := time.Now().Add(time.Minute); n.Load() == 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no message acknowledged in a minute")
		}
	}
}
