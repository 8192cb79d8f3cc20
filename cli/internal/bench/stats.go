package bench

import (
	"encoding/json"
	"math"
	"slices"
	"time"
)

// Latency summarises a set of latency samples. Percentiles are by the
// nearest-rank method: the p-th percentile of n sorted samples is the
// sample of rank ceil(p/100 × n).
type Latency struct {
	Count int
	Mean  time.Duration
	P50   time.Duration
	P95   time.Duration
	P99   time.Duration
	Max   time.Duration
}

// summarize returns the summary of samples, which it sorts in place. An
// empty set gives the zero Latency.
func summarize(samples []time.Duration) Latency {
	if len(samples) == 0 {
		return Latency{}
	}
	slices.Sort(samples)
	var sum float64
	for _, s := range samples {
		sum += float64(s)
	}
	return Latency{
		Count: len(samples),
		Mean:  time.Duration(sum / float64(len(samples))),
		P50:   percentile(samples, 50),
		P95:   percentile(samples, 95),
		P99:   percentile(samples, 99),
		Max:   samples[len(samples)-1],
	}
}

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted, by the
// nearest-rank method; 0 for no samples.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = min(max(rank, 1), len(sorted))
	return sorted[rank-1]
}

// MarshalJSON writes the summary in milliseconds.
func (l Latency) MarshalJSON() ([]byte, error) {
	f := func(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }
	return json.Marshal(struct {
		Count int     `json:"count"`
		Mean  float64 `json:"mean_ms"`
		P50   float64 `json:"p50_ms"`
		P95   float64 `json:"p95_ms"`
		P99   float64 `json:"p99_ms"`
		Max   float64 `json:"max_ms"`
	}{l.Count, f(l.Mean), f(l.P50), f(l.P95), f(l.P99), f(l.Max)})
}

// Throughput is a count of messages over an elapsed time.
type Throughput struct {
	Messages int64
	Bytes    int64
	Elapsed  time.Duration
}

// PerSecond returns messages per second; 0 when nothing elapsed.
func (t Throughput) PerSecond() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Messages) / t.Elapsed.Seconds()
}

// MiBPerSecond returns payload MiB per second; 0 when nothing elapsed.
func (t Throughput) MiBPerSecond() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Bytes) / (1 << 20) / t.Elapsed.Seconds()
}

// MarshalJSON writes the counts, seconds and rates.
func (t Throughput) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Messages  int64   `json:"messages"`
		Bytes     int64   `json:"bytes"`
		Seconds   float64 `json:"seconds"`
		MsgsPerS  float64 `json:"msgs_per_s"`
		MiBPerSec float64 `json:"mib_per_s"`
	}{t.Messages, t.Bytes, math.Round(t.Elapsed.Seconds()*1e6) / 1e6,
		math.Round(t.PerSecond()*10) / 10, math.Round(t.MiBPerSecond()*100) / 100})
}

// sampler keeps latency samples from many goroutines, up to a cap; past
// the cap it keeps a uniform random subset (reservoir sampling,
// J. S. Vitter, "Random Sampling with a Reservoir", ACM TOMS 11(1), 1985)
// so memory stays bounded on long runs.
type sampler struct {
	samples []time.Duration
	seen    int64
	limit   int
	rng     uint64
}

func newSampler(limit int) *sampler {
	return &sampler{limit: limit, rng: 0x9e3779b97f4a7c15}
}

// add records one sample. Not safe for concurrent use: each goroutine
// keeps its own sampler and merges at the end.
func (s *sampler) add(d time.Duration) {
	s.seen++
	if len(s.samples) < s.limit {
		s.samples = append(s.samples, d)
		return
	}
	// xorshift64*: cheap and good enough to pick reservoir slots.
	s.rng ^= s.rng >> 12
	s.rng ^= s.rng << 25
	s.rng ^= s.rng >> 27
	j := (s.rng * 2685821657736338717) % uint64(s.seen)
	if j < uint64(s.limit) {
		s.samples[j] = d
	}
}

// merge returns the samples of all ss together, weighting none: each
// sampler's reservoir stands for its own share of the stream, which is
// exact while no sampler went past its limit.
func merge(ss []*sampler) []time.Duration {
	var n int
	for _, s := range ss {
		n += len(s.samples)
	}
	out := make([]time.Duration, 0, n)
	for _, s := range ss {
		out = append(out, s.samples...)
	}
	return out
}
