package hook

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// Defaults of Limits, the [lua] section of fila.toml.
const (
	DefaultTimeout                 = 10 * time.Millisecond // default_timeout
	DefaultMemoryLimit             = 8 << 20               // memory_limit, 8 MiB
	DefaultCircuitBreakerThreshold = 3                     // circuit_breaker_threshold
	DefaultCircuitBreakerCooldown  = 30 * time.Second      // circuit_breaker_cooldown
	DefaultMaxWeight               = 1000
)

// Limits bound what a queue's hooks may do. A zero or negative field takes
// its default.
type Limits struct {
	// Timeout is how long one call may run, on the monotonic clock (not
	// the runner's now): 10ms by default. A call past it is stopped and
	// fails with ErrTimeout. Waiting for a free interpreter does not count.
	Timeout time.Duration
	// MemoryLimit is how many bytes one call may allocate, in total: 8 MiB
	// by default. A call that would pass it is stopped before the
	// allocation and fails with ErrMemoryLimit. See the package
	// documentation for what is counted.
	MemoryLimit int64
	// CircuitBreakerThreshold is how many consecutive failures of a hook
	// open its circuit breaker: 3 by default.
	CircuitBreakerThreshold int
	// CircuitBreakerCooldown is how long an open breaker bypasses its hook
	// before one call probes it again: 30s by default.
	CircuitBreakerCooldown time.Duration
	// MaxWeight is the largest weight on_enqueue may return: 1000 by
	// default. A larger one is a hook failure, not silently capped.
	MaxWeight uint32
	// States is how many interpreter states a runner keeps, hence how
	// many calls of its hooks run at once (more wait): GOMAXPROCS by
	// default. Each may hold up to about MemoryLimit while it runs.
	States int
}

// DefaultLimits returns the default limits.
func DefaultLimits() Limits { return Limits{}.withDefaults() }

func (l Limits) withDefaults() Limits {
	if l.Timeout <= 0 {
		l.Timeout = DefaultTimeout
	}
	if l.MemoryLimit <= 0 {
		l.MemoryLimit = DefaultMemoryLimit
	}
	if l.CircuitBreakerThreshold <= 0 {
		l.CircuitBreakerThreshold = DefaultCircuitBreakerThreshold
	}
	if l.CircuitBreakerCooldown <= 0 {
		l.CircuitBreakerCooldown = DefaultCircuitBreakerCooldown
	}
	if l.MaxWeight == 0 {
		l.MaxWeight = DefaultMaxWeight
	}
	if l.States <= 0 {
		l.States = runtime.GOMAXPROCS(0)
	}
	return l
}

// A ConfigReader reads the runtime config for fila.get. Get is called from
// many goroutines at once, on every hook call that uses fila.get, so it
// must be safe for concurrent use and cheap (a lookup in an immutable
// snapshot); a value it returns is what the next call sees.
type ConfigReader interface {
	Get(key string) (string, bool)
}

// A Header is one application header of a message.
type Header struct {
	Key, Value string
}

// EnqueueInput is what on_enqueue sees of a message being enqueued. The
// fairness key, weight and throttle keys are the producer's: "" or 0 or
// none when not set.
type EnqueueInput struct {
	Queue        string
	Headers      []Header // in the producer's order
	PayloadSize  int      // bytes
	FairnessKey  string
	Weight       uint32
	ThrottleKeys []string
}

// EnqueueOutput is what a message is enqueued with: each field is the
// script's value where it returned one, else the producer's (so it may be
// "" or 0, which the caller turns into its defaults). ThrottleKeys may
// alias EnqueueInput.ThrottleKeys.
type EnqueueOutput struct {
	FairnessKey  string
	Weight       uint32
	ThrottleKeys []string
}

// FailureInput is what on_failure sees of a message whose delivery failed.
type FailureInput struct {
	Queue        string
	ID           string // the message ID, UUID text
	Attempts     int    // deliveries so far, the failed one included
	Error        string // the nack reason, or "lease expired"
	Headers      []Header
	FairnessKey  string
	Weight       uint32
	ThrottleKeys []string
	PayloadSize  int
}

