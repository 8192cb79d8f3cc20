package httpapi

import (
	"io"
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
