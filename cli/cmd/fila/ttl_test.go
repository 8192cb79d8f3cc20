package main

import (
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
)

// TestEnqueueTTLAndPriority: `fila queue create --message-ttl` and
// `--expired-action` show in `queue inspect`; `fila enqueue --ttl`
// expires a message to the DLQ with fila-error "expired"; `--priority`
// orders a fairness key's messages; out-of-range values are usage errors.
func TestEnqueueTTLAndPriority(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	c.ok("queue", "create", "quotes", "--message-ttl", "1h", "--expired-action", "dead-letter")
	c.ok("queue", "create", "jobs")

	var st struct {
		MessageTTLMS    int64  `json:"message_ttl_ms"`
		ExpiredAction   string `json:"expired_action"`
		MessagesExpired uint64 `json:"messages_expired"`
		Ready           uint64 `json:"ready"`
		DeadLettered    uint64 `json:"dead_lettered"`
	}
	c.json(&st, "queue", "inspect", "quotes")
	if st.MessageTTLMS != 3_600_000 || st.ExpiredAction != "dead-letter" {
		t.Fatalf("queue inspect quotes: ttl %d ms, action %q; want 3600000, dead-letter", st.MessageTTLMS, st.ExpiredAction)
	}
	if out := c.ok("queue", "inspect", "quotes"); !strings.Contains(out, "message ttl 1h0m0s (expired: dead-letter), 0 expired") {
		t.Errorf("queue inspect quotes:\n%s\nwant the message ttl line", out)
	}

	c.ok("enqueue", "quotes", "stale", "--ttl", "50ms")
	c.ok("enqueue", "quotes", "fresh")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		c.json(&st, "queue", "inspect", "quotes")
		if st.MessagesExpired == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue inspect quotes: %+v; the stale message never expired", st)
		}
	}
	if st.Ready != 1 || st.DeadLettered != 1 {
		t.Errorf("quotes after the expiry: ready %d, dead-lettered %d; want 1, 1", st.Ready, st.DeadLettered)
	}
	var d struct {
		Payload string            `json:"payload"`
		Headers map[string]string `json:"headers"`
	}
	c.json(&d, "consume", "quotes.dlq", "--count", "1")
	if d.Payload != "stale" || d.Headers["fila-error"] != "expired" {
		t.Errorf("consume quotes.dlq = %+v; want stale with fila-error expired", d)
	}

	c.ok("enqueue", "jobs", "low", "--priority", "0")
	c.ok("enqueue", "jobs", "mid")
	c.ok("enqueue", "jobs", "high", "--priority", "9")
	for _, want := range []string{"high", "mid", "low"} {
		c.json(&d, "consume", "jobs", "--count", "1")
		if d.Payload != want {
			t.Fatalf("consume jobs = %q; want %q", d.Payload, want)
		}
	}

	c.fails(2, "--priority 10", "enqueue", "jobs", "x", "--priority", "10")
	c.fails(2, "--ttl", "enqueue", "jobs", "x", "--ttl", "-1s")
	c.fails(2, "--message-ttl", "queue", "create", "bad", "--message-ttl", "-1s")
	if r := c.run("queue", "create", "bad", "--expired-action", "keep"); r.code == 0 || !strings.Contains(r.stderr, "expired_action") {
		t.Errorf("queue create --expired-action keep: exit %d, %q; want a failure naming expired_action", r.code, r.stderr)
	}
}
