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
)

// observer is the admin HTTP listener and the metrics behind it; its
// methods do nothing when [http] listen_addr is empty.
type observer struct {
	http  *httpapi.Server
	m     *metrics.Metrics
	ready *httpapi.Readiness
	keys  atomic.Pointer[auth.Store]
	up    atomic.Bool // recovery done, the client listener open
	down  atomic.Bool // shutting down
	log   *slog.Logger
	top   int
	done  chan error
}

// startHTTP starts the admin HTTP listener when cfg sets one.
func startHTTP(cfg config.Config, log *slog.Logger) (*observer, error) {
	o := &observer{log: log, top: cfg.Telemetry.MetricsTopKeys}
	if cfg.HTTP.ListenAddr == "" {
		return o, nil
	}
	o.m = metrics.New(version)
	o.ready = &httpapi.Readiness{}
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
		Gatherer:    o.m.Registry(),
		Ready:       o.ready,
		Logger:      log.With("component", "http"),
	}
	if cfg.TLS.CertFile != "" {
		// The clients' certificate and key; scrapers and probes are not
		// asked for a client certificate.
		tc, err := auth.ServerTLSConfig(cfg.TLS.CertFile, cfg.TLS.KeyFile, "")
		if err != nil {
			return nil, err
		}
		hc.TLS = tc
	}
	srv, err := httpapi.Listen(hc)
	if err != nil {
		return nil, err
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
	log.Info("admin HTTP listener: /healthz, /readyz, /metrics", attrs...)
	return o, nil
}

func (o *observer) metrics() *metrics.Metrics { return o.m }

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
	o.m.Register(
		&metrics.Queues{Source: n.AllQueueStats, TopKeys: o.top, Logger: o.log.With("component", "metrics")},
		&metrics.Hooks{Each: hooks.Each},
	)
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

// stop shuts the listener down.
func (o *observer) stop() {
	if o.http == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	o.http.Shutdown(ctx)
	if err := <-o.done; err != nil {
		o.log.Warn("admin HTTP listener", "err", err)
	}
}
