package dashboard

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// The browser tests drive the dashboard in headless Chromium: what a
// person sees, read from the DOM after the page's script has run.
//
// FILA_UPDATE_SCREENSHOT=1 also writes docs/images/dashboard.png, the
// fairness page of a queue with a noisy and a quiet tenant after a minute
// of history.

// chromium returns the path of a Chromium (or Chrome) binary:
// $FILA_TEST_CHROMIUM, or the first of the usual names on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FILA_TEST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no Chromium found: the dashboard's browser tests need it; install the chromium package (apt-get install chromium) or set FILA_TEST_CHROMIUM to a Chrome binary")
	return ""
}

// browser starts headless Chromium for the test and returns a tab's
// context, bounded by limit. Uncaught exceptions of the pages' script
// fail the test.
func browser(t *testing.T, limit time.Duration) context.Context {
	t.Helper()
	var out strings.Builder
	var outMu sync.Mutex
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium(t)),
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1280, 1000),
		chromedp.CombinedOutput(writerFunc(func(p []byte) (int, error) {
			outMu.Lock()
			defer outMu.Unlock()
			return out.Write(p)
		})),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, tcancel := context.WithTimeout(ctx, limit)
	t.Cleanup(func() {
		tcancel()
		cancel()
		acancel()
		if t.Failed() {
			outMu.Lock()
			t.Logf("chromium output:\n%s", out.String())
			outMu.Unlock()
		}
	})
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("starting %s: %v", chromium(t), err)
	}
	var mu sync.Mutex
	var exceptions []string
	thrown := chromedp.Events(ctx, runtime.ExceptionThrown)
	go func() {
		for ev, err := range thrown {
			if err != nil {
				return
			}
			mu.Lock()
			exceptions = append(exceptions, fmt.Sprintf("%s: %s", ev.ExceptionDetails.Text, describe(ev.ExceptionDetails.Exception)))
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, e := range exceptions {
			t.Errorf("uncaught exception in the page: %s", e)
		}
	})
	return ctx
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func describe(o *runtime.RemoteObject) string {
	if o == nil {
		return ""
	}
	return o.Description
}

// run runs steps in the tab, failing the test on an error.
func run(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates expr in the tab.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// poll waits until the JavaScript expression cond is true in the tab, for
// up to two minutes.
func poll(t *testing.T, ctx context.Context, what, cond string) {
	t.Helper()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](cond,
		chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(2*time.Minute))); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, cond, err)
	}
}

// keyCells is one row of the fairness table, as the page shows it.
type keyCells struct {
	Key      string `json:"key"`
	Entitled string `json:"entitled"`
	Share    string `json:"share"`
	Pending  string `json:"pending"`
}

const readKeys = `Array.from(document.querySelectorAll('table.keys tbody tr')).map(r => ({
	key: r.dataset.key,
	entitled: r.querySelector('td.entitled').textContent.trim(),
	share: r.querySelector('td.share').textContent.trim(),
	pending: r.cells[1].textContent.trim(),
}))`

func parsePct(t *testing.T, s string) float64 {
	t.Helper()
	f, err := strconv.ParseFloat(strings.TrimSuffix(s, "%"), 64)
	if err != nil || !strings.HasSuffix(s, "%") {
		t.Fatalf("share %q: want a percentage", s)
	}
	return f
}

