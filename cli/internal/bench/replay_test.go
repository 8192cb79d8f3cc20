package bench

import (
	"bytes"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const genericHeaderLine = "time_s,tenant,fairness_key,throttle_key,cost\n"

func TestReadTraceGeneric(t *testing.T) {
	t.Run("valid", func(t *testing.T) {
		in := "\ufeff" + genericHeaderLine +
			"1700000000.5,alice,,stripe,\n" +
			"1700000000.5,bob,bob-batch,,2.5\n" +
			"1700000003.75,alice,alice,stripe,1\n" +
			"1700000010,carol,,paypal,\n"
		tr, err := readTrace(strings.NewReader(in), 0, layoutAuto)
		if err != nil {
			t.Fatal(err)
		}
		if tr.layout != layoutCSV || len(tr.jobs) != 4 || !slices.Equal(tr.users, []string{"alice", "bob", "carol"}) {
			t.Fatalf("readTrace = layout %s, %d jobs, users %v; want csv, 4, [alice bob carol]", tr.layout, len(tr.jobs), tr.users)
		}
		if tr.span != 9500*time.Millisecond || !tr.costs || !slices.Equal(tr.throttles, []string{"stripe", "paypal"}) {
			t.Errorf("readTrace = span %v, costs %v, throttles %v; want 9.5s, true, [stripe paypal]", tr.span, tr.costs, tr.throttles)
		}
		for i, want := range []struct {
			at            time.Duration
			key, throttle string
			cost          time.Duration
		}{
			{0, "alice", "stripe", 0},
			{0, "bob-batch", "", 2500 * time.Millisecond},
			{3250 * time.Millisecond, "alice", "stripe", time.Second},
			{9500 * time.Millisecond, "carol", "paypal", 0},
		} {
			j := &tr.jobs[i]
			if j.at != want.at || tr.fairnessKey(j) != want.key || tr.throttleKey(j) != want.throttle || j.cost != want.cost || j.row != i+1 {
				t.Errorf("job %d = at %v, key %q, throttle %q, cost %v, row %d; want %v, %q, %q, %v, %d",
					i, j.at, tr.fairnessKey(j), tr.throttleKey(j), j.cost, j.row, want.at, want.key, want.throttle, want.cost, i+1)
			}
		}
		if got := tr.longest(time.Second); got != 2500*time.Millisecond {
			t.Errorf("longest(1s) = %v; want 2.5s", got)
		}
		if tr, err := readTrace(strings.NewReader(in), 2, layoutCSV); err != nil || len(tr.jobs) != 2 {
			t.Errorf("readTrace(limit 2, csv) = %v; want 2 jobs", err)
		}
	})
	t.Run("without cost, negative times", func(t *testing.T) {
		in := "time_s,tenant,fairness_key,throttle_key\n-3,a,,\n-1.5,b,,\n"
		tr, err := readTrace(strings.NewReader(in), 0, layoutAuto)
		if err != nil {
			t.Fatal(err)
		}
		if tr.costs || tr.span != 1500*time.Millisecond || len(tr.throttles) != 0 {
			t.Errorf("readTrace = costs %v, span %v, throttles %v; want false, 1.5s, none", tr.costs, tr.span, tr.throttles)
		}
	})
	for _, tc := range []struct {
		name, layout, in, want string
	}{
		{"columns out of order", layoutAuto, "time_s,fairness_key,tenant,throttle_key\n1,a,b,\n", "want time_s,tenant,fairness_key,throttle_key[,cost]"},
		{"misspelt cost", layoutAuto, "time_s,tenant,fairness_key,throttle_key,costs\n1,a,,,1\n", "want time_s,tenant"},
		{"extra column", layoutAuto, genericHeaderLine[:len(genericHeaderLine)-1] + ",x\n1,a,,,1,2\n", "want time_s,tenant"},
		{"csv named, google header", layoutCSV, traceHeader + "1,,1,0,a,0,j,p\n", "want time_s,tenant"},
		{"google named, csv header", layoutGoogle, genericHeaderLine + "1,a,,,\n", `no column "timestamp"`},
		{"unknown layout", "parquet", genericHeaderLine + "1,a,,,\n", `layout "parquet"`},
		{"no rows", layoutAuto, genericHeaderLine, "no rows"},
		{"short row", layoutAuto, genericHeaderLine + "1,a,,\n", "line 2: 4 fields; want 5"},
		{"long row", layoutAuto, genericHeaderLine + "1,a,,,,\n", "line 2: 6 fields; want 5"},
		{"bad time", layoutAuto, genericHeaderLine + "x,a,,,\n", `line 2: time_s "x"`},
		{"empty time", layoutAuto, genericHeaderLine + ",a,,,\n", `line 2: time_s ""`},
		{"NaN time", layoutAuto, genericHeaderLine + "NaN,a,,,\n", `time_s "NaN"`},
		{"infinite time", layoutAuto, genericHeaderLine + "1,a,,,\nInf,a,,,\n", `line 3: time_s "Inf"`},
		{"decreasing", layoutAuto, genericHeaderLine + "5,a,,,\n4.5,a,,,\n", "line 3: time_s 4.5 before the previous row's 5"},
		{"beyond a year", layoutAuto, genericHeaderLine + "0,a,,,\n31700000,a,,,\n", "more than a year"},
		{"empty tenant", layoutAuto, genericHeaderLine + "1,,k,,\n", "line 2: empty tenant"},
		{"zero cost", layoutAuto, genericHeaderLine + "1,a,,,0\n", `line 2: cost "0"`},
		{"negative cost", layoutAuto, genericHeaderLine + "1,a,,,-2\n", `cost "-2"`},
		{"bad cost", layoutAuto, genericHeaderLine + "1,a,,,fast\n", `cost "fast"`},
		{"NaN cost", layoutAuto, genericHeaderLine + "1,a,,,NaN\n", `cost "NaN"`},
		{"cost beyond a year", layoutAuto, genericHeaderLine + "1,a,,,1e9\n", `cost "1e9"`},
		{"unterminated quote", layoutAuto, genericHeaderLine + "1,\"a,,,\n", "trace: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readTrace(strings.NewReader(tc.in), 0, tc.layout)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("readTrace(%q, %s) = %v; want an error containing %q", tc.in, tc.layout, err, tc.want)
			}
		})
	}
}

