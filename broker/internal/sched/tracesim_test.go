package sched

import (
	"bufio"
	"cmp"
	"encoding/binary"
	"hash/fnv"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTraceSimulation replays the Google trace that `make replay` uses
// through the scheduler alone, on a fake clock, and judges it as the
// replay does: the users whose p99 wait during the noisy user's flood
// stays within 2× of their p99 before it. It takes a second where the
// replay takes 20 minutes, so that a change to the policy can be judged
// before the replay measures it on a real broker. It models the replay
// at 600×: 8 consumers each taking one job at a time for 14 s of trace
// time, then acking it (no network, no ack round trip); the jobs'
// providers as throttle keys of 1,000 jobs per trace hour, burst 20.
// "others first" gives every user but the noisy one weight 1,000 against
// its 1: near strict priority for everyone else, a bound on what any
// policy that keeps the noisy user last could reach on this criterion.
//
// It runs only when FILA_TRACE names the trace (`make replay-sim`).
func TestTraceSimulation(t *testing.T) {
	path := os.Getenv("FILA_TRACE")
	if path == "" {
		t.Skip("FILA_TRACE does not name a trace (make replay-sim sets it)")
	}
	tr := readSimTrace(t, path)
	for _, c := range []struct {
		name   string
		policy string
		budget int
		favour bool
	}{
		{"drr", PolicyDRR, 0, false},
		{"stfq, no latency lane", PolicySTFQ, -1, false},
		{"stfq", PolicySTFQ, 0, false},
		{"stfq, others first", PolicySTFQ, 0, true},
	} {
		within, judged, worst := tr.judge(t, simulateTrace(t, tr, c.policy, c.budget, c.favour))
		t.Logf("%-22s %d of %d users within 2× (worst: %s)", c.name, within, judged, worst)
	}
}

type simJob struct {
	at   time.Duration // from the trace's start
	user int
	prov int
}

type simTrace struct {
	jobs     []simJob
	users    []string
	noisy    int
	from, to time.Duration // the noisy user's first and last job
}

func readSimTrace(t *testing.T, path string) *simTrace {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tr := &simTrace{}
	ids := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Scan() // the header
	first := int64(-1)
	for sc.Scan() {
		c := strings.Split(sc.Text(), ",")
		if len(c) < 8 {
			t.Fatalf("%s: %q: want the Google layout", path, sc.Text())
		}
		us, err := strconv.ParseInt(c[0], 10, 64)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if first < 0 {
			first = us
		}
		u, ok := ids[c[4]]
		if !ok {
			u = len(tr.users)
			ids[c[4]] = u
			tr.users = append(tr.users, c[4])
		}
		h := fnv.New32a()
		h.Write([]byte(c[7]))
		tr.jobs = append(tr.jobs, simJob{at: time.Duration(us-first) * time.Microsecond, user: u, prov: int(h.Sum32() % 8)})
	}
	slices.SortStableFunc(tr.jobs, func(a, b simJob) int { return cmp.Compare(a.at, b.at) })
	count := make([]int, len(tr.users))
	for _, j := range tr.jobs {
		if count[j.user]++; count[j.user] > count[tr.noisy] {
			tr.noisy = j.user
		}
	}
	tr.from = -1
	for _, j := range tr.jobs {
		if j.user == tr.noisy {
			tr.to = j.at
			if tr.from < 0 {
				tr.from = j.at
			}
		}
	}
	return tr
}

// simulateTrace returns when each job was delivered, in trace time.
func simulateTrace(t *testing.T, tr *simTrace, policy string, budget int, favour bool) []time.Duration {
	const speedup = 600
	service := 14 * time.Second / speedup
	p := newPropSched(Config{VisibilityTimeout: time.Hour, LatencyBudget: budget})
	p.s.CreateQueue(p.cmdRef(), QueueSpec{Name: "q", Policy: policy})
	providers := make([][]string, 8)
	for i := range providers {
		providers[i] = []string{"provider-" + strconv.Itoa(i)}
		p.s.SetThrottle(providers[i][0], 1000.0*speedup/3600, 20)
	}
	p.s.Subscribe(p.cmdRef(), 1, "q", 8, nil)
	start := p.s.now
	due := func(j int) Time { return start.Add(tr.jobs[j].at / speedup) }
	delivered := make([]time.Duration, len(tr.jobs))
	type running struct {
		d   Delivered
		end Time
	}
	var busy []running
	next := 0
	for {
		for _, d := range p.drainT(t) {
			delivered[binary.BigEndian.Uint64(d.ID[8:])-1] = time.Duration(p.s.now-start) * speedup
			busy = append(busy, running{d, p.s.now.Add(service)})
		}
		p.out = p.out[:0]
		at, done := Time(math.MaxInt64), -1
		if next < len(tr.jobs) {
			at = due(next)
		}
		for i, r := range busy {
			if r.end < at {
				at, done = r.end, i
			}
		}
		if d := p.s.Deadline(); d > p.s.now && d < at {
			at, done = d, -2
		}
		if at == Time(math.MaxInt64) {
			return delivered
		}
		p.s.Tick(max(at, p.s.now))
		switch {
		case done >= 0:
			p.ack(busy[done].d)
			busy = slices.Delete(busy, done, done+1)
			p.s.AddCredit(1, 1)
		case done == -1:
			for ; next < len(tr.jobs) && due(next) <= p.s.now; next++ {
				j := tr.jobs[next]
				m := Message{ID: testID(uint64(next) + 1), FairnessKey: tr.users[j.user], PayloadSize: 64, ThrottleKeys: providers[j.prov]}
				if favour && j.user != tr.noisy {
					m.Weight = 1000
				}
				p.s.Enqueue(p.cmdRef(), []EnqueueItem{{Queue: "q", Msg: m}})
			}
		}
	}
}

// judge applies the replay's criterion: a user with at least 10 jobs
// before the flood and 10 during it passes if its p99 wait during is at
// most 2× its p99 before (waits under one service time count as one).
func (tr *simTrace) judge(t *testing.T, delivered []time.Duration) (within, judged int, worst string) {
	const floor = 14 * time.Second
	pre := make([][]time.Duration, len(tr.users))
	during := make([][]time.Duration, len(tr.users))
	for j, jb := range tr.jobs {
		w := max(delivered[j]-jb.at, 0)
		switch {
		case jb.at < tr.from:
			pre[jb.user] = append(pre[jb.user], w)
		case jb.at <= tr.to:
			during[jb.user] = append(during[jb.user], w)
		}
	}
	p99 := func(ws []time.Duration) time.Duration {
		slices.Sort(ws)
		return ws[min(max(int(math.Ceil(0.99*float64(len(ws)))), 1), len(ws))-1]
	}
	var worstRatio float64
	for u, name := range tr.users {
		if u == tr.noisy || len(pre[u]) < 10 || len(during[u]) < 10 {
			continue
		}
		judged++
		r := float64(max(p99(during[u]), floor)) / float64(max(p99(pre[u]), floor))
		if r <= 2 {
			within++
		}
		if r > worstRatio {
			worstRatio, worst = r, name+" "+strconv.FormatFloat(r, 'f', 2, 64)+"×"
		}
		if testing.Verbose() && r > 2 {
			t.Logf("  %s: p99 %v before, %v during (%.2f×)", name, p99(pre[u]).Round(time.Second), p99(during[u]).Round(time.Second), r)
		}
	}
	return within, judged, worst
}