func TestBrowserFairnessAndDeadLetters(t *testing.T) {
	srv := filatest.Start(t)
	c := connect(t, srv.Addr, "")
	_, base := startDashboard(t, Config{Client: c, Broker: srv.Addr, Interval: 250 * time.Millisecond})
	ctx := browser(t, 5*time.Minute)

	// A queue shared by a noisy tenant (300 messages, weight 1) and a
	// quiet one (40 messages, weight 2); a consumer takes 30, so both
	// have deliveries in the window and messages pending.
	createQueue(t, c, fila.NewQueueSpec("jobs"))
	var msgs []*fila.Message
	for i := range 300 {
		msgs = append(msgs, fila.NewMessage("jobs", fmt.Appendf(nil, "noisy-%d", i)).FairnessKey("noisy"))
	}
	for i := range 40 {
		msgs = append(msgs, fila.NewMessage("jobs", fmt.Appendf(nil, "quiet-%d", i)).FairnessKey("quiet").Weight(2))
	}
	send(t, c, msgs)
	consume(t, c, "jobs", 30, ack)

	// The overview lists the queue with its depth.
	run(t, ctx, "opening the overview", chromedp.Navigate(base+"/"))
	poll(t, ctx, "the jobs row with 310 ready", `(() => {
		const r = document.querySelector('tr[data-queue="jobs"]');
		return r !== null && r.cells[1].textContent.trim() === '310';
	})()`)

	// The queue's page: both keys, their entitled shares (weights 1 and
	// 2 over 3) and the delivered shares QueueStats reports.
	run(t, ctx, "opening the queue", chromedp.Click(chromedp.CSS(`tr[data-queue="jobs"] a[href^="/queue"]`)),
		chromedp.WaitVisible(chromedp.CSS(`table.keys tr[data-key="quiet"]`)))
	var rows []keyCells
	waitUntil(t, "the page's shares to be QueueStats'", func() (bool, string) {
		rows = eval[[]keyCells](t, ctx, readKeys)
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := c.Admin().QueueStats(sctx, "jobs")
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]keyCells{}
		for _, k := range st.FairnessKeys {
			want[k.Key] = keyCells{Key: k.Key, Entitled: pct(k.EntitledShare), Share: pct(k.WindowShare), Pending: strconv.FormatUint(k.Pending, 10)}
		}
		if len(rows) != 2 || len(want) != 2 {
			return false, fmt.Sprintf("page %+v, QueueStats %+v", rows, want)
		}
		for _, r := range rows {
			if r != want[r.Key] {
				return false, fmt.Sprintf("page %+v, QueueStats %+v", rows, want)
			}
		}
		return true, ""
	})
	byKey := map[string]keyCells{}
	for _, r := range rows {
		byKey[r.Key] = r
	}
	if byKey["noisy"].Entitled != "33.3%" || byKey["quiet"].Entitled != "66.7%" {
		t.Errorf("entitled shares %+v; want noisy 33.3%%, quiet 66.7%%", rows)
	}
	noisy, quiet := parsePct(t, byKey["noisy"].Share), parsePct(t, byKey["quiet"].Share)
	if noisy <= 0 || quiet <= 0 || math.Abs(noisy+quiet-100) > 0.15 {
		t.Errorf("delivered shares noisy %v%%, quiet %v%%; want both above 0, adding up to 100%%", noisy, quiet)
	}
	jain, err := strconv.ParseFloat(eval[string](t, ctx, `document.querySelector('[data-field="jain"]').textContent.trim()`), 64)
	if err != nil || jain <= 0.5 || jain > 1 {
		t.Errorf("Jain's index on the page %v (%v); want above 1/2 (the index of two keys) up to 1", jain, err)
	}

	// The live chart: Jain's index and each key's delivered share, drawn
	// by the script from several samples, and a legend naming the keys.
	poll(t, ctx, "the charts drawn from at least three samples", `(() => {
		const j = document.querySelector('#chart-jain path.jain');
		const n = document.querySelector('#chart-share path.share[data-key="noisy"]');
		const q = document.querySelector('#chart-share path.share[data-key="quiet"]');
		const e = document.querySelector('#chart-share path.entitled[data-key="quiet"]');
		return j !== null && n !== null && q !== null && e !== null && j.getAttribute('d').split('L').length > 2;
	})()`)
	legend := eval[string](t, ctx, `document.getElementById('chart-legend').textContent`)
	if !strings.Contains(legend, "noisy delivered "+byKey["noisy"].Share) || !strings.Contains(legend, "quiet delivered "+byKey["quiet"].Share) {
		t.Errorf("chart legend %q; want each key's delivered share as in the table %+v", legend, rows)
	}

	if os.Getenv("FILA_UPDATE_SCREENSHOT") != "" {
		screenshot(t, ctx, srv, c)
	}

	// Dead letters: a queue of one attempt whose five messages fail.
	createQueue(t, c, fila.NewQueueSpec("payments").MaxAttempts(1))
	msgs = nil
	for i := range 5 {
		msgs = append(msgs, fila.NewMessage("payments", fmt.Appendf(nil, "charge-%d", i)).FairnessKey("acme").Header("order", fmt.Sprintf("A%d", i)))
	}
	send(t, c, msgs)
	deadLetter(t, c, "payments", 5, "card declined")

	run(t, ctx, "opening the overview", chromedp.Navigate(base+"/"))
	poll(t, ctx, "the payments row with 5 dead letters", `(() => {
		const r = document.querySelector('tr[data-queue="payments"]');
		return r !== null && r.cells[4].textContent.trim() === '5';
	})()`)
	run(t, ctx, "opening the dead letters", chromedp.Click(chromedp.CSS(`tr[data-queue="payments"] a[href^="/dlq"]`)),
		chromedp.WaitVisible(chromedp.ID("browse")))
	note := eval[string](t, ctx, `document.getElementById('browse-note').textContent`)
	if !strings.Contains(note, "Browsing leases and releases") {
		t.Errorf("DLQ page note %q; want it to say that browsing leases and releases", note)
	}
	run(t, ctx, "browsing", chromedp.Click(chromedp.ID("browse")), chromedp.WaitVisible(chromedp.CSS("table.letters")))
	type letterCells struct {
		Key      string `json:"key"`
		Attempts string `json:"attempts"`
		Failure  string `json:"failure"`
		Headers  string `json:"headers"`
		Payload  string `json:"payload"`
	}
	letters := eval[[]letterCells](t, ctx, `Array.from(document.querySelectorAll('table.letters tbody tr')).map(r => ({
		key: r.querySelector('td.key').textContent.trim(),
		attempts: r.querySelector('td.attempts').textContent.trim(),
		failure: r.querySelector('td.failure').textContent.trim(),
		headers: r.querySelector('td.headers').textContent.trim(),
		payload: r.querySelector('td.payload').textContent.trim(),
	}))`)
	if len(letters) != 5 {
		t.Fatalf("browse shows %d dead letters: %+v; want 5", len(letters), letters)
	}
	for i, l := range letters {
		want := letterCells{Key: "acme", Attempts: "1", Failure: "card declined", Headers: fmt.Sprintf("order=A%d", i), Payload: fmt.Sprintf("charge-%d", i)}
		if l != want {
			t.Errorf("dead letter %d: %+v; want %+v", i, l, want)
		}
	}
	// Browsing released them: all ready again, none leased.
	if q := queueInfo(t, c, "payments.dlq"); q.Ready != 5 || q.Leased != 0 {
		t.Errorf("payments.dlq after the browse: ready %d, leased %d; want 5 and 0", q.Ready, q.Leased)
	}

	// Redrive 3, answering the page's confirmation.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	asked := make(chan string, 1)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			select {
			case asked <- ev.Message:
			default:
			}
			chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	run(t, ctx, "redriving 3", chromedp.SetValue(chromedp.CSS(`#redrive-form input[name="count"]`), "3"),
		chromedp.Click(chromedp.ID("redrive")), chromedp.WaitVisible(chromedp.ID("redrive-result")))
	select {
	case msg := <-asked:
		if !strings.Contains(msg, "Move up to 3 dead letters from payments.dlq back to payments") {
			t.Errorf("confirmation %q; want it to name the count and the queues", msg)
		}
	default:
		t.Error("the redrive was not confirmed with a dialog")
	}
	result := eval[string](t, ctx, `document.getElementById('redrive-result').textContent`)
	if !strings.Contains(result, "Moved 3 of the 3") {
		t.Errorf("redrive result %q; want Moved 3 of the 3", result)
	}
	if q := queueInfo(t, c, "payments.dlq"); q.Ready != 2 {
		t.Errorf("payments.dlq ready %d after redriving 3 of 5; want 2", q.Ready)
	}
	if q := queueInfo(t, c, "payments"); q.Ready != 3 {
		t.Errorf("payments ready %d after redriving 3; want 3", q.Ready)
	}
	shown := eval[string](t, ctx, `document.querySelector('[data-field="dlq-ready"]').textContent.trim()`)
	if shown != "2" {
		t.Errorf("the page shows %q dead letters ready after the redrive; want 2", shown)
	}
}

