package bench

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]int, 100)
	for i := range hundred {
		hundred[i] = 100 - i // 100 down to 1
	}
	for _, tc := range []struct {
		name string
		in   []time.Duration
		want Latency
	}{
		{"empty", nil, Latency{}},
		{"one", ms(7), Latency{Count: 1, Mean: 7e6, P50: 7e6, P95: 7e6, P99: 7e6, Max: 7e6}},
		{"two", ms(1, 3), Latency{Count: 2, Mean: 2e6, P50: 1e6, P95: 3e6, P99: 3e6, Max: 3e6}},
		// Nearest rank: p50 of 1..100 is rank 50, p95 rank 95, p99 rank 99.
		{"1..100 unsorted", ms(hundred...), Latency{Count: 100, Mean: 50500000, P50: 50e6, P95: 95e6, P99: 99e6, Max: 100e6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.in); got != tc.want {
				t.Errorf("summarize(%v) = %+v; want %+v", tc.in, got, tc.want)
			}
		})
	}
}

func TestShares(t *testing.T) {
	for _, tc := range []struct {
		name     string
		order    []int
		enqueued []int64
		weights  []uint32
		window   int64
		counts   []int64
		maxDev   float64
	}{
		{
			name:  "exact 1:2 until key 0 runs out",
			order: []int{0, 1, 1, 0, 1, 1, 1}, enqueued: []int64{2, 5}, weights: []uint32{1, 2},
			window: 4, counts: []int64{2, 2}, maxDev: 0.5 - 1.0/3,
		},
		{
			name:  "perfect shares",
			order: []int{0, 1, 1, 0, 1, 1}, enqueued: []int64{3, 6}, weights: []uint32{1, 2},
			window: 6, counts: []int64{2, 4}, maxDev: 0,
		},
		{
			name:  "no deliveries",
			order: nil, enqueued: []int64{1, 1}, weights: []uint32{1, 1},
			window: 0, counts: []int64{0, 0}, maxDev: 0.5,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			window, keys, maxDev, _ := shares(tc.order, tc.enqueued, tc.weights)
			var counts []int64
			for _, k := range keys {
				counts = append(counts, k.Delivered)
			}
			if window != tc.window || !slices.Equal(counts, tc.counts) || math.Abs(maxDev-tc.maxDev) > 1e-12 {
				t.Errorf("shares(%v) = window %d, delivered %v, max deviation %v; want %d, %v, %v", tc.order, window, counts, maxDev, tc.window, tc.counts, tc.maxDev)
			}
		})
	}
}

func TestTimeline(t *testing.T) {
	s := time.Second
	times := []time.Duration{0, s / 2, s, 3 * s / 2, 2*s - 1, 2 * s, 5 * s, -1}
	ivs, steady := timeline(times, s, 2*s+s/2, 2, 3)
	want := []ThrottleInterval{
		{End: 1, Delivered: 2, Cumulative: 2, Allowed: 5},
		{End: 2, Delivered: 3, Cumulative: 5, Allowed: 7},
		{End: 2.5, Delivered: 1, Cumulative: 6, Allowed: 8},
	}
	if !slices.Equal(ivs, want) {
		t.Errorf("timeline = %+v; want %+v", ivs, want)
	}
	if wantSteady := 4 / 1.5; math.Abs(steady-wantSteady) > 1e-12 {
		t.Errorf("timeline steady rate = %v; want %v (4 deliveries after the first interval, over 1.5s)", steady, wantSteady)
	}
}

const traceHeader = "timestamp,missing_info,job_id,event_type,user,scheduling_class,job_name,logical_job_name\n"

