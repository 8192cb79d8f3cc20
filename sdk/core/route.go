package core

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// A routeKey names the Raft group that serves a request: a queue's, by
// the queue's name (a dead-letter queue lives in its parent's group), or
// the meta group's (metaKey). anyKey marks a request any node answers.
type routeKey string

const (
	anyKey  routeKey = ""
	metaKey routeKey = "\x00meta" // not a queue name: those are letters, digits and ._-:
)

// queueKey is the key of queue q's group. Queue names may not end in
// ".dlq", so a name that does is a dead-letter queue, in its parent's
// group.
func queueKey(q string) routeKey { return routeKey(strings.TrimSuffix(q, ".dlq")) }

// frameKey is the key of a request that is not a batch (see itemQueue):
// a queue's operations go to its leader, admin writes and the cluster's
// shared state (queues, keys, ACLs, runtime config) to the meta group's.
func frameKey(f wire.Frame) routeKey {
	switch f := f.(type) {
	case *wire.Subscribe:
		return queueKey(f.Queue)
	case *wire.QueueStats:
		return queueKey(f.Name)
	case *wire.Explain:
		return queueKey(f.Queue)
	case *wire.Redrive:
		return queueKey(f.DeadLetterQueue)
	case *wire.PurgeQueue:
		return queueKey(f.Name)
	case *wire.Peek:
		return queueKey(f.Queue)
	case *wire.CreateQueue, *wire.DeleteQueue, *wire.ListQueues,
		*wire.SetConfig, *wire.GetConfig, *wire.ListConfig, *wire.DeleteConfig,
		*wire.CreateAPIKey, *wire.RevokeAPIKey, *wire.ListAPIKeys, *wire.SetACL, *wire.GetACL:
		return metaKey
	}
	// Ping, Topology, ClusterStatus, MoveQueue, DrainNode, Rebalance,
	// AddNode, RemoveNode: any node answers them (ClusterStatus with its
	// own view; the others once their change, which the node forwards to
	// the meta group itself, is applied there), so they go to the node
	// the Router asks first.
	return anyKey
}

// batchItems returns the number of items of a batch request, whose items
// each name their queue, or -1 for any other frame.
func batchItems(f wire.Frame) int {
	switch f.(type) {
	case *wire.Enqueue, *wire.Ack, *wire.Nack, *wire.RetryAfter, *wire.ExtendLease, *wire.Release:
		return batchLen(f)
	}
	return -1
}

// itemQueue returns the queue of item i of a batch request.
func itemQueue(f wire.Frame, i int) string {
	switch f := f.(type) {
	case *wire.Enqueue:
		return f.Messages[i].Queue
	case *wire.Ack:
		return f.Items[i].Queue
	case *wire.Nack:
		return f.Items[i].Queue
	case *wire.RetryAfter:
		return f.Items[i].Queue
	case *wire.ExtendLease:
		return f.Items[i].Queue
	case *wire.Release:
		return f.Items[i].Queue
	}
	return ""
}

// subset returns a batch request of the items of f at idx, in that order.
// An Enqueue's subset is not stamped: it is stamped when first sent.
func subset(f wire.Frame, idx []int) wire.Frame {
	switch f := f.(type) {
	case *wire.Enqueue:
		return &wire.Enqueue{Messages: pickItems(f.Messages, idx)}
	case *wire.Ack:
		return &wire.Ack{Items: pickItems(f.Items, idx)}
	case *wire.Nack:
		return &wire.Nack{Items: pickItems(f.Items, idx)}
	case *wire.RetryAfter:
		return &wire.RetryAfter{Items: pickItems(f.Items, idx)}
	case *wire.ExtendLease:
		return &wire.ExtendLease{Items: pickItems(f.Items, idx)}
	case *wire.Release:
		return &wire.Release{Items: pickItems(f.Items, idx)}
	}
	return f
}

func pickItems[T any](items []T, idx []int) []T {
	out := make([]T, len(idx))
	for k, i := range idx {
		out[k] = items[i]
	}
	return out
}

// run returns items a to b of a batch request. A stamped Enqueue's run
// keeps each message's sequence (subEnqueue).
func run(f wire.Frame, a, b int) wire.Frame {
	switch f := f.(type) {
	case *wire.Enqueue:
		return subEnqueue(f, f.Messages[a:b:b], a)
	case *wire.Ack:
		return &wire.Ack{Items: f.Items[a:b:b]}
	case *wire.Nack:
		return &wire.Nack{Items: f.Items[a:b:b]}
	case *wire.RetryAfter:
		return &wire.RetryAfter{Items: f.Items[a:b:b]}
	case *wire.ExtendLease:
		return &wire.ExtendLease{Items: f.Items[a:b:b]}
	case *wire.Release:
		return &wire.Release{Items: f.Items[a:b:b]}
	}
	return f
}

