package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
)

// These tests run the fila binary ($FILA_TEST_CLI_BIN, or one built once
// per test process) against a real fila-server, and check exit codes,
// stdout (JSON where scripts read it) and stderr.

var (
	buildOnce sync.Once
	cliBin    string
	buildErr  error
)

func binary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FILA_TEST_CLI_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fila-cli-bin")
		if err != nil {
			buildErr = err
			return
		}
		cliBin = filepath.Join(dir, "fila")
		out, err := exec.Command("go", "build", "-o", cliBin, "github.com/fila-mq/fila/cli/cmd/fila").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build fila: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return cliBin
}

// cli runs the fila binary against one broker.
type cli struct {
	t    *testing.T
	addr string
	env  []string
}

func newCLI(t *testing.T, srv *filatest.Server, env ...string) *cli {
	return &cli{t: t, addr: srv.Addr, env: env}
}

type result struct {
	stdout, stderr string
	code           int
}

func (c *cli) runIn(stdin string, args ...string) result {
	c.t.Helper()
	cmd := exec.Command(binary(c.t), args...)
	cmd.Env = append(os.Environ(), "FILA_ADDR="+c.addr, "FILA_API_KEY=", "FILA_OUTPUT=")
	cmd.Env = append(cmd.Env, c.env...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		c.t.Fatalf("fila %s: no exit in 2 minutes", strings.Join(args, " "))
	}
	return result{out.String(), errb.String(), cmd.ProcessState.ExitCode()}
}

func (c *cli) run(args ...string) result {
	c.t.Helper()
	return c.runIn("", args...)
}

// ok runs a command that must succeed and returns its stdout.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	r := c.run(args...)
	if r.code != 0 {
		c.t.Fatalf("fila %s: exit %d; want 0\nstderr: %s", strings.Join(args, " "), r.code, r.stderr)
	}
	return r.stdout
}

// json runs a command with -o json that must succeed and decodes its
// stdout into v.
func (c *cli) json(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "-o", "json")...)
	if err := json.Unmarshal([]byte(out), v); err != nil {
		c.t.Fatalf("fila %s -o json: %v\nstdout: %s", strings.Join(args, " "), err, out)
	}
}

// fails runs a command that must exit with code and an error on stderr
// containing want.
// retry runs fila with args until it exits 0, for up to a minute (a
// cluster electing its leaders answers with errors meanwhile), and
// returns its stdout; it fails the test when the minute runs out.
func (c *cli) retry(args ...string) string {
	c.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		r := c.run(args...)
		if r.code == 0 {
			return r.stdout
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("fila %s: exit %d: %s", strings.Join(args, " "), r.code, r.stderr)
		}
	}
}