func TestReadTrace(t *testing.T) {
	t.Run("valid", func(t *testing.T) {
		in := traceHeader +
			"1000000,,1,0,alice,0,j1,progA\n" +
			"1000000,,2,0,bob,1,j2,progB\n" +
			"4000000,,3,0,alice,0,j3,progA\n"
		tr, err := readTrace(strings.NewReader(in), 0, layoutAuto)
		if err != nil {
			t.Fatal(err)
		}
		if len(tr.jobs) != 3 || !slices.Equal(tr.users, []string{"alice", "bob"}) || tr.span != 3*time.Second {
			t.Fatalf("readTrace = %d jobs, users %v, span %v; want 3, [alice bob], 3s", len(tr.jobs), tr.users, tr.span)
		}
		if j := tr.jobs[2]; j.at != 3*time.Second || j.user != 0 || j.logical != "progA" || j.row != 3 {
			t.Errorf("readTrace job 2 = %+v; want at 3s, user 0, progA, row 3", j)
		}
		if u := tr.heaviest(); u != 0 {
			t.Errorf("heaviest() = %d; want 0 (alice)", u)
		}
		if from, to, ok := tr.window(1); !ok || from != 0 || to != 0 {
			t.Errorf("window(bob) = %v, %v, %v; want 0, 0, true", from, to, ok)
		}
		tr, err = readTrace(strings.NewReader(in), 2, layoutAuto)
		if err != nil || len(tr.jobs) != 2 {
			t.Errorf("readTrace(limit 2) = %v jobs, %v; want 2", len(tr.jobs), err)
		}
	})
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", "empty file"},
		{"no rows", traceHeader, "no rows"},
		{"missing column", "timestamp,user\n1,a\n", `no column "logical_job_name"`},
		{"short row", traceHeader + "1,,1,0\n", "line 2: 4 fields"},
		{"bad timestamp", traceHeader + "x,,1,0,a,0,j,p\n", `line 2: timestamp "x"`},
		{"negative timestamp", traceHeader + "-5,,1,0,a,0,j,p\n", `timestamp "-5"`},
		{"decreasing", traceHeader + "5,,1,0,a,0,j,p\n4,,2,0,a,0,j,p\n", "line 3: timestamp 4 before the previous row's 5"},
		{"empty user", traceHeader + "5,,1,0,,0,j,p\n", "line 2: empty user"},
		{"beyond a year", traceHeader + "0,,1,0,a,0,j,p\n99999999999999,,2,0,a,0,j,p\n", "more than a year"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readTrace(strings.NewReader(tc.in), 0, layoutAuto)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("readTrace(%q) = %v; want an error containing %q", tc.in, err, tc.want)
			}
		})
	}
}

// FuzzReadTrace checks that no input makes the trace reader panic, and
// that what it accepts is consistent: offsets non-negative and in order,
// users indexed.
func FuzzReadTrace(f *testing.F) {
	f.Add([]byte(traceHeader + "1383000841043,,6379591325,0,F2+Gv53P,0,6cEyQ7YE,2N2Ubknr\n"))
	f.Add([]byte("timestamp,user,logical_job_name\n1,a,b\n2,\"c,d\",e\n"))
	f.Add([]byte(genericHeaderLine + "1.5,a,,stripe,\n2,b,b-batch,,0.25\n"))
	f.Add([]byte("time_s,tenant,fairness_key,throttle_key\n-1e3,a,k,t\n"))
	if b, err := os.ReadFile(filepath.Join("testdata", "google-clusterdata-2011-job-submits-2000.csv")); err == nil {
		f.Add(b[:4096])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tr, err := readTrace(bytes.NewReader(b), 1000, layoutAuto)
		if err != nil {
			return
		}
		var prev time.Duration
		for _, j := range tr.jobs {
			if j.at < prev || int(j.user) >= len(tr.users) || int(j.key) > len(tr.keys) || int(j.throttle) > len(tr.throttles) || j.cost < 0 {
				t.Fatalf("readTrace accepted job %+v after offset %v with %d users", j, prev, len(tr.users))
			}
			prev = j.at
		}
		if tr.span != prev {
			t.Fatalf("readTrace span = %v; want the last offset %v", tr.span, prev)
		}
	})
}

func TestProvider(t *testing.T) {
	// FNV-1a 32-bit reference values: "" is the offset basis 2166136261,
	// "a" is 0xe40c292c, "foobar" is 0xbf9cf968.
	for _, tc := range []struct {
		in   string
		n    int
		want int
	}{
		{"", 1 << 30, 2166136261 % (1 << 30)},
		{"a", 1000, 0xe40c292c % 1000},
		{"foobar", 8, 0xbf9cf968 % 8},
	} {
		if got := provider(tc.in, tc.n); got != tc.want {
			t.Errorf("provider(%q, %d) = %d; want %d", tc.in, tc.n, got, tc.want)
		}
	}
}