func TestAssignProviders(t *testing.T) {
	tr := &trace{layout: layoutGoogle, users: []string{"u"}, jobs: []job{{logical: "a"}, {logical: "foobar"}}}
	tr.assignProviders(8)
	if len(tr.throttles) != 8 || tr.throttleKey(&tr.jobs[0]) != providerName(0xe40c292c%8) || tr.throttleKey(&tr.jobs[1]) != "provider-0" {
		t.Errorf("assignProviders(8) = keys %v, jobs %q, %q; want 8 keys, provider-%d, provider-0", tr.throttles,
			tr.throttleKey(&tr.jobs[0]), tr.throttleKey(&tr.jobs[1]), 0xe40c292c%8)
	}
	tr.assignProviders(0)
	if len(tr.throttles) != 0 || tr.throttleKey(&tr.jobs[0]) != "" {
		t.Errorf("assignProviders(0) = keys %v, job 0 %q; want none", tr.throttles, tr.throttleKey(&tr.jobs[0]))
	}
}

func TestParseThrottleRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want ThrottleRate
		err  string
	}{
		{in: "stripe=600", want: ThrottleRate{Key: "stripe", Rate: 600}},
		{in: "stripe=600:10", want: ThrottleRate{Key: "stripe", Rate: 600, Burst: 10}},
		{in: "provider:stripe=0.5:1.5", want: ThrottleRate{Key: "provider:stripe", Rate: 0.5, Burst: 1.5}},
		{in: "a=b=3", want: ThrottleRate{Key: "a=b", Rate: 3}},
		{in: "", err: "want key=rate"},
		{in: "stripe", err: "want key=rate"},
		{in: "=5", err: "want key=rate"},
		{in: "stripe=", err: `rate ""`},
		{in: "stripe=0", err: `rate "0"`},
		{in: "stripe=-1", err: `rate "-1"`},
		{in: "stripe=NaN", err: `rate "NaN"`},
		{in: "stripe=+Inf", err: `rate "+Inf"`},
		{in: "stripe=fast", err: `rate "fast"`},
		{in: "stripe=10:0", err: `burst "0"`},
		{in: "stripe=10:0.5", err: `burst "0.5"`},
		{in: "stripe=10:Inf", err: `burst "Inf"`},
		{in: "stripe=10:x", err: `burst "x"`},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := parseThrottleRate(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("parseThrottleRate(%q) = %+v, %v; want an error containing %q", tc.in, got, err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Errorf("parseThrottleRate(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseThrottleRates(t *testing.T) {
	in := "# provider buckets\n\nstripe 600 10\n  paypal\t1200  \n   # indented comment\nprovider:x 1.5\n"
	got, err := parseThrottleRates(strings.NewReader(in))
	want := []ThrottleRate{{"stripe", 600, 10}, {"paypal", 1200, 0}, {"provider:x", 1.5, 0}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("parseThrottleRates = %+v, %v; want %+v", got, err, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"stripe\n", "line 1: 1 fields"},
		{"# ok\nstripe 1 2 3\n", "line 2: 4 fields"},
		{"stripe 0\n", `line 1: rate "0"`},
		{"stripe 10 0\n", `line 1: burst "0"`},
		{"\n\nstripe x\n", `line 3: rate "x"`},
	} {
		if _, err := parseThrottleRates(strings.NewReader(tc.in)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseThrottleRates(%q) = %v; want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestThrottleRates(t *testing.T) {
	got, err := throttleRates([]string{"paypal=50", "visa=5:2"}, strings.NewReader("stripe 600\n"), 20)
	want := []ThrottleRate{{"stripe", 600, 20}, {"paypal", 50, 20}, {"visa", 5, 2}}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("throttleRates = %+v, %v; want %+v (file first, then flags; default burst 20)", got, err, want)
	}
	if _, err := throttleRates([]string{"stripe=1"}, strings.NewReader("stripe 600\n"), 20); err == nil || !strings.Contains(err.Error(), `"stripe" given a rate twice`) {
		t.Errorf("throttleRates with stripe twice = %v; want an error", err)
	}
	if got, err := throttleRates(nil, nil, 20); err != nil || got != nil {
		t.Errorf("throttleRates() = %v, %v; want none", got, err)
	}
}

func TestBucketValue(t *testing.T) {
	plain := regexp.MustCompile(`^[0-9]+(\.[0-9]+)?,[0-9]+(\.[0-9]+)?$`) // the broker's form
	for _, tc := range []struct {
		r       ThrottleRate
		speedup float64
		want    string
	}{
		{ThrottleRate{"p", 1000, 20}, 600, ""}, // 166.66…
		{ThrottleRate{"p", 3600, 1}, 1, "1,1"},
		{ThrottleRate{"p", 0.001, 1.5}, 1, ""}, // would be 2.777…e-07 with %g
		{ThrottleRate{"p", 1e9, 1e7}, 36000, "10000000000,10000000"},
	} {
		got := tc.r.bucketValue(tc.speedup)
		if !plain.MatchString(got) || tc.want != "" && got != tc.want {
			t.Errorf("%+v.bucketValue(%v) = %q; want plain decimals %s", tc.r, tc.speedup, got, tc.want)
		}
		rate, _ := strconv.ParseFloat(strings.Split(got, ",")[0], 64)
		if want := tc.r.Rate * tc.speedup / 3600; math.Abs(rate-want) > 1e-12*want {
			t.Errorf("%+v.bucketValue(%v) rate = %v; want %v tokens per second", tc.r, tc.speedup, rate, want)
		}
	}
}

func TestBuckets(t *testing.T) {
	cfg := &replayConfig{providerRate: 1000, providerBurst: 20, rates: []ThrottleRate{{"provider-1", 10, 2}, {"stripe", 5, 1}}}
	g := &trace{layout: layoutGoogle}
	g.assignProviders(3)
	want := []ThrottleRate{{"provider-0", 1000, 20}, {"provider-1", 10, 2}, {"provider-2", 1000, 20}}
	if got := cfg.buckets(g); !slices.Equal(got, want) {
		t.Errorf("buckets(google, 3 providers) = %+v; want %+v", got, want)
	}
	c := &trace{layout: layoutCSV, throttles: []string{"stripe", "paypal"}}
	want = []ThrottleRate{{"stripe", 5, 1}, {"paypal", 0, 0}}
	if got := cfg.buckets(c); !slices.Equal(got, want) {
		t.Errorf("buckets(csv) = %+v; want %+v (paypal unlimited)", got, want)
	}
}

// judgeCase builds a trace of n jobs without costs and a run whose two
// consumers begin a job every period from 0, one job each at a time.
func judgeCase(n int, period time.Duration) (*trace, []time.Duration) {
	tr := &trace{users: []string{"u"}, jobs: make([]job, n)}
	started := make([]time.Duration, n)
	for i := range started {
		started[i] = time.Duration(i/2) * period
	}
	return tr, started
}

func TestJudge(t *testing.T) {
	s := time.Second
	// Two consumers, 3,600 jobs an hour: 2 s a job. A backlog counts
	// from a sample of at least 2 × (1 + 10 s / 2 s) = 12 jobs.
	cfg := &replayConfig{consumers: 2, capacity: 3600, minBusy: 0.95}
	samples := func(ready ...int64) []backlogSample {
		out := make([]backlogSample, len(ready))
		for i, r := range ready {
			out[i] = backlogSample{at: time.Duration(i) * 10 * s, ready: r}
		}
		return out
	}
	deep := samples(50, 50, 50, 50, 50, 50, 50, 50, 50, 50, 50) // 0 – 100 s
	late := func(n int, tail ...time.Duration) []time.Duration {
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = s / 10
		}
		copy(out[n-len(tail):], tail)
		return out
	}
	for _, tc := range []struct {
		name     string
		period   time.Duration // between a consumer's jobs
		samples  []backlogSample
		lateness []time.Duration
		valid    bool
		tested   bool
		busy     float64
		backlog  time.Duration
		reasons  []string
	}{
		{name: "kept up", period: 2 * s, samples: deep, lateness: late(100), valid: true, tested: true, busy: 1, backlog: 100 * s},
		{name: "slow consumers", period: 2500 * time.Millisecond, samples: deep, lateness: late(100), tested: true, busy: 0.8, backlog: 100 * s,
			reasons: []string{"the consumers did not keep up: busy 80.00% of the 100 s with a backlog, below --min-busy 95.00% (2,880 jobs per trace hour; --capacity 3,600)"}},
		{name: "shallow backlog is not one", period: 2500 * time.Millisecond, samples: samples(11, 11, 11, 11, 11, 11, 11, 11, 11, 11, 11), lateness: late(100), valid: true},
		{name: "backlog too short to judge", period: 2500 * time.Millisecond, samples: samples(50, 50, 50, 0, 0, 0), lateness: late(100), valid: true, backlog: 30 * s},
		{name: "joins adjacent spans", period: 2 * s, samples: samples(50, 50, 0, 50, 50, 50, 50, 50), lateness: late(100), valid: true, tested: true, busy: 1, backlog: 60 * s},
		{name: "one late enqueue in 100 is within p99", period: 2 * s, samples: deep, lateness: late(100, 30*s), valid: true, tested: true, busy: 1, backlog: 100 * s},
		{name: "late enqueues", period: 2 * s, samples: deep, lateness: late(100, 5*s, 30*s), tested: true, busy: 1, backlog: 100 * s,
			reasons: []string{"the machine did not hold the offered rate: enqueues were accepted 5 s after their scheduled time at p99 (30 s at most), above --max-lateness 2 s"}},
		{name: "both", period: 2500 * time.Millisecond, samples: deep, lateness: late(10, 3*s), tested: true, busy: 0.8, backlog: 100 * s,
			reasons: []string{"the consumers did not keep up", "the machine did not hold the offered rate"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, started := judgeCase(100, tc.period)
			m := &modeTimes{started: started, lateness: tc.lateness, samples: tc.samples}
			v := judge(cfg, tr, m)
			if v.Valid != tc.valid || v.CapacityTested != tc.tested || math.Abs(v.Busy-tc.busy) > 1e-9 ||
				math.Abs(v.BacklogHours-tc.backlog.Hours()) > 1e-12 || len(v.Reasons) != len(tc.reasons) || v.Samples != len(tc.samples) {
				t.Fatalf("judge = %+v; want valid %v, tested %v, busy %v, backlog %v, %d reasons", v, tc.valid, tc.tested, tc.busy, tc.backlog, len(tc.reasons))
			}
			for i, want := range tc.reasons {
				if !strings.HasPrefix(v.Reasons[i], want) {
					t.Errorf("judge reason %d = %q; want it to start %q", i, v.Reasons[i], want)
				}
			}
			if p99 := summarize(slices.Clone(tc.lateness)).P99.Seconds(); v.LatenessP99 != p99 || v.LatenessMax < v.LatenessP99 || v.LatenessP50 > v.LatenessP99 {
				t.Errorf("judge lateness = %v / %v / %v; want p99 %v, in order", v.LatenessP50, v.LatenessP99, v.LatenessMax, p99)
			}
		})
	}
	t.Run("own lateness threshold", func(t *testing.T) {
		tr, started := judgeCase(100, 2*s)
		c := *cfg
		c.maxLateness = 10 * s
		if v := judge(&c, tr, &modeTimes{started: started, lateness: late(10, 5*s), samples: deep}); !v.Valid {
			t.Errorf("judge with --max-lateness 10s = %+v; want valid at a p99 of 5 s", v)
		}
	})
}

func TestBusyIn(t *testing.T) {
	s := time.Second
	tr := &trace{jobs: []job{{}, {cost: 10 * s}, {}, {}}}
	ivs := []span{{10 * s, 20 * s}, {30 * s, 40 * s}}
	// Job 0: 9–11 s (1 s in); job 1: 15–25 s (5 s in, begun in); job 2:
	// never; job 3: 19–21 s (1 s in, begun in).
	busy, begun := busyIn(ivs, tr, []time.Duration{9 * s, 15 * s, -1, 19 * s}, 2*s)
	if busy != 7*s || begun != 2 {
		t.Errorf("busyIn = %v, %d begun; want 7s, 2", busy, begun)
	}
	// One job across both spans.
	busy, begun = busyIn(ivs, &trace{jobs: []job{{cost: 40 * s}}}, []time.Duration{5 * s}, 2*s)
	if busy != 20*s || begun != 0 {
		t.Errorf("busyIn(one long job) = %v, %d begun; want 20s, 0", busy, begun)
	}
}

// threeModes returns the result of a small replay in three modes: the
// flood of user "noisy" (10h – 12h) waits 10 s in every mode and the
// quiet user's flood jobs wait 1 h in fifo; stfq's enqueues were late.
func threeModes(t *testing.T) *ReplayResult {
	t.Helper()
	h := time.Hour
	tr := &trace{layout: layoutGoogle, users: []string{"quiet", "noisy"}}
	for i := range 10 {
		tr.jobs = append(tr.jobs, job{at: time.Duration(i) * h / 2, user: 0})
	}
	for i := range 10 {
		tr.jobs = append(tr.jobs, job{at: 10*h + time.Duration(i)*h/10, user: 0})
	}
	for i := range 21 {
		tr.jobs = append(tr.jobs, job{at: 10*h + time.Duration(i)*h/10, user: 1})
	}
	tr.span = tr.jobs[len(tr.jobs)-1].at
	cfg := &replayConfig{capacity: 3600, consumers: 1, minJobs: 5, bin: h, speedup: 600, size: 64, minBusy: 0.95, providers: 0}
	var modes []modeTimes
	for _, mode := range []string{"fifo", "drr", "stfq"} {
		m := modeTimes{mode: mode, policy: modePolicy(mode), queue: "q-" + mode, wall: 7 * time.Minute}
		for _, jb := range tr.jobs {
			d := jb.at + 10*time.Second
			if mode == "fifo" && jb.user == 0 && jb.at >= 10*h {
				d = jb.at + h
			}
			m.delivered = append(m.delivered, d)
			m.started = append(m.started, d)
			late := time.Second
			if mode == "stfq" {
				late = time.Minute
			}
			m.lateness = append(m.lateness, late)
		}
		modes = append(modes, m)
	}
	r := analyseModes(cfg, tr, 1, modes)
	r.Trace, r.Attribution = "jobs.csv", "Contains made-up data."
	return r
}

func TestReplayReportThreeModes(t *testing.T) {
	r := threeModes(t)
	if r.Valid || len(r.InvalidReasons) != 1 || !strings.HasPrefix(r.InvalidReasons[0], "stfq: the machine did not hold the offered rate") {
		t.Fatalf("result valid %v, reasons %q; want invalid for stfq's late enqueues only", r.Valid, r.InvalidReasons)
	}
	if r.WallSeconds != 3*7*60 || len(r.Modes) != 3 || r.Modes[2].Policy != "stfq" || r.Modes[0].Policy != "drr" || !r.Modes[0].Validity.Valid {
		t.Fatalf("result wall %v, modes %+v; want 21 min, fifo (drr), drr, stfq", r.WallSeconds, r.Modes)
	}
	dir := t.TempDir()
	if err := writeReport(dir, r); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(dir, reportMarkdown))
	if err != nil {
		t.Fatal(err)
	}
	head, _, _ := strings.Cut(string(md), "## Parameters")
	for _, want := range []string{
		"# Trace replay: FIFO, DRR and STFQ\n",
		"> **INVALID:**",
		"> - stfq: the machine did not hold the offered rate",
		"Contains made-up data.",
	} {
		if !strings.Contains(head, want) {
			t.Errorf("replay.md before its parameters lacks %q:\n%s", want, head)
		}
	}
	for _, want := range []string{
		"| fifo | drr |", "| drr | drr |", "| stfq | stfq |", // validity
		"| FIFO (one key) |", "| DRR (key = user) |", "| STFQ (key = user) INVALID |", // summary
		"| fifo SHARE IN FLOOD |", "| drr SHARE IN FLOOD |", "| stfq SHARE IN FLOOD |", // per user
		"| quiet |", "| noisy (noisy) |", "![Wait over trace time",
	} {
		if !strings.Contains(string(md), want) {
			t.Errorf("replay.md lacks %q", want)
		}
	}
	var js map[string]any
	b, _ := os.ReadFile(filepath.Join(dir, reportJSON))
	if err := json.Unmarshal(b, &js); err != nil {
		t.Fatal(err)
	}
	if js["valid"] != false || len(js["invalid_reasons"].([]any)) != 1 || len(js["modes"].([]any)) != 3 {
		t.Errorf("replay.json valid = %v, invalid_reasons %v, %d modes; want false, one reason, 3", js["valid"], js["invalid_reasons"], len(js["modes"].([]any)))
	}
	var table bytes.Buffer
	if err := r.writeTable(&table); err != nil || !strings.HasPrefix(table.String(), "INVALID: stfq: ") {
		t.Errorf("table = %v, %.60q; want it to start with the INVALID line", err, table.String())
	}
	checkLegendOutside(t, filepath.Join(dir, reportPlot), []string{"FIFO (one key)", "DRR (key = user)", "STFQ (key = user) INVALID", "flood"})
}

// checkLegendOutside reads an SVG plot and checks that it names each of
// entries once, in the legend, to the right of every axis line.
func checkLegendOutside(t *testing.T, path string, entries []string) {
	t.Helper()
	svg, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(bytes.TrimSpace(svg), []byte("<?xml")) || !bytes.Contains(svg, []byte("<svg")) {
		t.Fatalf("%s does not start as an SVG document: %.80q", path, svg)
	}
	// vgsvg writes text as <text x="…" …>label</text>, and fills each
	// panel's background with a closed rectangular path: the legend must
	// stand right of all three.
	textRE := regexp.MustCompile(`<text x="([0-9.e+-]+)"[^>]*>([^<]*)</text>`)
	rectRE := regexp.MustCompile(`d="M[0-9.]+,[0-9.]+L([0-9.]+),[0-9.]+L[0-9.]+,[0-9.]+L[0-9.]+,[0-9.]+Z"`)
	rects := rectRE.FindAllSubmatch(svg, -1)
	if len(rects) != 3 {
		t.Fatalf("%s has %d panel backgrounds; want 3", path, len(rects))
	}
	var right float64
	for _, m := range rects {
		x, _ := strconv.ParseFloat(string(m[1]), 64)
		right = max(right, x)
	}
	found := map[string]float64{}
	for _, m := range textRE.FindAllSubmatch(svg, -1) {
		x, _ := strconv.ParseFloat(string(m[1]), 64)
		found[string(m[2])] = x
	}
	for _, e := range entries {
		x, ok := found[e]
		if !ok {
			t.Errorf("%s has no legend entry %q", path, e)
		} else if x <= right {
			t.Errorf("%s legend entry %q at x = %v; want it right of the plot areas (x > %v)", path, e, x, right)
		}
	}
}

func TestMergeResults(t *testing.T) {
	r := threeModes(t)
	dir := t.TempDir()
	write := func(name string, r *ReplayResult) string {
		b, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	var paths []string
	for _, m := range r.Modes {
		one := *r
		one.Modes, one.WallSeconds = []ReplayMode{m}, m.WallSeconds
		one.Valid, one.InvalidReasons = m.Validity.Valid, nil
		paths = append(paths, write(m.Mode+".json", &one))
	}
	got, err := mergeResults(paths)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(r)
	if b, _ := json.Marshal(got); !bytes.Equal(b, want) {
		t.Errorf("mergeResults of the three modes =\n%s\nwant\n%s", b, want)
	}

	other := *r
	other.Modes, other.Speedup = r.Modes[:1], 60
	other.Modes[0].Mode = "fifo2"
	if _, err := mergeResults([]string{paths[1], write("other.json", &other)}); err == nil || !strings.Contains(err.Error(), "speedup is 60") {
		t.Errorf("mergeResults with another speed-up = %v; want an error naming speedup", err)
	}
	if _, err := mergeResults([]string{paths[0], paths[0]}); err == nil || !strings.Contains(err.Error(), "mode fifo given twice") {
		t.Errorf("mergeResults of one file twice = %v; want mode fifo given twice", err)
	}
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte(`{"workload":"produce"}`), 0o644)
	if _, err := mergeResults([]string{bad}); err == nil || !strings.Contains(err.Error(), "not the result of a replay") {
		t.Errorf("mergeResults of a produce result = %v; want an error", err)
	}
	if _, err := mergeResults([]string{filepath.Join(dir, "missing.json")}); err == nil {
		t.Errorf("mergeResults of a missing file: no error")
	}
}
