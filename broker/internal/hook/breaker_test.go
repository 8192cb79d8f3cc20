package hook

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestCircuitBreaker(t *testing.T) {
	clock := newFakeClock()
	var log syncBuffer
	p := mustCompile(t,
		`function on_enqueue(msg) if fila.get("fail") then error("broken") end return {weight = 2} end`,
		`function on_failure(msg) return {action = "dlq"} end`)
	cfg := newTestConfig()
	r := NewRunner(p, cfg, Limits{Timeout: 10 * time.Second, CircuitBreakerCooldown: time.Minute},
		slog.New(slog.NewTextHandler(&log, nil)), clock.Now)
	defer r.Close()
	ctx := context.Background()
	in := EnqueueInput{Queue: "orders", Weight: 5}

	type want struct {
		weight  uint32
		errIs   error  // nil: no error
		errText string // substring of the error, if any
		stats   Stats
	}
	step := func(name string, w want) {
		t.Helper()
		out, err := r.OnEnqueue(ctx, in)
		switch {
		case w.errIs == nil && w.errText == "" && err != nil:
			t.Errorf("%s: OnEnqueue() error = %v; want nil", name, err)
		case w.errIs != nil && !errors.Is(err, w.errIs):
			t.Errorf("%s: OnEnqueue() error = %v; want %v", name, err, w.errIs)
		case w.errText != "" && (err == nil || !strings.Contains(err.Error(), w.errText)):
			t.Errorf("%s: OnEnqueue() error = %v; want one containing %q", name, err, w.errText)
		}
		if out.Weight != w.weight {
			t.Errorf("%s: OnEnqueue() weight = %d; want %d", name, out.Weight, w.weight)
		}
		got := r.Stats()
		got.OnEnqueueTime, got.OnFailureTime = 0, 0 // timing: not compared
		if got != w.stats {
			t.Errorf("%s: Stats() = %+v; want %+v", name, got, w.stats)
		}
	}

	step("healthy", want{weight: 2, stats: Stats{OnEnqueueCalls: 1}})
	cfg.Set("fail", "1")
	step("failure 1", want{weight: 5, errText: "broken", stats: Stats{OnEnqueueCalls: 2, OnEnqueueFailures: 1}})
	step("failure 2", want{weight: 5, errText: "broken", stats: Stats{OnEnqueueCalls: 3, OnEnqueueFailures: 2}})
	step("failure 3 opens", want{weight: 5, errText: "broken",
		stats: Stats{OnEnqueueCalls: 4, OnEnqueueFailures: 3, CircuitOpen: true, CircuitTrips: 1}})
	if !strings.Contains(log.String(), "circuit breaker opened") || !strings.Contains(log.String(), "queue=orders") {
		t.Errorf("log = %q; want the opening logged with the queue", log.String())
	}

	openStats := Stats{OnEnqueueCalls: 4, OnEnqueueFailures: 3, CircuitOpen: true, CircuitTrips: 1}
	step("bypassed", want{weight: 5, errIs: ErrCircuitOpen, stats: openStats})
	clock.Advance(59 * time.Second)
	step("bypassed before the cooldown ends", want{weight: 5, errIs: ErrCircuitOpen, stats: openStats})

	// The other hook has its own breaker.
	if d, err := r.OnFailure(ctx, FailureInput{Queue: "orders"}); err != nil || !d.DeadLetter {
		t.Errorf("OnFailure() while on_enqueue's breaker is open = %+v, %v; want dead-letter, nil", d, err)
	}
	openStats.OnFailureCalls = 1

	// After the cooldown one call probes; it fails: open again for another
	// cooldown.
	clock.Advance(time.Second)
	openStats.OnEnqueueCalls, openStats.OnEnqueueFailures, openStats.CircuitTrips = 5, 4, 2
	step("probe fails", want{weight: 5, errText: "broken", stats: openStats})
	step("bypassed again", want{weight: 5, errIs: ErrCircuitOpen, stats: openStats})

	cfg.Delete("fail")
	step("healthy but bypassed", want{weight: 5, errIs: ErrCircuitOpen, stats: openStats})
	clock.Advance(time.Minute)
	step("probe succeeds and closes", want{weight: 2,
		stats: Stats{OnEnqueueCalls: 6, OnEnqueueFailures: 4, OnFailureCalls: 1, CircuitTrips: 2}})
	if !strings.Contains(log.String(), "circuit breaker closed") {
		t.Errorf("log = %q; want the closing logged", log.String())
	}
	step("closed", want{weight: 2, stats: Stats{OnEnqueueCalls: 7, OnEnqueueFailures: 4, OnFailureCalls: 1, CircuitTrips: 2}})
}

func TestCircuitBreakerCountsConsecutiveFailures(t *testing.T) {
	clock := newFakeClock()
	cfg := newTestConfig()
	r := NewRunner(mustCompile(t, `function on_enqueue(msg) if msg.headers.fail then error("x") end end`, ""),
		cfg, Limits{Timeout: 10 * time.Second}, nil, clock.Now)
	defer r.Close()
	fail := EnqueueInput{Queue: "q", Headers: []Header{{"fail", "1"}}}
	ok := EnqueueInput{Queue: "q"}
	for _, in := range []EnqueueInput{fail, fail, ok, fail, fail, ok, fail, fail} {
		r.OnEnqueue(context.Background(), in)
	}
	if s := r.Stats(); s.CircuitOpen || s.CircuitTrips != 0 || s.OnEnqueueFailures != 6 {
		t.Errorf("Stats() = %+v; want 6 failures and a closed breaker (never 3 in a row)", s)
	}
	r.OnEnqueue(context.Background(), fail)
	if s := r.Stats(); !s.CircuitOpen || s.CircuitTrips != 1 {
		t.Errorf("Stats() = %+v; want the breaker open after 3 in a row", s)
	}
}

func TestCircuitBreakerOneProbe(t *testing.T) {
	// While a probe runs, other calls are bypassed.
	b := &breaker{threshold: 1, cooldown: time.Second, hook: "on_enqueue", log: slog.New(slog.DiscardHandler)}
	clock := newFakeClock()
	b.failure(clock.Now, "q", errors.New("x"))
	if b.allow(clock.Now) {
		t.Fatal("allow() = true right after opening; want false")
	}
	clock.Advance(time.Second)
	if !b.allow(clock.Now) {
		t.Fatal("allow() = false after the cooldown; want true (the probe)")
	}
	if b.allow(clock.Now) {
		t.Error("allow() = true during the probe; want false")
	}
	b.abandon() // the probe's caller gave up: the next call probes
	if !b.allow(clock.Now) {
		t.Error("allow() = false after an abandoned probe; want true")
	}
	b.success("q")
	if b.isOpen() || !b.allow(clock.Now) {
		t.Error("breaker still open after a successful probe")
	}
}
