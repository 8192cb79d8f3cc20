package bench

import (
	"cmp"
	"slices"
	"time"
)

// modeTimes is one mode's run in trace time, as offsets from the
// trace's first submission; per-job slices are indexed like tr.jobs.
type modeTimes struct {
	mode, policy, queue string
	// wall is the run's wall-clock time, first enqueue to last ack.
	wall time.Duration
	// delivered is when each job was delivered, started when its
	// consumer began it; negative for a job never delivered.
	delivered, started []time.Duration
	// lateness is each job's enqueue lateness: from its scheduled
	// submission to the broker's acceptance.
	lateness []time.Duration
	samples  []backlogSample
}

// times converts r's record, in time since epoch, to trace time.
func (r *replayRun) times(cfg *replayConfig, tr *trace) modeTimes {
	toTrace := func(at time.Duration) time.Duration { return time.Duration(float64(at-r.start) * cfg.speedup) }
	n := len(tr.jobs)
	m := modeTimes{
		mode: r.mode, policy: r.policy, queue: r.queue, wall: max(r.end-r.start, 0),
		delivered: make([]time.Duration, n), started: make([]time.Duration, n), lateness: make([]time.Duration, 0, n),
		samples: make([]backlogSample, len(r.samples)),
	}
	for j, jb := range tr.jobs {
		m.delivered[j], m.started[j] = -1, -1
		if r.delivered[j] != 0 {
			m.delivered[j], m.started[j] = toTrace(r.delivered[j]), toTrace(r.started[j])
		}
		if r.accepted[j] != 0 {
			m.lateness = append(m.lateness, max(toTrace(r.accepted[j])-jb.at, 0))
		}
	}
	for i, s := range r.samples {
		m.samples[i] = backlogSample{at: toTrace(s.at), ready: s.ready}
	}
	return m
}

// analyse turns the records of the replay's runs, one per mode, into a
// ReplayResult.
func analyse(cfg *replayConfig, tr *trace, noisy int32, runs []*replayRun) *ReplayResult {
	ms := make([]modeTimes, len(runs))
	for i, r := range runs {
		ms[i] = r.times(cfg, tr)
	}
	return analyseModes(cfg, tr, noisy, ms)
}

