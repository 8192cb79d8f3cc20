package hook

import (
	"context"
	"errors"
	"fmt"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// ErrTimeout is wrapped by the error of a call stopped at its time limit
// (Limits.Timeout): "on_enqueue orders: timeout after 10ms".
var ErrTimeout = errors.New("timeout")

// ErrMemoryLimit is wrapped by the error of a call stopped at its memory
// limit (Limits.MemoryLimit): "on_enqueue orders: memory limit 8MB
// exceeded".
var ErrMemoryLimit = errors.New("memory limit")

// pollEvery is how many VM instructions or builtin steps run between two
// looks at the clock and the caller's context: about 10 to 50 µs of work,
// so a call overruns its time limit by at most that much.
const pollEvery = 1024

// closed is the Done channel of a stopped meter.
var closed = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// A meter enforces the limits of one call. It is the call's
// context.Context: gopher-lua calls Done before every VM instruction, so
// Done counts instructions, polls the clock every pollEvery of them, and
// stops the VM by returning a closed channel. Builtins written in Go count
// their own steps with step and their allocations with charge.
//
// Once stopped, a meter stays stopped: every following instruction raises
// the error again, so a script cannot catch a limit with pcall and carry on.
//
// A meter belongs to one state and is used by the goroutine running that
// state's call, and by nobody else; it is not safe for concurrent use,
// which is what lets Done cost an increment and a compare.
type meter struct {
	st       *state // the state the meter belongs to, for the builtins (current)
	parent   context.Context
	deadline time.Time
	timeout  time.Duration
	limit    int64 // bytes a call may allocate
	used     int64 // bytes charged so far
	steps    uint32
	err      error           // why the call was stopped; nil while it runs
	done     <-chan struct{} // nil while the call runs, closed once stopped
}

// reset prepares m for a call under parent with the given limits.
func (m *meter) reset(parent context.Context, timeout time.Duration, limit int64) {
	*m = meter{
		st:       m.st,
		parent:   parent,
		deadline: time.Now().Add(timeout),
		timeout:  timeout,
		limit:    limit,
	}
	if err := parent.Err(); err != nil {
		m.stop(err)
	}
}

// Deadline returns the end of the call's time limit.
func (m *meter) Deadline() (time.Time, bool) { return m.deadline, true }

// Done counts one VM instruction and returns a closed channel once the
// call must stop.
func (m *meter) Done() <-chan struct{} {
	m.steps++
	if m.steps%pollEvery == 0 && m.err == nil {
		m.poll()
	}
	return m.done
}

// Err returns why the call was stopped, or nil.
func (m *meter) Err() error { return m.err }

// Value returns the caller's context values.
func (m *meter) Value(key any) any { return m.parent.Value(key) }

// poll stops the call if its time is up or its caller gave up.
func (m *meter) poll() {
	select {
	case <-m.parent.Done():
		m.stop(m.parent.Err())
		return
	default:
	}
	if !time.Now().Before(m.deadline) {
		m.stop(&limitError{kind: ErrTimeout, text: "timeout after " + m.timeout.String()})
	}
}

func (m *meter) stop(err error) {
	if m.err == nil {
		m.err = err
		m.done = closed
	}
}

// step counts n steps of work done by a builtin and raises the call's
// error in L if the call must stop. Builtins whose running time is not
// bounded by the size of what they were charged for call it in their
// loops, since the VM only looks at the meter between instructions.
func (m *meter) step(L *lua.LState, n int) {
	before := m.steps
	m.steps += uint32(n)
	if m.err == nil && (m.steps/pollEvery != before/pollEvery || n >= pollEvery) {
		m.poll()
	}
	m.check(L)
}

// check raises the call's error in L if the call was stopped.
func (m *meter) check(L *lua.LState) {
	if m.err != nil {
		L.RaiseError("%s", m.err.Error())
	}
}

// charge records that the running call is about to allocate n bytes, and
// stops it, raising the error in L, if that takes it past its memory limit.
// A negative n stands for an amount too large to compute.
func (m *meter) charge(L *lua.LState, n int64) {
	if n < 0 || n > m.limit-m.used {
		m.stop(&limitError{kind: ErrMemoryLimit, text: "memory limit " + formatBytes(m.limit) + " exceeded"})
	} else {
		m.used += n
	}
	m.check(L)
}

// A limitError is why a meter stopped a call.
type limitError struct {
	kind error // ErrTimeout or ErrMemoryLimit
	text string
}

func (e *limitError) Error() string { return e.text }
func (e *limitError) Unwrap() error { return e.kind }

// formatBytes writes n the way the configuration spells sizes: "8MB",
// "512KB", "1000B" (MB and KB are binary multiples).
func formatBytes(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKB", n>>10)
	default:
		return fmt.Sprintf("%dB", n)
	}
}