// screenshot writes docs/images/dashboard.png: the fairness page of a
// queue where a noisy tenant has a backlog of thousands (its messages
// taking tokens of a bucket of 25 a second) and a quiet one, coming later,
// keeps a short queue, after a minute of a consumer taking 40 messages a
// second, sampled every second.
func screenshot(t *testing.T, ctx context.Context, srv *filatest.Server, c *fila.Client) {
	t.Helper()
	_, base := startDashboard(t, Config{Client: c, Broker: srv.Addr, Interval: time.Second})
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	createQueue(t, c, fila.NewQueueSpec("orders"))
	if err := c.Admin().SetConfig(sctx, "throttle.provider:stripe", "25,50"); err != nil {
		t.Fatal(err)
	}
	var msgs []*fila.Message
	for i := range 4000 {
		msgs = append(msgs, fila.NewMessage("orders", fmt.Appendf(nil, "noisy-%d", i)).FairnessKey("noisy").ThrottleKey("provider:stripe"))
	}
	send(t, c, msgs)
	sub, err := c.Consumer().Subscribe(sctx, "orders", fila.Prefetch(4))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(sctx)
	tick := time.NewTicker(25 * time.Millisecond)
	defer tick.Stop()
	end := time.Now().Add(75 * time.Second)
	for n := 0; time.Now().Before(end); n++ {
		<-tick.C
		// The quiet tenant comes after 10s with 60 messages, then sends
		// 22 a second, a little over its half of the consumer's 40, so
		// that it stays backlogged with a short queue.
		if n%20 == 0 && n >= 400 {
			var quiet []*fila.Message
			for i := range map[bool]int{true: 60, false: 11}[n == 400] {
				quiet = append(quiet, fila.NewMessage("orders", fmt.Appendf(nil, "quiet-%d-%d", n, i)).FairnessKey("quiet"))
			}
			send(t, c, quiet)
		}
		d, err := sub.Next(sctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Ack(sctx); err != nil {
			t.Fatal(err)
		}
	}
	run(t, ctx, "opening the orders page", chromedp.Navigate(base+"/queue?name=orders"),
		chromedp.WaitVisible(chromedp.CSS(`table.keys tr[data-key="quiet"]`)))
	poll(t, ctx, "the charts", `document.querySelector('#chart-share path.share') !== null`)
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join("..", "..", "..", "docs", "images", "dashboard.png")
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", out, len(png))
}
