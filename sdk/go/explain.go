package fila

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// Why a message is not delivered yet: Explanation.Reason. A broker newer
// than this SDK may answer a reason not listed here.
const (
	// WhyDelayed: not due until Until (an enqueue delay or a retry's
	// backoff).
	WhyDelayed = "delayed"
	// WhyDeciding: it failed, and waits for the queue's on_failure hook.
	WhyDeciding = "deciding"
	// WhyLeased: delivered, and leased to a consumer until Until.
	WhyLeased = "leased"
	// WhyOrdering: the message before it with the same ordering key is
	// delivered and not yet acked.
	WhyOrdering = "ordering"
	// WhyBehindKey: Ahead messages of its fairness key (with the same
	// throttle keys and ordering key) go first.
	WhyBehindKey = "behind-key"
	// WhyThrottled: next in its lane, which waits for a token of
	// ThrottleKeys; the next comes at Until.
	WhyThrottled = "throttled"
	// WhyKeyWaiting: its key's next message; the key waits in Lane
	// behind Ahead other keys.
	WhyKeyWaiting = "key-waiting"
	// WhyNoCredit: it goes next, but no subscription of the queue has
	// credit; or the queue has no subscription at all.
	WhyNoCredit = "no-credit"
)

// Explanation is why one message is not delivered yet, as the broker's
// scheduler sees it at the moment it answers.
type Explanation struct {
	Queue       string
	ID          ID
	Reason      string // one of the Why constants
	FairnessKey string
	Attempts    uint32 // failed attempts so far
	// Until is when the condition ends, where the broker knows it
	// (WhyDelayed, WhyLeased, WhyThrottled); zero otherwise.
	Until time.Time
	// Ahead counts messages ahead of it (WhyBehindKey) or keys ahead of
	// its key (WhyKeyWaiting).
	Ahead        uint64
	ThrottleKeys []string // WhyThrottled: the key short of a token
	// Lane is where its key waits (WhyKeyWaiting): "latency" or
	// "throughput" in an stfq queue, "round" in a drr queue.
	Lane string
	// ETA is the broker's estimate of when it will be delivered: for
	// WhyBehindKey and WhyKeyWaiting, at the pace its key and its queue
	// were delivered at over the last 30 to 60 s, if consumers keep it;
	// for WhyDelayed and WhyThrottled, Until. Zero when there is no
	// estimate.
	ETA time.Time
}

// String says it in one sentence, times relative to now.
func (e *Explanation) String() string {
	in := func() string {
		if e.Until.IsZero() {
			return ""
		}
		d := time.Until(e.Until).Round(time.Millisecond)
		if d < 0 {
			d = 0
		}
		return fmt.Sprintf(" until %s (in %v)", e.Until.UTC().Format(time.RFC3339Nano), d)
	}
	switch e.Reason {
	case WhyDelayed:
		return "delayed" + in()
	case WhyDeciding:
		return fmt.Sprintf("failed (%d attempts), waiting for the queue's on_failure hook to decide", e.Attempts)
	case WhyLeased:
		return "leased to a consumer" + in()
	case WhyOrdering:
		return "waiting for the message before it with the same ordering key to be acked"
	case WhyBehindKey:
		return fmt.Sprintf("behind %s of its own fairness key %q", count(e.Ahead, "message"), e.FairnessKey) + e.eta()
	case WhyThrottled:
		return fmt.Sprintf("waiting for a token of throttle key %v, next", e.ThrottleKeys) + in()
	case WhyKeyWaiting:
		return fmt.Sprintf("next of fairness key %q, which waits in the %s lane behind %s", e.FairnessKey, e.Lane, count(e.Ahead, "key")) + e.eta()
	case WhyNoCredit:
		return "ready, next to go: no subscription of the queue has credit"
	}
	return e.Reason
}

// eta says when the broker expects the delivery, if it has an estimate.
func (e *Explanation) eta() string {
	if e.ETA.IsZero() {
		return ""
	}
	d := max(time.Until(e.ETA), 0)
	return fmt.Sprintf("; expected by %s (in %v) at the recent delivery rate", e.ETA.UTC().Format(time.RFC3339Nano), d.Round(time.Millisecond))
}

func count(n uint64, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// Explain asks the broker why message id of queue (a queue, or its DLQ
// for a dead-lettered message) is not delivered yet. It needs the admin
// permission on the queue, as QueueStats does. It returns *ExplainError (QUEUE_NOT_FOUND;
// MESSAGE_NOT_FOUND for a message that is not in the queue: never
// enqueued, acked, or dead-lettered) or *StatusError. Of a sharded
// queue it asks each shard in turn, and Explanation.Queue names the
// shard that holds the message.
func (a *Administrator) Explain(ctx context.Context, queue string, id ID) (*Explanation, error) {
	resp, err := a.c.request(ctx, &wire.Explain{Queue: queue, ID: id}, queue)
	if errors.Is(err, ErrQueueSharded) {
		shards, terr := a.Topology(ctx, queue)
		if terr != nil {
			return nil, terr
		}
		for _, s := range shards {
			e, serr := a.Explain(ctx, s.Queue, id)
			if !errors.Is(serr, ErrMessageNotFound) {
				return e, serr
			}
			err = serr
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	r := resp.(*wire.ExplainResult)
	e := &Explanation{Queue: queue, ID: id, Reason: r.Reason, FairnessKey: r.FairnessKey, Attempts: r.Attempts,
		Ahead: r.Ahead, ThrottleKeys: r.ThrottleKeys, Lane: r.Lane}
	if r.UntilMS > 0 {
		e.Until = time.UnixMilli(int64(r.UntilMS))
	}
	if r.EtaAtMS > 0 {
		e.ETA = time.UnixMilli(int64(r.EtaAtMS))
	}
	return e, nil
}