func (c *cli) fails(code int, want string, args ...string) result {
	c.t.Helper()
	r := c.run(args...)
	if r.code != code || !strings.Contains(r.stderr, want) {
		c.t.Fatalf("fila %s: exit %d, stderr %q; want exit %d and %q", strings.Join(args, " "), r.code, r.stderr, code, want)
	}
	return r
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}$`)

func TestQueueCommands(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	dir := t.TempDir()
	hook := filepath.Join(dir, "hook.lua")
	if err := os.WriteFile(hook, []byte(`function on_enqueue(msg) return { fairness_key = msg.headers["tenant"] or "none" } end`), 0o644); err != nil {
		t.Fatal(err)
	}

	var created map[string]string
	c.json(&created, "queue", "create", "orders", "--visibility-timeout", "45s", "--max-attempts", "5",
		"--backoff-base", "2s", "--backoff-max", "1m", "--dedup-window", "10m", "--on-enqueue", hook)
	if created["name"] != "orders" || created["dead_letter_queue"] != "orders.dlq" {
		t.Errorf("queue create -o json = %v; want orders, orders.dlq", created)
	}
	if out := c.ok("queue", "create", "billing"); !strings.Contains(out, "created queue billing") {
		t.Errorf("queue create billing = %q", out)
	}
	r := c.fails(1, "already exists", "queue", "create", "orders", "-o", "json")
	var e map[string]string
	if err := json.Unmarshal([]byte(r.stderr), &e); err != nil || e["code"] != "QUEUE_EXISTS" {
		t.Errorf("queue create orders -o json stderr = %q; want JSON with code QUEUE_EXISTS", r.stderr)
	}
	bad := filepath.Join(dir, "bad.lua")
	os.WriteFile(bad, []byte("function on_enqueue(msg) return {"), 0o644)
	c.fails(1, "script error", "queue", "create", "broken", "--on-enqueue", bad)
	c.fails(1, "no such file", "queue", "create", "broken", "--on-failure", filepath.Join(dir, "missing.lua"))

	c.ok("enqueue", "orders", "x", "--header", "tenant=acme")
	var qs []struct {
		Name   string `json:"name"`
		Ready  uint64 `json:"ready"`
		DLQ    string `json:"dead_letter_queue"`
		Parent string `json:"parent"`
	}
	c.json(&qs, "queue", "list")
	if len(qs) != 4 || qs[2].Name != "orders" || qs[2].Ready != 1 || qs[2].DLQ != "orders.dlq" || qs[3].Parent != "orders" {
		t.Errorf("queue list -o json = %+v; want billing, billing.dlq, orders (ready 1), orders.dlq", qs)
	}
	if out := c.ok("queue", "list"); !strings.HasPrefix(out, "NAME") || !strings.Contains(out, "orders.dlq") {
		t.Errorf("queue list = %q; want a table", out)
	}

	var st struct {
		Name              string `json:"name"`
		Ready             uint64 `json:"ready"`
		VisibilityTimeout int64  `json:"visibility_timeout_ms"`
		MaxAttempts       uint32 `json:"max_attempts"`
		FairnessKeys      []struct {
			Key     string `json:"key"`
			Pending uint64 `json:"pending"`
		} `json:"fairness_keys"`
		Hooks struct {
			OnEnqueueCalls uint64 `json:"on_enqueue_calls"`
		} `json:"hooks"`
	}
	c.json(&st, "queue", "inspect", "orders")
	if st.Ready != 1 || st.VisibilityTimeout != 45000 || st.MaxAttempts != 5 || len(st.FairnessKeys) != 1 || st.FairnessKeys[0].Key != "acme" || st.Hooks.OnEnqueueCalls != 1 {
		t.Errorf("queue inspect orders -o json = %+v; want ready 1, 45s, 5 attempts, key acme, 1 hook call", st)
	}
	if out := c.ok("queue", "inspect", "orders"); !strings.Contains(out, "FAIRNESS KEY") || !strings.Contains(out, "acme") || !strings.Contains(out, "policy stfq") {
		t.Errorf("queue inspect orders = %q; want policy stfq (the default) and the fairness key table", out)
	}
	// A drr queue shows it, and each key's DRR deficit.
	c.ok("queue", "create", "rounds", "--policy", "drr")
	c.ok("enqueue", "rounds", "x", "--fairness-key", "acme")
	if out := c.ok("queue", "inspect", "rounds"); !strings.Contains(out, "policy drr") || !strings.Contains(out, "DEFICIT") || strings.Contains(out, "latency lane") {
		t.Errorf("queue inspect rounds = %q; want policy drr, a DEFICIT column and no latency lane", out)
	}
	// A queue with the stfq policy shows it, and no DRR deficit.
	c.ok("queue", "create", "fair", "--policy", "stfq", "--latency-budget", "20", "--latency-idle", "1s")
	c.ok("enqueue", "fair", "x", "--fairness-key", "acme")
	var fair struct {
		Policy        string `json:"policy"`
		LatencyBudget uint32 `json:"latency_budget"`
		LatencyIdle   int64  `json:"latency_idle_ms"`
	}
	if c.json(&fair, "queue", "inspect", "fair"); fair.Policy != "stfq" || fair.LatencyBudget != 20 || fair.LatencyIdle != 1000 {
		t.Errorf("queue inspect fair -o json: %+v; want stfq, latency lane 20 after 1000ms", fair)
	}
	if out := c.ok("queue", "inspect", "fair"); !strings.Contains(out, "policy stfq") || strings.Contains(out, "DEFICIT") ||
		!strings.Contains(out, "latency lane: 20 deliveries per key after 1s idle") {
		t.Errorf("queue inspect fair = %q; want policy stfq, its latency lane and no DEFICIT column", out)
	}
	// Fairness you can see: each key's entitled share against what it
	// got over the window, its lane and dwell; Jain's index.
	c.ok("queue", "create", "shares", "--policy", "stfq")
	for range 8 {
		c.ok("enqueue", "shares", "x", "--fairness-key", "light", "--weight", "1")
		c.ok("enqueue", "shares", "x", "--fairness-key", "heavy", "--weight", "3")
	}
	c.ok("consume", "shares", "--count", "8", "--prefetch", "1")
	var shares struct {
		BackloggedKeys  uint64  `json:"backlogged_keys"`
		WindowDelivered uint64  `json:"window_delivered"`
		JainIndex       float64 `json:"jain_index"`
		FairnessKeys    []struct {
			Key           string  `json:"key"`
			EntitledShare float64 `json:"entitled_share"`
			WindowShare   float64 `json:"window_share"`
			Lane          string  `json:"lane"`
			DwellP99      int64   `json:"dwell_p99_ms"`
		} `json:"fairness_keys"`
	}
	c.json(&shares, "queue", "inspect", "shares", "--top", "1")
	// (The consumer may have been delivered one more before it closed.)
	if shares.BackloggedKeys != 2 || shares.WindowDelivered < 8 || shares.JainIndex <= 0 || len(shares.FairnessKeys) != 1 {
		t.Errorf("queue inspect shares --top 1 -o json = %+v; want 2 backlogged, 8 delivered, a Jain's index, one key listed", shares)
	} else if k := shares.FairnessKeys[0]; k.EntitledShare != map[string]float64{"light": 0.25, "heavy": 0.75}[k.Key] || k.WindowShare <= 0 || k.Lane == "" || k.DwellP99 <= 0 {
		t.Errorf("most pending key = %+v; want its entitled share (light 0.25, heavy 0.75), a share of the deliveries, a lane, a dwell", k)
	}
	if out := c.ok("queue", "inspect", "shares"); !strings.Contains(out, "2 backlogged keys") || !strings.Contains(out, "Jain's index") ||
		!strings.Contains(out, "ENTITLED") || !strings.Contains(out, "25.0%") || !strings.Contains(out, "75.0%") {
		t.Errorf("queue inspect shares = %q; want the keys' entitled shares and Jain's index", out)
	}
	// Tenants: a tenant's keys share its one share.
	c.ok("queue", "create", "tenants", "--tenant-separator", "/", "--cost-by-time")
	for _, k := range []string{"acme/a", "acme/b", "acme/c", "solo"} {
		c.ok("enqueue", "tenants", "x", "--fairness-key", k)
	}
	var tenants struct {
		Policy       string `json:"policy"`
		Separator    string `json:"tenant_separator"`
		CostByTime   bool   `json:"cost_by_time"`
		FairnessKeys []struct {
			Key           string  `json:"key"`
			EntitledShare float64 `json:"entitled_share"`
		} `json:"fairness_keys"`
	}
	c.json(&tenants, "queue", "inspect", "tenants")
	if tenants.Policy != "stfq" || tenants.Separator != "/" || !tenants.CostByTime || len(tenants.FairnessKeys) != 4 {
		t.Errorf("queue inspect tenants -o json = %+v; want stfq, separator /, cost by time, 4 keys", tenants)
	}
	for _, k := range tenants.FairnessKeys {
		if want := map[bool]float64{true: 0.5, false: 0.5 / 3}[k.Key == "solo"]; math.Abs(k.EntitledShare-want) > 1e-9 {
			t.Errorf("key %s: entitled share %v; want %v", k.Key, k.EntitledShare, want)
		}
	}
	if out := c.ok("queue", "inspect", "tenants"); !strings.Contains(out, `a key's tenant is the key up to the first "/"`) || !strings.Contains(out, "per tenant") || !strings.Contains(out, "cost by time") {
		t.Errorf("queue inspect tenants = %q; want the tenant separator, a latency lane per tenant and cost by time", out)
	}
	c.fails(1, `tenant_separator "/"`, "queue", "create", "odd", "--policy", "drr", "--tenant-separator", "/")
	c.fails(1, "cost_by_time", "queue", "create", "odd", "--policy", "drr", "--cost-by-time")
	c.fails(2, "--top 0: want 1 to 1000", "queue", "inspect", "shares", "--top", "0")
	c.fails(1, `policy "fifo": want "drr" or "stfq"`, "queue", "create", "odd", "--policy", "fifo")
	c.fails(1, "latency_budget 2000000", "queue", "create", "odd", "--policy", "stfq", "--latency-budget", "2000000")
	c.ok("queue", "delete", "fair")
	// Errors name the command run, not the protocol operation.
	c.fails(3, "fila: queue inspect nope: queue not found", "queue", "inspect", "nope")
	c.fails(1, "fila: queue create orders: queue already exists", "queue", "create", "orders")

	var del map[string]string
	c.json(&del, "queue", "delete", "billing")
	if del["deleted"] != "billing" {
		t.Errorf("queue delete -o json = %v", del)
	}
	c.fails(3, "fila: queue delete billing: queue not found", "queue", "delete", "billing")
}