// A Decision is on_failure's answer: dead-letter the message, or retry it
// after Delay.
type Decision struct {
	DeadLetter bool
	Delay      time.Duration
}

// Stats are a runner's counters, the HookStats of queue stats.
type Stats struct {
	OnEnqueueCalls    uint64 // calls that ran on_enqueue (not those the breaker bypassed)
	OnEnqueueFailures uint64 // of which failed: error, timeout, memory, bad result
	OnFailureCalls    uint64
	OnFailureFailures uint64
	CircuitOpen       bool   // a hook's breaker is open now
	CircuitTrips      uint64 // times a breaker opened, both hooks
	// OnEnqueueTime and OnFailureTime are the time spent in each hook's
	// calls, summed.
	OnEnqueueTime, OnFailureTime time.Duration
}

// ErrCircuitOpen is wrapped by the error of a call its hook's open circuit
// breaker bypassed. It is not a new failure of the hook.
var ErrCircuitOpen = errors.New("circuit breaker open")

// ErrClosed is wrapped by the error of a call on a closed Runner.
var ErrClosed = errors.New("runner closed")

// ErrNoHook is wrapped by the error of OnFailure on a queue without an
// on_failure hook.
var ErrNoHook = errors.New("no hook")

// A Runner runs one queue's hooks. It is safe for concurrent use: calls
// take an interpreter state from a bounded pool (Limits.States), and each
// hook has its own circuit breaker. Calls are synchronous and run on the
// caller's goroutine; the caller decides which goroutine that is.
//
// A hook call that fails returns the defaults (the producer's values, or
// for on_failure a zero Decision the caller must ignore) and an error
// saying why: "on_enqueue orders: on_enqueue:3: attempt to index a
// nil value". Errors wrapping ErrTimeout and ErrMemoryLimit are limits
// hit. The error of a call whose context ended wraps the context's error;
// that call does not count as a failure of the hook.
type Runner struct {
	limits  Limits
	now     func() time.Time
	pool    *pool
	enqueue hookState
	failure hookState
	closed  atomic.Bool
}

type hookState struct {
	name     string
	proto    *lua.FunctionProto // nil: no hook
	calls    atomic.Uint64
	failures atomic.Uint64
	nanos    atomic.Int64 // time in calls (Stats)
	breaker  breaker
}

// NewRunner returns a runner of p's hooks, one per queue. cfg serves
// fila.get (nil: every key is unset), limits bound every call (zero fields
// take the defaults), logger receives circuit breaker transitions, whose
// lines name the hook and the queue themselves (nil: discarded), and now
// is the clock of the breaker's cooldown (nil: time.Now); tests pass a
// fake one.
func NewRunner(p *Program, cfg ConfigReader, limits Limits, logger *slog.Logger, now func() time.Time) *Runner {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if now == nil {
		now = time.Now
	}
	limits = limits.withDefaults()
	r := &Runner{limits: limits, now: now, pool: newPool(limits.States, cfg)}
	for _, h := range []struct {
		hs    *hookState
		name  string
		proto *lua.FunctionProto
	}{{&r.enqueue, hookEnqueue, p.onEnqueue}, {&r.failure, hookFailure, p.onFailure}} {
		h.hs.name = h.name
		h.hs.proto = h.proto
		h.hs.breaker.threshold = int32(limits.CircuitBreakerThreshold)
		h.hs.breaker.cooldown = limits.CircuitBreakerCooldown
		h.hs.breaker.hook = h.name
		h.hs.breaker.log = logger
	}
	return r
}

// HasOnEnqueue reports whether the queue has an on_enqueue hook.
func (r *Runner) HasOnEnqueue() bool { return r.enqueue.proto != nil }

// HasOnFailure reports whether the queue has an on_failure hook.
func (r *Runner) HasOnFailure() bool { return r.failure.proto != nil }