// analyseModes is analyse over runs already in trace time.
func analyseModes(cfg *replayConfig, tr *trace, noisy int32, modes []modeTimes) *ReplayResult {
	from, to, _ := tr.window(noisy)
	floor := cfg.service()
	var cost float64 // seconds
	throttles := map[int32]bool{}
	for _, j := range tr.jobs {
		cost += cmp.Or(j.cost, floor).Seconds()
		if j.throttle > 0 {
			throttles[j.throttle] = true
		}
	}
	res := &ReplayResult{
		Workload: "replay", TraceFormat: tr.layout, Valid: true,
		Jobs: len(tr.jobs), Users: len(tr.users), SpanHours: tr.span.Hours(),
		Speedup: cfg.speedup, Capacity: cfg.capacity, Consumers: cfg.consumers,
		ServiceSeconds: floor.Seconds(), JobCosts: tr.costs, MeanCostSeconds: cost / float64(len(tr.jobs)),
		ThrottleKeys: len(throttles), ThrottleRates: cfg.rates, PayloadSize: cfg.size,
		Noisy: tr.users[noisy], FloodFromHours: from.Hours(), FloodToHours: to.Hours(), MinJobs: cfg.minJobs,
		BinSeconds: cfg.bin.Seconds(), MaxLatenessSeconds: cfg.lateness().Seconds(), MinBusy: cfg.minBusy,
	}
	if tr.layout == layoutGoogle && cfg.providers > 0 {
		res.Providers, res.ProviderRate, res.ProviderBurst = cfg.providers, cfg.providerRate, cfg.providerBurst
	}
	inFlood := func(t time.Duration) bool { return t >= from && t <= to }
	for mi := range modes {
		mt := &modes[mi]
		dl := mt.delivered
		type waits struct{ all, pre, flood []time.Duration }
		per := make([]waits, len(tr.users))
		var others waits
		users := make([]ReplayUser, len(tr.users))
		var floodDeliveries, othersIn int
		for j, jb := range tr.jobs {
			u := &users[jb.user]
			u.Jobs++
			pre, flood := jb.at < from, inFlood(jb.at)
			if pre {
				u.PreJobs++
			} else if flood {
				u.FloodJobs++
			}
			if dl[j] < 0 {
				continue
			}
			if inFlood(dl[j]) {
				floodDeliveries++
				u.deliveriesIn++
				if jb.user != noisy {
					othersIn++
				}
			}
			w := max(dl[j]-jb.at, 0)
			add := func(ws *waits) {
				ws.all = append(ws.all, w)
				if pre {
					ws.pre = append(ws.pre, w)
				} else if flood {
					ws.flood = append(ws.flood, w)
				}
			}
			add(&per[jb.user])
			if jb.user != noisy {
				add(&others)
			}
		}
		m := ReplayMode{Mode: mt.mode, Policy: mt.policy, Queue: mt.queue, WallSeconds: mt.wall.Seconds(), Validity: judge(cfg, tr, mt)}
		res.WallSeconds += m.WallSeconds
		if !m.Validity.Valid {
			res.Valid = false
			for _, why := range m.Validity.Reasons {
				res.InvalidReasons = append(res.InvalidReasons, m.Mode+": "+why)
			}
		}
		fill := func(u *ReplayUser, ws *waits) {
			all, pre, fl := summarize(ws.all), summarize(ws.pre), summarize(ws.flood)
			u.P50, u.P99 = all.P50.Seconds(), all.P99.Seconds()
			u.PreP50, u.PreP99 = pre.P50.Seconds(), pre.P99.Seconds()
			u.FloodP50, u.FloodP99 = fl.P50.Seconds(), fl.P99.Seconds()
		}
		for i := range users {
			u := &users[i]
			u.User = tr.users[i]
			fill(u, &per[i])
			if floodDeliveries > 0 {
				u.FloodShare = float64(u.deliveriesIn) / float64(floodDeliveries)
			}
			if int32(i) == noisy || u.PreJobs < cfg.minJobs || u.FloodJobs < cfg.minJobs {
				continue
			}
			u.Judged = true
			u.Ratio = max(u.FloodP99, floor.Seconds()) / max(u.PreP99, floor.Seconds())
			u.WithinTwoX = u.Ratio <= 2
			m.Judged++
			if u.WithinTwoX {
				m.Within++
			}
			if u.Ratio > m.WorstRatio {
				m.WorstRatio, m.WorstUser = u.Ratio, u.User
			}
		}
		m.NoisyFloodShare = users[noisy].FloodShare
		m.Others.User = "(everyone else)"
		for i, u := range users {
			if int32(i) != noisy {
				m.Others.Jobs += u.Jobs
				m.Others.PreJobs += u.PreJobs
				m.Others.FloodJobs += u.FloodJobs
			}
		}
		fill(&m.Others, &others)
		if floodDeliveries > 0 {
			m.Others.FloodShare = float64(othersIn) / float64(floodDeliveries)
		}
		slices.SortStableFunc(users, func(a, b ReplayUser) int {
			return cmp.Or(cmp.Compare(b.Jobs, a.Jobs), cmp.Compare(a.User, b.User))
		})
		m.Users = users
		m.Bins = bins(cfg.bin, tr, noisy, dl)
		res.Modes = append(res.Modes, m)
	}
	return res
}

// bins groups jobs by submission time into spans of width and gives the
// noisy user's and everyone else's wait percentiles in each.
func bins(width time.Duration, tr *trace, noisy int32, delivered []time.Duration) []ReplayBin {
	n := int(tr.span/width) + 1
	type acc struct {
		noisy, others []time.Duration
		lost          int
	}
	accs := make([]acc, n)
	for j, jb := range tr.jobs {
		a := &accs[int(jb.at/width)]
		if delivered[j] < 0 {
			a.lost++
			continue
		}
		w := max(delivered[j]-jb.at, 0)
		if jb.user == noisy {
			a.noisy = append(a.noisy, w)
		} else {
			a.others = append(a.others, w)
		}
	}
	out := make([]ReplayBin, n)
	for i, a := range accs {
		ns, os := summarize(a.noisy), summarize(a.others)
		out[i] = ReplayBin{
			FromHours: (time.Duration(i) * width).Hours(),
			NoisyJobs: ns.Count, NoisyP50: ns.P50.Seconds(), NoisyP99: ns.P99.Seconds(),
			OthersJobs: os.Count, OthersP50: os.P50.Seconds(), OthersP99: os.P99.Seconds(),
			Undelivered: a.lost,
		}
	}
	return out
}
