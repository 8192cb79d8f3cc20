package e2e

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// The admin HTTP listener of a real fila-server: /healthz, /readyz and
// /metrics after a scripted workload, and the key /metrics needs with
// auth on.

// httpServer starts a fila-server with the admin HTTP listener on host
// and returns it and the listener's base URL.
func httpServer(t *testing.T, host string, env ...string) (*filatest.Server, string) {
	t.Helper()
	port := filatest.FreePorts(t, 1)[0]
	_, p, _ := strings.Cut(port, ":")
	srv := filatest.Start(t, filatest.WithEnv(append(env, "FILA_HTTP_LISTEN_ADDR="+host+":"+p)...))
	return srv, "http://127.0.0.1:" + p
}

// get fetches url with the bearer key (none if empty) and returns the
// status and body.
func get(t *testing.T, url, key string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// scrape reads /metrics into families by name.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	code, body := get(t, base+"/metrics", "")
	if code != http.StatusOK {
		t.Fatalf("GET /metrics = %d %s", code, body)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// value returns the value of the series of name whose labels include
// labels ("k=v" pairs), and whether there is one.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.Metric {
		have := map[string]string{}
		for _, l := range m.Label {
			have[l.GetName()] = l.GetValue()
		}
		for _, kv := range labels {
			k, v, _ := strings.Cut(kv, "=")
			if have[k] != v {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestMetricsAfterWorkload(t *testing.T) {
	srv, base := httpServer(t, "127.0.0.1")
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)

	if code, body := get(t, base+"/healthz", ""); code != http.StatusOK {
		t.Fatalf("GET /healthz = %d %q", code, body)
	}
	if code, body := get(t, base+"/readyz", ""); code != http.StatusOK || !strings.Contains(body, "ready") {
		t.Fatalf("GET /readyz = %d %q; want 200 ready", code, body)
	}

	// work: 40 messages, all delivered; 30 acked, 10 nacked and, with
	// one attempt allowed, dead-lettered.
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("work").MaxAttempts(1)); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		m := fila.NewMessage("work", fmt.Appendf(nil, "w%d", i)).FairnessKey([]string{"a", "b"}[i%2])
		if _, err := c.Producer().Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.Consumer().Subscribe(ctx, "work", fila.Prefetch(8))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if i < 30 {
			err = d.Ack(ctx)
		} else {
			err = d.Nack(ctx, "failed on purpose")
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// fair: 30 messages of each of two keys; 20 delivered and held, so
	// both keys stay backlogged and listed.
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("fair")); err != nil {
		t.Fatal(err)
	}
	for i := range 60 {
		m := fila.NewMessage("fair", make([]byte, 512)).FairnessKey([]string{"noisy", "quiet"}[i%2])
		if _, err := c.Producer().Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	fsub, err := c.Consumer().Subscribe(ctx, "fair", fila.Prefetch(20))
	if err != nil {
		t.Fatal(err)
	}
	perKey := map[string]int{}
	for range 20 {
		d, err := fsub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		perKey[d.FairnessKey()]++
	}

	// Deliveries are counted when leased, before the client reads them;
	// the scrape waits for the broker's counts to settle (the acks and
	// nacks above returned once durable, so only the last leases race).
	var fams map[string]*dto.MetricFamily
	deadline := time.Now().Add(30 * time.Second)
	for {
		fams = scrape(t, base)
		if v, _ := value(fams, "fila_queue_leased_messages", "queue=fair"); v == 20 || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	want := []struct {
		name   string
		labels []string
		v      float64
	}{
		{"fila_queue_enqueued_total", []string{"queue=work"}, 40},
		{"fila_queue_delivered_total", []string{"queue=work"}, 40},
		{"fila_queue_acked_total", []string{"queue=work"}, 30},
		{"fila_queue_nacked_total", []string{"queue=work"}, 10},
		{"fila_queue_dead_lettered_total", []string{"queue=work"}, 10},
		{"fila_queue_dlq_messages", []string{"queue=work"}, 10},
		{"fila_queue_ready_messages", []string{"queue=work"}, 0},
		{"fila_queue_ready_messages", []string{"queue=work.dlq"}, 10},
		{"fila_queue_leased_messages", []string{"queue=work"}, 0},
		{"fila_queue_enqueued_total", []string{"queue=fair"}, 60},
		{"fila_queue_delivered_total", []string{"queue=fair"}, 20},
		{"fila_queue_leased_messages", []string{"queue=fair"}, 20},
		{"fila_queue_backlogged_keys", []string{"queue=fair"}, 2},
		{"fila_fairness_key_window_delivered", []string{"queue=fair", "key=noisy"}, float64(perKey["noisy"])},
		{"fila_fairness_key_window_delivered", []string{"queue=fair", "key=quiet"}, float64(perKey["quiet"])},
		{"fila_fairness_key_pending_messages", []string{"queue=fair", "key=noisy"}, float64(30 - perKey["noisy"])},
		{"fila_fairness_key_entitled_share", []string{"queue=fair", "key=quiet"}, 0.5},
		{"fila_requests_total", []string{"op=CreateQueue", "code=OK"}, 2},
		{"fila_requests_total", []string{"op=Enqueue", "code=OK"}, 100},
		{"fila_request_duration_seconds", []string{"op=Ack"}, 30},
		{"fila_request_duration_seconds", []string{"op=Nack"}, 10},
		{"fila_connections_open", nil, 1},
	}
	for _, w := range want {
		got, ok := value(fams, w.name, w.labels...)
		if !ok || got != w.v {
			t.Errorf("%s%v = %v (present %v); want %v", w.name, w.labels, got, ok, w.v)
		}
	}
	for _, name := range []string{"fila_store_fsyncs_total", "fila_store_commits_total", "fila_store_written_bytes_total", "fila_store_commit_wait_seconds"} {
		if v, ok := value(fams, name); !ok || v == 0 {
			t.Errorf("%s = %v (present %v); want above 0", name, v, ok)
		}
	}
	if v, ok := value(fams, "fila_connection_received_bytes_total"); !ok || v < 60*512 {
		t.Errorf("fila_connection_received_bytes_total = %v; want at least the payloads' %d bytes", v, 60*512)
	}
	for _, name := range []string{"go_goroutines", "process_resident_memory_bytes", "fila_build_info"} {
		if _, ok := fams[name]; !ok {
			t.Errorf("/metrics has no %s", name)
		}
	}
	_ = sub.Close(ctx)
	_ = fsub.Close(ctx)
}

// TestMetricsNeedAdminKey: with auth on and the listener on all
// addresses, /metrics needs a key with admin on "*"; the probes need
// none.
func TestMetricsNeedAdminKey(t *testing.T) {
	srv, base := httpServer(t, "0.0.0.0", "FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY="+bootstrap)
	ctx := ctxT(t, time.Minute)
	admin, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	worker, err := admin.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("worker").Permissions(fila.Consume("*"), fila.Admin("orders")))
	if err != nil {
		t.Fatal(err)
	}
	ops, err := admin.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("ops").Permissions(fila.Admin("*")))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, key string
		want      int
	}{
		{"/healthz", "", http.StatusOK},
		{"/readyz", "", http.StatusOK},
		{"/metrics", "", http.StatusUnauthorized},
		{"/metrics", "not-a-key", http.StatusUnauthorized},
		{"/metrics", worker.Secret, http.StatusForbidden},
		{"/metrics", ops.Secret, http.StatusOK},
		{"/metrics", bootstrap, http.StatusOK},
	} {
		if code, body := get(t, base+tc.path, tc.key); code != tc.want {
			t.Errorf("GET %s with key %q = %d %q; want %d", tc.path, tc.key, code, body, tc.want)
		}
	}
	// A handshake with a bad key counts as failed, by its code.
	if _, err := connectKey(t, srv.Addr, "not-a-key"); err == nil {
		t.Fatal("Connect with a bad key succeeded")
	}
	if _, body := get(t, base+"/metrics", ops.Secret); !strings.Contains(body, `fila_handshakes_failed_total{reason="UNAUTHORIZED"} 1`) {
		t.Errorf("/metrics after a refused handshake lacks fila_handshakes_failed_total{reason=\"UNAUTHORIZED\"} 1")
	}
	if err := admin.Admin().RevokeAPIKey(ctx, ops.ID); err != nil {
		t.Fatal(err)
	}
	if code, _ := get(t, base+"/metrics", ops.Secret); code != http.StatusUnauthorized {
		t.Errorf("GET /metrics with a revoked key = %d; want 401", code)
	}
}

// TestReadyzDuringRecovery: /readyz answers 503 "recovering" while the
// broker loads its store and queues (held for 3 s by fault injection),
// and 200 once it serves; /healthz answers 200 throughout.
func TestReadyzDuringRecovery(t *testing.T) {
	port := filatest.FreePorts(t, 1)[0]
	_, p, _ := strings.Cut(port, ":")
	base := "http://127.0.0.1:" + p
	started := make(chan *filatest.Proc, 1)
	go func() {
		proc, err := filatest.StartProc(filatest.ProcConfig{
			Bin:     filatest.FaultBinary(t),
			DataDir: t.TempDir(),
			Env:     []string{"FILA_HTTP_LISTEN_ADDR=127.0.0.1:" + p, "FILA_TEST_RECOVERY_PAUSE=3s"},
		})
		if err != nil {
			t.Error(err)
		}
		started <- proc
	}()
	seen := false
	deadline := time.Now().Add(time.Minute)
	for !seen && time.Now().Before(deadline) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			time.Sleep(20 * time.Millisecond) // not listening yet
			continue
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(b), "recovering"):
			seen = true
			if code, _ := get(t, base+"/healthz", ""); code != http.StatusOK {
				t.Errorf("GET /healthz during recovery = %d; want 200", code)
			}
		case resp.StatusCode == http.StatusOK:
			t.Fatalf("GET /readyz = 200 before the 3 s recovery pause ended")
		}
	}
	if !seen {
		t.Fatal("never saw /readyz answer 503 recovering")
	}
	proc := <-started
	if proc == nil {
		t.FailNow()
	}
	t.Cleanup(func() { proc.Stop(5 * time.Second) })
	if proc.Addr == "" {
		t.Fatalf("fila-server exited: %s", proc.Log())
	}
	if code, body := get(t, base+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("GET /readyz once listening = %d %q; want 200", code, body)
	}
}
