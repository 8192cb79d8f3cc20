package bench

import (
	"cmp"
	"slices"
	"time"
)

// analyse turns the delivery times of the replay's runs (time since
// epoch; 0 for a job never delivered) into a ReplayResult. The replay
// started at start (since epoch); job j was due then plus j.at /
// speed-up.
func analyse(cfg *replayConfig, tr *trace, noisy int32, start time.Duration, runs []*replayRun) *ReplayResult {
	modes := make([]string, len(runs))
	queues := make([]string, len(runs))
	delivered := make([][]time.Duration, len(runs))
	for i, r := range runs {
		modes[i], queues[i] = r.mode, r.queue
		d := make([]time.Duration, len(r.delivered))
		for j, at := range r.delivered {
			if at == 0 {
				d[j] = -1
				continue
			}
			d[j] = time.Duration(float64(at-start) * cfg.speedup)
		}
		delivered[i] = d
	}
	return analyseModes(cfg, tr, noisy, modes, queues, delivered)
}

// analyseModes is analyse over delivery times already in trace time
// (offsets from the first submission, as job.at; negative for a job
// never delivered), one slice per mode, indexed like tr.jobs.
func analyseModes(cfg *replayConfig, tr *trace, noisy int32, modes, queues []string, delivered [][]time.Duration) *ReplayResult {
	from, to, _ := tr.window(noisy)
	floor := cfg.service()
	res := &ReplayResult{
		Workload: "replay", Jobs: len(tr.jobs), Users: len(tr.users), SpanHours: tr.span.Hours(),
		Speedup: cfg.speedup, Capacity: cfg.capacity, Consumers: cfg.consumers, ServiceSeconds: floor.Seconds(),
		Providers: cfg.providers, PayloadSize: cfg.size,
		Noisy: tr.users[noisy], FloodFromHours: from.Hours(), FloodToHours: to.Hours(), MinJobs: cfg.minJobs,
		BinSeconds: cfg.bin.Seconds(),
	}
	if cfg.providers > 0 {
		res.ProviderRate, res.ProviderBurst = cfg.providerRate, cfg.providerBurst
	}
	inFlood := func(t time.Duration) bool { return t >= from && t <= to }
	for mi, mode := range modes {
		dl := delivered[mi]
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
		m := ReplayMode{Mode: mode, Queue: queues[mi]}
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
