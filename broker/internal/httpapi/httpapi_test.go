package httpapi

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func fetch(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestProbesAndLoopback: /readyz lists each failing check and answers
// 200 once none fails; /healthz always answers; on loopback, /metrics
// needs no key even with auth on.
func TestProbesAndLoopback(t *testing.T) {
	var recovering, full atomic.Bool
	recovering.Store(true)
	ready := &Readiness{}
	ready.Add(func() string {
		if recovering.Load() {
			return "recovering"
		}
		return ""
	})
	ready.Add(func() string {
		if full.Load() {
			return "disk full"
		}
		return ""
	})
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "fila_test_total", Help: "A test counter."}))
	s, err := Listen(Config{Addr: "127.0.0.1:0", RequireAuth: true, Gatherer: reg, Ready: ready})
	if err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Shutdown(t.Context()) })
	if !s.Open() {
		t.Fatal("a loopback listener with auth on requires a key for /metrics; want it open")
	}
	base := "http://" + s.Addr().String()

	full.Store(true)
	if code, body := fetch(t, base+"/readyz"); code != 503 || !strings.Contains(body, "not ready: recovering\nnot ready: disk full") {
		t.Errorf("/readyz = %d %q; want 503 naming both", code, body)
	}
	if code, _ := fetch(t, base+"/healthz"); code != 200 {
		t.Errorf("/healthz = %d; want 200", code)
	}
	recovering.Store(false)
	full.Store(false)
	if code, body := fetch(t, base+"/readyz"); code != 200 || body != "ready\n" {
		t.Errorf("/readyz = %d %q; want 200 ready", code, body)
	}
	if code, body := fetch(t, base+"/metrics"); code != 200 || !strings.Contains(body, "fila_test_total 0") {
		t.Errorf("/metrics = %d %q", code, body)
	}
	if code, _ := fetch(t, base+"/nothing"); code != 404 {
		t.Errorf("/nothing = %d; want 404", code)
	}
}

// TestPprof: with Pprof the runtime profiles are served, a CPU profile
// runs for its seconds parameter and comes back as a gzipped profile, a
// seconds parameter out of range is refused, and off a listener without
// Pprof they are not found. Off loopback with auth on, they need a key.
func TestPprof(t *testing.T) {
	start := func(cfg Config) string {
		t.Helper()
		cfg.Gatherer = prometheus.NewRegistry()
		cfg.Ready = &Readiness{}
		s, err := Listen(cfg)
		if err != nil {
			t.Fatal(err)
		}
		go s.Serve()
		t.Cleanup(func() { s.Shutdown(t.Context()) })
		return fmt.Sprintf("http://127.0.0.1:%d", s.Addr().(*net.TCPAddr).Port)
	}
	on := start(Config{Addr: "127.0.0.1:0", Pprof: true})
	if code, body := fetch(t, on+"/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/ = %d %q", code, body)
	}
	if code, body := fetch(t, on+"/debug/pprof/profile?seconds=1"); code != 200 || !strings.HasPrefix(body, "\x1f\x8b") {
		t.Errorf("/debug/pprof/profile?seconds=1 = %d, %d bytes; want 200 and a gzipped profile", code, len(body))
	}
	for _, q := range []string{"seconds=0", "seconds=301", "seconds=x"} {
		if code, body := fetch(t, on+"/debug/pprof/profile?"+q); code != 400 || !strings.Contains(body, "want an integer from 1 to 300") {
			t.Errorf("/debug/pprof/profile?%s = %d %q; want 400", q, code, body)
		}
	}
	off := start(Config{Addr: "127.0.0.1:0"})
	if code, _ := fetch(t, off+"/debug/pprof/"); code != 404 {
		t.Errorf("without Pprof /debug/pprof/ = %d; want 404", code)
	}
	guarded := start(Config{Addr: "0.0.0.0:0", Pprof: true, RequireAuth: true})
	if code, _ := fetch(t, guarded+"/debug/pprof/heap"); code != 401 {
		t.Errorf("off loopback with auth on, /debug/pprof/heap without a key = %d; want 401", code)
	}
}
