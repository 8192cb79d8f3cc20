package shard

import (
	"context"
	"fmt"

	"github.com/fila-mq/fila/broker/internal/store"
)

// op is one entry of the shard's channel: a command to propose and apply,
// a read, or a barrier.
type op struct {
	cmd    Command      // a command, or nil
	sink   Sink         // *Subscribe: where its deliveries go
	read   func() Query // a read: which one
	fn     func()       // a barrier: run on the loop goroutine
	replay []Command    // commands to apply as they are (Replay)
	done   func(Result) // receives the result once durable; nil: none wanted
}

// Query names a read of the scheduler's state.
type Query struct {
	Stats string // QueueStats of this queue; "" lists the queues
	// Top is how many fairness keys QueueStats lists (0: the most).
	Top int
	// All reads every queue's QueueStats instead (Stats is then
	// ignored).
	All bool
	// Explain, if Queue is set, explains message ID of that queue
	// instead (Stats is then ignored).
	Explain struct {
		Queue string
		ID    [16]byte
	}
	// Peek, if Queue is set, lists a page of that queue's messages
	// instead (sched.Sched.Peek).
	Peek struct {
		Queue string
		After [16]byte
		Count int
		Key   string
	}
}

// Submit proposes cmd and applies it on the shard goroutine. done (may be
// nil) receives the Result once the storage group holding the command's
// effects is durable, or a Result whose Err wraps fault.ErrUnavailable if
// storage failed. done runs on the storage completion goroutine and must
// not block. cmd is the shard's until done runs.
//
// Before applying, the shard fills in what the command must carry: an
// Enqueue's message IDs (UUIDv7, increasing in enqueue order) where they
// are zero. While the storage reports its disk full, an Enqueue's done
// receives an Err wrapping store.ErrNoSpace (and so
// fault.ErrResourceExhausted), and nothing is enqueued. A *Subscribe
// submitted here has no sink, so its deliveries are dropped: open
// subscriptions with Subscribe.
//
// Submit blocks while the command channel is full (back-pressure on
// producers). It returns an error, and done is never called, when the
// shard has stopped (wrapping fault.ErrUnavailable) or ctx ends first.
func (sh *Shard) Submit(ctx context.Context, cmd Command, done func(Result)) error {
	return sh.do(ctx, op{cmd: cmd, done: done})
}

// Subscribe opens a subscription whose deliveries, expired leases and end
// go to sink; done receives Subscribed (the credit granted) or Err.
// Otherwise as Submit.
func (sh *Shard) Subscribe(ctx context.Context, cmd *Subscribe, sink Sink, done func(Result)) error {
	return sh.do(ctx, op{cmd: cmd, sink: sink, done: done})
}

// ListQueues reads every queue's summary into Result.Queues.
func (sh *Shard) ListQueues(ctx context.Context, done func(Result)) error {
	return sh.do(ctx, op{read: func() Query { return Query{} }, done: done})
}

// QueueStats reads one queue's statistics, with its top most pending
// fairness keys (0: sched.MaxStatsKeys), into Result.Stats, or an Err
// wrapping fault.ErrQueueNotFound.
func (sh *Shard) QueueStats(ctx context.Context, name string, top int, done func(Result)) error {
	return sh.do(ctx, op{read: func() Query { return Query{Stats: name, Top: top} }, done: done})
}

// AllQueueStats reads the statistics of every queue and DLQ the shard
// holds, by name, each with its top most pending fairness keys (0:
// sched.MaxStatsKeys), into Result.AllStats.
func (sh *Shard) AllQueueStats(ctx context.Context, top int, done func(Result)) error {
	return sh.do(ctx, op{read: func() Query { return Query{All: true, Top: top} }, done: done})
}

// Explain reads why message id of queue is not delivered yet into
// Result.Explained (sched.Explain), or an Err wrapping
// fault.ErrQueueNotFound or fault.ErrMessageNotFound.
func (sh *Shard) Explain(ctx context.Context, queue string, id [16]byte, done func(Result)) error {
	return sh.do(ctx, op{read: func() Query {
		var q Query
		q.Explain.Queue, q.Explain.ID = queue, id
		return q
	}, done: done})
}

