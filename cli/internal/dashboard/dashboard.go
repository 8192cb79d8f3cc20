// Package dashboard serves "fila dashboard": a live web view of a Fila
// broker, as seen by one API key. It is a client over the Go SDK, with no
// privileged access: every figure comes from ListQueues, QueueStats and
// ListConfig, dead letters are browsed by subscribing to a dead-letter
// queue and releasing what it delivers, and redrive is
// Administrator.Redrive.
//
// Pages are rendered on the server with html/template; a little
// JavaScript polls a JSON endpoint to refresh the figures and to draw
// Jain's index and each fairness key's delivered share over time as
// inline SVG. A sampler polls the broker every Config.Interval and keeps
// the last Config.History samples of each queue, from which the rates and
// the charts are computed.
package dashboard

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
)

//go:embed assets
var assets embed.FS

// Defaults of Config's zero fields.
const (
	DefaultInterval  = 2 * time.Second
	DefaultHistory   = 150
	DefaultTopKeys   = 20
	DefaultMaxQueues = 50
	DefaultTimeout   = 10 * time.Second
	// DefaultBrowse is how many dead letters a browse shows unless the
	// page asks for another number; MaxBrowse is the most it may ask for.
	DefaultBrowse = 20
	MaxBrowse     = 100
)

// Config configures a Server. Only Client is required.
type Config struct {
	// Client is the broker connection, with the user's own API key. The
	// server does not close it.
	Client *fila.Client
	// Broker names the broker on every page (its address).
	Broker string
	// Interval is how often the sampler polls the broker (default
	// DefaultInterval); the pages refresh at the same pace.
	Interval time.Duration
	// History is how many samples of each queue are kept for the rates
	// and the charts (default DefaultHistory).
	History int
	// TopKeys is how many fairness keys each QueueStats lists, most
	// pending first (default DefaultTopKeys, at most fila.MaxTopKeys).
	TopKeys int
	// MaxQueues bounds how many queues the sampler inspects with
	// QueueStats each round (default DefaultMaxQueues): the first by name,
	// plus any queue whose page was open in the last minute. Other queues
	// show their depths only.
	MaxQueues int
	// Timeout bounds each request to the broker (default DefaultTimeout).
	Timeout time.Duration
	// AllowedHosts are host names, besides IP addresses and "localhost",
	// that requests may name in their Host header. Any other name is
	// refused, so that a web page whose name resolves to this machine
	// (DNS rebinding) cannot read the dashboard.
	AllowedHosts []string
}

// Server is the dashboard: an http.Handler over the sampled state of the
// broker, and the sampler that fills it.
type Server struct {
	cfg   Config
	c     *fila.Client
	csrf  string // per-process token that every form posts back
	pages map[string]*template.Template
	mux   *http.ServeMux
	hosts map[string]bool

	mu     sync.Mutex
	list   listing
	queues map[string]*queueState
	viewed map[string]time.Time // queue pages open recently, sampled whatever MaxQueues says
}

// New returns a Server for cfg, with its defaults applied. Call Run (or
// Serve, which runs it) to start sampling.
func New(cfg Config) (*Server, error) {
	if cfg.Client == nil {
		return nil, errors.New("dashboard: no client")
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.History <= 1 {
		cfg.History = DefaultHistory
	}
	if cfg.TopKeys <= 0 || cfg.TopKeys > fila.MaxTopKeys {
		cfg.TopKeys = DefaultTopKeys
	}
	if cfg.MaxQueues <= 0 {
		cfg.MaxQueues = DefaultMaxQueues
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	tok := make([]byte, 32)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}
	s := &Server{
		cfg:    cfg,
		c:      cfg.Client,
		csrf:   hex.EncodeToString(tok),
		queues: map[string]*queueState{},
		viewed: map[string]time.Time{},
		hosts:  map[string]bool{"localhost": true},
	}
	for _, h := range cfg.AllowedHosts {
		s.hosts[strings.ToLower(strings.TrimSuffix(h, "."))] = true
	}
	if err := s.parseTemplates(); err != nil {
		return nil, err
	}
	static, err := fs.Sub(assets, "assets/static")
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	mux.HandleFunc("GET /{$}", s.overview)
	mux.HandleFunc("GET /queue", s.queuePage)
	mux.HandleFunc("GET /dlq", s.dlqPage)
	mux.HandleFunc("POST /dlq/redrive", s.redrive)
	mux.HandleFunc("GET /config", s.configPage)
	mux.HandleFunc("GET /api/overview", s.overviewJSON)
	mux.HandleFunc("GET /api/queue", s.queueJSON)
	s.mux = mux
	return s, nil
}

// pageFiles are the pages, each a template file under assets/ that
// defines "content" (and the live parts it refreshes) for the layout.
var pageFiles = []string{"overview", "queue", "dlq", "confirm", "config"}

var funcs = template.FuncMap{
	"pct":   pct,
	"rate":  fmtRate,
	"dur":   fmtDur,
	"float": fmtFloat,
	"bar":   func(f float64) string { return fmtFloat(120 * clamp01(f)) },
	"mark":  func(f float64) string { return fmtFloat(2 + 120*clamp01(f)) },
	"when":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05 UTC") },
}

func (s *Server) parseTemplates() error {
	s.pages = map[string]*template.Template{}
	base, err := template.New("layout").Funcs(funcs).ParseFS(assets, "assets/layout.html")
	if err != nil {
		return err
	}
	for _, p := range pageFiles {
		t, err := template.Must(base.Clone()).ParseFS(assets, "assets/"+p+".html")
		if err != nil {
			return err
		}
		s.pages[p] = t
	}
	return nil
}

// CSRFToken returns the token the dashboard's forms carry: a POST
// without it is refused.
func (s *Server) CSRFToken() string { return s.csrf }

// ServeHTTP serves the dashboard: the host check and the security
// headers first, then cross-origin protection of every POST, then the
// pages.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
	if !s.hostAllowed(r.Host) {
		http.Error(w, "dashboard: host "+r.Host+" is not allowed (see --allow-host)", http.StatusMisdirectedRequest)
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	crossOrigin.Handler(s.mux).ServeHTTP(w, r)
}

// crossOrigin refuses POSTs whose Sec-Fetch-Site or Origin header shows
// they come from another site.
var crossOrigin = http.NewCrossOriginProtection()

// hostAllowed reports whether a request naming host (the Host header,
// host[:port]) may be served: an IP address, localhost, or an allowed
// name.
func (s *Server) hostAllowed(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.Trim(host, "[]"), ".")
	if net.ParseIP(host) != nil {
		return true
	}
	return s.hosts[strings.ToLower(host)]
}

