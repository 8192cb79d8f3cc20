package shard

import (
	"context"
	"fmt"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// Call runs cmd on the shard goroutine with a fresh Ref; done receives the
// scheduler's reply for that Ref once the Ready holding it is durable (or
// an error wrapping fault.ErrUnavailable if storage failed). done runs on
// the storage completion goroutine and must not block.
//
//	sh.Call(ctx, func(s *sched.Sched, ref sched.Ref) { s.DeleteQueue(ref, name) }, done)
//
// Call returns an error, and done is never called, when the shard has
// stopped or ctx ends while the command channel is full.
func (sh *Shard) Call(ctx context.Context, cmd func(s *sched.Sched, ref sched.Ref), done func(v any)) error {
	return sh.do(ctx, func() { cmd(sh.s, sh.ref(done)) })
}

// Post runs cmd on the shard goroutine, for commands without a reply.
func (sh *Shard) Post(ctx context.Context, cmd func(s *sched.Sched)) error {
	return sh.do(ctx, func() { cmd(sh.s) })
}

// Enqueue assigns each item a new message ID (UUIDv7, increasing in
// enqueue order) and enqueues the batch; done receives the scheduler's
// reply: []sched.EnqueueResult, or an error. While the storage reports its
// disk full, done receives an error wrapping store.ErrNoSpace (and so
// fault.ErrResourceExhausted) and nothing is enqueued.
func (sh *Shard) Enqueue(ctx context.Context, items []sched.EnqueueItem, done func(v any)) error {
	return sh.do(ctx, func() {
		if sh.st.Health().Full {
			done(fmt.Errorf("shard: enqueue of %d messages refused: %w", len(items), store.ErrNoSpace))
			return
		}
		for i := range items {
			id, err := NewID()
			if err != nil {
				done(err)
				return
			}
			items[i].Msg.ID = id
		}
		sh.s.Enqueue(sh.ref(done), items)
	})
}

// Subscribe opens a subscription whose deliveries go to sink with credit
// deliveries of initial credit (math.MaxUint32: as much as the scheduler
// allows, Config.Sched.MaxUnsettled); done receives the reply, a
// sched.Subscribed with the credit granted, or an error.
func (sh *Shard) Subscribe(ctx context.Context, sub sched.SubID, queue string, credit uint32, limits []sched.RateLimit, sink Sink, done func(v any)) error {
	return sh.do(ctx, func() {
		sh.sinks[sub] = sink
		ref := sh.ref(func(v any) {
			if err, ok := v.(error); ok && err != nil {
				sh.do(context.Background(), func() { delete(sh.sinks, sub) })
			}
			done(v)
		})
		sh.s.Subscribe(ref, sub, queue, credit, limits)
	})
}

// Unsubscribe closes a subscription. With release, its leased messages
// return to their queue at once (the consumer disconnected); without, they
// keep their leases. Deliveries made before the command still reach the
// sink. done (may be nil) receives the reply.
func (sh *Shard) Unsubscribe(ctx context.Context, sub sched.SubID, release bool, done func(v any)) error {
	return sh.do(ctx, func() {
		if done == nil {
			done = func(any) {}
		}
		sh.s.Unsubscribe(sh.ref(done), sub, release)
		sh.closing = append(sh.closing, sub)
	})
}

// AddCredit grants a subscription n more deliveries. It never lets the
// subscription hold more than Config.Sched.MaxUnsettled leases.
func (sh *Shard) AddCredit(ctx context.Context, sub sched.SubID, n uint32) error {
	return sh.do(ctx, func() { sh.s.AddCredit(sub, n) })
}