func TestEnqueueAndConsume(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	c.ok("queue", "create", "jobs", "--max-attempts", "2", "--backoff-base", "1ms", "--backoff-max", "1ms", "--visibility-timeout", "1h")

	var sent struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	c.json(&sent, "enqueue", "jobs", "hello", "--header", "tenant=acme", "--header", "trace=t1",
		"--fairness-key", "acme", "--weight", "2", "--throttle-key", "provider:a", "--throttle-key", "provider:b",
		"--idempotency-key", "job-1", "--ordering-key", "cart-1")
	if !uuidRE.MatchString(sent.ID) || sent.Duplicate {
		t.Fatalf("enqueue -o json = %+v; want a UUIDv7, not duplicate", sent)
	}
	if out := strings.TrimSpace(c.ok("enqueue", "jobs", "again", "--idempotency-key", "job-1")); out != sent.ID+" (duplicate)" {
		t.Errorf("enqueue duplicate = %q; want %q", out, sent.ID+" (duplicate)")
	}
	if out := strings.TrimSpace(c.ok("enqueue", "jobs", "later", "--delay", "1h")); !uuidRE.MatchString(out) {
		t.Errorf("enqueue --delay = %q; want an ID", out)
	}

	var d struct {
		ID           string            `json:"id"`
		Queue        string            `json:"queue"`
		Attempt      uint32            `json:"attempt"`
		FairnessKey  string            `json:"fairness_key"`
		Weight       uint32            `json:"weight"`
		ThrottleKeys []string          `json:"throttle_keys"`
		OrderingKey  string            `json:"ordering_key"`
		Headers      map[string]string `json:"headers"`
		Payload      string            `json:"payload"`
	}
	// --no-ack leaves the lease: the queue shows it leased afterwards.
	c.json(&d, "consume", "jobs", "--count", "1", "--no-ack")
	if d.ID != sent.ID || d.Queue != "jobs" || d.Attempt != 1 || d.FairnessKey != "acme" || d.Weight != 2 || d.OrderingKey != "cart-1" ||
		d.Payload != "hello" || d.Headers["tenant"] != "acme" || strings.Join(d.ThrottleKeys, ",") != "provider:a,provider:b" {
		t.Fatalf("consume -o json = %+v; want the enqueued message", d)
	}

	// Stdin: one message per line, in one batch.
	r := c.runIn("one\ntwo\nthree\n", "enqueue", "jobs", "-", "--fairness-key", "batch")
	ids := strings.Fields(r.stdout)
	if r.code != 0 || len(ids) != 3 {
		t.Fatalf("enqueue - = exit %d, %q; want 3 IDs", r.code, r.stdout)
	}
	r = c.runIn("four\n", "enqueue", "jobs", "-", "-o", "json")
	var lines []map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &lines); r.code != 0 || err != nil || len(lines) != 1 {
		t.Fatalf("enqueue - -o json = exit %d, %q; want one result", r.code, r.stdout)
	}
	c.fails(3, "queue not found", "enqueue", "nope", "x")
	if r := c.runIn("x\n", "enqueue", "nope", "-"); r.code != 3 || !strings.Contains(r.stderr, "queue not found") {
		t.Errorf("enqueue nope - = exit %d, %q; want 3 and queue not found", r.code, r.stderr)
	}
	c.fails(2, "key=value", "enqueue", "jobs", "x", "--header", "novalue")
	c.fails(2, "duplicate", "enqueue", "jobs", "-", "--idempotency-key", "k")

	// Table output: ID, attempt, fairness key, payload; each acked.
	out := c.ok("consume", "jobs", "--count", "4", "--prefetch", "2")
	for _, p := range []string{"one", "two", "three", "four"} {
		if !strings.Contains(out, "attempt=1  key=") || !strings.Contains(out, "  "+p+"\n") {
			t.Errorf("consume --count 4 = %q; want %q with attempt and key", out, p)
		}
	}
	// --nack fails a delivery: with max attempts 2 and a 1ms backoff it
	// comes back once, then goes to the DLQ.
	c.ok("enqueue", "jobs", "poison")
	out = c.ok("consume", "jobs", "--count", "1", "--nack", "bad input", "--wait", "1m")
	if !strings.Contains(out, "poison") {
		t.Fatalf("consume --nack = %q; want poison", out)
	}
	out = c.ok("consume", "jobs", "--count", "1", "--nack", "bad input again", "--wait", "1m")
	if !strings.Contains(out, "attempt=2") {
		t.Fatalf("consume --nack (second) = %q; want attempt=2", out)
	}
	// --release peeks: the dead letter is ready again at once, its
	// attempt and headers unchanged, and redrive can move it.
	for range 2 {
		c.json(&d, "consume", "jobs.dlq", "--count", "1", "--release", "--wait", "1m")
		if d.Payload != "poison" || d.Attempt != 3 || d.Headers["fila-error"] != "bad input again" || d.Headers["fila-attempts"] != "2" {
			t.Errorf("consume jobs.dlq --release = %+v; want poison, attempt 3, with fila-error and fila-attempts 2", d)
		}
	}
	var moved struct {
		Moved uint64 `json:"moved"`
	}
	if c.json(&moved, "redrive", "jobs.dlq"); moved.Moved != 1 {
		t.Errorf("redrive after consume --release moved %d; want 1", moved.Moved)
	}
	c.ok("consume", "jobs", "--count", "1", "--nack", "bad input", "--wait", "1m")
	c.ok("consume", "jobs", "--count", "1", "--nack", "bad input again", "--wait", "1m")
	c.json(&d, "consume", "jobs.dlq", "--count", "1", "--no-ack")
	if d.Payload != "poison" || d.Headers["fila-error"] != "bad input again" {
		t.Errorf("consume jobs.dlq = %+v; want poison with fila-error", d)
	}
	c.fails(3, "fila: consume nope: queue not found", "consume", "nope", "--wait", "1s")
	// --wait ends an idle consume with success.
	if r := c.run("consume", "billing-none", "--wait", "10ms"); r.code != 3 {
		t.Errorf("consume of a missing queue = exit %d (%s); want 3", r.code, r.stderr)
	}
	c.fails(2, "exclude", "consume", "jobs", "--no-ack", "--nack", "x")
	c.fails(2, "exclude", "consume", "jobs", "--release", "--no-ack")
}

