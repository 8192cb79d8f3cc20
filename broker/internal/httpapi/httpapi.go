// Package httpapi is the broker's admin HTTP listener ([http]
// listen_addr): liveness at /healthz, readiness at /readyz and the
// Prometheus metrics at /metrics. It is off unless configured.
//
// /healthz and /readyz answer anyone: orchestrators probe them without
// credentials, and they reveal only whether the broker can serve. With
// API-key authentication on, /metrics needs a key with admin on "*",
// sent as "Authorization: Bearer <secret>", unless the listener is bound
// to a loopback address, where only local processes reach it; the
// startup log says which.
package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/fila-mq/fila/broker/internal/auth"
)

// Config configures Listen.
type Config struct {
	// Addr is the host:port to listen on.
	Addr string
	// TLS, if set, serves HTTPS with it.
	TLS *tls.Config
	// Keys returns the store that authenticates /metrics scrapes when
	// RequireAuth is set and the listener is not on loopback; nil until
	// the store is open (the listener starts before recovery).
	Keys        func() *auth.Store
	RequireAuth bool
	// Gatherer is what /metrics serves.
	Gatherer prometheus.Gatherer
	// Ready answers /readyz.
	Ready  *Readiness
	Logger *slog.Logger
}

// Server is a running admin listener.
type Server struct {
	cfg  Config
	ln   net.Listener
	srv  *http.Server
	open bool // /metrics needs no key
}

// Listen binds cfg.Addr and returns the server; Serve serves it. The
// error is the bind's.
func Listen(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Keys == nil {
		cfg.Keys = func() *auth.Store { return nil }
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("admin HTTP listener: %w", err)
	}
	s := &Server{cfg: cfg, ln: ln, open: !cfg.RequireAuth || loopback(ln.Addr())}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	metrics := promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{
		ErrorLog:      slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelWarn),
		ErrorHandling: promhttp.ContinueOnError,
	})
	mux.Handle("GET /metrics", s.authorized(metrics))
	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      60 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    16 << 10,
		ErrorLog:          slog.NewLogLogger(cfg.Logger.Handler(), slog.LevelDebug),
	}
	if cfg.TLS != nil {
		s.srv.TLSConfig = cfg.TLS
	}
	return s, nil
}

// Addr returns the address the listener is bound to.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Open reports whether /metrics is served without a key.
func (s *Server) Open() bool { return s.open }

// Serve serves until Shutdown; it returns nil then.
func (s *Server) Serve() error {
	var err error
	if s.cfg.TLS != nil {
		err = s.srv.ServeTLS(s.ln, "", "")
	} else {
		err = s.srv.Serve(s.ln)
	}
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops the listener and waits for requests in flight until
// ctx ends.
func (s *Server) Shutdown(ctx context.Context) error { return s.srv.Shutdown(ctx) }

// authorized wraps h with the /metrics key check.
func (s *Server) authorized(h http.Handler) http.Handler {
	if s.open {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		secret, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fila"`)
			http.Error(w, "an API key with admin on \"*\" is needed: Authorization: Bearer <secret>", http.StatusUnauthorized)
			return
		}
		keys := s.cfg.Keys()
		if keys == nil {
			http.Error(w, "recovering: API keys are not loaded yet", http.StatusServiceUnavailable)
			return
		}
		p, err := keys.Authenticate(strings.TrimSpace(secret))
		if err != nil {
			w.Header().Set("WWW-Authenticate", `Bearer realm="fila", error="invalid_token"`)
			http.Error(w, "unknown or revoked API key", http.StatusUnauthorized)
			return
		}
		if !p.Allowed(auth.Admin, "*") {
			http.Error(w, "this API key lacks admin on \"*\"", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	if why := s.cfg.Ready.NotReady(); len(why) > 0 {
		w.WriteHeader(http.StatusServiceUnavailable)
		for _, r := range why {
			fmt.Fprintln(w, "not ready:", r)
		}
		return
	}
	fmt.Fprintln(w, "ready")
}

// loopback reports whether a is a loopback address.
func loopback(a net.Addr) bool {
	ap, err := netip.ParseAddrPort(a.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// Readiness is what /readyz reports: a set of checks, each returning
// why the broker cannot serve, or "" when it can. Safe for concurrent
// use.
type Readiness struct {
	mu     sync.Mutex
	checks []func() string
}

// Add adds a check.
func (r *Readiness) Add(check func() string) {
	r.mu.Lock()
	r.checks = append(r.checks, check)
	r.mu.Unlock()
}

// NotReady returns why the broker is not ready, one reason per failing
// check; nil when it is ready.
func (r *Readiness) NotReady() []string {
	r.mu.Lock()
	checks := r.checks
	r.mu.Unlock()
	var why []string
	for _, c := range checks {
		if s := c(); s != "" {
			why = append(why, s)
		}
	}
	return why
}
