package dashboard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// These tests run the dashboard in the test process against a real
// fila-server (filatest), over HTTP.

// connect opens a client of addr with key ("" for none), closed when the
// test ends.
func connect(t *testing.T, addr, key string) *fila.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var opts []fila.Option
	if key != "" {
		opts = append(opts, fila.WithAPIKey(key))
	}
	c, err := fila.Connect(ctx, addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startDashboard serves a dashboard of cfg on a free loopback port until
// the test ends, and returns it and its base URL.
func startDashboard(t *testing.T, cfg Config) (*Server, string) {
	t.Helper()
	if cfg.Interval == 0 {
		cfg.Interval = 250 * time.Millisecond
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, "http://" + ln.Addr().String()
}

func createQueue(t *testing.T, c *fila.Client, spec *fila.QueueSpec) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Admin().CreateQueue(ctx, spec); err != nil {
		t.Fatal(err)
	}
}

func send(t *testing.T, c *fila.Client, msgs []*fila.Message) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := c.Producer().SendBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// consume takes n deliveries of queue and settles each with settle.
func consume(t *testing.T, c *fila.Client, queue string, n int, settle func(context.Context, *fila.Delivery) error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sub, err := c.Consumer().Subscribe(ctx, queue, fila.Prefetch(uint32(min(n, 10))))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(ctx)
	for range n {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("consume %s: %v", queue, err)
		}
		if err := settle(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
}

func ack(ctx context.Context, d *fila.Delivery) error { return d.Ack(ctx) }

// deadLetter makes n messages of queue (created with max attempts 1)
// dead letters by nacking them with reason, and waits until its DLQ
// holds them.
func deadLetter(t *testing.T, c *fila.Client, queue string, n int, reason string) {
	t.Helper()
	consume(t, c, queue, n, func(ctx context.Context, d *fila.Delivery) error { return d.Nack(ctx, reason) })
	waitUntil(t, fmt.Sprintf("%d dead letters in %s.dlq", n, queue), func() (bool, string) {
		q := queueInfo(t, c, queue+".dlq")
		return q.Ready == uint64(n), fmt.Sprintf("%+v", q)
	})
}

// queueInfo is name's ListQueues entry.
func queueInfo(t *testing.T, c *fila.Client, name string) fila.QueueInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	qs, err := c.Admin().ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == name {
			return q
		}
	}
	t.Fatalf("ListQueues has no %s: %+v", name, qs)
	return fila.QueueInfo{}
}