func TestRedriveAndConfig(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	c.ok("queue", "create", "jobs", "--max-attempts", "1")
	for i := range 3 {
		c.ok("enqueue", "jobs", fmt.Sprint(i))
	}
	c.ok("consume", "jobs", "--count", "3", "--nack", "boom")
	var moved struct {
		Moved uint64 `json:"moved"`
	}
	c.json(&moved, "redrive", "jobs.dlq", "--count", "2")
	if moved.Moved != 2 {
		t.Errorf("redrive --count 2 = %d; want 2", moved.Moved)
	}
	if out := c.ok("redrive", "jobs.dlq"); !strings.Contains(out, "moved 1 messages from jobs.dlq") {
		t.Errorf("redrive = %q; want the remaining 1", out)
	}
	c.fails(1, "not a dead-letter queue", "redrive", "jobs")
	c.fails(3, "queue not found", "redrive", "nope.dlq")

	c.ok("config", "set", "throttle.provider:stripe", "100,200")
	c.ok("config", "set", "routing.region", "eu")
	if out := strings.TrimSpace(c.ok("config", "get", "routing.region")); out != "eu" {
		t.Errorf("config get = %q; want eu", out)
	}
	var kv map[string]string
	c.json(&kv, "config", "get", "throttle.provider:stripe")
	if kv["value"] != "100,200" {
		t.Errorf("config get -o json = %v", kv)
	}
	c.fails(3, "not set", "config", "get", "unset.key")
	c.fails(1, "invalid config value", "config", "set", "throttle.x", "fast")
	var es []map[string]string
	c.json(&es, "config", "list", "--prefix", "throttle.")
	if len(es) != 1 || es[0]["key"] != "throttle.provider:stripe" {
		t.Errorf("config list --prefix throttle. = %v", es)
	}
	if out := c.ok("config", "list"); !strings.Contains(out, "routing.region") || !strings.Contains(out, "throttle.provider:stripe") {
		t.Errorf("config list = %q", out)
	}
	var gone map[string]any
	c.json(&gone, "config", "delete", "routing.region")
	if gone["existed"] != true {
		t.Errorf("config delete = %v; want existed", gone)
	}
	c.fails(3, "fila: config delete routing.region: not set", "config", "delete", "routing.region")
}