func TestAnalyseModes(t *testing.T) {
	h := time.Hour
	// Users: quiet (0) submits before and during the flood; noisy (1)
	// floods from 10h to 12h.
	tr := &trace{users: []string{"quiet", "noisy"}}
	for i := 0; i < 10; i++ {
		tr.jobs = append(tr.jobs, job{at: time.Duration(i) * h / 2, user: 0}) // 0h..4.5h
	}
	for i := 0; i < 10; i++ {
		tr.jobs = append(tr.jobs, job{at: 10*h + time.Duration(i)*h/10, user: 0}) // 10h..10.9h
	}
	for i := 0; i <= 20; i++ {
		tr.jobs = append(tr.jobs, job{at: 10*h + time.Duration(i)*h/10, user: 1}) // 10h..12h
	}
	tr.span = tr.jobs[len(tr.jobs)-1].at
	cfg := &replayConfig{capacity: 3600, consumers: 1, minJobs: 5, bin: h, speedup: 1} // service 1s
	// Mode a: every job waits 10s. Mode b: quiet's flood jobs wait 1h.
	a := make([]time.Duration, len(tr.jobs))
	b := make([]time.Duration, len(tr.jobs))
	for j, jb := range tr.jobs {
		a[j] = jb.at + 10*time.Second
		b[j] = a[j]
		if jb.user == 0 && jb.at >= 10*h {
			b[j] = jb.at + h
		}
	}
	r := analyseModes(cfg, tr, 1, []modeTimes{{mode: "drr", queue: "qa", delivered: a}, {mode: "fifo", queue: "qb", delivered: b}})
	if r.Noisy != "noisy" || r.FloodFromHours != 10 || r.FloodToHours != 12 || r.ServiceSeconds != 1 {
		t.Fatalf("analyseModes = noisy %s, flood %v–%vh, service %vs; want noisy, 10–12h, 1s", r.Noisy, r.FloodFromHours, r.FloodToHours, r.ServiceSeconds)
	}
	ma, mb := r.Modes[0], r.Modes[1]
	quiet := func(m ReplayMode) ReplayUser {
		i := slices.IndexFunc(m.Users, func(u ReplayUser) bool { return u.User == "quiet" })
		return m.Users[i]
	}
	qa, qb := quiet(ma), quiet(mb)
	if qa.Jobs != 20 || qa.PreJobs != 10 || qa.FloodJobs != 10 || !qa.Judged || qa.Ratio != 1 || !qa.WithinTwoX {
		t.Errorf("mode a quiet = %+v; want 20 jobs, 10 before, 10 during, judged, ratio 1, within", qa)
	}
	if qb.Ratio != 360 || qb.WithinTwoX || mb.Within != 0 || mb.Judged != 1 || mb.WorstUser != "quiet" || qb.FloodP99 != 3600 {
		t.Errorf("mode b quiet = %+v, within %d of %d; want ratio 360, not within, flood p99 3600s", qb, mb.Within, mb.Judged)
	}
	// Deliveries during the flood, mode a: quiet's 10 (10h..10.9h +10s)
	// and noisy's 20 of 21 (12h+10s is after the flood).
	if want := 20.0 / 30; math.Abs(ma.NoisyFloodShare-want) > 1e-12 || math.Abs(ma.Others.FloodShare-10.0/30) > 1e-12 {
		t.Errorf("mode a flood shares = noisy %v, others %v; want %v, %v", ma.NoisyFloodShare, ma.Others.FloodShare, want, 10.0/30)
	}
	// Mode b: quiet's flood jobs are delivered 11h..11.9h, inside it.
	if want := 20.0 / 30; math.Abs(mb.NoisyFloodShare-want) > 1e-12 {
		t.Errorf("mode b noisy flood share = %v; want %v", mb.NoisyFloodShare, want)
	}
	if ma.Users[0].User != "noisy" || ma.Others.Jobs != 20 {
		t.Errorf("mode a users[0] = %s, others %d jobs; want noisy (most jobs) first, others 20", ma.Users[0].User, ma.Others.Jobs)
	}
	if n := len(ma.Bins); n != 13 || ma.Bins[10].NoisyJobs != 10 || ma.Bins[10].OthersJobs != 10 || ma.Bins[10].OthersP99 != 10 {
		t.Errorf("mode a bins = %d, bin 10 = %+v; want 13 bins, bin 10 with 10 noisy and 10 others waiting 10s", n, ma.Bins[10])
	}
}

