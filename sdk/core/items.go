package core

import "github.com/fila-mq/fila/sdk/core/wire"

// itemCodes returns the per-item codes of a batch request's response, in
// item order; nil for any other frame.
func itemCodes(resp wire.Frame) []wire.Code {
	var codes []wire.Code
	add := func(c wire.Code) { codes = append(codes, c) }
	switch r := resp.(type) {
	case *wire.EnqueueResult:
		for _, x := range r.Results {
			add(x.Code)
		}
	case *wire.ExtendLeaseResult:
		for _, x := range r.Results {
			add(x.Code)
		}
	case *wire.AckResult:
		return resultCodes(r.Results)
	case *wire.NackResult:
		return resultCodes(r.Results)
	case *wire.RetryAfterResult:
		return resultCodes(r.Results)
	case *wire.ReleaseResult:
		return resultCodes(r.Results)
	}
	return codes
}

func resultCodes(rs []wire.ItemResult) []wire.Code {
	codes := make([]wire.Code, len(rs))
	for i, x := range rs {
		codes[i] = x.Code
	}
	return codes
}

// pickResults returns resp, a batch request's response, with only the
// results at idx.
func pickResults(resp wire.Frame, idx []int) wire.Frame {
	switch r := resp.(type) {
	case *wire.EnqueueResult:
		return &wire.EnqueueResult{Results: pickItems(r.Results, idx)}
	case *wire.ExtendLeaseResult:
		return &wire.ExtendLeaseResult{Results: pickItems(r.Results, idx)}
	case *wire.AckResult:
		return &wire.AckResult{Results: pickItems(r.Results, idx)}
	case *wire.NackResult:
		return &wire.NackResult{Results: pickItems(r.Results, idx)}
	case *wire.RetryAfterResult:
		return &wire.RetryAfterResult{Results: pickItems(r.Results, idx)}
	case *wire.ReleaseResult:
		return &wire.ReleaseResult{Results: pickItems(r.Results, idx)}
	}
	return resp
}

// notLeaderItems handles the response of part p from n in which some
// items, but not the request, failed NOT_LEADER: a node leading several
// of the part's groups answers for each group, and one of them may have
// lost its leader, or be electing one. Those items are sent again, as a
// NOT_LEADER of their own would be (after a backoff, the route to n
// forgotten), in runs of consecutive items that keep their Enqueue
// sequences: the broker may have taken a proposal it then failed with
// NOT_LEADER, and a resend with the same producer ID and sequence is not
// enqueued twice. The others finish. It reports whether it did; it does
// not once p has used its redirects, and the items keep their NOT_LEADER.
func (r *Router) notLeaderItems(n *node, p *part, resp wire.Frame) bool {
	codes := itemCodes(resp)
	if len(codes) == 0 || len(codes) != batchLen(p.frame) || p.redirects >= r.cfg.MaxRedirects {
		return false
	}
	var bad, good []int
	for i, c := range codes {
		if c == wire.CodeNotLeader {
			bad = append(bad, i)
		} else {
			good = append(good, i)
		}
	}
	if len(bad) == 0 || len(good) == 0 {
		// None failed, or all did: a broker answers a request whose every
		// item is not led there with a NOT_LEADER of the request, which
		// redirect follows; one whose items all failed is left as it is.
		return false
	}
	re := &RequestError{Code: wire.CodeNotLeader, Message: itemMessage(resp, bad[0])}
	var runs []*part
	for a := 0; a < len(bad); {
		k := queueKey(itemQueue(p.frame, bad[a]))
		b := a + 1
		for b < len(bad) && bad[b] == bad[b-1]+1 && queueKey(itemQueue(p.frame, bad[b])) == k {
			b++
		}
		lo, hi := bad[a], bad[b-1]+1
		pos := make([]int, hi-lo)
		for i := range pos {
			pos[i] = lo + i
		}
		runs = append(runs, &part{req: p.req, frame: run(p.frame, lo, hi), idx: p.reqIdx(pos),
			key: k, stamped: p.stamped, redirects: p.redirects + 1})
		a = b
	}
	r.replacePart(p, append([]*part{p}, runs...)...)
	p.frame, p.idx = subset(p.frame, good), p.reqIdx(good)
	r.learn(n, p, resp)
	r.finish(p, pickResults(resp, good), nil)
	for _, q := range runs {
		r.redirect(n, q, re)
	}
	return true
}

// itemMessage returns the message of item i of resp.
func itemMessage(resp wire.Frame, i int) string {
	switch r := resp.(type) {
	case *wire.EnqueueResult:
		return r.Results[i].Message
	case *wire.ExtendLeaseResult:
		return r.Results[i].Message
	case *wire.AckResult:
		return r.Results[i].Message
	case *wire.NackResult:
		return r.Results[i].Message
	case *wire.RetryAfterResult:
		return r.Results[i].Message
	case *wire.ReleaseResult:
		return r.Results[i].Message
	}
	return ""
}
