package dashboard

import (
	"context"
	"net/http"
	"strings"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
)

// overviewData is the queues page: every queue with its depths and rates.
type overviewData struct {
	frame
	Err    *brokerError
	At     time.Time
	Queues []queueRow
}

// queueRow is one queue of the overview. The depths come from
// ListQueues; the rest from the queue's QueueStats samples, when the
// sampler inspects it (Sampled).
type queueRow struct {
	Name                   string
	Shards                 uint32
	Ready, Delayed, Leased uint64
	DLQ                    string
	DLQDepth               uint64
	Sampled                bool
	Subscriptions          uint32
	BackloggedKeys         uint64
	Jain                   float64
	Rates                  rates
	Err                    *brokerError
}

// currentListing returns the sampler's latest ListQueues answer, asking the
// broker itself if the sampler has none yet.
func (s *Server) currentListing(ctx context.Context) listing {
	s.mu.Lock()
	l := s.list
	s.mu.Unlock()
	if !l.at.IsZero() {
		return l
	}
	qs, err := s.c.Admin().ListQueues(ctx)
	return listing{at: time.Now(), queues: qs, err: err}
}

func (s *Server) overviewData(ctx context.Context) overviewData {
	d := overviewData{frame: s.frame("Queues", "queues")}
	l := s.currentListing(ctx)
	d.At, d.Err = l.at, showErr(l.err)
	depth := map[string]uint64{}
	for _, q := range l.queues {
		depth[q.Name] = q.Ready + q.Delayed + q.Leased
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, q := range l.queues {
		if q.Parent != "" {
			continue // a dead-letter queue: a column of its queue's row
		}
		row := queueRow{Name: q.Name, Shards: q.Shards, Ready: q.Ready, Delayed: q.Delayed, Leased: q.Leased,
			DLQ: q.DeadLetterQueue, DLQDepth: depth[q.DeadLetterQueue]}
		if st := s.queues[q.Name]; st != nil {
			row.Err = showErr(st.err)
			if st.stats != nil {
				row.Sampled = true
				row.Subscriptions = st.stats.Subscriptions
				row.BackloggedKeys = st.stats.BackloggedKeys
				row.Jain = st.stats.JainIndex
				row.Rates = ratesOf(st.hist)
			}
		}
		d.Queues = append(d.Queues, row)
	}
	return d
}

func (s *Server) overview(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	s.render(w, http.StatusOK, "overview", s.overviewData(ctx))
}

func (s *Server) overviewJSON(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	html, err := s.fragment("overview", "queues", s.overviewData(ctx))
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, map[string]any{"parts": map[string]string{"queues": html}})
}

// queueData is a queue's page: depths, rates, the fairness view and the
// token buckets, from its latest QueueStats sample.
type queueData struct {
	frame
	Name      string
	Err       *brokerError
	At        time.Time
	St        *fila.QueueStats
	Rates     rates
	DRR       bool
	Keys      []keyRow
	Throttles []throttleRow
}

// keyRow is one fairness key of a queue's page.
type keyRow struct {
	fila.FairnessKeyStats
	// Tone is "over" when the key got clearly more than its entitled
	// share over the window, "under" when clearly less, "" otherwise.
	Tone string
}

// throttleRow is one token bucket of a queue's page.
type throttleRow struct {
	fila.ThrottleKeyStats
	Fill float64 // Tokens over Burst, 0 to 1
}

