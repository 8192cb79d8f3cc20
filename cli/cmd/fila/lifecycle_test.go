package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
)

// deadLetters creates queue jobs (one attempt) and fails n messages of
// each fairness key into jobs.dlq.
func deadLetters(t *testing.T, c *cli, n int, keys ...string) {
	t.Helper()
	c.ok("queue", "create", "jobs", "--max-attempts", "1")
	for _, k := range keys {
		for i := range n {
			c.ok("enqueue", "jobs", fmt.Sprintf("%s-%d", k, i), "--fairness-key", k)
		}
	}
	c.ok("consume", "jobs", "--count", fmt.Sprint(n*len(keys)), "--nack", "boom")
}

type peekOut struct {
	Messages []struct {
		ID          string            `json:"id"`
		State       string            `json:"state"`
		FairnessKey string            `json:"fairness_key"`
		Attempts    uint32            `json:"attempts"`
		Due         string            `json:"due_at"`
		Headers     map[string]string `json:"headers"`
		Size        uint32            `json:"payload_size"`
		Preview     string            `json:"payload_preview"`
	} `json:"messages"`
	Next string `json:"next"`
}

// TestQueuePurge: `fila queue purge` removes the ready and delayed
// messages and leaves leased ones; --include-leased removes those too;
// a DLQ purges alone.
func TestQueuePurge(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	deadLetters(t, c, 2, "a")
	for i := range 5 {
		c.ok("enqueue", "jobs", fmt.Sprint("m", i))
	}
	c.ok("enqueue", "jobs", "later", "--delay", "1h")
	c.ok("consume", "jobs", "--count", "2", "--no-ack", "--prefetch", "2")

	var purged struct {
		Purged uint64 `json:"purged"`
	}
	c.json(&purged, "queue", "purge", "jobs")
	if purged.Purged != 4 {
		t.Fatalf("queue purge jobs = %d; want 4 (3 ready, 1 delayed)", purged.Purged)
	}
	var st struct {
		Ready        uint64 `json:"ready"`
		Delayed      uint64 `json:"delayed"`
		Leased       uint64 `json:"leased"`
		DeadLettered uint64 `json:"dead_lettered"`
		Purged       uint64 `json:"purged"`
	}
	c.json(&st, "queue", "inspect", "jobs")
	if st.Ready != 0 || st.Delayed != 0 || st.Leased != 2 || st.DeadLettered != 2 || st.Purged != 4 {
		t.Fatalf("after purge: %+v; want the 2 leased and the 2 dead letters left, 4 purged", st)
	}
	if out := c.ok("queue", "purge", "jobs.dlq"); !strings.Contains(out, "purged 2 messages from jobs.dlq") {
		t.Fatalf("queue purge jobs.dlq = %q; want 2 purged", out)
	}
	c.json(&purged, "queue", "purge", "jobs", "--include-leased")
	if purged.Purged != 2 {
		t.Fatalf("queue purge --include-leased = %d; want the 2 leased", purged.Purged)
	}
	c.json(&st, "queue", "inspect", "jobs")
	if st.Ready+st.Delayed+st.Leased+st.DeadLettered != 0 {
		t.Fatalf("after purging everything: %+v; want empty", st)
	}
	c.fails(3, "queue not found", "queue", "purge", "nope")
}

// TestQueuePeek: `fila queue peek` lists a DLQ's messages with their
// failure headers and payload, a page at a time (--from the last ID),
// by key, and leases nothing.
func TestQueuePeek(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	deadLetters(t, c, 3, "a", "b")
	var p peekOut
	c.json(&p, "queue", "peek", "jobs.dlq", "--count", "4")
	if len(p.Messages) != 4 || p.Next != p.Messages[3].ID {
		t.Fatalf("first page: %d messages, next %q; want 4 and the last one's ID", len(p.Messages), p.Next)
	}
	m := p.Messages[0]
	if m.State != "ready" || m.Attempts != 1 || m.Headers["fila-error"] != "boom" || m.Headers["fila-attempts"] != "1" || !strings.HasPrefix(m.Preview, "a-") || m.Size != 3 {
		t.Fatalf("first message: %+v; want a ready dead letter with its fila-error and payload", m)
	}
	var p2 peekOut
	c.json(&p2, "queue", "peek", "jobs.dlq", "--count", "4", "--from", p.Next)
	if len(p2.Messages) != 2 || p2.Next != "" || p2.Messages[0].ID <= p.Next {
		t.Fatalf("second page: %+v; want the last 2 and no next", p2)
	}
	c.json(&p, "queue", "peek", "jobs.dlq", "--key", "b")
	for _, m := range p.Messages {
		if m.FairnessKey != "b" {
			t.Fatalf("--key b listed a message of %q", m.FairnessKey)
		}
	}
	if len(p.Messages) != 3 {
		t.Fatalf("--key b: %d messages; want 3", len(p.Messages))
	}
	// Nothing was leased: the table shows them ready, and a consumer
	// gets them at attempt 2.
	out := c.ok("queue", "peek", "jobs.dlq")
	if !strings.Contains(out, "LAST ERROR") || strings.Count(out, "ready") != 6 || !strings.Contains(out, "boom") {
		t.Fatalf("peek table = %q; want 6 ready rows with their errors", out)
	}
	c.fails(2, "--count 0", "queue", "peek", "jobs", "--count", "0")
	c.fails(2, "--from", "queue", "peek", "jobs", "--from", "nope")
	c.fails(3, "queue not found", "queue", "peek", "nope")
}