// Peek reads a page of up to count messages of queue, those with IDs
// above after (zero: from the first) and, unless key is empty, of that
// fairness key, into Result.Peeked (sched.Sched.Peek), or an Err
// wrapping fault.ErrQueueNotFound.
func (sh *Shard) Peek(ctx context.Context, queue string, after [16]byte, count int, key string, done func(Result)) error {
	return sh.do(ctx, op{read: func() Query {
		var q Query
		q.Peek.Queue, q.Peek.After, q.Peek.Count, q.Peek.Key = queue, after, count, key
		return q
	}, done: done})
}

// Barrier runs fn on the shard goroutine after every operation the caller
// submitted before it. fn must not block.
func (sh *Shard) Barrier(ctx context.Context, fn func()) error {
	return sh.do(ctx, op{fn: fn})
}

// Replay applies cmds in order on the shard goroutine, as a follower
// applies committed log entries or recovery replays a command log: no
// command is filled in (an Enqueue's IDs must be set), and no Tick or
// Deliver is added from the shard's own clock or batching. Deliveries are
// decided, and the effects cut into a storage group, at each Deliver and
// nowhere else, so how the commands are split over Replay calls changes
// nothing; the effects of commands after the last Deliver wait for the
// next one. Results go nowhere; deliveries go to the sinks of
// subscriptions opened with Subscribe. It returns once the commands are
// queued; a later Barrier runs after them.
func (sh *Shard) Replay(ctx context.Context, cmds []Command) error {
	return sh.do(ctx, op{replay: cmds})
}

// run1 runs one op on the shard goroutine.
func (sh *Shard) run1(o op) {
	switch {
	case o.fn != nil:
		o.fn()
	case o.replay != nil:
		for _, c := range o.replay {
			apply(sh.s, 0, c)
			if _, ok := c.(*Deliver); ok {
				sh.flush(sh.timer)
			}
		}
	case o.read != nil:
		ref := sh.ref(o.done)
		switch q := o.read(); {
		case q.Peek.Queue != "":
			sh.s.Peek(ref, q.Peek.Queue, q.Peek.After, q.Peek.Count, q.Peek.Key)
		case q.Explain.Queue != "":
			sh.s.Explain(ref, q.Explain.Queue, q.Explain.ID)
		case q.All:
			sh.s.AllQueueStats(ref, q.Top)
		case q.Stats != "":
			sh.s.QueueStats(ref, q.Stats, q.Top)
		default:
			sh.s.ListQueues(ref)
		}
	default:
		sh.propose(o)
	}
}

// propose fills in what a command carries from the shell (IDs), applies
// it, and registers its result callback.
func (sh *Shard) propose(o op) {
	done, ok := sh.prepare(o)
	if !ok {
		return
	}
	apply(sh.s, sh.ref(done), o.cmd)
}

// prepare fills in what a command carries from the shell (IDs) and
// registers a subscription's sink. It returns the callback for the
// command's result, or false when the command was refused (done has been
// called).
func (sh *Shard) prepare(o op) (func(Result), bool) {
	done := o.done
	switch c := o.cmd.(type) {
	case *Enqueue:
		if sh.st.Health().Full {
			if done != nil {
				done(Result{Err: fmt.Errorf("enqueue of %d messages refused: %w", len(c.Items), store.ErrNoSpace)})
			}
			return nil, false
		}
		for i := range c.Items {
			if c.Items[i].Msg.ID != ([16]byte{}) {
				continue
			}
			id, err := NewID()
			if err != nil {
				if done != nil {
					done(Result{Err: err})
				}
				return nil, false
			}
			c.Items[i].Msg.ID = id
		}
	case *Subscribe:
		if o.sink != nil {
			sub := c.Sub
			sh.sinks[sub] = o.sink
			done = func(r Result) {
				if r.Err != nil {
					sh.post(func() { delete(sh.sinks, sub) })
				}
				if o.done != nil {
					o.done(r)
				}
			}
		}
	case *Unsubscribe:
		sh.closing = append(sh.closing, c.Sub)
	}
	return done, true
}
