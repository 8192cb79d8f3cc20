package shard

import (
	"context"
	"fmt"
	"sync"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
)

// A cluster node runs one shard per queue, so what a shard holds while
// idle is paid once per queue: with a buffered channel of 4,096 commands
// (80 bytes each), one of 1,024 failures (176 bytes each) and four
// on_failure workers always running, 10,000 idle queues held 4.9 GB of
// channel buffers and 50,000 goroutines. The two queues below hold memory
// only for what is queued, and the workers run only while there are
// failures to decide.

// maxQueuedOps bounds the commands waiting for a shard's loop: a caller
// blocks while it is reached, which slows producers when the shard falls
// behind.
const maxQueuedOps = 4096

// maxOpsPerStep bounds the commands the loop takes into one step (one
// storage group, or one proposal of a replicated shard).
const maxOpsPerStep = 1025

// opQueue is the shard's command queue: a buffered channel of
// maxQueuedOps commands in behaviour, whose memory is that of the
// commands queued.
type opQueue struct {
	// ready holds a token while ops may be non-empty: push gives one when
	// it makes ops non-empty, take when it leaves commands behind. The
	// loop may find it empty (a stale token), never ops non-empty
	// without one. Open makes it, with a buffer of 1.
	ready chan struct{}

	mu  sync.Mutex
	ops []op
	// space, when callers wait for room, is closed by the next take.
	space chan struct{}
}

// tryPush queues o unless the queue is full, and reports whether it did.
func (q *opQueue) tryPush(o op) bool {
	q.mu.Lock()
	if len(q.ops) >= maxQueuedOps {
		q.mu.Unlock()
		return false
	}
	q.ops = append(q.ops, o)
	first := len(q.ops) == 1
	q.mu.Unlock()
	if first {
		q.signal()
	}
	return true
}

// push queues o, waiting while the queue is full. It fails with
// fault.ErrUnavailable once stopped is closed, or with ctx's error.
func (q *opQueue) push(ctx context.Context, stopped <-chan struct{}, o op) error {
	for {
		select {
		case <-stopped:
			return fmt.Errorf("scheduler stopped: %w", fault.ErrUnavailable)
		default:
		}
		if q.tryPush(o) {
			return nil
		}
		q.mu.Lock()
		if len(q.ops) < maxQueuedOps {
			q.mu.Unlock() // room made since tryPush
			continue
		}
		if q.space == nil {
			q.space = make(chan struct{})
		}
		space := q.space
		q.mu.Unlock()
		select {
		case <-space:
		case <-stopped:
			return fmt.Errorf("scheduler stopped: %w", fault.ErrUnavailable)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// take moves up to n queued commands, oldest first, into buf and returns
// it. buf must be empty (its elements zero, as clear leaves them): it may
// become the queue's buffer.
func (q *opQueue) take(buf []op, n int) []op {
	q.mu.Lock()
	defer q.mu.Unlock()
	n = min(n, len(q.ops))
	if n == len(q.ops) {
		buf, q.ops = q.ops, buf[:0] // all of it: swap rather than copy
	} else {
		buf = append(buf[:0], q.ops[:n]...)
		rest := copy(q.ops, q.ops[n:])
		clear(q.ops[rest:])
		q.ops = q.ops[:rest]
	}
	if len(q.ops) == 0 && cap(q.ops) > maxOpsPerStep {
		q.ops = nil // a burst's buffer: let it go
	}
	if q.space != nil {
		close(q.space)
		q.space = nil
	}
	if len(q.ops) > 0 {
		q.signal()
	}
	return buf
}

// signal gives ready its token, if it has none.
func (q *opQueue) signal() {
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

// Bounds on the on_failure work of a shard: failures waiting for a
// worker (beyond it, a failure is decided by the default policy rather
// than block the storage completion that reports it), and workers
// running at once.
const (
	maxQueuedFailures = 1024
	maxFailureWorkers = 4
)

// failures hands failed messages to the shard's on_failure workers,
// started as failures come and ending when none is left.
type failures struct {
	mu      sync.Mutex
	queue   []sched.Failure
	workers int
	// closed: the shard is closing; no worker starts, the running ones
	// end, and Close waits on idle until none runs.
	closed bool
	idle   sync.Cond
}

// fail hands f to an on_failure worker, starting one if fewer than
// maxFailureWorkers run; with maxQueuedFailures already waiting it
// decides f by the default policy. It reports false once the shard has
// stopped: nothing can decide any more (recovery finds the messages
// failed and undecided).
func (sh *Shard) fail(f sched.Failure) bool {
	w := &sh.failures
	w.mu.Lock()
	if w.closed || sh.stopped() {
		w.mu.Unlock()
		return false
	}
	if len(w.queue) >= maxQueuedFailures {
		w.mu.Unlock()
		sh.decide(f, sched.DefaultDecision(f.Policy, f.Attempts))
		return true
	}
	w.queue = append(w.queue, f)
	start := w.workers < maxFailureWorkers
	if start {
		w.workers++
	}
	w.mu.Unlock()
	if start {
		go sh.failureWorker()
	}
	return true
}

// failureWorker runs on_failure hooks until no failure is left, or the
// shard stops.
func (sh *Shard) failureWorker() {
	w := &sh.failures
	for {
		w.mu.Lock()
		if len(w.queue) == 0 || w.closed || sh.stopped() {
			w.workers--
			if w.workers == 0 {
				w.idle.Broadcast()
			}
			w.mu.Unlock()
			return
		}
		f := w.queue[0]
		w.queue[0] = sched.Failure{}
		w.queue = w.queue[1:]
		if len(w.queue) == 0 {
			w.queue = nil
		}
		w.mu.Unlock()
		sh.runFailure(f)
	}
}

// closeFailures stops the on_failure workers once the loop has stopped,
// and waits for those running (each finishes the hook it runs).
func (sh *Shard) closeFailures() {
	w := &sh.failures
	w.mu.Lock()
	w.closed = true
	w.queue = nil
	for w.workers > 0 {
		w.idle.Wait()
	}
	w.mu.Unlock()
}

// stopped reports whether the shard's loop has stopped.
func (sh *Shard) stopped() bool {
	select {
	case <-sh.done:
		return true
	default:
		return false
	}
}
