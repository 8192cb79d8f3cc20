package dashboard

import (
	"context"
	"math"
	"slices"
	"strconv"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
)

// listing is the last ListQueues answer.
type listing struct {
	at     time.Time
	queues []fila.QueueInfo
	err    error
}

// queueState is what the sampler knows of one queue.
type queueState struct {
	stats   *fila.QueueStats // the latest QueueStats answer, nil before the first
	statsAt time.Time        // when stats was read
	at      time.Time        // when QueueStats was last asked, answered or not
	err     error            // the latest QueueStats error, nil after a success
	hist    []sample         // oldest first, at most History
}

// sample is one QueueStats reading, as the rates and the charts use it.
type sample struct {
	at                     time.Time
	ready, delayed, leased uint64
	deadLettered           uint64
	windowDelivered        uint64
	window                 time.Duration
	jain                   float64
	share, entitled        map[string]float64 // per listed fairness key
}

// viewedFor is how long a queue whose page was open stays sampled
// beyond MaxQueues.
const viewedFor = time.Minute

// Run samples the broker every Interval until ctx ends: ListQueues, then
// QueueStats of the queues to watch (see Config.MaxQueues).
func (s *Server) Run(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	for {
		s.sampleOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// sampleOnce takes one round of samples.
func (s *Server) sampleOnce(ctx context.Context) {
	lctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	qs, err := s.c.Admin().ListQueues(lctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	now := time.Now()
	s.mu.Lock()
	s.list = listing{at: now, queues: qs, err: err}
	if err != nil {
		s.mu.Unlock()
		return
	}
	listed := map[string]bool{}
	var watch []string
	for _, q := range qs {
		listed[q.Name] = true
		if q.Parent == "" && len(watch) < s.cfg.MaxQueues {
			watch = append(watch, q.Name)
		}
	}
	for name, at := range s.viewed {
		if now.Sub(at) > viewedFor {
			delete(s.viewed, name)
		} else if listed[name] && !slices.Contains(watch, name) {
			watch = append(watch, name)
		}
	}
	for name := range s.queues {
		if !slices.Contains(watch, name) {
			// Deleted, or no longer watched: its history goes with it,
			// rather than stale figures staying on the pages.
			delete(s.queues, name)
		}
	}
	s.mu.Unlock()
	for _, name := range watch {
		if ctx.Err() != nil {
			return
		}
		s.sampleQueue(ctx, name)
	}
}

// sampleQueue reads QueueStats of name and records it.
func (s *Server) sampleQueue(ctx context.Context, name string) {
	qctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	st, err := s.c.Admin().QueueStats(qctx, name, fila.WithTopKeys(s.cfg.TopKeys))
	cancel()
	if ctx.Err() != nil {
		return
	}
	s.record(name, st, err, time.Now())
}

// record keeps a QueueStats answer (or its error) of name read at at.
func (s *Server) record(name string, st *fila.QueueStats, err error, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[name]
	if q == nil {
		q = &queueState{}
		s.queues[name] = q
	}
	if err != nil {
		q.err, q.at = err, at
		return
	}
	if n := len(q.hist); n > 0 && !at.After(q.hist[n-1].at) {
		return // an older answer than the one kept
	}
	q.stats, q.statsAt, q.at, q.err = st, at, at, nil
	sm := sample{
		at: at, ready: st.Ready, delayed: st.Delayed, leased: st.Leased, deadLettered: st.DeadLettered,
		windowDelivered: st.WindowDelivered, window: st.Window, jain: st.JainIndex,
		share: map[string]float64{}, entitled: map[string]float64{},
	}
	for _, k := range st.FairnessKeys {
		sm.share[k.Key] = k.WindowShare
		sm.entitled[k.Key] = k.EntitledShare
	}
	q.hist = append(q.hist, sm)
	if len(q.hist) > s.cfg.History {
		q.hist = slices.Delete(q.hist, 0, len(q.hist)-s.cfg.History)
	}
}

// view marks name's page as open, so that the sampler keeps sampling it.
func (s *Server) view(name string) {
	s.mu.Lock()
	s.viewed[name] = time.Now()
	s.mu.Unlock()
}

// rates are a queue's rates, per second.
type rates struct {
	// Delivered is the queue's deliveries over the broker's stats window,
	// per second of it.
	Delivered float64
	// Depth and DeadLetters are how fast the queue's depth (ready,
	// delayed and leased) and its dead-letter queue's grew between the
	// oldest sample of the last rateSpan and the latest: negative when
	// they shrink.
	Depth, DeadLetters float64
	Known              bool // at least two samples
}

// rateSpan is how far back the depth rates look.
const rateSpan = 10 * time.Second

func ratesOf(h []sample) rates {
	var r rates
	if len(h) == 0 {
		return r
	}
	last := h[len(h)-1]
	if last.window > 0 {
		r.Delivered = float64(last.windowDelivered) / last.window.Seconds()
	}
	first := len(h) - 1
	for first > 0 && last.at.Sub(h[first-1].at) <= rateSpan {
		first--
	}
	if first == len(h)-1 && len(h) > 1 {
		first = len(h) - 2 // samples further apart than rateSpan
	}
	if first == len(h)-1 {
		return r
	}
	f := h[first]
	dt := last.at.Sub(f.at).Seconds()
	if dt <= 0 {
		return r
	}
	depth := func(x sample) float64 { return float64(x.ready + x.delayed + x.leased) }
	r.Depth = (depth(last) - depth(f)) / dt
	r.DeadLetters = (float64(last.deadLettered) - float64(f.deadLettered)) / dt
	r.Known = true
	return r
}

// pct formats a share (0 to 1) as a percentage with one decimal.
func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

// fmtRate formats a rate per second, with a sign when signed is true.
func fmtRate(f float64, signed bool) string {
	prec := 1
	if math.Abs(f) >= 100 {
		prec = 0
	}
	s := strconv.FormatFloat(f, 'f', prec, 64)
	if s == "-0.0" || s == "-0" {
		s = s[1:]
	}
	if signed && f > 0 && s != "0.0" && s != "0" {
		s = "+" + s
	}
	return s + "/s"
}

// fmtDur formats a dwell or setting, "-" for none.
func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "-"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(10 * time.Millisecond).String()
	}
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

func clamp01(f float64) float64 { return min(max(f, 0), 1) }
