package node

import (
	"context"
	"errors"

	"github.com/fila-mq/fila/broker/internal/hook"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/google/uuid"
)

// FailureHook returns the shard's on_failure runner: it runs the failed
// message's queue hook with the message's headers read from its stored
// record. An error means the shard applies the default policy.
func FailureHook(h *Hooks) func(ctx context.Context, f sched.Failure, record []byte) (sched.Decision, error) {
	return func(ctx context.Context, f sched.Failure, record []byte) (sched.Decision, error) {
		r := h.Runner(f.Queue)
		if r == nil || !r.HasOnFailure() {
			return sched.Decision{}, errors.New("no on_failure hook")
		}
		headers, _, err := decodeRecord(record)
		if err != nil {
			return sched.Decision{}, err
		}
		in := hook.FailureInput{
			Queue:        f.Queue,
			ID:           uuid.UUID(f.ID).String(),
			Attempts:     int(f.Attempts),
			Error:        f.Reason,
			FairnessKey:  f.FairnessKey,
			Weight:       f.Weight,
			ThrottleKeys: f.ThrottleKeys,
			PayloadSize:  int(f.PayloadSize),
		}
		for _, hd := range headers {
			in.Headers = append(in.Headers, hook.Header{Key: hd.Key, Value: hd.Value})
		}
		d, err := r.OnFailure(ctx, in)
		if err != nil {
			return sched.Decision{}, err // names the hook and the queue
		}
		if d.DeadLetter {
			return sched.DeadLetter(), nil
		}
		return sched.Retry(d.Delay), nil
	}
}
