package bench

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// ReplayValidity says whether one mode's run measured what the replay
// claims to: that its consumers worked at --capacity whenever a backlog
// waited for them, and that its jobs were enqueued on schedule. Times
// are in trace time.
type ReplayValidity struct {
	Valid bool `json:"valid"`
	// Reasons say why the run is not valid, one sentence each.
	Reasons []string `json:"reasons,omitempty"`
	// Samples is how many times the run asked the broker for its
	// backlog. BacklogHours is the time the broker held enough
	// deliverable jobs to keep every consumer busy (see backlogged).
	Samples      int     `json:"samples"`
	BacklogHours float64 `json:"backlog_hours"`
	// CapacityTested is false when BacklogHours was shorter than
	// minBacklogJobs jobs' processing time: Busy and ProcessedPerHour
	// are then 0 and the capacity is not judged.
	CapacityTested bool `json:"capacity_tested"`
	// Busy is the share of the consumers' time, over BacklogHours, they
	// spent processing jobs (0 to 1); a valid run's is at least the
	// result's MinBusy. ProcessedPerHour is the jobs they began per hour
	// of it, to set against the capacity.
	Busy             float64 `json:"consumers_busy"`
	ProcessedPerHour float64 `json:"processed_jobs_per_hour"`
	// Lateness is from a job's scheduled submission to the broker's
	// acceptance of its enqueue, in seconds; a valid run's p99 is at most
	// the result's MaxLatenessSeconds.
	LatenessP50 float64 `json:"enqueue_lateness_p50_s"`
	LatenessP99 float64 `json:"enqueue_lateness_p99_s"`
	LatenessMax float64 `json:"enqueue_lateness_max_s"`
}

// minBacklogJobs is how many jobs' processing time (per consumer) a
// run's backlog must last for its consumers' capacity to be judged: a
// shorter one is all start-up and noise.
const minBacklogJobs = 20

// A span is an interval of trace time, [from, to).
type span struct{ from, to time.Duration }

// judge checks one mode's run against the thresholds of cfg.
func judge(cfg *replayConfig, tr *trace, m *modeTimes) ReplayValidity {
	v := ReplayValidity{Samples: len(m.samples)}
	var reasons []string
	mean := meanCost(cfg, tr)
	ivs := backlogged(m.samples, cfg.consumers, mean)
	var total time.Duration
	for _, iv := range ivs {
		total += iv.to - iv.from
	}
	v.BacklogHours = total.Hours()
	if total >= minBacklogJobs*mean {
		v.CapacityTested = true
		busy, begun := busyIn(ivs, tr, m.started, cfg.service())
		v.Busy = busy.Seconds() / (float64(cfg.consumers) * total.Seconds())
		v.ProcessedPerHour = float64(begun) / total.Hours()
		if v.Busy < cfg.minBusy {
			reasons = append(reasons, fmt.Sprintf(
				"the consumers did not keep up: busy %s of the %s with a backlog, below --min-busy %s (%s jobs per trace hour; --capacity %s)",
				pct(v.Busy), dur(total.Seconds()), pct(cfg.minBusy), group(int64(math.Round(v.ProcessedPerHour))), group(int64(math.Round(cfg.capacity)))))
		}
	}
	l := summarize(slices.Clone(m.lateness))
	v.LatenessP50, v.LatenessP99, v.LatenessMax = l.P50.Seconds(), l.P99.Seconds(), l.Max.Seconds()
	if limit := cfg.lateness(); l.P99 > limit {
		reasons = append(reasons, fmt.Sprintf(
			"the machine did not hold the offered rate: enqueues were accepted %s after their scheduled time at p99 (%s at most), above --max-lateness %s",
			dur(v.LatenessP99), dur(v.LatenessMax), dur(limit.Seconds())))
	}
	v.Valid, v.Reasons = len(reasons) == 0, reasons
	return v
}

// meanCost is the mean processing time of tr's jobs.
func meanCost(cfg *replayConfig, tr *trace) time.Duration {
	def := cfg.service()
	var sum float64
	for _, j := range tr.jobs {
		sum += float64(cmp.Or(j.cost, def))
	}
	return time.Duration(sum / float64(max(len(tr.jobs), 1)))
}

// backlogged returns the spans of trace time between successive samples
// (sorted by time) whose first showed a backlog deep enough to keep all
// consumers busy until the second, without a new job: at least
// consumers × (1 + gap / cost) deliverable jobs, cost being a job's
// processing time. Adjacent spans are joined.
func backlogged(samples []backlogSample, consumers int, cost time.Duration) []span {
	var out []span
	for i := 0; i+1 < len(samples); i++ {
		a, b := samples[i], samples[i+1]
		gap := b.at - a.at
		if gap <= 0 {
			continue
		}
		need := float64(consumers) * (1 + float64(gap)/float64(cost))
		if float64(a.ready) < need {
			continue
		}
		if n := len(out); n > 0 && out[n-1].to == a.at {
			out[n-1].to = b.at
		} else {
			out = append(out, span{a.at, b.at})
		}
	}
	return out
}

// busyIn returns how much of the spans ivs (sorted, disjoint) the
// consumers spent processing jobs, summed over consumers, and how many
// jobs they began within them. Job j was begun at started[j] (negative:
// never) and took its cost, def for a job without one.
func busyIn(ivs []span, tr *trace, started []time.Duration, def time.Duration) (busy time.Duration, begun int) {
	for j, s := range started {
		if s < 0 {
			continue
		}
		e := s + cmp.Or(tr.jobs[j].cost, def)
		k := sort.Search(len(ivs), func(i int) bool { return ivs[i].to > s })
		if k < len(ivs) && ivs[k].from <= s {
			begun++
		}
		for ; k < len(ivs) && ivs[k].from < e; k++ {
			busy += min(e, ivs[k].to) - max(s, ivs[k].from)
		}
	}
	return busy, begun
}