// own returns f, or a copy of it that the Router may stamp.
func own(f wire.Frame) wire.Frame {
	if e, ok := f.(*wire.Enqueue); ok {
		c := *e
		return &c
	}
	return f
}

// resendable reports whether a request lost with its connection may be
// sent again: the broker may have applied it. Enqueues stamped with a
// producer ID (the broker answers a resent one with the first results),
// settles (by message ID and lease: a second one finds the lease gone)
// and reads are; other admin operations are not.
func resendable(op wire.Opcode, f wire.Frame) bool {
	switch op {
	case wire.OpEnqueue:
		return f.(*wire.Enqueue).ProducerID != [16]byte{}
	case wire.OpAck, wire.OpNack, wire.OpRetryAfter, wire.OpExtendLease, wire.OpRelease,
		wire.OpPing, wire.OpListQueues, wire.OpQueueStats, wire.OpExplain, wire.OpPeek, wire.OpGetConfig, wire.OpListConfig,
		wire.OpListAPIKeys, wire.OpGetACL, wire.OpTopology, wire.OpClusterStatus:
		return true
	}
	return false
}

// joinParts joins the outcomes of the parts of a request split across
// leaders into one response, each item's result at its place. When every
// part failed as a whole the request fails with the first failure; else a
// part that failed contributes one result per item with its code.
func joinParts(req *request) (wire.Frame, error) {
	var first error
	failed := 0
	for _, p := range req.parts {
		if p.err != nil {
			failed++
			if first == nil {
				first = p.err
			}
		}
	}
	if failed == len(req.parts) {
		return nil, first
	}
	n := batchItems(req.frame)
	switch req.frame.(type) {
	case *wire.Enqueue:
		out := make([]wire.EnqueueItemResult, n)
		for _, p := range req.parts {
			var rs []wire.EnqueueItemResult
			if r, ok := p.resp.(*wire.EnqueueResult); ok {
				rs = r.Results
			}
			place(out, p, rs, func(c wire.Code, m string) wire.EnqueueItemResult { return wire.EnqueueItemResult{Code: c, Message: m} })
		}
		return &wire.EnqueueResult{Results: out}, nil
	case *wire.ExtendLease:
		out := make([]wire.ExtendLeaseItemResult, n)
		for _, p := range req.parts {
			var rs []wire.ExtendLeaseItemResult
			if r, ok := p.resp.(*wire.ExtendLeaseResult); ok {
				rs = r.Results
			}
			place(out, p, rs, func(c wire.Code, m string) wire.ExtendLeaseItemResult {
				return wire.ExtendLeaseItemResult{Code: c, Message: m}
			})
		}
		return &wire.ExtendLeaseResult{Results: out}, nil
	}
	out := make([]wire.ItemResult, n)
	for _, p := range req.parts {
		place(out, p, itemResults(p.resp), func(c wire.Code, m string) wire.ItemResult { return wire.ItemResult{Code: c, Message: m} })
	}
	switch req.frame.(type) {
	case *wire.Ack:
		return &wire.AckResult{Results: out}, nil
	case *wire.Nack:
		return &wire.NackResult{Results: out}, nil
	case *wire.RetryAfter:
		return &wire.RetryAfterResult{Results: out}, nil
	}
	return &wire.ReleaseResult{Results: out}, nil
}

// place puts part p's results (rs) at its items' places in out, or its
// failure in each.
func place[T any](out []T, p *part, rs []T, fail func(wire.Code, string) T) {
	if p.err != nil {
		code, msg := errCode(p.err)
		for _, i := range p.idx {
			out[i] = fail(code, msg)
		}
		return
	}
	if len(rs) != len(p.idx) {
		msg := fmt.Sprintf("broker returned %d results for %d items", len(rs), len(p.idx))
		for _, i := range p.idx {
			out[i] = fail(wire.CodeInternal, msg)
		}
		return
	}
	for k, i := range p.idx {
		out[i] = rs[k]
	}
}

// errCode is the code and message an item gets for its part's failure: a
// broker's Error frame's, or UNAVAILABLE for one the broker never
// answered (the connection was lost, no leader could be reached).
func errCode(err error) (wire.Code, string) {
	var re *RequestError
	if errors.As(err, &re) && !errors.Is(err, ErrConnectionLost) {
		return re.Code, re.Message
	}
	return wire.CodeUnavailable, err.Error()
}