// waitUntil polls cond until it holds, failing the test with cond's last
// word after two minutes.
func waitUntil(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ok, last := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: last %s", what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// get fetches u with the given extra headers and returns the status and
// body.
func get(t *testing.T, u string, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	return do(t, req, header...)
}

func post(t *testing.T, u string, form url.Values, header ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, u, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return do(t, req, header...)
}

func do(t *testing.T, req *http.Request, header ...string) (int, string) {
	t.Helper()
	for i := 0; i+1 < len(header); i += 2 {
		if header[i] == "Host" {
			req.Host = header[i+1]
		} else {
			req.Header.Set(header[i], header[i+1])
		}
	}
	cl := &http.Client{Timeout: time.Minute}
	resp, err := cl.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestRedriveNeedsTokenConfirmationAndSameOrigin(t *testing.T) {
	srv := filatest.Start(t)
	c := connect(t, srv.Addr, "")
	createQueue(t, c, fila.NewQueueSpec("payments").MaxAttempts(1))
	var msgs []*fila.Message
	for i := range 4 {
		msgs = append(msgs, fila.NewMessage("payments", fmt.Appendf(nil, "charge-%d", i)))
	}
	send(t, c, msgs)
	deadLetter(t, c, "payments", 4, "card declined")
	s, base := startDashboard(t, Config{Client: c, Broker: srv.Addr})
	u := base + "/dlq/redrive"
	form := url.Values{"name": {"payments.dlq"}, "count": {"2"}, "confirm": {"yes"}}
	unmoved := func(why string) {
		t.Helper()
		if q := queueInfo(t, c, "payments.dlq"); q.Ready != 4 {
			t.Fatalf("%s: payments.dlq ready %d; want 4, nothing moved", why, q.Ready)
		}
	}

	if code, body := post(t, u, form); code != http.StatusForbidden || !strings.Contains(body, "token") {
		t.Errorf("POST without the form token: %d %q; want 403 naming the token", code, body)
	}
	unmoved("no token")
	form.Set("csrf", "x"+s.CSRFToken()[1:])
	if code, _ := post(t, u, form); code != http.StatusForbidden {
		t.Errorf("POST with a wrong token: %d; want 403", code)
	}
	unmoved("wrong token")
	form.Set("csrf", s.CSRFToken())
	if code, _ := post(t, u, form, "Origin", "http://evil.example"); code != http.StatusForbidden {
		t.Errorf("POST from another origin: %d; want 403", code)
	}
	if code, _ := post(t, u, form, "Sec-Fetch-Site", "cross-site"); code != http.StatusForbidden {
		t.Errorf("POST with Sec-Fetch-Site cross-site: %d; want 403", code)
	}
	unmoved("cross-site")
	if code, _ := get(t, u+"?name=payments.dlq&count=2&confirm=yes&csrf="+s.CSRFToken()); code != http.StatusMethodNotAllowed {
		t.Errorf("GET of the redrive: %d; want 405", code)
	}
	unmoved("GET")
	for _, bad := range []string{"0", "-1", "two", ""} {
		form.Set("count", bad)
		if code, _ := post(t, u, form); code != http.StatusBadRequest {
			t.Errorf("POST with count %q: %d; want 400", bad, code)
		}
	}
	unmoved("bad counts")

	form.Set("count", "2")
	form.Del("confirm")
	code, body := post(t, u, form)
	if code != http.StatusOK || !strings.Contains(body, "Confirm redrive") || !strings.Contains(body, `name="confirm" value="yes"`) {
		t.Errorf("POST without confirm=yes: %d; want 200 and a page asking to confirm:\n%s", code, body)
	}
	unmoved("no confirmation")

	form.Set("confirm", "yes")
	code, body = post(t, u, form, "Origin", base, "Sec-Fetch-Site", "same-origin")
	if code != http.StatusOK || !strings.Contains(body, "Moved <b>2</b> of the 2") {
		t.Errorf("confirmed POST: %d; want 200 saying 2 moved:\n%s", code, body)
	}
	if q := queueInfo(t, c, "payments.dlq"); q.Ready != 2 {
		t.Errorf("payments.dlq ready %d after redriving 2 of 4; want 2", q.Ready)
	}
	if q := queueInfo(t, c, "payments"); q.Ready != 2 {
		t.Errorf("payments ready %d after redriving 2; want 2", q.Ready)
	}

	// A name that is not a dead-letter queue is the broker's error, on
	// the page.
	form.Set("name", "payments")
	code, body = post(t, u, form)
	if code != http.StatusOK || !strings.Contains(body, "NOT_A_DLQ") {
		t.Errorf("redrive of payments: %d; want the page with NOT_A_DLQ:\n%s", code, body)
	}
	form.Set("name", "<script>")
	if code, _ := post(t, u, form); code != http.StatusBadRequest {
		t.Errorf("redrive of <script>: %d; want 400", code)
	}
}

func TestHostHeaderAndSecurityHeaders(t *testing.T) {
	srv := filatest.Start(t)
	c := connect(t, srv.Addr, "")
	_, base := startDashboard(t, Config{Client: c, Broker: srv.Addr, AllowedHosts: []string{"fila-dash.internal"}})
	port := base[strings.LastIndex(base, ":")+1:]
	for host, want := range map[string]int{
		"127.0.0.1:" + port:          http.StatusOK,
		"localhost:" + port:          http.StatusOK,
		"[::1]:" + port:              http.StatusOK,
		"fila-dash.internal:" + port: http.StatusOK,
		"FILA-DASH.internal.":        http.StatusOK,
		"evil.example:" + port:       http.StatusMisdirectedRequest,
		"localhost.evil.example":     http.StatusMisdirectedRequest,
	} {
		if code, _ := get(t, base+"/", "Host", host); code != want {
			t.Errorf("GET / with Host %s: %d; want %d", host, code, want)
		}
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	for h, want := range map[string]string{
		"Content-Security-Policy": "script-src 'self'",
		"X-Content-Type-Options":  "nosniff",
		"X-Frame-Options":         "DENY",
	} {
		if got := resp.Header.Get(h); !strings.Contains(got, want) {
			t.Errorf("%s = %q; want %q in it", h, got, want)
		}
	}
	for _, p := range []string{"/static/dashboard.js", "/static/dashboard.css"} {
		if code, body := get(t, base+p); code != http.StatusOK || len(body) < 100 {
			t.Errorf("GET %s: %d, %d bytes", p, code, len(body))
		}
	}
	if code, _ := get(t, base+"/queue?name="+url.QueryEscape("a b")); code != http.StatusBadRequest {
		t.Errorf("GET /queue of a bad name: %d; want 400", code)
	}
	if code, _ := get(t, base+"/nosuch"); code != http.StatusNotFound {
		t.Errorf("GET /nosuch: %d; want 404", code)
	}
}

// TestBrokerErrorsOnThePage: a key without the permissions a page needs
// gets the page with the broker's FORBIDDEN on it, and the rest of what
// it may see.
func TestBrokerErrorsOnThePage(t *testing.T) {
	const root = "root-secret-for-the-dashboard-test"
	srv := filatest.Start(t, filatest.WithEnv("FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY="+root))
	rc := connect(t, srv.Addr, root)
	createQueue(t, rc, fila.NewQueueSpec("jobs"))
	send(t, rc, []*fila.Message{fila.NewMessage("jobs", []byte("x")).FairnessKey("acme")})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	key, err := rc.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("viewer").Permissions(fila.Consume("jobs")))
	if err != nil {
		t.Fatal(err)
	}
	c := connect(t, srv.Addr, key.Secret)
	_, base := startDashboard(t, Config{Client: c, Broker: srv.Addr})

	// The overview lists jobs (consume lets ListQueues show it) with its
	// depth, and FORBIDDEN where its QueueStats would be.
	waitUntil(t, "the overview's row of jobs with FORBIDDEN", func() (bool, string) {
		code, body := get(t, base+"/")
		return code == http.StatusOK && strings.Contains(body, `data-queue="jobs"`) && strings.Contains(body, "FORBIDDEN"), body
	})
	for _, p := range []string{"/queue?name=jobs", "/config", "/dlq?name=jobs.dlq&browse=1&n=5"} {
		code, body := get(t, base+p)
		if code != http.StatusOK || !strings.Contains(body, "FORBIDDEN") || !strings.Contains(body, "lacks a permission") {
			t.Errorf("GET %s: %d; want 200 with FORBIDDEN and the hint:\n%s", p, code, body)
		}
	}
	code, body := get(t, base+"/api/queue?name=jobs")
	if code != http.StatusOK || !strings.Contains(body, "FORBIDDEN") {
		t.Errorf("GET /api/queue: %d %s; want 200 with FORBIDDEN in its parts", code, body)
	}
	// The dashboard is still up after all that.
	if code, _ := get(t, base+"/"); code != http.StatusOK {
		t.Errorf("GET / after the errors: %d", code)
	}
}

// TestEscaping: what producers put in messages, and runtime config
// values, reach the pages as text.
func TestEscaping(t *testing.T) {
	srv := filatest.Start(t)
	c := connect(t, srv.Addr, "")
	const evil = `<img src=x onerror="alert(1)">`
	createQueue(t, c, fila.NewQueueSpec("esc").MaxAttempts(1))
	send(t, c, []*fila.Message{fila.NewMessage("esc", []byte(evil)).FairnessKey(evil).Header("note", evil)})
	send(t, c, []*fila.Message{fila.NewMessage("esc", []byte("second")).FairnessKey(evil)})
	deadLetter(t, c, "esc", 1, evil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.Admin().SetConfig(ctx, "app.banner", evil); err != nil {
		t.Fatal(err)
	}
	_, base := startDashboard(t, Config{Client: c, Broker: srv.Addr})
	escaped := "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;"
	for _, p := range []string{"/dlq?name=esc.dlq&browse=1&n=5", "/queue?name=esc", "/config"} {
		code, body := get(t, base+p)
		if code != http.StatusOK || strings.Contains(body, "<img") || !strings.Contains(body, escaped) {
			t.Errorf("GET %s: %d; want 200 with the markup escaped:\n%s", p, code, body)
		}
	}
	// The JSON's parts are HTML for innerHTML, escaped; the chart's keys
	// are data, which the script sets as text.
	_, body := get(t, base+"/api/queue?name=esc")
	var live struct {
		Parts map[string]string `json:"parts"`
		Chart chartData         `json:"chart"`
	}
	if err := json.Unmarshal([]byte(body), &live); err != nil {
		t.Fatal(err)
	}
	if f := live.Parts["fairness"]; strings.Contains(f, "<img") || !strings.Contains(f, escaped) {
		t.Errorf("GET /api/queue: fairness part has the key unescaped:\n%s", f)
	}
	if len(live.Chart.Keys) != 1 || live.Chart.Keys[0].Key != evil {
		t.Errorf("GET /api/queue: chart keys %+v; want the key as it is", live.Chart.Keys)
	}
}

// TestBrowseReleasesInOrder: a browse gives the dead letters back as
// they were: ready, not leased, in the same order, attempts unchanged.
func TestBrowseReleasesInOrder(t *testing.T) {
	srv := filatest.Start(t)
	c := connect(t, srv.Addr, "")
	createQueue(t, c, fila.NewQueueSpec("mail").MaxAttempts(1))
	var msgs []*fila.Message
	for i := range 6 {
		msgs = append(msgs, fila.NewMessage("mail", fmt.Appendf(nil, "letter-%d", i)).FairnessKey("acme"))
	}
	send(t, c, msgs)
	deadLetter(t, c, "mail", 6, "smtp 554")
	s, _ := startDashboard(t, Config{Client: c, Broker: srv.Addr})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	payloads := func(ls []letter) string {
		var p []string
		for _, l := range ls {
			p = append(p, l.Payload)
		}
		return strings.Join(p, " ")
	}
	first, err := s.browse(ctx, "mail.dlq", 4, 6)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := payloads(first), "letter-0 letter-1 letter-2 letter-3"; got != want {
		t.Errorf("browse of 4: %s; want %s", got, want)
	}
	for _, l := range first {
		if l.Attempts != "1" || l.Error != "smtp 554" || l.FairnessKey != "acme" {
			t.Errorf("letter %+v: want fila-attempts 1, fila-error smtp 554, key acme", l)
		}
	}
	q := queueInfo(t, c, "mail.dlq")
	if q.Ready != 6 || q.Leased != 0 {
		t.Errorf("mail.dlq after a browse: ready %d, leased %d; want 6 and 0", q.Ready, q.Leased)
	}
	again, err := s.browse(ctx, "mail.dlq", 6, 6)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := payloads(again), "letter-0 letter-1 letter-2 letter-3 letter-4 letter-5"; got != want {
		t.Errorf("second browse: %s; want %s, the order kept", got, want)
	}
	for _, l := range again {
		if l.Attempts != "1" {
			t.Errorf("letter %s after two browses: fila-attempts %s; want 1", l.Payload, l.Attempts)
		}
	}
	// An empty dead-letter queue is not subscribed to.
	none, err := s.browse(ctx, "mail.dlq", 5, 0)
	if err != nil || len(none) != 0 {
		t.Errorf("browse with none ready: %v, %v; want nothing", none, err)
	}
	if _, err := s.browse(ctx, "nosuch.dlq", 5, 5); !errors.Is(err, fila.ErrQueueNotFound) {
		t.Errorf("browse of nosuch.dlq: %v; want queue not found", err)
	}
}

func TestRates(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	if r := ratesOf(nil); r.Known || r.Delivered != 0 {
		t.Errorf("ratesOf(nil) = %+v; want nothing known", r)
	}
	one := []sample{{at: at(0), ready: 10, windowDelivered: 300, window: 30 * time.Second}}
	if r := ratesOf(one); r.Known || r.Delivered != 10 {
		t.Errorf("one sample: %+v; want 10/s delivered from the window, no depth rate", r)
	}
	// Depth 100, then 90 at 2s, 80 at 4s ... 0 at 20s; the dead letters
	// grow by 1 a second. The rates look back rateSpan (10s).
	var h []sample
	for i := range 11 {
		h = append(h, sample{at: at(float64(2 * i)), ready: uint64(100 - 10*i), deadLettered: uint64(2 * i), windowDelivered: 60, window: 60 * time.Second})
	}
	r := ratesOf(h)
	if !r.Known || r.Depth != -5 || r.DeadLetters != 1 || r.Delivered != 1 {
		t.Errorf("ratesOf = %+v; want depth -5/s, dead letters +1/s, delivered 1/s", r)
	}
	// Samples further apart than rateSpan: the last two.
	far := []sample{{at: at(0), ready: 50}, {at: at(20), ready: 10}}
	if r := ratesOf(far); !r.Known || r.Depth != -2 {
		t.Errorf("samples 20s apart: %+v; want depth -2/s", r)
	}
	for f, want := range map[float64]string{0: "0.0/s", -0.01: "0.0/s", 1.25: "+1.2/s", -3: "-3.0/s", 250: "+250/s"} {
		if got := fmtRate(f, true); got != want {
			t.Errorf("fmtRate(%v, true) = %q; want %q", f, got, want)
		}
	}
}