// TestThrottledRedrive: `fila redrive --rate --key` moves one fairness
// key's dead letters in the background, shows its progress in `queue
// inspect`, and `--cancel` stops it with the rest left in the DLQ; the
// other key's dead letters stay.
func TestThrottledRedrive(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	deadLetters(t, c, 10, "a", "b")
	var started struct {
		Moved   uint64 `json:"moved"`
		Pending uint64 `json:"pending"`
	}
	c.json(&started, "redrive", "jobs.dlq", "--rate", "1", "--key", "a")
	if started.Moved < 1 || started.Moved+started.Pending != 10 {
		t.Fatalf("redrive --rate 1 --key a = %+v; want the first moved and the rest of key a's 10 pending", started)
	}
	var st struct {
		Ready   uint64 `json:"ready"`
		Redrive struct {
			Rate        uint32 `json:"rate"`
			FairnessKey string `json:"fairness_key"`
			Moved       uint64 `json:"moved"`
			Remaining   uint64 `json:"remaining"`
		} `json:"redrive"`
	}
	c.json(&st, "queue", "inspect", "jobs.dlq")
	if r := st.Redrive; r.Rate != 1 || r.FairnessKey != "a" || r.Moved+r.Remaining != 10 {
		t.Fatalf("inspect jobs.dlq: redrive %+v; want key a at 1/s, 10 in all", r)
	}
	if out := c.ok("queue", "inspect", "jobs"); !strings.Contains(out, `redrive: `) || !strings.Contains(out, `1/s, key "a"`) {
		t.Fatalf("inspect jobs = %q; want the redrive's progress", out)
	}
	var cancelled struct {
		Moved   uint64 `json:"moved"`
		Pending uint64 `json:"pending"`
	}
	c.json(&cancelled, "redrive", "jobs.dlq", "--cancel")
	if cancelled.Moved < started.Moved || cancelled.Moved+cancelled.Pending != 10 {
		t.Fatalf("redrive --cancel = %+v; want what it moved and left, 10 in all", cancelled)
	}
	time.Sleep(1500 * time.Millisecond) // a running redrive would move one more meanwhile
	st.Redrive.Rate = 0                 // a null redrive leaves the field as it was
	c.json(&st, "queue", "inspect", "jobs")
	if st.Ready != cancelled.Moved || st.Redrive.Rate != 0 {
		t.Fatalf("after cancel: %d ready in jobs, redrive %+v; want the %d moved and no redrive", st.Ready, st.Redrive, cancelled.Moved)
	}
	var p peekOut
	c.json(&p, "queue", "peek", "jobs")
	for _, m := range p.Messages {
		if m.FairnessKey != "a" {
			t.Fatalf("redrive --key a moved a message of %q", m.FairnessKey)
		}
	}
	c.json(&p, "queue", "peek", "jobs.dlq", "--key", "b")
	if len(p.Messages) != 10 {
		t.Fatalf("jobs.dlq holds %d of key b; want all 10", len(p.Messages))
	}
	c.fails(2, "--cancel", "redrive", "jobs.dlq", "--cancel", "--rate", "5")
	c.fails(1, "not a dead-letter queue", "redrive", "jobs", "--rate", "5")
}

// TestConsumeLeaseTimeout: `fila consume --lease-timeout` leases its
// deliveries for that long instead of the queue's visibility timeout;
// more than the broker's max_lease_extension is refused.
func TestConsumeLeaseTimeout(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	c.ok("queue", "create", "jobs", "--visibility-timeout", "30s")
	c.ok("enqueue", "jobs", "slow")
	var d struct {
		LeaseDeadline string `json:"lease_deadline"`
	}
	before := time.Now()
	c.json(&d, "consume", "jobs", "--count", "1", "--no-ack", "--lease-timeout", "2h")
	dl, err := time.Parse(time.RFC3339Nano, d.LeaseDeadline)
	if err != nil {
		t.Fatalf("lease_deadline %q: %v", d.LeaseDeadline, err)
	}
	if dl.Before(before.Add(time.Hour)) {
		t.Fatalf("lease deadline %v; want about 2h after %v, not the queue's 30s", dl, before)
	}
	var p peekOut
	c.json(&p, "queue", "peek", "jobs")
	if len(p.Messages) != 1 || p.Messages[0].State != "leased" {
		t.Fatalf("peek: %+v; want the message leased", p.Messages)
	}
	r := c.run("consume", "jobs", "--count", "1", "--lease-timeout", "100h", "--wait", "1s")
	if r.code == 0 || !strings.Contains(r.stderr, "max_lease_extension") {
		t.Fatalf("consume --lease-timeout 100h = exit %d, %q; want a failure naming max_lease_extension", r.code, r.stderr)
	}
}