func TestGroup(t *testing.T) {
	for _, tc := range []struct {
		in   int64
		want string
	}{{0, "0"}, {999, "999"}, {1000, "1,000"}, {-1234567, "-1,234,567"}, {100000, "100,000"}} {
		if got := group(tc.in); got != tc.want {
			t.Errorf("group(%d) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

func TestSamplerBounded(t *testing.T) {
	s := newSampler(100)
	for i := range 10000 {
		s.add(time.Duration(i))
	}
	if len(s.samples) != 100 || s.seen != 10000 {
		t.Fatalf("sampler = %d samples of %d seen; want 100 of 10000", len(s.samples), s.seen)
	}
	// A uniform subset of 0..9999 has most of its samples past the first
	// 100 values.
	var late int
	for _, d := range s.samples {
		if d >= 100 {
			late++
		}
	}
	if late < 50 {
		t.Errorf("sampler kept %d of 100 samples past the first 100 values; want a uniform subset", late)
	}
}

func TestMedianRun(t *testing.T) {
	run := func(keys int, perSecond float64) KeysRun {
		return KeysRun{Keys: keys, Consume: Throughput{Messages: int64(perSecond), Elapsed: time.Second}}
	}
	for _, tc := range []struct {
		name  string
		rates []float64
		want  float64
	}{
		{"one", []float64{5}, 5},
		{"odd", []float64{9, 3, 6}, 6},
		{"even takes the lower middle", []float64{4, 1, 3, 2}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var runs []KeysRun
			for _, r := range tc.rates {
				runs = append(runs, run(10, r))
			}
			m := medianRun(runs)
			if got := m.Consume.PerSecond(); got != tc.want || !slices.Equal(m.ConsumeRates, tc.rates) {
				t.Errorf("medianRun(%v) = %v, rates %v; want %v, rates in run order", tc.rates, got, m.ConsumeRates, tc.want)
			}
		})
	}
}

func TestWrap(t *testing.T) {
	for _, tc := range []struct {
		in    string
		width int
		want  []string
	}{
		{"", 10, nil},
		{"a bb ccc dddd", 6, []string{"a bb", "ccc", "dddd"}},
		{"averyveryverylongword x", 5, []string{"averyveryverylongword", "x"}},
		{"  spaced   out  ", 20, []string{"spaced out"}},
	} {
		if got := wrap(tc.in, tc.width); !slices.Equal(got, tc.want) {
			t.Errorf("wrap(%q, %d) = %q; want %q", tc.in, tc.width, got, tc.want)
		}
	}
}

func TestJainIndex(t *testing.T) {
	for _, tc := range []struct {
		shares, entitled []float64
		want             float64
	}{
		{[]float64{0.25, 0.75}, []float64{0.25, 0.75}, 1},
		{[]float64{1, 0}, []float64{0.5, 0.5}, 0.5},
		{[]float64{1, 0, 0, 0}, []float64{0.25, 0.25, 0.25, 0.25}, 0.25},
		{[]float64{0.6, 0.4}, []float64{0.5, 0.5}, 1 / 1.04},
		{nil, nil, 0},
	} {
		keys := make([]FairnessKeyShare, len(tc.shares))
		for i := range keys {
			keys[i] = FairnessKeyShare{Share: tc.shares[i], Entitled: tc.entitled[i]}
		}
		if got := jainIndex(keys); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("jainIndex(%v / %v) = %v, want %v", tc.shares, tc.entitled, got, tc.want)
		}
	}
}
