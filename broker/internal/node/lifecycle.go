package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// Message lifecycle operations: purge, peek (browse) and redrive.

// PeekPreview bounds the payload bytes Peek returns of each message.
const PeekPreview = 256

// maxPeekResult bounds the encoded size of a Peek's result, in bytes
// (about): well under the smallest frame a client may accept after
// continuation frames, and small enough for an operator's page.
const maxPeekResult = 4 << 20

// PurgeQueue removes the ready and delayed messages of queue (a queue or
// a DLQ), and with includeLeased its leased ones, for p (the admin
// permission on the queue). done receives Result.Purged or Result.Err
// (wrapping fault.ErrQueueNotFound).
func (n *Node) PurgeQueue(ctx context.Context, p Principal, queue string, includeLeased bool, done func(Result)) error {
	if err := p.Authorize(auth.OpPurgeQueue, queue); err != nil {
		return err
	}
	return n.submit(ctx, queue, &shard.PurgeQueue{Name: queue, IncludeLeased: includeLeased}, done)
}

// Peek lists up to count messages of queue (a queue or a DLQ) with IDs
// above after, of fairness key key unless it is empty, without leasing
// them, for p (the admin permission on the queue, as QueueStats). Each
// carries its headers (with fila-attempts and fila-error in a DLQ) and
// the first PeekPreview bytes of its payload; the page stops early to
// stay within about 4 MiB, NextAfter then resuming after the last one
// listed. done receives the page, or an error wrapping
// fault.ErrQueueNotFound; it runs on a goroutine of its own. In a
// cluster any replica answers.
func (n *Node) Peek(ctx context.Context, p Principal, queue string, after [16]byte, count int, key string, done func(*wire.PeekResult, error)) error {
	if err := p.Authorize(auth.OpPeek, queue); err != nil {
		return err
	}
	sh, err := n.localShard(queue)
	if err != nil {
		return err
	}
	return sh.Peek(ctx, queue, after, count, key, func(r Result) {
		if r.Err != nil {
			done(nil, r.Err)
			return
		}
		// Reading the records may wait for the disk: not on the
		// storage completion goroutine.
		go func() { done(peekResult(sh, r.Peeked)) }()
	})
}

// peekResult reads the headers and payload preview of each message of
// page from sh's storage, skipping those gone since (acked meanwhile).
func peekResult(sh *shard.Shard, page sched.PeekPage) (*wire.PeekResult, error) {
	res := &wire.PeekResult{NextAfter: page.Next}
	size := 0
	for i := range page.Msgs {
		m := &page.Msgs[i]
		rec, err := sh.ReadRecord(m.Key)
		if errors.Is(err, fault.ErrMessageNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		headers, payload, err := decodeRecord(rec)
		if err != nil {
			return nil, fmt.Errorf("peek %s: %w", m.Key, err)
		}
		if m.DeadLettered {
			headers = append(headers,
				wire.MessageHeader{Key: "fila-attempts", Value: fmt.Sprint(m.Attempts)},
				wire.MessageHeader{Key: "fila-error", Value: m.LastError})
		}
		pm := wire.PeekedMessage{
			ID:           m.ID,
			FairnessKey:  m.FairnessKey,
			State:        m.State,
			Attempts:     m.Attempts,
			EnqueuedAtMS: unixMS(m.EnqueuedAt),
			Headers:      headers,
			PayloadSize:  uint32(len(payload)),
			Preview:      payload[:min(len(payload), PeekPreview)],
		}
		if m.Due > 0 {
			pm.DueAtMS = unixMS(m.Due)
		}
		sz := 64 + len(pm.FairnessKey) + len(pm.Preview)
		for _, h := range headers {
			sz += 4 + len(h.Key) + len(h.Value)
		}
		if size+sz > maxPeekResult && len(res.Messages) > 0 {
			res.NextAfter = res.Messages[len(res.Messages)-1].ID
			break
		}
		size += sz
		res.Messages = append(res.Messages, pm)
	}
	return res, nil
}

func unixMS(t sched.Time) uint64 { return uint64(t) / uint64(time.Millisecond) }

// RedriveSpec says what a redrive moves, and how fast.
type RedriveSpec = sched.RedriveSpec

// RedriveWith moves messages of a DLQ back to its parent, for p (redrive
// permission): all at once, or with spec.Rate in the background; with
// cancel it stops the DLQ's throttled redrive instead. done receives
// Result.Redriven or Result.Err.
func (n *Node) RedriveWith(ctx context.Context, p Principal, dlq string, spec RedriveSpec, cancel bool, done func(Result)) error {
	if err := p.Authorize(auth.OpRedrive, dlq); err != nil {
		return err
	}
	if cancel {
		return n.submit(ctx, dlq, &shard.CancelRedrive{DLQ: dlq}, done)
	}
	return n.submit(ctx, dlq, &shard.Redrive{DLQ: dlq, N: spec.N, Rate: spec.Rate, FairnessKey: spec.FairnessKey}, done)
}