func TestAuthCommands(t *testing.T) {
	const root = "bootstrap-secret-0123456789"
	srv := filatest.Start(t, filatest.WithEnv("FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY="+root))
	anon := newCLI(t, srv)
	anon.fails(1, "unauthorized", "queue", "list")
	c := newCLI(t, srv, "FILA_API_KEY="+root)
	c.ok("queue", "create", "orders.eu")
	c.ok("queue", "create", "billing")

	var key struct {
		ID     string `json:"key_id"`
		Name   string `json:"name"`
		Secret string `json:"secret"`
	}
	c.json(&key, "auth", "create", "--name", "ci", "--perm", "produce:orders.*")
	if key.ID == "" || key.Secret == "" || key.Name != "ci" {
		t.Fatalf("auth create -o json = %+v", key)
	}
	if out := c.ok("auth", "create", "--name", "ops"); !strings.Contains(out, "secret:") {
		t.Errorf("auth create = %q; want the secret", out)
	}
	c.fails(2, "--name is required", "auth", "create")
	c.fails(2, "want produce, consume or admin", "auth", "create", "--name", "x", "--perm", "publish:*")

	ci := newCLI(t, srv, "FILA_API_KEY="+key.Secret)
	ci.ok("enqueue", "orders.eu", "x")
	r := ci.fails(1, "forbidden", "enqueue", "billing", "x", "-o", "json")
	if !strings.Contains(r.stderr, `"code":"FORBIDDEN"`) {
		t.Errorf("forbidden enqueue -o json stderr = %q; want code FORBIDDEN", r.stderr)
	}
	// The flag overrides the environment.
	anon.ok("--api-key", key.Secret, "enqueue", "orders.eu", "y")
	// The cluster's status needs admin on *.
	ci.fails(1, "fila: cluster status: forbidden", "cluster", "status")
	c.ok("cluster", "status")

	var acl struct {
		ID          string   `json:"key_id"`
		Permissions []string `json:"permissions"`
	}
	c.json(&acl, "auth", "acl", "set", key.ID, "produce:orders.*", "consume:orders.eu")
	if strings.Join(acl.Permissions, " ") != "produce:orders.* consume:orders.eu" {
		t.Errorf("auth acl set -o json = %+v", acl)
	}
	if out := c.ok("auth", "acl", "get", key.ID); out != "produce:orders.*\nconsume:orders.eu\n" {
		t.Errorf("auth acl get = %q", out)
	}
	c.json(&acl, "auth", "acl", "get", key.ID)
	if len(acl.Permissions) != 2 {
		t.Errorf("auth acl get -o json = %+v", acl)
	}
	ci.ok("consume", "orders.eu", "--count", "2")
	c.fails(3, "api key not found", "auth", "acl", "get", "nope")
	c.fails(3, "api key not found", "auth", "acl", "set", "nope", "produce:*")

	var keys []struct {
		ID          string   `json:"key_id"`
		Name        string   `json:"name"`
		Permissions []string `json:"permissions"`
	}
	c.json(&keys, "auth", "list")
	names := map[string]bool{}
	for _, k := range keys {
		names[k.Name] = true
	}
	if !names["ci"] || !names["ops"] {
		t.Errorf("auth list -o json = %+v; want ci and ops", keys)
	}
	if out := c.ok("auth", "list"); !strings.Contains(out, "produce:orders.* consume:orders.eu") {
		t.Errorf("auth list = %q", out)
	}

	var revoked map[string]string
	c.json(&revoked, "auth", "revoke", key.ID)
	if revoked["revoked"] != key.ID {
		t.Errorf("auth revoke -o json = %v", revoked)
	}
	ci.fails(1, "unauthorized", "queue", "list")
	c.fails(3, "api key not found", "auth", "revoke", key.ID)
}

