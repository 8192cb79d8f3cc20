package core

import (
	"fmt"
	"math/bits"
	"slices"
	"strings"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// ShardOf returns the shard, from 0 to shards-1, that a message with
// fairness key fairnessKey belongs to in a queue of shards shards whose
// tenant separator is tenantSeparator (wire.TopologyResult's
// TenantSeparator; "" for none): fnv1a32(h) mod shards, where fnv1a32 is
// the 32-bit FNV-1a hash (offset basis 2166136261, prime 16777619) of h's
// bytes, and h is the fairness key, or, when tenantSeparator is not
// empty, the fairness key up to its first tenantSeparator (all of it if
// it has none), so that one tenant's keys stay in one shard. An empty
// key is the broker's "default" (DefaultFairnessKey), and hashes as such.
// shards of 1 or less gives 0. The protocol specifies the same mapping
// (TopologyResult.shards).
func ShardOf(fairnessKey, tenantSeparator string, shards int) int {
	if shards <= 1 {
		return 0
	}
	h := fairnessKey
	if h == "" {
		h = DefaultFairnessKey
	}
	if tenantSeparator != "" {
		if i := strings.Index(h, tenantSeparator); i >= 0 {
			h = h[:i]
		}
	}
	sum := uint32(2166136261)
	for i := 0; i < len(h); i++ {
		sum ^= uint32(h[i])
		sum *= 16777619
	}
	return int(sum % uint32(shards))
}

// DefaultFairnessKey is the fairness key of a message that names none.
const DefaultFairnessKey = "default"

// A shardMap is what Topology told of a queue's shards.
type shardMap struct {
	names []string // each shard's queue, by shard number
	sep   string   // the tenant separator the hash uses
}

// trivial reports whether m maps queue to itself alone: the queue is not
// sharded (or the broker does not name its shards).
func (m *shardMap) trivial(queue string) bool {
	return len(m.names) == 1 && m.names[0] == queue
}

// shardQueue is the queue to address shard sh of t by.
func shardQueue(t *wire.TopologyResult, sh wire.ShardInfo) string {
	if sh.Queue != "" {
		return sh.Queue
	}
	return t.Queue
}

// A lookup is a Topology the Router asked for a queue's shard map, and
// what waits for it.
type lookup struct {
	req   *request
	parts []*part // Enqueue parts answered QUEUE_SHARDED
	subs  []*rsub // subscriptions answered QUEUE_SHARDED
}

// lookup returns the lookup of queue's shard map, asking Topology if none
// is in flight. deadline (0 for none) is a waiter's: the lookup waits as
// long as its most patient waiter.
func (r *Router) lookup(queue string, deadline Time) *lookup {
	if lk, ok := r.lookups[queue]; ok {
		if lk.req.deadline != 0 && (deadline == 0 || deadline > lk.req.deadline) {
			lk.req.deadline = deadline
		}
		return lk
	}
	req := &request{op: wire.OpTopology, frame: &wire.Topology{Queue: queue}, deadline: deadline, left: 1}
	req.parts = []*part{{req: req, frame: req.frame, key: anyKey}}
	req.onDone = func(resp wire.Frame, err error) { r.lookedUp(queue, resp, err) }
	lk := &lookup{req: req}
	r.lookups[queue] = lk
	r.wait(req.parts[0])
	return lk
}

// lookedUp records queue's shard map from its Topology, and resumes
// what waited for it.
func (r *Router) lookedUp(queue string, resp wire.Frame, err error) {
	lk := r.lookups[queue]
	delete(r.lookups, queue)
	if t, ok := resp.(*wire.TopologyResult); ok && err == nil && len(t.Shards) > 0 {
		m := &shardMap{names: make([]string, len(t.Shards)), sep: t.TenantSeparator}
		for i, sh := range t.Shards {
			m.names[i] = shardQueue(t, sh)
		}
		r.shards[queue] = m
	}
	if lk == nil {
		return
	}
	_, known := r.shards[queue]
	for _, p := range lk.parts {
		p.lookupFailed = p.lookupFailed || !known
		if p.parked--; p.parked == 0 {
			r.resume(p)
		}
	}
	for _, s := range lk.subs {
		if r.subs[s.id] != s {
			continue
		}
		if m := r.shards[queue]; m != nil {
			r.splitSub(s, m)
		} else {
			r.subEnd(s, s.sharded)
		}
	}
}

// --- Producers ---

// shardName returns the shard queue of a message of queue with
// fairness key key; ok is false when the queue's shard map is not known.
func (r *Router) shardName(queue, key string) (name string, ok bool) {
	m := r.shards[queue]
	if m == nil || len(m.names) == 0 {
		return "", false
	}
	return m.names[ShardOf(key, m.sep, len(m.names))], true
}

// shardFrame returns f with each message of a sharded queue whose shard
// map is known addressed to its shard, as a new Enqueue with a new slice
// of messages (f is the caller's: it is not changed); f itself when it
// is not an Enqueue or no message changes.
func (r *Router) shardFrame(f wire.Frame) wire.Frame {
	e, ok := f.(*wire.Enqueue)
	if !ok || len(r.shards) == 0 {
		return f
	}
	var msgs []wire.EnqueueMessage
	for i := range e.Messages {
		m := &e.Messages[i]
		name, ok := r.shardName(m.Queue, m.FairnessKey)
		if !ok || name == m.Queue {
			continue
		}
		if msgs == nil {
			msgs = slices.Clone(e.Messages)
		}
		msgs[i].Queue = name
	}
	if msgs == nil {
		return f
	}
	c := *e
	c.Messages = msgs
	return &c
}

// reshard acts on an Enqueue part answered QUEUE_SHARDED (the broker
// enqueued none of it): it waits for the shard maps of its queues that
// are not known, then is sent again split by shard (resume).
func (r *Router) reshard(p *part, re *RequestError) {
	p.sharded = re
	var need []string
	for i := range batchLen(p.frame) {
		q := itemQueue(p.frame, i)
		if _, known := r.shards[q]; !known && !slices.Contains(need, q) {
			need = append(need, q)
		}
	}
	for _, q := range need {
		lk := r.lookup(q, p.deadline())
		lk.parts = append(lk.parts, p)
		p.parked++
	}
	if p.parked == 0 {
		r.resume(p)
	}
}

// resume sends again, split by shard and then by leader, a part whose
// shard maps are known; it fails with its QUEUE_SHARDED when a lookup
// failed or the maps change nothing.
func (r *Router) resume(p *part) {
	if p.done {
		return
	}
	f := r.shardFrame(p.frame)
	if p.lookupFailed || f == p.frame {
		r.finish(p, nil, p.sharded)
		return
	}
	req := p.req
	groups := r.groupItems(f)
	parts := make([]*part, 0, len(groups))
	for _, g := range groups {
		// Not stamped: the broker enqueued nothing of p, so the parts
		// take new sequences.
		parts = append(parts, &part{req: req, frame: subset(f, g.idx), idx: p.reqIdx(g.idx), key: g.key, multi: g.multi})
	}
	p.done = true
	r.replacePart(p, parts...)
	for _, q := range parts {
		r.wait(q)
	}
}

// reqIdx maps positions in p's frame to the request's items.
func (p *part) reqIdx(pos []int) []int {
	idx := make([]int, len(pos))
	for k, i := range pos {
		if p.idx == nil {
			idx[k] = i
		} else {
			idx[k] = p.idx[i]
		}
	}
	return idx
}

// replacePart puts parts in p's place in its request, which waits for
// them instead of p.
func (r *Router) replacePart(p *part, parts ...*part) {
	req := p.req
	for i, q := range req.parts {
		if q == p {
			req.parts = append(req.parts[:i:i], append(parts, req.parts[i+1:]...)...)
			break
		}
	}
	req.left += len(parts) - 1
}

// shardedItems handles an EnqueueResult of part p from n in which some
// items failed QUEUE_SHARDED (a part the Conn split at the broker's batch
// cap, and some of its frames failed as a whole): those items are sent
// again by shard, the others finish. It reports whether it did.
func (r *Router) shardedItems(n *node, p *part, resp wire.Frame) bool {
	er, ok := resp.(*wire.EnqueueResult)
	if !ok || len(er.Results) != batchLen(p.frame) {
		return false
	}
	var bad, good []int
	for i, res := range er.Results {
		if res.Code == wire.CodeQueueSharded {
			bad = append(bad, i)
		} else {
			good = append(good, i)
		}
	}
	if len(bad) == 0 {
		return false
	}
	re := &RequestError{Code: wire.CodeQueueSharded, Message: er.Results[bad[0]].Message}
	if len(good) == 0 {
		r.reshard(p, re)
		return true
	}
	q := &part{req: p.req, frame: subset(p.frame, bad), idx: p.reqIdx(bad), key: queueKey(itemQueue(p.frame, bad[0])), multi: true}
	r.replacePart(p, p, q)
	p.frame, p.idx = subset(p.frame, good), p.reqIdx(good)
	r.learn(n, p, resp)
	r.finish(p, &wire.EnqueueResult{Results: pickItems(er.Results, good)}, nil)
	r.reshard(q, re)
	return true
}

// --- Consumers ---

// root is the subscription the caller knows s by: its parent, for a
// shard's.
func (s *rsub) root() *rsub {
	if s.parent != nil {
		return s.parent
	}
	return s
}

// alive reports whether s has not ended.
func (r *Router) alive(s *rsub) bool { return r.subs[s.id] == s }

// shardSub acts on the caller's Subscribe s answered QUEUE_SHARDED: it
// subscribes to the shards once their map is known.
func (r *Router) shardSub(s *rsub, re *RequestError) {
	s.sharded = re
	if m := r.shards[s.frame.Queue]; m != nil {
		r.splitSub(s, m)
		return
	}
	lk := r.lookup(s.frame.Queue, s.deadline)
	lk.subs = append(lk.subs, s)
}

// splitSub makes s the parent of one subscription per shard of m, each
// opened on its shard's leader with its share of s's prefetch. A map of
// the queue alone ends s with its QUEUE_SHARDED.
func (r *Router) splitSub(s *rsub, m *shardMap) {
	if m.trivial(s.frame.Queue) {
		err := error(s.sharded)
		if s.sharded == nil {
			err = &RequestError{Code: wire.CodeQueueSharded, Message: "queue " + s.frame.Queue + " is sharded, but Topology lists it alone"}
		}
		r.subEnd(s, err)
		return
	}
	shares := splitCredit(s.prefetch, make([]uint64, len(m.names)))
	s.children = make([]*rsub, len(m.names))
	for i, name := range m.names {
		var share uint32
		if s.prefetch > 0 {
			share = shares[i]
		}
		c := &rsub{
			id:       r.allocID(),
			frame:    &wire.Subscribe{Queue: name, Prefetch: share, RateLimits: s.frame.RateLimits, LeaseTimeoutMS: s.frame.LeaseTimeoutMS},
			key:      queueKey(name),
			prefetch: share,
			deadline: s.deadline,
			parent:   s,
		}
		r.subs[c.id] = c
		s.children[i] = c
		r.wait(r.attempt(c))
	}
}

// childOpened records the first opening of c, a shard's subscription,
// and completes its parent's Subscribe once every shard's is open.
func (r *Router) childOpened(c *rsub, resp wire.Frame) {
	if ok, isOK := resp.(*wire.SubscribeOk); isOK {
		c.granted = ok.Prefetch
	}
	if c.prefetch == 0 {
		c.prefetch = c.granted // 0 was asked: the broker's cap is its share
	}
	par := c.parent
	if par.opened || par.ending || par.closing {
		return
	}
	var sum uint32
	for _, o := range par.children {
		if !o.opened {
			return
		}
		sum += o.granted
	}
	par.opened = true
	r.completions = append(r.completions, Completion{RequestID: par.id, Op: wire.OpSubscribe, Request: par.frame,
		Response: &wire.SubscribeOk{Prefetch: sum}})
	r.deliveries = append(r.deliveries, par.early...)
	r.expired = append(r.expired, par.earlyExp...)
	par.early, par.earlyExp = nil, nil
	r.rebalance(par, false)
}

// closeChildren closes every child of par still open.
func (r *Router) closeChildren(par *rsub) {
	for _, c := range par.children {
		if r.alive(c) && !c.closing {
			c.closing = true
			c.unsub = &request{op: wire.OpUnsubscribe, frame: &wire.Unsubscribe{Subscription: c.id}, left: 1,
				onDone: func(wire.Frame, error) {}}
			r.stopSub(c)
		}
	}
	r.parentDone(par)
}

// childGone acts on the end of c, a shard's subscription: one that ends
// unasked ends its parent, whose other children are closed.
func (r *Router) childGone(c *rsub, err error) {
	par := c.parent
	if par.closing || par.ending {
		r.parentDone(par)
		return
	}
	par.ending = true
	par.endErr = err
	if err == nil {
		par.endErr = fmt.Errorf("fila: the subscription of shard %s ended", c.frame.Queue)
	}
	r.closeChildren(par)
}

// parentDone ends par once none of its children is left: its Subscribe
// fails if it had not completed, else it ends (Ready.Ended) with the
// error of the child that ended it, or nil after Unsubscribe.
func (r *Router) parentDone(par *rsub) {
	if !r.alive(par) {
		return
	}
	for _, c := range par.children {
		if r.alive(c) {
			return
		}
	}
	par.early, par.earlyExp = nil, nil
	if !par.opened {
		delete(r.subs, par.id)
		err := par.endErr
		if err == nil {
			err = ErrGoingAway
		}
		r.completions = append(r.completions, Completion{RequestID: par.id, Op: wire.OpSubscribe, Request: par.frame, Err: err})
		return
	}
	err := par.endErr
	if par.closing {
		err = nil
	}
	r.subGone(par, err)
}

// delivered reports a Delivery of s under the caller's ID. A shard's
// backlog moves its parent's credit (rebalance).
func (r *Router) delivered(s *rsub, d DeliveryBatch) {
	par := s.parent
	if par == nil {
		d.Subscription = s.id
		r.deliveries = append(r.deliveries, d)
		return
	}
	d.Subscription = par.id
	s.backlog = d.Backlog
	if !par.opened {
		par.early = append(par.early, d)
		return
	}
	r.deliveries = append(r.deliveries, d)
	r.rebalance(par, false)
}

// expiredIn reports an expiry of s under the caller's ID.
func (r *Router) expiredIn(s *rsub, e Expiry) {
	e.Subscription = s.root().id
	if par := s.parent; par != nil && !par.opened {
		par.earlyExp = append(par.earlyExp, e)
		return
	}
	r.expired = append(r.expired, e)
}

// settleAny settles each of leases on the first child of par that holds
// it.
func (r *Router) settleAny(par *rsub, leases []uint64) {
	per := make([][]uint64, len(par.children))
	for _, l := range leases {
		for i, c := range par.children {
			if r.alive(c) && r.holds(c, l) {
				per[i] = append(per[i], l)
				break
			}
		}
	}
	for i, ls := range per {
		if len(ls) > 0 {
			r.settle(par.children[i], ls)
		}
	}
}

// holds reports whether s holds the delivery of lease unsettled, where it
// is open or for its next opening.
func (r *Router) holds(s *rsub, lease uint64) bool {
	if _, ok := s.adopt[lease]; ok {
		return true
	}
	return s.node != nil && s.node.conn != nil && s.connSub != 0 && s.node.conn.holds(s.connSub, lease)
}

// rebalance shares par's prefetch among its children by their backlogs
// (see Subscribe and splitCredit). A child's new share is applied only
// when it differs from its prefetch by at least a quarter of it (at least
// 1) or moves to or from 1, unless force; where the child is open, by
// Conn.SetPrefetch, else for its next opening.
func (r *Router) rebalance(par *rsub, force bool) {
	if !par.opened || par.ending || par.closing {
		return
	}
	total := par.prefetch
	backlogs := make([]uint64, len(par.children))
	if total == 0 {
		for _, c := range par.children {
			total += c.granted
		}
	}
	if total == 0 {
		return // no limit to share
	}
	for i, c := range par.children {
		backlogs[i] = c.backlog
	}
	shares := splitCredit(total, backlogs)
	for i, c := range par.children {
		want, cur := shares[i], c.prefetch
		if want == cur || !r.alive(c) || (!force && !worthMoving(cur, want)) {
			continue
		}
		switch {
		case c.live:
			if err := c.node.conn.SetPrefetch(c.connSub, want); err != nil {
				continue // an unlimited grant (an older broker): nothing to share
			}
		case c.attempt != nil && c.attempt.node != nil:
			continue // its Subscribe is in flight with the old share
		}
		c.prefetch = want
	}
}

// worthMoving reports whether a share moving from cur to want is worth a
// change: by at least max(1, cur/4), or to or from the floor of 1.
func worthMoving(cur, want uint32) bool {
	if (cur == 1) != (want == 1) {
		return true
	}
	d := max(cur, want) - min(cur, want)
	return d >= max(1, cur/4)
}

// splitCredit splits prefetch p among len(backlogs) shards: each gets 1,
// and the rest of max(p, shards) in proportion to its backlog (largest
// remainders first, the lower shard on a tie), or evenly (the first
// shards one more) when every backlog is 0.
func splitCredit(p uint32, backlogs []uint64) []uint32 {
	n := len(backlogs)
	out := make([]uint32, n)
	if n == 0 {
		return out
	}
	total := max(uint64(p), uint64(n))
	rest := total - uint64(n)
	for i := range out {
		out[i] = 1
	}
	// Sum the backlogs, scaling them down should the sum overflow.
	b := slices.Clone(backlogs)
	var sum uint64
	for {
		sum = 0
		overflow := false
		for _, v := range b {
			var carry uint64
			sum, carry = bits.Add64(sum, v, 0)
			if carry != 0 {
				overflow = true
				break
			}
		}
		if !overflow {
			break
		}
		for i := range b {
			b[i] >>= 8
		}
	}
	if sum == 0 {
		for i := range out {
			out[i] += uint32(rest / uint64(n))
			if uint64(i) < rest%uint64(n) {
				out[i]++
			}
		}
		return out
	}
	rems := make([]uint64, n)
	given := uint64(0)
	for i, v := range b {
		hi, lo := bits.Mul64(rest, v)
		q, rem := bits.Div64(hi, lo, sum) // q <= rest: hi < sum
		out[i] += uint32(q)
		rems[i] = rem
		given += q
	}
	order := make([]int, n)
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		switch {
		case rems[a] > rems[b]:
			return -1
		case rems[a] < rems[b]:
			return 1
		}
		return 0
	})
	for k := uint64(0); k < rest-given; k++ {
		out[order[k]]++
	}
	return out
}
