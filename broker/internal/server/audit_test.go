package server

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLimitedAudit drives the audit rate limit with a fake clock: one line
// at once after a quiet spell, then one summary per interval with the
// count of the events it stands for.
func TestLimitedAudit(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	a := newLimitedAudit(log, auditAuthFailed)
	now := time.Unix(1000, 0)
	a.now = func() time.Time { return now }
	var timers []time.Duration
	var fire []func()
	a.after = func(d time.Duration, f func()) { timers = append(timers, d); fire = append(fire, f) }
	lines := func() []string {
		s := strings.TrimSpace(buf.String())
		buf.Reset()
		if s == "" {
			return nil
		}
		return strings.Split(s, "\n")
	}
	const head = `level=INFO msg=audit event=auth.failed `

	a.record("remote", "10.0.0.1:1")
	if got := lines(); len(got) != 1 || got[0] != head+"remote=10.0.0.1:1" {
		t.Fatalf("first event logged %q; want one line", got)
	}
	// Within the interval: counted, one summary scheduled for its end.
	now = now.Add(300 * time.Millisecond)
	a.record("remote", "10.0.0.2:1")
	now = now.Add(300 * time.Millisecond)
	a.record("remote", "10.0.0.3:1")
	if got := lines(); got != nil {
		t.Fatalf("events within the interval logged %q", got)
	}
	if len(timers) != 1 || timers[0] != 700*time.Millisecond {
		t.Fatalf("timers = %v; want one of 700ms", timers)
	}
	// Past the interval but before the timer ran: still counted.
	now = now.Add(500 * time.Millisecond)
	a.record("remote", "10.0.0.4:1")
	if got := lines(); got != nil {
		t.Fatalf("event before the summary logged %q", got)
	}
	fire[0]()
	want := head + `remote=10.0.0.4:1 suppressed=3 note="events since the previous line, the last one shown"`
	if got := lines(); len(got) != 1 || got[0] != want {
		t.Fatalf("summary = %q; want %q", got, want)
	}
	// The summary counts as a line: the next event within the interval
	// waits for the next summary.
	now = now.Add(100 * time.Millisecond)
	a.record("remote", "10.0.0.5:1")
	if got := lines(); got != nil || len(timers) != 2 || timers[1] != 900*time.Millisecond {
		t.Fatalf("after a summary: logged %q, timers %v; want nothing and a 900ms timer", got, timers)
	}
	fire[1]()
	if got := lines(); len(got) != 1 || !strings.Contains(got[0], "remote=10.0.0.5:1 suppressed=1 ") {
		t.Fatalf("second summary = %q", got)
	}
	// A quiet spell: the next event is logged at once, with no count.
	now = now.Add(10 * time.Second)
	a.record("remote", "10.0.0.6:1")
	if got := lines(); len(got) != 1 || got[0] != head+"remote=10.0.0.6:1" {
		t.Fatalf("event after a quiet spell logged %q", got)
	}
	// A timer with nothing to report writes nothing.
	a.flush()
	if got := lines(); got != nil {
		t.Fatalf("empty flush logged %q", got)
	}
}