// TestAPIKeySources checks where the CLI takes the API key from: --api-key,
// --api-key-file, FILA_API_KEY, in that order, never both flags; and that
// --help never shows the environment's secret.
func TestAPIKeySources(t *testing.T) {
	const root = "bootstrap-secret-0123456789"
	srv := filatest.Start(t, filatest.WithEnv("FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY="+root))
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	keyFile := write("key", root+"\n")
	crlf := write("key-crlf", root+"\r\n")
	empty := write("empty", "\n")

	anon := newCLI(t, srv)
	anon.ok("--api-key-file", keyFile, "queue", "list")
	anon.ok("--api-key-file", crlf, "queue", "list")
	anon.ok("--api-key", root, "queue", "list")
	anon.fails(2, "--api-key and --api-key-file: give one or the other", "--api-key", root, "--api-key-file", keyFile, "queue", "list")
	anon.fails(2, "the file is empty", "--api-key-file", empty, "queue", "list")
	r := anon.fails(1, "--api-key-file: open", "--api-key-file", filepath.Join(dir, "missing"), "queue", "list")
	if strings.Contains(r.stderr, root) {
		t.Errorf("error shows the secret: %q", r.stderr)
	}

	// The environment is the last resort: a flag or file overrides it.
	env := newCLI(t, srv, "FILA_API_KEY="+root)
	env.ok("queue", "list")
	wrongEnv := newCLI(t, srv, "FILA_API_KEY=fila_wrong")
	wrongEnv.fails(1, "unauthorized", "queue", "list")
	wrongEnv.ok("--api-key-file", keyFile, "queue", "list")
	wrongEnv.ok("--api-key", root, "queue", "list")

	// --help lists the flags without the environment's secret as a
	// default, and says where the key may come from.
	for _, args := range [][]string{{"--help"}, {"queue", "list", "--help"}} {
		out := env.ok(args...)
		if strings.Contains(out, root) {
			t.Errorf("fila %s shows FILA_API_KEY's secret:\n%s", strings.Join(args, " "), out)
		}
		if !strings.Contains(out, "--api-key-file") || !strings.Contains(out, "process list") {
			t.Errorf("fila %s does not document --api-key-file and the process list:\n%s", strings.Join(args, " "), out)
		}
	}
}

func TestGlobalBehaviour(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)

	var ping map[string]any
	c.json(&ping, "ping")
	if ping["node_id"] != "test" || !strings.HasPrefix(fmt.Sprint(ping["server"]), "fila-server/") {
		t.Errorf("ping -o json = %v", ping)
	}
	if out := c.ok("ping"); !strings.Contains(out, "node test") {
		t.Errorf("ping = %q", out)
	}
	if out := c.ok("version"); !strings.HasPrefix(out, "fila ") {
		t.Errorf("version = %q", out)
	}

	// Usage errors exit 2.
	c.fails(2, "want table or json", "queue", "list", "-o", "yaml")
	c.fails(2, "unknown flag", "queue", "list", "--bogus")
	c.fails(2, "accepts 1 arg", "queue", "create")
	c.fails(2, "--producers 0: want 1 or more", "bench", "produce", "--producers", "0", "--count", "1")
	c.fails(2, "want a comma-separated list", "bench", "fairness", "--weights", "1,x")
	c.fails(2, `unknown command "frobnicate" for "fila"`, "frobnicate")
	// --addr overrides FILA_ADDR; an unreachable broker exits 1.
	stopped := filatest.Start(t)
	addr := stopped.Addr
	stopped.Stop(t)
	c.fails(1, "fila: connect "+addr, "--addr", addr, "--timeout", "5s", "queue", "list")
	// FILA_OUTPUT selects JSON.
	out := (&cli{t: t, addr: srv.Addr, env: []string{"FILA_OUTPUT=json"}}).ok("queue", "list")
	if strings.TrimSpace(out) != "[]" {
		t.Errorf("FILA_OUTPUT=json queue list = %q; want []", out)
	}

	// Shell completion scripts, and dynamic completion of queue names.
	for _, sh := range []string{"bash", "zsh", "fish", "powershell"} {
		if out := c.ok("completion", sh); len(out) < 100 {
			t.Errorf("completion %s = %q", sh, out)
		}
	}
	c.ok("queue", "create", "orders")
	c.ok("queue", "create", "outbox")
	out = c.ok("__complete", "queue", "inspect", "or")
	if !strings.Contains(out, "orders\n") || strings.Contains(out, "outbox") {
		t.Errorf("completion of queue inspect or = %q; want orders only", out)
	}
	out = c.ok("__complete", "redrive", "")
	if !strings.Contains(out, "orders.dlq") || strings.Contains(out, "orders\n") {
		t.Errorf("completion of redrive = %q; want DLQs only", out)
	}
}

