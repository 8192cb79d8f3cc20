package hook

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// A breaker is the circuit breaker of one hook of one queue. Closed, it
// lets every call through and counts consecutive failures; at the
// threshold it opens and the hook is bypassed for the cooldown; after the
// cooldown it lets one call through as a probe (half-open), which closes
// it on success and opens it for another cooldown on failure. Calls that
// overlap the probe are bypassed.
//
// The closed state, where a healthy hook spends its life, costs an atomic
// load per call and an atomic store after a failure streak; transitions
// take the mutex.
type breaker struct {
	threshold int32
	cooldown  time.Duration
	hook      string // for the log
	log       *slog.Logger

	open     atomic.Bool
	failures atomic.Int32 // consecutive failures while closed
	trips    atomic.Uint64

	mu        sync.Mutex
	openUntil time.Time
	probing   bool
}

// allow reports whether a call may run the hook now.
func (b *breaker) allow(now func() time.Time) bool {
	if !b.open.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return true
	}
	if b.probing || now().Before(b.openUntil) {
		return false
	}
	b.probing = true
	return true
}

// success records a call that ran the hook and did not fail.
func (b *breaker) success(queue string) {
	if b.failures.Load() != 0 {
		b.failures.Store(0)
	}
	if !b.open.Load() {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.open.Load() && b.probing {
		b.open.Store(false)
		b.probing = false
		b.log.Info("hook circuit breaker closed", "hook", b.hook, "queue", queue)
	}
}

// failure records a call whose hook failed with err.
func (b *breaker) failure(now func() time.Time, queue string, err error) {
	if !b.open.Load() && b.failures.Add(1) < b.threshold {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.open.Load() && b.probing:
		// The probe failed: open for another cooldown.
		b.probing = false
	case !b.open.Load() && b.failures.Load() >= b.threshold:
		b.open.Store(true)
	default:
		return // opened already, by a concurrent failure
	}
	b.failures.Store(0)
	b.openUntil = now().Add(b.cooldown)
	b.trips.Add(1)
	b.log.Warn("hook circuit breaker opened: hook bypassed",
		"hook", b.hook, "queue", queue, "threshold", b.threshold, "cooldown", b.cooldown, "err", err)
}

// abandon records a call that ran the hook but whose outcome says nothing
// about the hook (its caller gave up): a probe is given back.
func (b *breaker) abandon() {
	if !b.open.Load() {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

func (b *breaker) isOpen() bool { return b.open.Load() }