// OnEnqueue runs on_enqueue for a message and returns what to enqueue it
// with. Without the hook it returns the producer's values and nil. If the
// hook fails, or its breaker is open (ErrCircuitOpen), it returns the
// producer's values and an error.
func (r *Runner) OnEnqueue(ctx context.Context, in EnqueueInput) (EnqueueOutput, error) {
	def := EnqueueOutput{FairnessKey: in.FairnessKey, Weight: in.Weight, ThrottleKeys: in.ThrottleKeys}
	h := &r.enqueue
	if h.proto == nil {
		return def, nil
	}
	st, err := r.acquire(ctx, h, in.Queue)
	if err != nil {
		return def, err
	}
	out := def
	start := time.Now()
	res, cerr := st.call(ctx, &r.limits, h.proto, h.name, st.enqueueMsg(&in))
	h.nanos.Add(int64(time.Since(start)))
	if cerr == nil {
		if err := parseEnqueue(res, r.limits.MaxWeight, &out); err != nil {
			cerr = &callError{err: err, failed: true}
		}
	}
	if err := r.release(st, h, in.Queue, cerr); err != nil {
		return def, err
	}
	return out, nil
}

// OnFailure runs on_failure for a message whose delivery failed and
// returns its decision. An error (no hook: ErrNoHook; a failing hook; an
// open breaker: ErrCircuitOpen) means the caller applies the queue's
// default retry policy.
func (r *Runner) OnFailure(ctx context.Context, in FailureInput) (Decision, error) {
	h := &r.failure
	if h.proto == nil {
		return Decision{}, hookError(h, in.Queue, ErrNoHook)
	}
	st, err := r.acquire(ctx, h, in.Queue)
	if err != nil {
		return Decision{}, err
	}
	var d Decision
	start := time.Now()
	res, cerr := st.call(ctx, &r.limits, h.proto, h.name, st.failureMsg(&in))
	h.nanos.Add(int64(time.Since(start)))
	if cerr == nil {
		if err := parseFailure(res, &d); err != nil {
			cerr = &callError{err: err, failed: true}
		}
	}
	if err := r.release(st, h, in.Queue, cerr); err != nil {
		return Decision{}, err
	}
	return d, nil
}

// acquire returns a state to run hook h in, unless the runner is closed or
// h's breaker bypasses it.
func (r *Runner) acquire(ctx context.Context, h *hookState, queue string) (*state, error) {
	if r.closed.Load() {
		return nil, hookError(h, queue, ErrClosed)
	}
	if !h.breaker.allow(r.now) {
		return nil, hookError(h, queue, ErrCircuitOpen)
	}
	st, err := r.pool.get(ctx)
	if err != nil {
		h.breaker.abandon()
		return nil, hookError(h, queue, err)
	}
	h.calls.Add(1)
	return st, nil
}

// release returns st to the pool and records the outcome of its call, and
// returns the call's error, if any, for the caller.
func (r *Runner) release(st *state, h *hookState, queue string, cerr *callError) error {
	r.pool.put(st)
	if cerr == nil {
		h.breaker.success(queue)
		return nil
	}
	err := hookError(h, queue, cerr.err)
	if cerr.failed {
		h.failures.Add(1)
		h.breaker.failure(r.now, queue, err)
	} else {
		h.breaker.abandon()
	}
	return err
}

func hookError(h *hookState, queue string, err error) error {
	return fmt.Errorf("%s %s: %w", h.name, queue, err)
}

// Stats returns the runner's counters.
func (r *Runner) Stats() Stats {
	return Stats{
		OnEnqueueCalls:    r.enqueue.calls.Load(),
		OnEnqueueFailures: r.enqueue.failures.Load(),
		OnFailureCalls:    r.failure.calls.Load(),
		OnFailureFailures: r.failure.failures.Load(),
		CircuitOpen:       r.enqueue.breaker.isOpen() || r.failure.breaker.isOpen(),
		CircuitTrips:      r.enqueue.breaker.trips.Load() + r.failure.breaker.trips.Load(),
		OnEnqueueTime:     time.Duration(r.enqueue.nanos.Load()),
		OnFailureTime:     time.Duration(r.failure.nanos.Load()),
	}
}

// Close releases the runner's interpreter states: idle ones at once, busy
// ones when their call returns. Calls after Close fail with ErrClosed.
func (r *Runner) Close() {
	r.closed.Store(true)
	r.pool.close()
}