// TestUsageErrors checks that every mistake in how a command is called
// exits 2 before anything is done to the broker.
func TestUsageErrors(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)

	// Unknown commands, at the top or under a group, and extra arguments.
	c.fails(2, `unknown command "bogus" for "fila"`, "bogus")
	c.fails(2, `unknown command "extra-arg" for "fila bench produce"`, "bench", "produce", "extra-arg", "--count", "1")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"queue", "stats", "orders"}, `unknown command "stats" for "fila queue"`},
		{[]string{"auth", "nope"}, `unknown command "nope" for "fila auth"`},
		{[]string{"cluster", "nope"}, `unknown command "nope" for "fila cluster"`},
		{[]string{"auth", "acl", "nope"}, `unknown command "nope" for "fila auth acl"`},
		{[]string{"bench", "nope"}, `unknown command "nope" for "fila bench"`},
		{[]string{"completion", "nope"}, `unknown command "nope" for "fila completion"`},
		{[]string{"help", "bogus"}, `unknown command "bogus" for "fila"`},
		{[]string{"help", "queue", "stats"}, `unknown command "stats" for "fila queue"`},
	} {
		r := c.fails(2, tc.want, tc.args...)
		if path := strings.TrimSuffix(strings.SplitN(tc.want, `for "`, 2)[1], `"`); !strings.Contains(r.stderr, "Run '"+path+" --help' for usage.") {
			t.Errorf("fila %s: stderr %q; want the hint to run %s --help", strings.Join(tc.args, " "), r.stderr, path)
		}
	}
	c.fails(2, "Did you mean this?\n\tqueue", "queu", "list")
	// A group alone, or help of one, prints its help.
	for _, args := range [][]string{{"queue"}, {"help", "queue"}, {"queue", "--help"}} {
		if out := c.ok(args...); !strings.Contains(out, "Available Commands") || !strings.Contains(out, "fila queue [command]") {
			t.Errorf("fila %s = %q; want the help of queue", strings.Join(args, " "), out)
		}
	}
	// A required flag.
	c.fails(2, "--trace is required", "bench", "replay")
	c.fails(2, `required flag(s) "to" not set`, "cluster", "move", "orders")

	// Node IDs of cluster move, and its one queue.
	c.fails(2, `--to "1,x": "x" is not a node ID`, "cluster", "move", "orders", "--to", "1,x")
	c.fails(2, `--to "0": "0" is not a node ID`, "cluster", "move", "orders", "--to", "0")
	c.fails(2, `--to "": "" is not a node ID`, "cluster", "move", "orders", "--to", "")
	c.fails(2, `--to "2,3,2": node 2 is named twice`, "cluster", "move", "orders", "--to", "2,3,2")
	c.fails(2, "accepts 1 arg(s), received 0", "cluster", "move", "--to", "1")
	c.fails(2, "accepts 1 arg(s), received 2", "cluster", "move", "a", "b", "--to", "1")

	// The node ID of cluster drain, and its flags.
	c.fails(2, `"x" is not a node ID`, "cluster", "drain", "x")
	c.fails(2, `"0" is not a node ID`, "cluster", "drain", "0")
	c.fails(2, `"-1" is not a node ID`, "cluster", "drain", "--", "-1")
	c.fails(2, "accepts 1 arg(s), received 0", "cluster", "drain")
	c.fails(2, "accepts 1 arg(s), received 2", "cluster", "drain", "1", "2")
	c.fails(2, "--undo and --wait: an undone drain has nothing to wait for", "cluster", "drain", "3", "--undo", "--wait")
	c.fails(2, "unknown flag: --to", "cluster", "drain", "3", "--to", "1")

	// Durations out of range.
	c.fails(2, "--timeout 0s: want a positive duration", "--timeout", "0", "queue", "list")
	c.fails(2, "--timeout -1s: want a positive duration", "--timeout", "-1s", "queue", "list")
	c.fails(2, "--backoff-base -1s", "queue", "create", "y", "--backoff-base", "-1s")
	c.fails(2, "--backoff-max -1s", "queue", "create", "y", "--backoff-max", "-1s")
	c.fails(2, "--backoff-base 10s: want at most --backoff-max 1s", "queue", "create", "y", "--backoff-base", "10s", "--backoff-max", "1s")
	c.fails(2, "--visibility-timeout -1s", "queue", "create", "y", "--visibility-timeout", "-1s")
	c.fails(2, "--visibility-timeout 500µs: want 0 (the broker's default) or at least 1ms", "queue", "create", "y", "--visibility-timeout", "500us")
	c.fails(2, "--dedup-window -1s", "queue", "create", "y", "--dedup-window", "-1s")
	c.fails(2, "--wait -1s", "consume", "y", "--wait", "-1s", "--count", "1")
	c.fails(2, "--delay -5s", "enqueue", "y", "x", "--delay", "-5s")

	// Bench flags, NaN among them, are checked before a queue is made.
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"bench", "fairness", "--size", "-1", "--count", "100"}, "--size -1"},
		{[]string{"bench", "throttle", "--size", "-1"}, "--size -1"},
		{[]string{"bench", "keys", "--size", "-1"}, "--size -1"},
		{[]string{"bench", "produce", "--size", "-1", "--count", "1"}, "--size -1"},
		{[]string{"bench", "produce", "--size", "268435457", "--count", "1"}, "--size 268435457"},
		{[]string{"bench", "produce", "--size", "16777216", "--duration", "1s"}, "payload bytes in flight"},
		{[]string{"bench", "keys", "--batch", "0"}, "--batch ≥ 1"},
		{[]string{"bench", "throttle", "--rate", "NaN"}, "--rate > 0"},
		{[]string{"bench", "latency", "--rate", "NaN"}, "finite --rate"},
		{[]string{"bench", "replay", "--trace", "jobs.csv", "--speedup", "NaN"}, "--speedup NaN"},
	} {
		c.fails(2, tc.want, tc.args...)
	}
	var qs []any
	if c.json(&qs, "queue", "list"); len(qs) != 0 {
		t.Errorf("queue list after usage errors = %v; want no queue", qs)
	}
	var es []any
	if c.json(&es, "config", "list"); len(es) != 0 {
		t.Errorf("config list after usage errors = %v; want no entry", es)
	}
	// A message over the broker's limit is the broker's refusal, exit 1.
	c.fails(1, "message too large", "bench", "produce", "--size", "20000000", "--count", "1")
}

