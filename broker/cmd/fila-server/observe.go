package main

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/cluster"
	"github.com/fila-mq/fila/broker/internal/config"
	"github.com/fila-mq/fila/broker/internal/httpapi"
	"github.com/fila-mq/fila/broker/internal/metrics"
	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/server"
	"github.com/fila-mq/fila/broker/internal/store"
	"github.com/fila-mq/fila/broker/internal/tracing"
)

// observer is the admin HTTP listener, the OTLP export, and the metrics
// and spans behind them; its methods do nothing when neither [http]
// listen_addr nor [telemetry] otlp_endpoint is set.
type observer struct {
	http   *httpapi.Server
	m      *metrics.Metrics
	tracer *tracing.Tracer
	// otlpStop ends the OTLP metric export, nil without one.
	otlpStop func(context.Context) error
	ready    *httpapi.Readiness
	keys     atomic.Pointer[auth.Store]
	up       atomic.Bool // recovery done, the client listener open
	down     atomic.Bool // shutting down
	log      *slog.Logger
	top      int
	done     chan error
}

// startObserver starts what cfg asks for of the admin HTTP listener and
// the OTLP export.
func startObserver(cfg config.Config, log *slog.Logger) (*observer, error) {
	o := &observer{log: log, top: cfg.Telemetry.MetricsTopKeys}
	if cfg.HTTP.ListenAddr == "" && cfg.Telemetry.OTLPEndpoint == "" {
		return o, nil
	}
	o.m = metrics.New(version)
	// Readiness is only served over HTTP; it is kept either way.
	o.ready = &httpapi.Readiness{}
	if cfg.Telemetry.OTLPEndpoint != "" {
		if err := o.startOTLP(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.HTTP.ListenAddr == "" {
		return o, nil
	}
	return o, o.startHTTP(cfg)
}

// startOTLP starts exporting the metrics and the spans of traced
// messages to cfg's OTLP endpoint.
func (o *observer) startOTLP(cfg config.Config) error {
	base, err := cfg.Telemetry.OTLPBase()
	if err != nil {
		return err
	}
	stop, err := o.m.StartOTLP(metrics.OTLP{BaseURL: base, Interval: cfg.Telemetry.OTLPInterval, NodeID: cfg.Server.NodeID, Version: version})
	if err != nil {
		return err
	}
	tr, err := tracing.Start(tracing.Config{BaseURL: base, Interval: cfg.Telemetry.OTLPInterval, SampleRatio: cfg.Telemetry.TraceSampleRatio, NodeID: cfg.Server.NodeID, Version: version})
	if err != nil {
		stop(context.Background())
		return err
	}
	o.otlpStop, o.tracer = stop, tr
	o.log.Info("OTLP export: metrics and traces", "endpoint", base, "interval", cfg.Telemetry.OTLPInterval, "trace_sample_ratio", cfg.Telemetry.TraceSampleRatio)
	return nil
}

// startHTTP starts the admin HTTP listener.
func (o *observer) startHTTP(cfg config.Config) error {
	log := o.log
	o.ready.Add(func() string {
		switch {
		case o.down.Load():
			return "shutting down"
		case !o.up.Load():
			return "recovering: the store and the queues are loading"
		}
		return ""
	})
	hc := httpapi.Config{
		Addr:        cfg.HTTP.ListenAddr,
		Keys:        o.keys.Load,
		RequireAuth: cfg.Auth.Enabled,
		Gatherer:    o.m.Gatherer(),
		Pprof:       cfg.HTTP.Pprof,
		Ready:       o.ready,
		Logger:      log.With("component", "http"),
	}
	if cfg.TLS.CertFile != "" {
		// The clients' certificate and key; scrapers and probes are not
		// asked for a client certificate.
		tc, err := auth.ServerTLSConfig(cfg.TLS.CertFile, cfg.TLS.KeyFile, "")
		if err != nil {
			return err
		}
		hc.TLS = tc
	}
	srv, err := httpapi.Listen(hc)
	if err != nil {
		return err
	}
	o.http = srv
	o.done = make(chan error, 1)
	go func() { o.done <- srv.Serve() }()
	attrs := []any{"addr", srv.Addr().String(), "tls", hc.TLS != nil}
	switch {
	case !cfg.Auth.Enabled:
		attrs = append(attrs, "metrics", "open (auth is off)")
	case srv.Open():
		attrs = append(attrs, "metrics", "open to local processes: the listener is on loopback")
	default:
		attrs = append(attrs, "metrics", `needs an API key with admin on "*"`)
	}
	paths := "/healthz, /readyz, /metrics"
	if cfg.HTTP.Pprof {
		paths += ", /debug/pprof/ (behind the /metrics check)"
	}
	log.Info("admin HTTP listener: "+paths, attrs...)
	return nil
}

func (o *observer) metrics() *metrics.Metrics { return o.m }

func (o *observer) traces() *tracing.Tracer { return o.tracer }

// commit returns the store's OnCommit hook, or nil.
func (o *observer) commit() func(store.Commit) {
	if o.m == nil {
		return nil
	}
	return func(c store.Commit) { o.m.Commit(c.Records, c.Wait, c.Sync) }
}

// storeOpen adds the store's readiness check and metrics.
func (o *observer) storeOpen(st *store.Disk) {
	if o.m == nil {
		return
	}
	o.ready.Add(func() string {
		h := st.Health()
		switch {
		case h.Err != nil:
			return fmt.Sprintf("storage failed: %v", h.Err)
		case h.Full:
			return "the data disk is full: new messages are refused until space is freed"
		}
		return ""
	})
	o.m.Register(&metrics.Store{Stats: st.Stats})
}

// serving registers what the scrape reads from the broker, and marks
// recovery done.
func (o *observer) serving(scfg server.Config, n *node.Node, hooks *node.Hooks, cn *cluster.Node) {
	if o.m == nil {
		return
	}
	if scfg.Auth != nil {
		o.keys.Store(scfg.Auth)
	}
	o.m.AddGatherer(&metrics.Queues{Source: n.AllQueueStats, TopKeys: o.top, Logger: o.log.With("component", "metrics")})
	o.m.Register(&metrics.Hooks{Each: hooks.Each})
	if cn != nil {
		o.ready.Add(func() string {
			if cn.MetaLeader() == 0 {
				return "no cluster meta leader is known: this node is cut off from a majority, or an election is under way"
			}
			return ""
		})
	}
	o.up.Store(true)
}

// shuttingDown turns /readyz not ready for the graceful shutdown.
func (o *observer) shuttingDown() { o.down.Store(true) }

// stop shuts the listener down and flushes the OTLP export.
func (o *observer) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if o.otlpStop != nil {
		if err := o.otlpStop(ctx); err != nil {
			o.log.Warn("OTLP metrics export", "err", err)
		}
		if err := o.tracer.Shutdown(ctx); err != nil {
			o.log.Warn("OTLP trace export", "err", err)
		}
	}
	if o.http == nil {
		return
	}
	o.http.Shutdown(ctx)
	if err := <-o.done; err != nil {
		o.log.Warn("admin HTTP listener", "err", err)
	}
}