// Serve runs the sampler and serves the dashboard on ln until ctx ends,
// then shuts the HTTP server down, letting requests in flight finish for
// up to five seconds. The server bounds how long a client may take to
// send a request and how long a connection may idle.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		// A browse waits for up to a few seconds of deliveries and a
		// redrive for the broker: both within Timeout.
		WriteTimeout:   s.cfg.Timeout + 30*time.Second,
		IdleTimeout:    2 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		BaseContext:    func(net.Listener) context.Context { return ctx },
	}
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() { s.Run(sctx) })
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	var err error
	select {
	case err = <-errc:
	case <-ctx.Done():
		shctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		err = srv.Shutdown(shctx)
		cancel()
		if serr := <-errc; !errors.Is(serr, http.ErrServerClosed) && err == nil {
			err = serr
		}
	}
	stop()
	wg.Wait()
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// frame is what the layout shows around every page.
type frame struct {
	Title    string
	Broker   string
	Interval time.Duration
	EveryMS  int64
	CSRF     string
	Nav      string // "queues" or "config"
}

func (s *Server) frame(title, nav string) frame {
	return frame{Title: title, Broker: s.cfg.Broker, Interval: s.cfg.Interval, EveryMS: s.cfg.Interval.Milliseconds(), CSRF: s.csrf, Nav: nav}
}

// render writes page p with data, or a plain 500 if the template fails
// (which the tests rule out).
func (s *Server) render(w http.ResponseWriter, status int, p string, data any) {
	var buf bytes.Buffer
	if err := s.pages[p].ExecuteTemplate(&buf, "layout", data); err != nil {
		http.Error(w, "dashboard: rendering "+p+": "+err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	w.Write(buf.Bytes())
}

// fragment renders the template named part of page p alone, for the JSON
// endpoints that refresh a page.
func (s *Server) fragment(p, part string, data any) (string, error) {
	var buf bytes.Buffer
	if err := s.pages[p].ExecuteTemplate(&buf, part, data); err != nil {
		return "", err
	}
	return buf.String(), nil
}

func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// brokerError is how a page shows a failed request: the SDK's message,
// which names the operation, the target and the code ("fila: queue stats
// orders: forbidden: ..."), and the code's name alone for a hint.
type brokerError struct {
	Msg  string
	Code string
	Hint string
}

func showErr(err error) *brokerError {
	if err == nil {
		return nil
	}
	e := &brokerError{Msg: err.Error()}
	var se *fila.StatusError
	if errors.As(err, &se) {
		e.Code = se.Code.String()
	}
	switch {
	case errors.Is(err, fila.ErrForbidden):
		e.Code = "FORBIDDEN"
		e.Hint = "The dashboard's API key lacks a permission this needs; see the permissions each page needs in the operations guide."
	case errors.Is(err, fila.ErrUnauthorized):
		e.Code = "UNAUTHORIZED"
		e.Hint = "The broker refused the API key."
	case errors.Is(err, fila.ErrQueueNotFound):
		e.Code = "QUEUE_NOT_FOUND"
	case errors.Is(err, fila.ErrNotADLQ):
		e.Code = "NOT_A_DLQ"
	case errors.Is(err, fila.ErrConnectionLost), errors.Is(err, fila.ErrClosed):
		e.Hint = "The broker cannot be reached; the dashboard keeps trying."
	}
	return e
}

// validName reports whether name can be a queue name: letters, digits and
// ._-:~, 1 to 255 bytes. Anything else is refused before it reaches the
// broker.
func validName(name string) bool {
	if name == "" || len(name) > 255 {
		return false
	}
	for _, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("._-:~", r):
		default:
			return false
		}
	}
	return true
}

// checkToken reports whether the form posted the process's CSRF token.
func (s *Server) checkToken(r *http.Request) bool {
	return subtle.ConstantTimeCompare([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) == 1
}

// sameSite reports whether a GET that has an effect on the broker (a
// browse leases dead letters) may come from this request: not when the
// browser says another site started it.
func sameSite(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
		return true
	}
	return false
}

func (s *Server) ctx(r *http.Request) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), s.cfg.Timeout)
}

// badRequest answers 400 with a plain message.
func badRequest(w http.ResponseWriter, format string, args ...any) {
	http.Error(w, "dashboard: "+fmt.Sprintf(format, args...), http.StatusBadRequest)
}
