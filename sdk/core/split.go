package core

import "github.com/fila-mq/fila/sdk/core/wire"

// splitBatch returns the parts of a batch request with more than max
// items, each of at most max items, in order, sharing f's items; nil when
// f is not a batch request or fits in one. The parts of a stamped Enqueue
// keep each message's sequence: a part starting at message k has the
// frame's sequence plus k.
func splitBatch(f wire.Frame, max int) []wire.Frame {
	switch f := f.(type) {
	case *wire.Enqueue:
		return split(f.Messages, max, func(s []wire.EnqueueMessage, off int) wire.Frame { return subEnqueue(f, s, off) })
	case *wire.Ack:
		return split(f.Items, max, func(s []wire.LeaseRef, _ int) wire.Frame { return &wire.Ack{Items: s} })
	case *wire.Nack:
		return split(f.Items, max, func(s []wire.NackItem, _ int) wire.Frame { return &wire.Nack{Items: s} })
	case *wire.RetryAfter:
		return split(f.Items, max, func(s []wire.RetryAfterItem, _ int) wire.Frame { return &wire.RetryAfter{Items: s} })
	case *wire.ExtendLease:
		return split(f.Items, max, func(s []wire.ExtendLeaseItem, _ int) wire.Frame { return &wire.ExtendLease{Items: s} })
	case *wire.Release:
		return split(f.Items, max, func(s []wire.LeaseRef, _ int) wire.Frame { return &wire.Release{Items: s} })
	}
	return nil
}

// subEnqueue returns an Enqueue of msgs, which start at message off of e,
// with e's producer ID and their own sequence.
func subEnqueue(e *wire.Enqueue, msgs []wire.EnqueueMessage, off int) *wire.Enqueue {
	sub := &wire.Enqueue{Messages: msgs, ProducerID: e.ProducerID}
	if e.ProducerID != ([16]byte{}) {
		sub.Sequence = e.Sequence + uint64(off)
	}
	return sub
}

func split[T any](items []T, max int, frame func(s []T, off int) wire.Frame) []wire.Frame {
	if max <= 0 || len(items) <= max {
		return nil
	}
	parts := make([]wire.Frame, 0, (len(items)+max-1)/max)
	for off := 0; off < len(items); off += max {
		n := min(len(items)-off, max)
		parts = append(parts, frame(items[off:off+n:off+n], off))
	}
	return parts
}

// batchLen returns the number of items of a part of a split request.
func batchLen(f wire.Frame) int {
	switch f := f.(type) {
	case *wire.Enqueue:
		return len(f.Messages)
	case *wire.Ack:
		return len(f.Items)
	case *wire.Nack:
		return len(f.Items)
	case *wire.RetryAfter:
		return len(f.Items)
	case *wire.ExtendLease:
		return len(f.Items)
	case *wire.Release:
		return len(f.Items)
	}
	return 0
}

// joinResults joins the responses of a split request's parts into one
// response of the request's type, in order. A part that failed as a whole
// contributes one result per item carrying its failure's code and
// message.
func joinResults(g *group) wire.Frame {
	switch g.req.(type) {
	case *wire.Enqueue:
		var out []wire.EnqueueItemResult
		for k := range g.parts {
			if e := g.errs[k]; e != nil {
				for range batchLen(g.parts[k]) {
					out = append(out, wire.EnqueueItemResult{Code: e.Code, Message: e.Message})
				}
				continue
			}
			out = append(out, g.answers[k].(*wire.EnqueueResult).Results...)
		}
		return &wire.EnqueueResult{Results: out}
	case *wire.ExtendLease:
		var out []wire.ExtendLeaseItemResult
		for k := range g.parts {
			if e := g.errs[k]; e != nil {
				for range batchLen(g.parts[k]) {
					out = append(out, wire.ExtendLeaseItemResult{Code: e.Code, Message: e.Message})
				}
				continue
			}
			out = append(out, g.answers[k].(*wire.ExtendLeaseResult).Results...)
		}
		return &wire.ExtendLeaseResult{Results: out}
	}
	var out []wire.ItemResult
	for k := range g.parts {
		if e := g.errs[k]; e != nil {
			for range batchLen(g.parts[k]) {
				out = append(out, wire.ItemResult{Code: e.Code, Message: e.Message})
			}
			continue
		}
		out = append(out, itemResults(g.answers[k])...)
	}
	switch g.req.(type) {
	case *wire.Ack:
		return &wire.AckResult{Results: out}
	case *wire.Nack:
		return &wire.NackResult{Results: out}
	case *wire.RetryAfter:
		return &wire.RetryAfterResult{Results: out}
	}
	return &wire.ReleaseResult{Results: out}
}

// itemResults returns the results of an Ack, Nack, RetryAfter or Release
// response.
func itemResults(f wire.Frame) []wire.ItemResult {
	switch f := f.(type) {
	case *wire.AckResult:
		return f.Results
	case *wire.NackResult:
		return f.Results
	case *wire.RetryAfterResult:
		return f.Results
	case *wire.ReleaseResult:
		return f.Results
	}
	return nil
}
