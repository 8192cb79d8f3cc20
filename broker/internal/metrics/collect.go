package metrics

import (
	"context"
	"log/slog"
	"math"
	"sort"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fila-mq/fila/broker/internal/hook"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// scrapeTimeout bounds a scrape's read of the scheduler.
const scrapeTimeout = 5 * time.Second

// QueueSource reads the stats of the queues a node reports, each with
// its top most pending fairness keys (node.Node.AllQueueStats).
type QueueSource func(ctx context.Context, top int) ([]sched.QueueStats, error)

// Queues collects the queue, fairness and throttle metrics from the
// scheduler at each scrape: one read per shard, which costs what a
// `fila queue inspect` of every queue costs, and nothing between
// scrapes. TopKeys bounds the per-key series of each queue to its most
// backlogged keys, so that a queue of a million keys exports TopKeys
// series per metric.
type Queues struct {
	Source  QueueSource
	TopKeys int
	Logger  *slog.Logger
}

var (
	queueLabels    = []string{"queue"}
	keyLabels      = []string{"queue", "key"}
	throttleLabels = []string{"queue", "key"}

	descReady    = desc("fila_queue_ready_messages", "Messages ready for delivery, including those waiting for a throttle token.", queueLabels)
	descDelayed  = desc("fila_queue_delayed_messages", "Messages not yet due: retries backing off, delayed enqueues, failures waiting for on_failure.", queueLabels)
	descLeased   = desc("fila_queue_leased_messages", "Messages delivered and not yet settled.", queueLabels)
	descDLQ      = desc("fila_queue_dlq_messages", "Messages in the queue's dead-letter queue.", queueLabels)
	descBytes    = desc("fila_queue_payload_bytes", "Payload bytes of the queue's messages and its DLQ's.", queueLabels)
	descSubs     = desc("fila_queue_subscriptions", "Open subscriptions.", queueLabels)
	descKeys     = desc("fila_queue_backlogged_keys", "Fairness keys with pending messages.", queueLabels)
	descJain     = desc("fila_queue_jain_index", "Jain's fairness index over the backlogged keys' delivered share against their entitled share in the stats window (Jain, Chiu & Hawe, 1984): 1 is exactly fair, 1/n is one key served alone; 0 when nothing was delivered.", queueLabels)
	descWindow   = desc("fila_queue_window_delivered", "Deliveries over the stats window (the last 30 to 60 s).", queueLabels)
	descEnqueued = desc("fila_queue_enqueued_total", "Messages accepted (duplicates not counted).", queueLabels)
	descDeliv    = desc("fila_queue_delivered_total", "Deliveries (leases granted), redeliveries included.", queueLabels)
	descAcked    = desc("fila_queue_acked_total", "Deliveries acked.", queueLabels)
	descNacked   = desc("fila_queue_nacked_total", "Deliveries settled as failed: Nack and RetryAfter.", queueLabels)
	descExpired  = desc("fila_queue_leases_expired_total", "Leases that ended without a settle: the visibility timeout passed.", queueLabels)
	descDead     = desc("fila_queue_dead_lettered_total", "Messages moved to the dead-letter queue.", queueLabels)
	descRedriven = desc("fila_queue_redriven_total", "Messages moved back from the dead-letter queue (counted on the queue and on its DLQ).", queueLabels)

	descKeyPending   = desc("fila_fairness_key_pending_messages", "A top key's messages ready or waiting for tokens.", keyLabels)
	descKeyEntitled  = desc("fila_fairness_key_entitled_share", "A top key's entitled share: its weight over the weights of the queue's backlogged keys (0 to 1).", keyLabels)
	descKeyShare     = desc("fila_fairness_key_delivered_share", "A top key's share of the queue's deliveries over the stats window (0 to 1).", keyLabels)
	descKeyDelivered = desc("fila_fairness_key_window_delivered", "A top key's deliveries over the stats window.", keyLabels)
	descKeyDwell     = desc("fila_fairness_key_dwell_p99_seconds", "A top key's 99th percentile time from enqueue to delivery over the stats window (within a factor of two).", keyLabels)
	descKeyWeight    = desc("fila_fairness_key_weight", "A top key's weight (its most recently enqueued message's).", keyLabels)

	descTokens   = desc("fila_throttle_tokens", "Tokens in a limited throttle bucket now.", throttleLabels)
	descRate     = desc("fila_throttle_rate", "A limited throttle bucket's rate, in tokens per second.", throttleLabels)
	descBurst    = desc("fila_throttle_burst", "A limited throttle bucket's burst, in tokens.", throttleLabels)
	descWaiting  = desc("fila_throttle_waiting_messages", "The queue's messages waiting for this bucket's token.", throttleLabels)
	descHeldBack = desc("fila_throttle_held_back_total", "Times a ready message waited for this bucket's token: deliveries held back by the throttle, of every queue that shares the bucket on this node.", throttleLabels)
)

func desc(name, help string, labels []string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// Describe sends the queue metrics' descriptions.
func (q *Queues) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descReady, descDelayed, descLeased, descDLQ, descBytes, descSubs, descKeys, descJain, descWindow,
		descEnqueued, descDeliv, descAcked, descNacked, descExpired, descDead, descRedriven,
		descKeyPending, descKeyEntitled, descKeyShare, descKeyDelivered, descKeyDwell, descKeyWeight,
		descTokens, descRate, descBurst, descWaiting, descHeldBack} {
		ch <- d
	}
}

