// Package httpapi is the broker's admin HTTP listener ([http]
// listen_addr): liveness at /healthz, readiness at /readyz and the
// Prometheus metrics at /metrics, and with Config.Pprof Go's runtime
// profiles under /debug/pprof/. It is off unless configured.
//
// /healthz and /readyz answer anyone: orchestrators probe them without
// credentials, and they reveal only whether the broker can serve. With
// API-key authentication on, /metrics needs a key with admin on "*",
// sent as "Authorization: Bearer <secret>", unless the listener is bound
// to a loopback address, where only local processes reach it; the
// startup log says which. The profiles are behind the same check.
package httpapi

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strconv"
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
	// Pprof serves net/http/pprof's handlers under /debug/pprof/.
	Pprof bool
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
	if cfg.Pprof {
		mux.Handle("GET /debug/pprof/", s.authorized(profileDeadline(http.HandlerFunc(pprof.Index))))
		mux.Handle("GET /debug/pprof/cmdline", s.authorized(http.HandlerFunc(pprof.Cmdline)))
		mux.Handle("GET /debug/pprof/profile", s.authorized(profileDeadline(http.HandlerFunc(pprof.Profile))))
		mux.Handle("GET /debug/pprof/symbol", s.authorized(http.HandlerFunc(pprof.Symbol)))
		mux.Handle("GET /debug/pprof/trace", s.authorized(profileDeadline(http.HandlerFunc(pprof.Trace))))
	}
	s.srv = &http.Server{
		// The write timeout is set per request (writeDeadline), so that
		// a profile may run longer than a scrape; a server-wide
		// WriteTimeout would make pprof refuse profiles of 60s or more.
		Handler:           writeDeadline(mux),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
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

// writeTimeout is how long a response may take to write, from the end of
// the request's headers, unless the handler moves the deadline
// (profileDeadline).
const writeTimeout = 60 * time.Second

// writeDeadline sets each response's write deadline to writeTimeout from
// now, as http.Server.WriteTimeout would.
func writeDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The error is ErrNotSupported for a writer without deadlines
		// (tests' recorders); there is nothing to bound then.
		_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(writeTimeout))
		h.ServeHTTP(w, r)
	})
}

// maxProfile bounds the seconds parameter of a CPU or trace profile (and
// of a delta profile such as /debug/pprof/heap?seconds=N).
const maxProfile = 5 * time.Minute

// profileDeadline lets a profile that runs for the request's seconds
// parameter outlive the server's WriteTimeout, which is sized for
// /metrics: the response's write deadline becomes seconds plus a margin.
// A seconds parameter above maxProfile, or not a positive integer, is
// refused with 400.
func profileDeadline(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.FormValue("seconds"); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 || time.Duration(n)*time.Second > maxProfile {
				http.Error(w, fmt.Sprintf("seconds: want an integer from 1 to %d", int(maxProfile/time.Second)), http.StatusBadRequest)
				return
			}
			d := time.Duration(n)*time.Second + 30*time.Second
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
		}
		h.ServeHTTP(w, r)
	})
}

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
