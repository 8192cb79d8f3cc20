// Package metrics holds the broker's Prometheus metrics: the registry
// that the HTTP listener's /metrics serves, the few metrics the server
// updates as requests pass (connections, bytes, requests and their
// latency), and collectors that read the rest from the scheduler, the
// storage and the Lua hooks at scrape time, so that a queue's counters
// cost the hot path nothing beyond an integer increment on the
// scheduler's goroutine.
//
// Names follow the Prometheus conventions: the fila_ prefix, base units
// (seconds, bytes), _total for counters. docs/operations.md lists every
// metric.
package metrics

import (
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	dto "github.com/prometheus/client_model/go"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// Metrics is the broker's registry and the metrics the server updates.
// Its methods are safe for concurrent use, and are no-ops on a nil
// *Metrics, so that a server without metrics pays a nil check.
type Metrics struct {
	reg *prometheus.Registry
	// gatherers add families to the registry's (AddGatherer).
	gmu       sync.Mutex
	gatherers []prometheus.Gatherer

	connsOpen       prometheus.Gauge
	connsAccepted   prometheus.Counter
	refused         *prometheus.CounterVec // reason
	handshakeFailed *prometheus.CounterVec // reason
	bytesIn         prometheus.Counter
	bytesOut        prometheus.Counter
	requests        *prometheus.CounterVec   // op, code
	latency         *prometheus.HistogramVec // op

	ops sync.Map // wire.Opcode -> *opMetrics

	commitWait    prometheus.Histogram
	fsync         prometheus.Histogram
	commitRecords prometheus.Histogram
}

// latencyBuckets are the bounds, in seconds, of the latency histograms:
// 50 µs to 10 s.
var latencyBuckets = []float64{50e-6, 100e-6, 250e-6, 500e-6, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}

// opMetrics caches one operation's series: its latency histogram and
// its request counter by code, filled in as codes appear.
type opMetrics struct {
	name    string
	latency prometheus.Observer
	byCode  sync.Map // wire.Code -> prometheus.Counter
}

// New returns the metrics of a broker of version, registered with the Go
// runtime and process collectors.
func New(version string) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	f := factory{m.reg}
	m.connsOpen = f.gauge("fila_connections_open", "Client connections open now, handshaken or not.")
	m.connsAccepted = f.counter("fila_connections_accepted_total", "Client connections accepted, before any handshake.")
	m.refused = f.counterVec("fila_connections_refused_total",
		"Client connections refused at accept, by reason: a limit of the server (connections, handshaking, per address) or an address whose handshakes failed too often.", "reason")
	m.handshakeFailed = f.counterVec("fila_handshakes_failed_total",
		"Connections closed before their handshake completed, by reason: the error code sent (UNAUTHORIZED, UNSUPPORTED_VERSION, ...), tls, or timeout.", "reason")
	m.bytesIn = f.counter("fila_connection_received_bytes_total", "Bytes read from client connections (TLS records included).")
	m.bytesOut = f.counter("fila_connection_sent_bytes_total", "Bytes written to client connections (TLS records included).")
	m.requests = f.counterVec("fila_requests_total",
		"Requests answered, by operation (the request frame's name) and the answer's error code (OK for success; a batch whose items failed alone counts OK).", "op", "code")
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "fila_request_duration_seconds",
		Help:    "Time from reading a request to queueing its answer, by operation; for Enqueue and the settles, this includes the fsync that makes them durable.",
		Buckets: latencyBuckets,
	}, []string{"op"})
	m.reg.MustRegister(m.latency)

	m.commitWait = f.histogram("fila_store_commit_wait_seconds",
		"Group-commit latency: from the submission of a commit's oldest group to the commit being durable.",
		latencyBuckets)
	m.fsync = f.histogram("fila_store_fsync_duration_seconds", "Duration of each fsync of the storage log.", latencyBuckets)
	m.commitRecords = f.histogram("fila_store_commit_records",
		"Records (puts and deletes) per commit, each commit one log write and at most one fsync: how well group commit amortises the fsync.",
		prometheus.ExponentialBuckets(1, 4, 8))

	build := f.gaugeVec("fila_build_info", "Always 1; the labels name the broker's version and the Go version.", "version", "goversion")
	build.WithLabelValues(version, goVersion()).Set(1)
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registry returns the registry that /metrics serves; collectors of the
// broker's other parts register with it (Register).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Register adds collectors to the registry. It panics if one's metrics
// collide with those already registered: a bug.
func (m *Metrics) Register(cs ...prometheus.Collector) { m.reg.MustRegister(cs...) }