// TestExplain: fila explain says why a message waits, in words and in
// JSON, against a real broker; unknown messages and bad IDs fail with the
// usual exit codes.
func TestExplain(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	c.ok("queue", "create", "jobs")
	later := strings.TrimSpace(c.ok("enqueue", "jobs", "x", "--delay", "1h"))
	if out := c.ok("explain", "jobs", later); !strings.Contains(out, "delayed until") {
		t.Errorf("explain of a delayed message = %q", out)
	}
	first := strings.TrimSpace(c.ok("enqueue", "jobs", "a", "--fairness-key", "acme"))
	second := strings.TrimSpace(c.ok("enqueue", "jobs", "b", "--fairness-key", "acme"))
	if out := c.ok("explain", "jobs", first); !strings.Contains(out, "no subscription of the queue has credit") {
		t.Errorf("explain of the head, no consumer = %q", out)
	}
	var e struct {
		Reason      string `json:"reason"`
		Ahead       uint64 `json:"ahead"`
		FairnessKey string `json:"fairness_key"`
		Explanation string `json:"explanation"`
	}
	if c.json(&e, "explain", "jobs", second); e.Reason != "behind-key" || e.Ahead != 1 || e.FairnessKey != "acme" || !strings.Contains(e.Explanation, "behind 1 message of") {
		t.Errorf("explain -o json of the second = %+v; want behind-key, 1 ahead, acme", e)
	}
	// Once the queue has been delivered from, a message behind others of
	// its key has an expected delivery time.
	for range 3 {
		c.ok("enqueue", "jobs", "c", "--fairness-key", "acme")
	}
	last := strings.TrimSpace(c.ok("enqueue", "jobs", "d", "--fairness-key", "acme"))
	c.ok("consume", "jobs", "--count", "2", "--prefetch", "1")
	var eta struct {
		Reason string `json:"reason"`
		ETA    int64  `json:"eta_ms"`
	}
	if c.json(&eta, "explain", "jobs", last); eta.Reason != "behind-key" || eta.ETA <= 0 {
		t.Errorf("explain -o json of the last of acme after deliveries = %+v; want behind-key with an eta_ms", eta)
	}
	if out := c.ok("explain", "jobs", last); !strings.Contains(out, "at the recent delivery rate") {
		t.Errorf("explain of the last of acme = %q; want its expected delivery", out)
	}
	c.fails(3, "message not found", "explain", "jobs", "01933b5e-6f9c-7a4e-9d1f-2b8c4a0e5d71")
	c.fails(3, "queue not found", "explain", "nope", first)
	c.fails(2, "message ID", "explain", "jobs", "not-an-id")
}