func (s *Server) queueData(ctx context.Context, name string) queueData {
	d := queueData{frame: s.frame("Queue "+name, "queues"), Name: name}
	s.view(name)
	s.mu.Lock()
	q := s.queues[name]
	fresh := q != nil && time.Since(q.at) < 2*s.cfg.Interval
	s.mu.Unlock()
	if !fresh {
		// Not sampled lately: the sampler takes it from now on, and
		// this first look is read at once.
		st, err := s.c.Admin().QueueStats(ctx, name, fila.WithTopKeys(s.cfg.TopKeys))
		s.record(name, st, err, time.Now())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q = s.queues[name]
	if q == nil {
		return d
	}
	d.Err, d.At, d.St = showErr(q.err), q.statsAt, q.stats
	if q.stats == nil {
		return d
	}
	d.Rates = ratesOf(q.hist)
	d.DRR = q.stats.Policy == fila.PolicyDRR
	for _, k := range q.stats.FairnessKeys {
		row := keyRow{FairnessKeyStats: k}
		if q.stats.WindowDelivered > 0 && k.EntitledShare > 0 {
			switch ratio := k.WindowShare / k.EntitledShare; {
			case ratio > 1.25:
				row.Tone = "over"
			case ratio < 0.8:
				row.Tone = "under"
			}
		}
		d.Keys = append(d.Keys, row)
	}
	for _, t := range q.stats.ThrottleKeys {
		row := throttleRow{ThrottleKeyStats: t}
		if t.Burst > 0 {
			row.Fill = clamp01(t.Tokens / t.Burst)
		}
		d.Throttles = append(d.Throttles, row)
	}
	return d
}

// queueName reads and checks the name parameter.
func queueName(w http.ResponseWriter, r *http.Request) (string, bool) {
	name := r.FormValue("name")
	if !validName(name) {
		badRequest(w, "name %q: want a queue name (letters, digits and ._-:)", name)
		return "", false
	}
	return name, true
}

func (s *Server) queuePage(w http.ResponseWriter, r *http.Request) {
	name, ok := queueName(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	s.render(w, http.StatusOK, "queue", s.queueData(ctx, name))
}

// maxChartKeys is how many fairness keys the chart draws, most pending
// first.
const maxChartKeys = 8

// chartData is what the page's script draws: for each sample, its time
// (seconds before the latest), Jain's index, and each charted key's
// delivered and entitled share; null where a sample has no value.
type chartData struct {
	T      []float64  `json:"t"`
	Jain   []*float64 `json:"jain"`
	Keys   []chartKey `json:"keys"`
	Window float64    `json:"window_s"`
	Span   float64    `json:"span_s"`
	Empty  bool       `json:"empty"`
}

type chartKey struct {
	Key      string     `json:"key"`
	Share    []*float64 `json:"share"`
	Entitled []*float64 `json:"entitled"`
}

func (s *Server) chart(name string) chartData {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := chartData{Span: (time.Duration(s.cfg.History) * s.cfg.Interval).Seconds()}
	q := s.queues[name]
	if q == nil || len(q.hist) == 0 {
		c.Empty = true
		return c
	}
	last := q.hist[len(q.hist)-1]
	c.Window = last.window.Seconds()
	var keys []string
	if q.stats != nil {
		for _, k := range q.stats.FairnessKeys {
			if len(keys) == maxChartKeys {
				break
			}
			keys = append(keys, k.Key)
		}
	}
	c.Keys = make([]chartKey, len(keys))
	for i, k := range keys {
		c.Keys[i].Key = k
	}
	for _, sm := range q.hist {
		c.T = append(c.T, sm.at.Sub(last.at).Seconds())
		var j *float64
		if sm.jain > 0 {
			v := sm.jain
			j = &v
		}
		c.Jain = append(c.Jain, j)
		for i, k := range keys {
			var sh, en *float64
			if v, ok := sm.share[k]; ok {
				sh = &v
			}
			if v, ok := sm.entitled[k]; ok {
				en = &v
			}
			c.Keys[i].Share = append(c.Keys[i].Share, sh)
			c.Keys[i].Entitled = append(c.Keys[i].Entitled, en)
		}
	}
	return c
}

func (s *Server) queueJSON(w http.ResponseWriter, r *http.Request) {
	name, ok := queueName(w, r)
	if !ok {
		return
	}
	ctx, cancel := s.ctx(r)
	defer cancel()
	d := s.queueData(ctx, name)
	parts := map[string]string{}
	for _, p := range []string{"summary", "fairness", "throttle"} {
		html, err := s.fragment("queue", p, d)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		parts[p] = html
	}
	writeJSON(w, map[string]any{"parts": parts, "chart": s.chart(name)})
}

// configData is the runtime config page.
type configData struct {
	frame
	Err     *brokerError
	Entries []configRow
}

// configRow is one runtime config entry; a "throttle." key also names
// its throttle key and token bucket.
type configRow struct {
	Key, Value   string
	ThrottleKey  string
	Rate, Burst  string
	IsThrottling bool
}

func (s *Server) configPage(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := s.ctx(r)
	defer cancel()
	d := configData{frame: s.frame("Runtime config", "config")}
	es, err := s.c.Admin().ListConfig(ctx, "")
	d.Err = showErr(err)
	for _, e := range es {
		row := configRow{Key: e.Key, Value: e.Value}
		if k, ok := strings.CutPrefix(e.Key, "throttle."); ok {
			if rate, burst, ok := strings.Cut(e.Value, ","); ok {
				row.IsThrottling, row.ThrottleKey = true, k
				row.Rate, row.Burst = strings.TrimSpace(rate), strings.TrimSpace(burst)
			}
		}
		d.Entries = append(d.Entries, row)
	}
	s.render(w, http.StatusOK, "config", d)
}