// AddGatherer adds g's families to what Gatherer returns. They are not
// checked as a registry checks its collectors' (Queues, which builds
// its families itself, is one): g must return valid families whose
// names are its own.
func (m *Metrics) AddGatherer(g prometheus.Gatherer) {
	m.gmu.Lock()
	m.gatherers = append(m.gatherers, g)
	m.gmu.Unlock()
}

// Gatherer returns what /metrics serves and the OTLP export reads: the
// registry's families and those of the added gatherers, by name.
func (m *Metrics) Gatherer() prometheus.Gatherer { return prometheus.GathererFunc(m.gather) }

func (m *Metrics) gather() ([]*dto.MetricFamily, error) {
	fams, err := m.reg.Gather()
	var errs prometheus.MultiError
	errs.Append(err)
	m.gmu.Lock()
	gs := m.gatherers
	m.gmu.Unlock()
	for _, g := range gs {
		f, err := g.Gather()
		errs.Append(err)
		fams = append(fams, f...)
	}
	slices.SortFunc(fams, func(a, b *dto.MetricFamily) int { return strings.Compare(a.GetName(), b.GetName()) })
	return fams, errs.MaybeUnwrap()
}

// ConnAccepted counts a connection accepted and open.
func (m *Metrics) ConnAccepted() {
	if m == nil {
		return
	}
	m.connsAccepted.Inc()
	m.connsOpen.Inc()
}

// ConnClosed counts a connection counted by ConnAccepted as closed.
func (m *Metrics) ConnClosed() {
	if m == nil {
		return
	}
	m.connsOpen.Dec()
}

// Refused counts a connection refused at accept for reason, a short
// snake_case word.
func (m *Metrics) Refused(reason string) {
	if m == nil {
		return
	}
	m.refused.WithLabelValues(reason).Inc()
}

// HandshakeFailed counts a connection closed before its handshake
// completed, for reason: an error code's name, "tls" or "timeout".
func (m *Metrics) HandshakeFailed(reason string) {
	if m == nil {
		return
	}
	m.handshakeFailed.WithLabelValues(reason).Inc()
}

// Received counts n bytes read from a client connection.
func (m *Metrics) Received(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.bytesIn.Add(float64(n))
}

// Sent counts n bytes written to a client connection.
func (m *Metrics) Sent(n int) {
	if m == nil || n <= 0 {
		return
	}
	m.bytesOut.Add(float64(n))
}

// Request counts a request of operation op answered with code after d.
// It does not allocate once the pair has been seen.
func (m *Metrics) Request(op wire.Opcode, code wire.Code, d time.Duration) {
	if m == nil {
		return
	}
	om := m.op(op)
	om.latency.Observe(d.Seconds())
	c, ok := om.byCode.Load(code)
	if !ok {
		c, _ = om.byCode.LoadOrStore(code, m.requests.WithLabelValues(om.name, code.String()))
	}
	c.(prometheus.Counter).Inc()
}

func (m *Metrics) op(op wire.Opcode) *opMetrics {
	if v, ok := m.ops.Load(op); ok {
		return v.(*opMetrics)
	}
	name := op.String()
	v, _ := m.ops.LoadOrStore(op, &opMetrics{name: name, latency: m.latency.WithLabelValues(name)})
	return v.(*opMetrics)
}

// Commit observes a durable storage commit: its group-commit wait, its
// fsync (when it had one) and its records.
func (m *Metrics) Commit(records int, wait, sync time.Duration) {
	if m == nil {
		return
	}
	m.commitWait.Observe(wait.Seconds())
	if sync > 0 {
		m.fsync.Observe(sync.Seconds())
	}
	m.commitRecords.Observe(float64(records))
}

func goVersion() string { return runtime.Version() }

// factory registers the metrics it makes with reg.
type factory struct{ reg *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.reg.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.reg.MustRegister(g)
	return g
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(c)
	return c
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.reg.MustRegister(g)
	return g
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.reg.MustRegister(h)
	return h
}