// Collect reads every queue's stats and sends their metrics. A failed
// read is logged and leaves the queue metrics out of this scrape.
func (q *Queues) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	all, err := q.Source(ctx, q.TopKeys)
	if err != nil {
		if q.Logger != nil {
			q.Logger.Warn("metrics: reading the queues' stats failed", "err", err)
		}
		return
	}
	for i := range all {
		collectQueue(ch, &all[i], q.TopKeys)
	}
}

func collectQueue(ch chan<- prometheus.Metric, st *sched.QueueStats, top int) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	c := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	name := st.Name
	g(descReady, float64(st.Ready), name)
	g(descDelayed, float64(st.Delayed), name)
	g(descLeased, float64(st.Leased), name)
	g(descDLQ, float64(st.DeadLettered), name)
	g(descBytes, float64(st.Bytes), name)
	g(descSubs, float64(st.Subscriptions), name)
	g(descKeys, float64(st.BackloggedKeys), name)
	g(descJain, st.JainIndex, name)
	g(descWindow, float64(st.WindowDelivered), name)
	n := &st.Counts
	c(descEnqueued, n.Enqueued, name)
	c(descDeliv, n.Delivered, name)
	c(descAcked, n.Acked, name)
	c(descNacked, n.Nacked, name)
	c(descExpired, n.Expired, name)
	c(descDead, n.DeadLettered, name)
	c(descRedriven, n.Redriven, name)

	keys := st.FairnessKeys
	if top > 0 && len(keys) > top {
		keys = keys[:top]
	}
	for i := range keys {
		k := &keys[i]
		g(descKeyPending, float64(k.Pending), name, k.Key)
		g(descKeyEntitled, k.EntitledShare, name, k.Key)
		g(descKeyShare, k.WindowShare, name, k.Key)
		g(descKeyDelivered, float64(k.WindowDelivered), name, k.Key)
		g(descKeyDwell, k.DwellP99.Seconds(), name, k.Key)
		g(descKeyWeight, float64(k.Weight), name, k.Key)
	}
	for i := range st.ThrottleKeys {
		t := &st.ThrottleKeys[i]
		g(descWaiting, float64(t.Waiting), name, t.Key)
		if math.IsInf(t.Rate, 1) {
			continue // not configured: unlimited, nothing to show
		}
		g(descTokens, t.Tokens, name, t.Key)
		g(descRate, t.Rate, name, t.Key)
		g(descBurst, t.Burst, name, t.Key)
		c(descHeldBack, t.HeldBack, name, t.Key)
	}
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
