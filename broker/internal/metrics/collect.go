package metrics

import (
	"context"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/fila-mq/fila/broker/internal/hook"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// scrapeTimeout bounds a scrape's read of the scheduler.
const scrapeTimeout = 5 * time.Second

// QueueSource reads the stats of the queues a node reports, each with
// its top most pending fairness keys (node.Node.AllQueueStats).
type QueueSource func(ctx context.Context, top int) ([]sched.QueueStats, error)

// Queues gathers the queue, fairness and throttle metrics from the
// scheduler at each scrape: one read per shard, which costs what a
// `fila queue inspect` of every queue costs, and nothing between
// scrapes. TopKeys bounds the per-key series of each queue to its most
// backlogged keys, so that a queue of a million keys exports TopKeys
// series per metric.
//
// It is a prometheus.Gatherer, added to the Metrics with AddGatherer,
// rather than a registered Collector: a broker of 10,000 queues (and
// their DLQs) exports 320,000 queue series, and a registry's Collect
// and Gather allocated about 650 bytes for each (a constant metric and
// its label pairs, then a checked and sorted copy), which took a scrape
// to 210 MB allocated and the broker's RSS from 58 to 204 MiB. Gather
// builds the families directly: one label pair per queue shared by its
// series, one value shared by the series that are zero, the rest
// allocated in slabs; about 130 bytes an idle queue's series.
type Queues struct {
	Source  QueueSource
	TopKeys int
	Logger  *slog.Logger
}

// A family is one metric the queue gatherer exports.
type family struct {
	name, help string
	counter    bool
	labels     []string
}

// desc returns the family's description, for Describe.
func (f *family) desc() *prometheus.Desc { return desc(f.name, f.help, f.labels) }

var (
	queueLabels    = []string{"queue"}
	keyLabels      = []string{"queue", "key"}
	throttleLabels = []string{"queue", "key"}
)

// queueFamilies are the metrics every queue exports, with their values.
var queueFamilies = []struct {
	family
	value func(*sched.QueueStats) float64
}{
	{gaugeFam("fila_queue_ready_messages", "Messages ready for delivery, including those waiting for a throttle token.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Ready) }},
	{gaugeFam("fila_queue_delayed_messages", "Messages not yet due: retries backing off, delayed enqueues, failures waiting for on_failure.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Delayed) }},
	{gaugeFam("fila_queue_leased_messages", "Messages delivered and not yet settled.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Leased) }},
	{gaugeFam("fila_queue_dlq_messages", "Messages in the queue's dead-letter queue.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.DeadLettered) }},
	{gaugeFam("fila_queue_payload_bytes", "Payload bytes of the queue's messages and its DLQ's.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Bytes) }},
	{gaugeFam("fila_queue_subscriptions", "Open subscriptions.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Subscriptions) }},
	{gaugeFam("fila_queue_backlogged_keys", "Fairness keys with pending messages.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.BackloggedKeys) }},
	{gaugeFam("fila_queue_jain_index", "Jain's fairness index over the backlogged keys' delivered share against their entitled share in the stats window (Jain, Chiu & Hawe, 1984): 1 is exactly fair, 1/n is one key served alone; 0 when nothing was delivered.", queueLabels),
		func(st *sched.QueueStats) float64 { return st.JainIndex }},
	{gaugeFam("fila_queue_window_delivered", "Deliveries over the stats window (the last 30 to 60 s).", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.WindowDelivered) }},
	{counterFam("fila_queue_enqueued_total", "Messages accepted (duplicates not counted).", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Counts.Enqueued) }},
	{counterFam("fila_queue_delivered_total", "Deliveries (leases granted), redeliveries included.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Counts.Delivered) }},
	{counterFam("fila_queue_acked_total", "Deliveries acked.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Counts.Acked) }},
	{counterFam("fila_queue_nacked_total", "Deliveries settled as failed: Nack and RetryAfter.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Counts.Nacked) }},
	{counterFam("fila_queue_leases_expired_total", "Leases that ended without a settle: the visibility timeout passed.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Counts.Expired) }},
	{counterFam("fila_queue_dead_lettered_total", "Messages moved to the dead-letter queue.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Counts.DeadLettered) }},
	{counterFam("fila_queue_redriven_total", "Messages moved back from the dead-letter queue (counted on the queue and on its DLQ).", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Counts.Redriven) }},
	{counterFam("fila_queue_purged_total", "Messages removed by a purge of the queue.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Counts.Purged) }},
	{counterFam("fila_queue_messages_expired_total", "Messages whose TTL passed before they were delivered: dead-lettered (also counted in fila_queue_dead_lettered_total) or dropped.", queueLabels),
		func(st *sched.QueueStats) float64 { return float64(st.Counts.TTLExpired) }},
}

// keyFamilies are the metrics of each queue's top fairness keys.
var keyFamilies = []struct {
	family
	value func(*sched.FairnessKeyStats) float64
}{
	{gaugeFam("fila_fairness_key_pending_messages", "A top key's messages ready or waiting for tokens.", keyLabels),
		func(k *sched.FairnessKeyStats) float64 { return float64(k.Pending) }},
	{gaugeFam("fila_fairness_key_entitled_share", "A top key's entitled share: its weight over the weights of the queue's backlogged keys (0 to 1).", keyLabels),
		func(k *sched.FairnessKeyStats) float64 { return k.EntitledShare }},
	{gaugeFam("fila_fairness_key_delivered_share", "A top key's share of the queue's deliveries over the stats window (0 to 1).", keyLabels),
		func(k *sched.FairnessKeyStats) float64 { return k.WindowShare }},
	{gaugeFam("fila_fairness_key_window_delivered", "A top key's deliveries over the stats window.", keyLabels),
		func(k *sched.FairnessKeyStats) float64 { return float64(k.WindowDelivered) }},
	{gaugeFam("fila_fairness_key_dwell_p99_seconds", "A top key's 99th percentile time from enqueue to delivery over the stats window (within a factor of two).", keyLabels),
		func(k *sched.FairnessKeyStats) float64 { return k.DwellP99.Seconds() }},
	{gaugeFam("fila_fairness_key_weight", "A top key's weight (its most recently enqueued message's).", keyLabels),
		func(k *sched.FairnessKeyStats) float64 { return float64(k.Weight) }},
}

// throttleFamilies are the metrics of the throttle keys of each queue;
// all but the first only for a bucket with a configured rate.
var throttleFamilies = []struct {
	family
	value func(*sched.ThrottleKeyStats) float64
}{
	{gaugeFam("fila_throttle_waiting_messages", "The queue's messages waiting for this bucket's token.", throttleLabels),
		func(t *sched.ThrottleKeyStats) float64 { return float64(t.Waiting) }},
	{gaugeFam("fila_throttle_tokens", "Tokens in a limited throttle bucket now.", throttleLabels),
		func(t *sched.ThrottleKeyStats) float64 { return t.Tokens }},
	{gaugeFam("fila_throttle_rate", "A limited throttle bucket's rate, in tokens per second.", throttleLabels),
		func(t *sched.ThrottleKeyStats) float64 { return t.Rate }},
	{gaugeFam("fila_throttle_burst", "A limited throttle bucket's burst, in tokens.", throttleLabels),
		func(t *sched.ThrottleKeyStats) float64 { return t.Burst }},
	{counterFam("fila_throttle_held_back_total", "Times a ready message waited for this bucket's token: deliveries held back by the throttle, of every queue that shares the bucket on this node.", throttleLabels),
		func(t *sched.ThrottleKeyStats) float64 { return float64(t.HeldBack) }},
}

func gaugeFam(name, help string, labels []string) family {
	return family{name: name, help: help, labels: labels}
}

func counterFam(name, help string, labels []string) family {
	return family{name: name, help: help, counter: true, labels: labels}
}

func desc(name, help string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Describe sends the descriptions of the metrics Gather returns.
func (q *Queues) Describe(ch chan<- *prometheus.Desc) {
	for i := range queueFamilies {
		ch <- queueFamilies[i].desc()
	}
	for i := range keyFamilies {
		ch <- keyFamilies[i].desc()
	}
	for i := range throttleFamilies {
		ch <- throttleFamilies[i].desc()
	}
}

// Gather reads every queue's stats and returns their metric families,
// sorted by name, each family's series by label values. A failed read
// is logged and leaves the queue metrics out of this scrape.
func (q *Queues) Gather() ([]*dto.MetricFamily, error) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	all, err := q.Source(ctx, q.TopKeys)
	if err != nil {
		if q.Logger != nil {
			q.Logger.Warn("metrics: reading the queues' stats failed", "err", err)
		}
		return nil, nil
	}
	b := newFamilyBuilder()
	var out []*dto.MetricFamily
	// Each queue's label pair, shared by its series.
	queuePairs := make([][]*dto.LabelPair, len(all))
	pairs := make([]dto.LabelPair, len(all))
	for i := range all {
		pairs[i] = dto.LabelPair{Name: &queueLabel, Value: &all[i].Name}
		queuePairs[i] = []*dto.LabelPair{&pairs[i]}
	}
	for _, f := range queueFamilies {
		mf := b.family(&f.family, len(all))
		for i := range all {
			mf.Metric = append(mf.Metric, b.metric(f.counter, queuePairs[i], f.value(&all[i])))
		}
		out = appendFamily(out, mf)
	}

	// Per-key and per-bucket series: labels key and queue, in that
	// (name) order, shared by a key's series.
	type keyed struct {
		labels []*dto.LabelPair
		st     *sched.QueueStats
		i      int // index in st.FairnessKeys or st.ThrottleKeys
	}
	var keys, buckets []keyed
	for qi := range all {
		st := &all[qi]
		n := len(st.FairnessKeys)
		if q.TopKeys > 0 {
			n = min(n, q.TopKeys)
		}
		for i := range n {
			keys = append(keys, keyed{b.keyPairs(&st.FairnessKeys[i].Key, queuePairs[qi][0]), st, i})
		}
		for i := range st.ThrottleKeys {
			buckets = append(buckets, keyed{b.keyPairs(&st.ThrottleKeys[i].Key, queuePairs[qi][0]), st, i})
		}
	}
	byLabels := func(a, b keyed) int {
		if c := strings.Compare(*a.labels[0].Value, *b.labels[0].Value); c != 0 {
			return c
		}
		return strings.Compare(*a.labels[1].Value, *b.labels[1].Value)
	}
	slices.SortFunc(keys, byLabels)
	slices.SortFunc(buckets, byLabels)
	for _, f := range keyFamilies {
		mf := b.family(&f.family, len(keys))
		for _, k := range keys {
			mf.Metric = append(mf.Metric, b.metric(f.counter, k.labels, f.value(&k.st.FairnessKeys[k.i])))
		}
		out = appendFamily(out, mf)
	}
	for j, f := range throttleFamilies {
		mf := b.family(&f.family, len(buckets))
		for _, k := range buckets {
			t := &k.st.ThrottleKeys[k.i]
			if j > 0 && math.IsInf(t.Rate, 1) {
				continue // not configured: unlimited, nothing to show
			}
			mf.Metric = append(mf.Metric, b.metric(f.counter, k.labels, f.value(t)))
		}
		out = appendFamily(out, mf)
	}
	slices.SortFunc(out, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return out, nil
}

// Label names, addressed by the label pairs Gather makes.
var (
	queueLabel = "queue"
	keyLabel   = "key"
)

// appendFamily appends mf to out unless it has no series (as a
// registry leaves out a family with none).
func appendFamily(out []*dto.MetricFamily, mf *dto.MetricFamily) []*dto.MetricFamily {
	if len(mf.Metric) == 0 {
		return out
	}
	return append(out, mf)
}

// familyBuilder allocates the metrics of one Gather in slabs, and shares
// one zero value among the series that are zero: the scrape's memory is
// then a few large allocations, freed together once it is served.
type familyBuilder struct {
	zeroGauge   *dto.Gauge
	zeroCounter *dto.Counter
	metrics     []dto.Metric
	gauges      []dto.Gauge
	counters    []dto.Counter
	floats      []float64
	pairs       []dto.LabelPair
}

// slab is the number of values each slab of a familyBuilder holds.
const slab = 1024

func newFamilyBuilder() *familyBuilder {
	zero := new(float64)
	return &familyBuilder{zeroGauge: &dto.Gauge{Value: zero}, zeroCounter: &dto.Counter{Value: zero}}
}

// family returns an empty family f with room for n series.
func (b *familyBuilder) family(f *family, n int) *dto.MetricFamily {
	typ := dto.MetricType_GAUGE
	if f.counter {
		typ = dto.MetricType_COUNTER
	}
	return &dto.MetricFamily{Name: &f.name, Help: &f.help, Type: typ.Enum(), Metric: make([]*dto.Metric, 0, n)}
}

// metric returns a series of value v with labels (shared, not copied).
func (b *familyBuilder) metric(counter bool, labels []*dto.LabelPair, v float64) *dto.Metric {
	m := take(&b.metrics)
	m.Label = labels
	switch {
	case counter && v == 0:
		m.Counter = b.zeroCounter
	case counter:
		c := take(&b.counters)
		c.Value = b.float(v)
		m.Counter = c
	case v == 0:
		m.Gauge = b.zeroGauge
	default:
		g := take(&b.gauges)
		g.Value = b.float(v)
		m.Gauge = g
	}
	return m
}

func (b *familyBuilder) float(v float64) *float64 {
	f := take(&b.floats)
	*f = v
	return f
}

// keyPairs returns the labels key (its value at key) and queue, sorted
// by name.
func (b *familyBuilder) keyPairs(key *string, queue *dto.LabelPair) []*dto.LabelPair {
	p := take(&b.pairs)
	p.Name, p.Value = &keyLabel, key
	return []*dto.LabelPair{p, queue}
}

// take returns the next zero element of *s, making a slab when it is
// used up.
func take[T any](s *[]T) *T {
	if len(*s) == 0 {
		*s = make([]T, slab)
	}
	e := &(*s)[0]
	*s = (*s)[1:]
	return e
}

// Store collects the storage's counters and gauges at each scrape
// (store.Disk.Stats); the per-commit histograms come from
// Metrics.Commit.
type Store struct {
	Stats func() store.Stats
}

var (
	descSyncs       = desc("fila_store_fsyncs_total", "fsyncs of the storage log's files and directory.", nil)
	descCommits     = desc("fila_store_commits_total", "Log writes, each holding one or more groups (group commit).", nil)
	descGroups      = desc("fila_store_groups_total", "Groups (atomic batches of records) made durable.", nil)
	descRecords     = desc("fila_store_records_total", "Records (puts and deletes) made durable.", nil)
	descWritten     = desc("fila_store_written_bytes_total", "Bytes appended to the log by commits.", nil)
	descSegments    = desc("fila_store_segments", "Log segment files.", nil)
	descLogBytes    = desc("fila_store_log_bytes", "Bytes in the log segment files.", nil)
	descLiveBytes   = desc("fila_store_live_bytes", "Bytes of the records that hold current values.", nil)
	descStoreKeys   = desc("fila_store_keys", "Keys holding a value.", nil)
	descCompactions = desc("fila_store_compactions_total", "Compactions that deleted segments.", nil)
	descCopied      = desc("fila_store_compaction_copied_bytes_total", "Bytes of live records copied forward by compaction.", nil)
	descReclaimed   = desc("fila_store_compaction_reclaimed_bytes_total", "Bytes of segment files deleted by compaction.", nil)
	descCacheHits   = desc("fila_store_cache_hits_total", "Reads served from the write cache.", nil)
	descCacheMisses = desc("fila_store_cache_misses_total", "Reads that went to the segment files.", nil)
	descPending     = desc("fila_store_pending_groups", "Groups submitted and not yet durable.", nil)
	descFull        = desc("fila_store_disk_full", "1 while the data disk is full: new messages are refused.", nil)
)

// Describe sends the storage metrics' descriptions.
func (s *Store) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSyncs, descCommits, descGroups, descRecords, descWritten, descSegments, descLogBytes,
		descLiveBytes, descStoreKeys, descCompactions, descCopied, descReclaimed, descCacheHits, descCacheMisses, descPending, descFull} {
		ch <- d
	}
}

// Collect sends the storage metrics.
func (s *Store) Collect(ch chan<- prometheus.Metric) {
	st := s.Stats()
	c := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	g := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	c(descSyncs, st.Syncs)
	c(descCommits, st.Commits)
	c(descGroups, st.Groups)
	c(descRecords, st.Mutations)
	c(descWritten, st.BytesWritten)
	g(descSegments, float64(st.Segments))
	g(descLogBytes, float64(st.LogBytes))
	g(descLiveBytes, float64(st.LiveBytes))
	g(descStoreKeys, float64(st.Keys))
	c(descCompactions, st.Compactions)
	c(descCopied, st.CopiedBytes)
	c(descReclaimed, st.ReclaimedBytes)
	c(descCacheHits, st.CacheHits)
	c(descCacheMisses, st.CacheMisses)
	g(descPending, float64(st.PendingGroups))
	g(descFull, b2f(st.Full))
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Hooks collects the Lua hooks' metrics at each scrape.
type Hooks struct {
	// Each calls fn with the stats of every queue that has hooks
	// (node.Hooks.Each).
	Each func(fn func(queue string, st hook.Stats))
}

var (
	hookLabels      = []string{"queue", "hook"}
	descHookRuns    = desc("fila_lua_hook_runs_total", "Hook calls run (not those an open circuit breaker bypassed).", hookLabels)
	descHookErrors  = desc("fila_lua_hook_errors_total", "Hook calls that failed: an error, a timeout, the memory limit, a bad result.", hookLabels)
	descHookSeconds = desc("fila_lua_hook_seconds_total", "Time spent in hook calls.", hookLabels)
	descBreakerOpen = desc("fila_lua_circuit_breaker_open", "1 while one of the queue's hook circuit breakers is open: its hooks are bypassed.", queueLabels)
	descBreakerTrip = desc("fila_lua_circuit_breaker_trips_total", "Times one of the queue's hook circuit breakers opened.", queueLabels)
)

// Describe sends the hook metrics' descriptions.
func (h *Hooks) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descHookRuns, descHookErrors, descHookSeconds, descBreakerOpen, descBreakerTrip} {
		ch <- d
	}
}

// Collect sends the hook metrics, by queue.
func (h *Hooks) Collect(ch chan<- prometheus.Metric) {
	type entry struct {
		queue string
		st    hook.Stats
	}
	var all []entry
	h.Each(func(queue string, st hook.Stats) { all = append(all, entry{queue, st}) })
	sort.Slice(all, func(i, j int) bool { return all[i].queue < all[j].queue })
	for _, e := range all {
		c := func(d *prometheus.Desc, v float64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
		}
		st := &e.st
		c(descHookRuns, float64(st.OnEnqueueCalls), e.queue, "on_enqueue")
		c(descHookErrors, float64(st.OnEnqueueFailures), e.queue, "on_enqueue")
		c(descHookSeconds, st.OnEnqueueTime.Seconds(), e.queue, "on_enqueue")
		c(descHookRuns, float64(st.OnFailureCalls), e.queue, "on_failure")
		c(descHookErrors, float64(st.OnFailureFailures), e.queue, "on_failure")
		c(descHookSeconds, st.OnFailureTime.Seconds(), e.queue, "on_failure")
		ch <- prometheus.MustNewConstMetric(descBreakerOpen, prometheus.GaugeValue, b2f(st.CircuitOpen), e.queue)
		c(descBreakerTrip, float64(st.CircuitTrips), e.queue)
	}
}
