package server

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/node"
	"github.com/fila-mq/fila/broker/internal/tracing"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// serverCapabilities are the optional features this broker grants.
var serverCapabilities = []string{"continuation", "dedup", "ordering", "rate-limits", "lua", "idempotent-producers"}

// dispatch handles one frame; false ends the read loop.
func (c *conn) dispatch(h wire.Header, body []byte) bool {
	op := h.Opcode
	if !c.handshaken {
		if op != wire.OpHandshake {
			c.fail(h.RequestID, wire.CodeProtocolViolation, fmt.Sprintf("%v before Handshake", op))
			return false
		}
		return c.handshake(h, body)
	}
	switch op.Kind() {
	case wire.KindUnknown:
		if !c.begin(h.RequestID, op, answerReserve(nil)) {
			c.fail(h.RequestID, wire.CodeProtocolViolation, fmt.Sprintf("request ID %d is already in flight", h.RequestID))
			return false
		}
		c.respond(h.RequestID, &wire.ErrorFrame{Code: wire.CodeUnknownOpcode, Message: fmt.Sprintf("unknown opcode 0x%04x", uint16(op))})
		return true
	case wire.KindResponse:
		if op == wire.OpPong {
			return true // answer to a server Ping; the server sends none yet
		}
		c.fail(h.RequestID, wire.CodeProtocolViolation, fmt.Sprintf("%v is a server-to-client frame", op))
		return false
	case wire.KindPush:
		if op == wire.OpGoAway {
			c.goAway(wire.CodeOK, "client leaving")
			return true
		}
		c.fail(h.RequestID, wire.CodeProtocolViolation, fmt.Sprintf("%v is a server-to-client frame", op))
		return false
	}
	f := wire.New(op)
	if err := f.Decode(body); err != nil {
		if errors.Is(err, wire.ErrListTooLong) && op.Kind() == wire.KindRequest && h.RequestID != 0 && op != wire.OpHandshake {
			// Well framed, only too long: refuse the request alone.
			if !c.begin(h.RequestID, op, answerReserve(nil)) {
				c.fail(h.RequestID, wire.CodeProtocolViolation, fmt.Sprintf("request ID %d is already in flight", h.RequestID))
				return false
			}
			c.respondErr(h.RequestID, fmt.Errorf("%v: %v: %w", op, err, fault.ErrInvalidArgument))
			return true
		}
		c.fail(h.RequestID, wire.CodeMalformedFrame, err.Error())
		return false
	}
	if op == wire.OpHandshake {
		c.fail(h.RequestID, wire.CodeProtocolViolation, "second Handshake")
		return false
	}
	if cr, ok := f.(*wire.Credit); ok {
		c.credit(cr)
		return true
	}
	if h.RequestID == 0 {
		c.fail(0, wire.CodeProtocolViolation, fmt.Sprintf("%v with request ID 0", op))
		return false
	}
	if !c.begin(h.RequestID, op, answerReserve(f)) {
		c.fail(h.RequestID, wire.CodeProtocolViolation, fmt.Sprintf("request ID %d is already in flight", h.RequestID))
		return false
	}
	c.mu.Lock()
	going := c.goingAway
	c.mu.Unlock()
	if going {
		c.respondErr(h.RequestID, fmt.Errorf("connection is going away: %w", fault.ErrUnavailable))
		return true
	}
	if n, ok := batchItems(f); ok && n > c.s.cfg.MaxBatchSize {
		c.respondErr(h.RequestID, fmt.Errorf("%v of %d items: at most %d per request (the max_batch_size in HandshakeOk): %w",
			op, n, c.s.cfg.MaxBatchSize, fault.ErrInvalidArgument))
		return true
	}
	if !c.principal.Valid() {
		// Revoked; the store's notification closes the connection too,
		// but this request may have come first.
		c.revoked()
		return false
	}
	if err := c.handle(h.RequestID, f); err != nil {
		c.respondErr(h.RequestID, err)
	}
	return true
}

func (c *conn) handshake(h wire.Header, body []byte) bool {
	var hs wire.Handshake
	if err := hs.Decode(body); err != nil {
		c.fail(h.RequestID, wire.CodeMalformedFrame, err.Error())
		return false
	}
	version := min(hs.MaxVersion, wire.ProtocolVersion)
	if version < max(hs.MinVersion, wire.MinProtocolVersion) || hs.MinVersion > hs.MaxVersion {
		c.fail(h.RequestID, wire.CodeUnsupportedVersion,
			fmt.Sprintf("client speaks versions %d to %d; server speaks %d to %d", hs.MinVersion, hs.MaxVersion, wire.MinProtocolVersion, wire.ProtocolVersion))
		return false
	}
	if a := c.s.cfg.Auth; a != nil && c.s.cfg.RequireAuth {
		p, err := a.Authenticate(hs.APIKey)
		if err != nil {
			c.s.authFailed.record("conn", c.id, "remote", c.remote(), "client", clip(hs.ClientName), "reason", err.Error())
			c.failQuiet(h.RequestID, wire.CodeUnauthorized, err.Error())
			return false
		}
		c.principal = p
		if !c.s.register(c) {
			c.s.authFailed.record("conn", c.id, "remote", c.remote(), "client", clip(hs.ClientName), "key_id", p.KeyID(), "reason", "API key revoked during the handshake")
			c.failQuiet(h.RequestID, wire.CodeUnauthorized, fmt.Sprintf("API key %s was revoked", p.KeyID()))
			return false
		}
	} else {
		c.principal = auth.Unrestricted()
	}
	if hs.MaxFrameSize != 0 {
		c.peerMaxFrame.Store(int64(max(int(hs.MaxFrameSize), wire.MinMaxFrameSize)))
	}
	var caps []string
	for _, want := range hs.Capabilities {
		for _, have := range serverCapabilities {
			if want == have {
				caps = append(caps, want)
			}
		}
	}
	if refusal := c.s.adm.handshaken(c); refusal != "" {
		c.log.Warn("refusing a handshake", "reason", refusal)
		c.fail(h.RequestID, wire.CodeResourceExhausted, refusal)
		return false
	}
	c.handshaken = true
	c.fr.SetLimits(c.s.cfg.MaxFrameSize, 0)
	c.nc.SetReadDeadline(time.Time{})
	c.clientName = clip(hs.ClientName)
	if id := c.principal.KeyID(); id != "" {
		c.log = c.log.With("client", c.clientName, "key_id", id)
	} else {
		c.log = c.log.With("client", c.clientName)
	}
	c.push(outItem{reqID: h.RequestID, frame: &wire.HandshakeOk{
		Version:      version,
		Capabilities: caps,
		NodeID:       c.s.cfg.NodeID,
		MaxFrameSize: uint32(c.s.cfg.MaxFrameSize),
		ServerName:   "fila-server/" + c.s.cfg.Version,
		MaxBatchSize: uint32(c.s.cfg.MaxBatchSize),
	}})
	return true
}

// batchItems returns the number of items of a batch request.
func batchItems(f wire.Frame) (int, bool) {
	switch f := f.(type) {
	case *wire.Enqueue:
		return len(f.Messages), true
	case *wire.Ack:
		return len(f.Items), true
	case *wire.Nack:
		return len(f.Items), true
	case *wire.RetryAfter:
		return len(f.Items), true
	case *wire.ExtendLease:
		return len(f.Items), true
	case *wire.Release:
		return len(f.Items), true
	}
	return 0, false
}

// handle runs one request. A returned error answers the request with an
// Error frame; otherwise the handler answers it, now or later.
func (c *conn) handle(id uint32, f wire.Frame) error {
	ctx, n, p := c.ctx, c.s.n, c.principal
	switch f := f.(type) {
	case *wire.Ping:
		c.respond(id, &wire.Pong{Nonce: f.Nonce})
		return nil
	case *wire.Enqueue:
		return c.enqueue(id, f)
	case *wire.Subscribe:
		return c.subscribe(id, f)
	case *wire.Unsubscribe:
		return c.unsubscribe(id, f)
	case *wire.Ack:
		items := make([]node.LeaseRef, len(f.Items))
		for i, it := range f.Items {
			items[i] = node.LeaseRef{Queue: it.Queue, ID: it.ID, Lease: it.Lease}
		}
		return n.Ack(ctx, p, items, c.settled(id, c.traceSettle("ack", len(items), func(i int) node.LeaseRef { return items[i] }), func(r []wire.ItemResult) wire.Frame { return &wire.AckResult{Results: r} }))
	case *wire.Nack:
		items := make([]node.NackItem, len(f.Items))
		for i, it := range f.Items {
			items[i] = node.NackItem{LeaseRef: node.LeaseRef{Queue: it.Queue, ID: it.ID, Lease: it.Lease}, Reason: it.Reason}
		}
		return n.Nack(ctx, p, items, c.settled(id, c.traceSettle("nack", len(items), func(i int) node.LeaseRef { return items[i].LeaseRef }), func(r []wire.ItemResult) wire.Frame { return &wire.NackResult{Results: r} }))
	case *wire.RetryAfter:
		items := make([]node.RetryItem, len(f.Items))
		for i, it := range f.Items {
			items[i] = node.RetryItem{LeaseRef: node.LeaseRef{Queue: it.Queue, ID: it.ID, Lease: it.Lease}, Delay: msDur(it.DelayMS)}
		}
		return n.RetryAfter(ctx, p, items, c.settled(id, c.traceSettle("retry", len(items), func(i int) node.LeaseRef { return items[i].LeaseRef }), func(r []wire.ItemResult) wire.Frame { return &wire.RetryAfterResult{Results: r} }))
	case *wire.Release:
		items := make([]node.LeaseRef, len(f.Items))
		for i, it := range f.Items {
			items[i] = node.LeaseRef{Queue: it.Queue, ID: it.ID, Lease: it.Lease}
		}
		return n.Release(ctx, p, items, c.settled(id, c.traceSettle("release", len(items), func(i int) node.LeaseRef { return items[i] }), func(r []wire.ItemResult) wire.Frame { return &wire.ReleaseResult{Results: r} }))
	case *wire.ExtendLease:
		return c.extend(id, f)
	case *wire.CreateQueue:
		return c.createQueue(id, f)
	case *wire.DeleteQueue:
		name := f.Name
		return n.DeleteQueue(ctx, p, name, func(r node.Result) {
			if err := r.Err; err != nil {
				c.respondErr(id, err)
				return
			}
			c.audit(auditQueueDeleted, "queue", name)
			c.respond(id, &wire.DeleteQueueOk{})
		})
	case *wire.ListQueues:
		return n.ListQueues(ctx, p, func(r node.Result) {
			if err := r.Err; err != nil {
				c.respondErr(id, err)
				return
			}
			var out []wire.QueueSummary
			for _, q := range r.Queues {
				out = append(out, wire.QueueSummary{Name: q.Name, Ready: q.Ready, Delayed: q.Delayed, Leased: q.Leased, DeadLetterQueue: q.DeadLetterQueue, Parent: q.Parent, Shards: q.Shards})
			}
			c.respond(id, &wire.ListQueuesResult{Queues: out})
		})
	case *wire.QueueStats:
		return n.QueueStats(ctx, p, f.Name, int(f.TopKeys), func(r node.Result) {
			if err := r.Err; err != nil {
				c.respondErr(id, err)
				return
			}
			c.respond(id, c.statsFrame(r.Stats))
		})
	case *wire.Explain:
		return n.Explain(ctx, p, f.Queue, f.ID, func(r node.Result) {
			if err := r.Err; err != nil {
				c.respondErr(id, err)
				return
			}
			e := r.Explained
			res := &wire.ExplainResult{Reason: e.Reason, FairnessKey: e.FairnessKey, Attempts: e.Attempts,
				Ahead: e.Ahead, ThrottleKeys: e.ThrottleKeys, Lane: e.Lane}
			if e.Until > 0 {
				res.UntilMS = uint64(e.Until) / uint64(time.Millisecond)
			}
			if e.ETA > 0 {
				res.EtaAtMS = uint64(e.ETA) / uint64(time.Millisecond)
			}
			c.respond(id, res)
		})
	case *wire.Redrive:
		spec := node.RedriveSpec{N: f.Count, Rate: f.Rate, FairnessKey: f.FairnessKey}
		return n.RedriveWith(ctx, p, f.DeadLetterQueue, spec, f.Cancel, func(r node.Result) {
			if err := r.Err; err != nil {
				c.respondErr(id, err)
				return
			}
			c.respond(id, &wire.RedriveResult{Moved: r.Redriven.Moved, Pending: r.Redriven.Pending})
		})
	case *wire.PurgeQueue:
		name := f.Name
		return n.PurgeQueue(ctx, p, name, f.IncludeLeased, func(r node.Result) {
			if err := r.Err; err != nil {
				c.respondErr(id, err)
				return
			}
			c.audit(auditQueuePurged, "queue", name, "purged", r.Purged.Count)
			c.respond(id, &wire.PurgeQueueResult{Purged: r.Purged.Count})
		})
	case *wire.Peek:
		return n.Peek(ctx, p, f.Queue, f.After, int(f.Count), f.FairnessKey, func(res *wire.PeekResult, err error) {
			if err != nil {
				c.respondErr(id, err)
				return
			}
			c.respond(id, res)
		})
	case *wire.SetConfig, *wire.GetConfig, *wire.ListConfig, *wire.DeleteConfig:
		return c.config(id, f)
	case *wire.CreateAPIKey, *wire.RevokeAPIKey, *wire.ListAPIKeys, *wire.SetACL, *wire.GetACL:
		return c.keys(id, f)
	case *wire.Topology:
		addr := c.s.cfg.AdvertiseAddr
		if addr == "" {
			addr = c.nc.LocalAddr().String()
		}
		q := f.Queue
		return n.Topology(ctx, p, q, func(shards []node.ShardLeader, sep string, err error) {
			if err != nil {
				c.respondErr(id, err)
				return
			}
			r := &wire.TopologyResult{Queue: q, Shards: make([]wire.ShardInfo, len(shards)), TenantSeparator: sep}
			for i, l := range shards {
				if l.Addr == "" && l.NodeID != "" {
					l.Addr = addr // a single node: this one
				}
				r.Shards[i] = wire.ShardInfo{Shard: uint32(i), LeaderNodeID: l.NodeID, LeaderAddr: l.Addr, Term: l.Term, Queue: l.Queue}
			}
			c.respond(id, r)
		})
	case *wire.ClusterStatus:
		st, ok, err := n.ClusterStatus(p)
		if err != nil {
			return err
		}
		if !ok {
			c.respond(id, &wire.ClusterStatusResult{}) // single-node mode: node 0, nothing else
			return nil
		}
		c.respond(id, clusterStatusFrame(st))
		return nil
	case *wire.MoveQueue:
		return c.moveQueue(id, f)
	case *wire.DrainNode:
		return c.drainNode(id, f)
	case *wire.Rebalance:
		return c.rebalance(id, f)
	case *wire.AddNode:
		// The frame's fields, not the frame, go to the goroutine.
		nodeID, addr := f.NodeID, strings.Clone(f.PeerAddr)
		return c.membership(id, func(ctx context.Context) error {
			if err := n.AddNode(ctx, p, nodeID, addr); err != nil {
				return err
			}
			c.audit(auditNodeAdded, "node_id", nodeID, "peer_addr", addr)
			c.respond(id, &wire.AddNodeResult{})
			return nil
		})
	case *wire.RemoveNode:
		nodeID := f.NodeID
		return c.membership(id, func(ctx context.Context) error {
			if err := n.RemoveNode(ctx, p, nodeID); err != nil {
				return err
			}
			c.audit(auditNodeRemoved, "node_id", nodeID)
			c.respond(id, &wire.RemoveNodeResult{})
			return nil
		})
	}
	return fmt.Errorf("%v: %w", f.Opcode(), fault.ErrNotSupported)
}

// moveQueue answers MoveQueue once the move's plan is recorded and
// applied on this node. That waits on a meta-group proposal, so it runs
// on a goroutine of its own, off the read loop; like CreateQueue's, the
// wait outlives the connection (the plan may be recorded anyway), and
// the cluster node bounds it.
func (c *conn) moveQueue(id uint32, f *wire.MoveQueue) error {
	ctx, n, p := context.WithoutCancel(c.ctx), c.s.n, c.principal
	queue, replicas := f.Queue, f.Replicas
	go func() {
		if err := n.MoveQueue(ctx, p, queue, replicas); err != nil {
			c.respondErr(id, err)
			return
		}
		c.audit(auditQueueMovePlanned, "queue", queue, "replicas", replicas)
		c.respond(id, &wire.MoveQueueResult{})
	}()
	return nil
}

// drainNode answers DrainNode once the drain (or its undoing) is
// recorded and applied on this node, off the read loop as moveQueue
// does: it waits on a meta-group proposal too.
func (c *conn) drainNode(id uint32, f *wire.DrainNode) error {
	ctx, n, p := context.WithoutCancel(c.ctx), c.s.n, c.principal
	nodeID, undo := f.NodeID, f.Undo
	go func() {
		queues, err := n.DrainNode(ctx, p, nodeID, undo)
		if err != nil {
			c.respondErr(id, err)
			return
		}
		if undo {
			c.audit(auditNodeDrainUndone, "node_id", nodeID)
		} else {
			c.audit(auditNodeDrainPlanned, "node_id", nodeID, "queues", queues)
		}
		c.respond(id, &wire.DrainNodeResult{Queues: uint32(queues)})
	}()
	return nil
}

// rebalance answers Rebalance with its plan, off the read loop as
// moveQueue does when the plan is recorded (a dry run only reads).
func (c *conn) rebalance(id uint32, f *wire.Rebalance) error {
	ctx, n, p := context.WithoutCancel(c.ctx), c.s.n, c.principal
	dry := f.DryRun
	go func() {
		plan, err := n.Rebalance(ctx, p, dry)
		if err != nil {
			c.respondErr(id, err)
			return
		}
		if !dry {
			c.audit(auditRebalancePlanned, "moves", len(plan.Moves), "leads", len(plan.Leads))
		}
		r := &wire.RebalanceResult{Moves: rebalanceMoves(plan.Moves)}
		for _, l := range plan.Leads {
			r.Leads = append(r.Leads, wire.RebalanceLead{Queue: l.Queue, NodeID: l.Node})
		}
		c.respond(id, r)
	}()
	return nil
}

func rebalanceMoves(moves []node.PlannedMove) []wire.RebalanceMove {
	var out []wire.RebalanceMove
	for _, m := range moves {
		out = append(out, wire.RebalanceMove{Queue: m.Queue, FromNodeID: m.From, ToNodeID: m.To})
	}
	return out
}

// membership runs an AddNode or RemoveNode, which waits on a meta-group
// proposal, off the read loop as moveQueue does; do answers it, and its
// error is answered.
func (c *conn) membership(id uint32, do func(ctx context.Context) error) error {
	ctx := context.WithoutCancel(c.ctx)
	go func() {
		if err := do(ctx); err != nil {
			c.respondErr(id, err)
		}
	}()
	return nil
}

// clusterStatusFrame is the answer to ClusterStatus for a cluster node's
// status st.
func clusterStatusFrame(st node.ClusterStatus) *wire.ClusterStatusResult {
	r := &wire.ClusterStatusResult{NodeID: st.NodeID}
	for _, ns := range st.Nodes {
		r.Nodes = append(r.Nodes, wire.ClusterNode{NodeID: ns.ID, Addr: ns.Addr, PeerAddr: ns.PeerAddr, Connected: ns.Connected, State: ns.State})
	}
	for _, g := range st.Groups {
		wg := wire.ClusterGroup{
			GroupID: g.ID, Queue: g.Queue, LeaderNodeID: g.Leader, Term: g.Term,
			Commit: g.Commit, Applied: g.Applied, LastIndex: g.LastIndex, Quiesced: g.Quiesced, FirstIndex: g.FirstIndex,
		}
		for _, rs := range g.Replicas {
			wg.Replicas = append(wg.Replicas, wire.ClusterReplica{NodeID: rs.NodeID, Known: rs.Known, Match: rs.Match, Lag: rs.Lag, Learner: rs.Learner})
		}
		wg.Target = g.Target
		wg.PreferredLeader = g.PreferredLeader
		r.Groups = append(r.Groups, wg)
	}
	r.Pending = rebalanceMoves(st.Pending)
	return r
}

// settled returns the completion of an Ack, Nack, RetryAfter or Release:
// one result per item, in the frame frame builds. traced, if not nil,
// records the items' settle spans (traceSettle).
func (c *conn) settled(id uint32, traced func(errs []error, err error), frame func([]wire.ItemResult) wire.Frame) func(errs []error, err error) {
	return func(errs []error, err error) {
		if traced != nil {
			traced(errs, err)
		}
		if err != nil {
			c.respondErr(id, err)
			return
		}
		results := make([]wire.ItemResult, len(errs))
		for i, err := range errs {
			if err != nil {
				results[i] = wire.ItemResult{Code: CodeOf(err), Message: err.Error()}
			}
		}
		c.respond(id, frame(results))
	}
}

func toAuth(ps []wire.Permission) []auth.Permission {
	out := make([]auth.Permission, len(ps))
	for i, p := range ps {
		out[i] = auth.Permission{Kind: auth.Kind(p.Kind), Pattern: p.Pattern}
	}
	return out
}

// permStrings renders an ACL for the audit log: ["consume:orders.*"].
func permStrings(ps []auth.Permission) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}

// clip cuts a client-supplied string, such as a client name, to a length
// fit for a log line.
func clip(s string) string {
	const max = 128
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

func fromAuth(ps []auth.Permission) []wire.Permission {
	out := make([]wire.Permission, len(ps))
	for i, p := range ps {
		out[i] = wire.Permission{Kind: wire.PermissionKind(p.Kind), Pattern: p.Pattern}
	}
	return out
}

func msDur(ms uint64) time.Duration {
	if ms > uint64(1<<63-1)/uint64(time.Millisecond) {
		return 1<<63 - 1
	}
	return time.Duration(ms) * time.Millisecond
}

func (c *conn) enqueue(id uint32, f *wire.Enqueue) error {
	n := len(f.Messages)
	// Message i of an idempotent producer's frame has sequence
	// f.Sequence+i.
	produced := f.ProducerID != [16]byte{}
	if produced && n > 0 && f.Sequence > math.MaxUint64-uint64(n-1) {
		return fmt.Errorf("sequence %d: the frame's %d messages would overflow it: %w", f.Sequence, n, fault.ErrInvalidArgument)
	}
	results := make([]wire.EnqueueItemResult, n)
	items := make([]node.EnqueueItem, 0, n)
	keep := make([]int, 0, n)
	total := 0
	// spans[j] is items[j]'s enqueue span, when tracing is on.
	var spans []tracing.Span
	var start time.Time
	if c.s.cfg.Tracer != nil {
		spans = make([]tracing.Span, 0, n)
		start = time.Now()
	}
	for i := range f.Messages {
		m := &f.Messages[i]
		msg, err := c.s.n.Admit(c.ctx, c.principal, m)
		if errors.Is(err, fault.ErrQueueSharded) {
			// The client must send to the shards: it fails as a whole,
			// nothing enqueued, so that the client can send it again
			// split by shard.
			return err
		}
		if err != nil {
			results[i] = wire.EnqueueItemResult{Code: CodeOf(err), Message: err.Error()}
			continue
		}
		if produced {
			msg.ProducerID, msg.Sequence = f.ProducerID, f.Sequence+uint64(i)
		}
		if spans != nil {
			spans = append(spans, c.traceEnqueue(m, start))
		}
		total += node.BodySize(m.Headers, m.Payload)
		// The body is encoded with its chunk (encodeBodies).
		items = append(items, node.EnqueueItem{Queue: m.Queue, Msg: msg})
		keep = append(keep, i)
	}
	if len(items) == 0 {
		c.respond(id, &wire.EnqueueResult{Results: results})
		return nil
	}
	fill := func(from int, res []node.EnqueueResult) {
		for j, r := range res {
			i := keep[from+j]
			if spans != nil {
				spans[from+j].EndEnqueue(r.ID, items[from+j].Msg.FairnessKey, r.Duplicate, r.Err)
			}
			if r.Err != nil {
				results[i] = wire.EnqueueItemResult{Code: CodeOf(r.Err), Message: r.Err.Error()}
				continue
			}
			results[i] = wire.EnqueueItemResult{ID: r.ID, Duplicate: r.Duplicate}
		}
	}
	// failed ends the spans of items[from:to], which failed with err.
	failed := func(from, to int, err error) {
		if spans == nil {
			return
		}
		for _, sp := range spans[from:to] {
			sp.EndEnqueue([16]byte{}, "", false, err)
		}
	}
	bodies := func(from, to int) func() {
		return encodeBodies(items[from:to], f.Messages, keep[from:to])
	}
	if len(items) <= enqueueChunkItems && int64(total) <= c.chunkBytes() {
		size := int64(total)
		if !c.waitEnqueueRoom(size, 0) {
			return fmt.Errorf("connection closed: %w", fault.ErrUnavailable)
		}
		free := bodies(0, len(items))
		err := c.s.n.Enqueue(c.ctx, items, func(r node.Result) {
			c.enqueueDone(size)
			free()
			if err := r.Err; err != nil {
				failed(0, len(items), err)
				c.respondErr(id, err)
				return
			}
			fill(0, r.Enqueued)
			c.respond(id, &wire.EnqueueResult{Results: results})
		})
		if err != nil {
			c.enqueueDone(size)
			free()
			failed(0, len(items), err)
		}
		return err
	}
	sizes := func(j int) int { m := &f.Messages[keep[j]]; return node.BodySize(m.Headers, m.Payload) }
	enqueueChunks(c.ctx, c.s.n, c, items, sizes, bodies, func(from, n int, r node.Result) {
		if err := r.Err; err != nil {
			// This chunk failed as a whole; the others may not have.
			failed(from, from+n, err)
			for j := from; j < from+n; j++ {
				results[keep[j]] = wire.EnqueueItemResult{Code: CodeOf(err), Message: err.Error()}
			}
			return
		}
		fill(from, r.Enqueued)
	}, func(err error) {
		if err != nil {
			c.respondErr(id, err)
			return
		}
		c.respond(id, &wire.EnqueueResult{Results: results})
	})
	return nil
}

// encodeBodies encodes the bodies of items, from msgs[idx[j]] for
// items[j], into one pooled buffer and points each item's Msg.Body at
// its part. The returned func gives the buffer back: call it once the
// shard has answered the items (the scheduler copies bodies into its
// storage group before it replies).
func encodeBodies(items []node.EnqueueItem, msgs []wire.EnqueueMessage, idx []int) func() {
	total := 0
	for _, i := range idx {
		total += node.BodySize(msgs[i].Headers, msgs[i].Payload)
	}
	p := node.GetBodyBuf(total)
	buf := *p
	for j, i := range idx {
		start := len(buf)
		buf = node.EncodeBody(buf, msgs[i].Headers, msgs[i].Payload)
		items[j].Msg.Body = buf[start:len(buf):len(buf)]
	}
	return func() {
		for j := range items {
			items[j].Msg.Body = nil
		}
		*p = buf[:0]
		node.PutBodyBuf(p)
	}
}

// Chunks of an Enqueue batch: a batch with more items, or more body bytes
// than the connection's chunk size (enqueueChunkBytes, less while it is
// held by a sparse producer: see producers), reaches the shard as several
// commands, each with its bodies in a buffer of its own.
const (
	enqueueChunkItems = 1024
	enqueueChunkBytes = 1 << 20
)

// commandQueue is the part of the node enqueueChunks uses.
type commandQueue interface {
	Enqueue(ctx context.Context, items []node.EnqueueItem, done func(node.Result)) error
	Barrier(ctx context.Context, fn func()) error
}

// enqueueFlow is the part of the connection enqueueChunks uses: its chunk
// size now, and its bound on bodies in flight to storage. waitEnqueueRoom
// waits for room for n bytes (rest: what is left of the batch after them)
// and returns false once the connection is closed; enqueueDone gives the
// room back.
type enqueueFlow interface {
	chunkBytes() int64
	waitEnqueueRoom(n, rest int64) bool
	enqueueDone(n int64)
}

// enqueueChunks submits items to the shard in chunks of at most
// enqueueChunkItems items and fl.chunkBytes() bytes of bodies (at least
// one item), each once the shard has run the one before, so that commands
// other connections queued meanwhile run between them: a large batch
// holds the others back by one chunk, not by the whole batch. Chunks are
// submitted in order, so the batch keeps its order in its queues. Each
// chunk's size is taken when it is cut, so a batch being submitted when a
// sparse producer appears goes on in smaller chunks.
//
// size(j) is the encoded size of items[j]'s body; bodies(from, to)
// encodes the bodies of items[from:to] just before their chunk is
// submitted and returns what frees them, which runs with the chunk's
// reply. Before each chunk, fl.waitEnqueueRoom waits for room in the
// connection's bound on bodies in flight to storage; the chunk's reply
// gives it back.
//
// done(from, n, r) receives the result of the chunk of items[from:from+n]:
// r.Enqueued, or r.Err if the chunk failed as a whole (or could not be
// submitted). After the last reply, finish(err) runs, with
// the first error when every chunk failed. Replies come on the storage
// completion goroutine, in any order. It returns once every chunk is
// submitted; ctx ends the wait between chunks (the connection closed).
func enqueueChunks(ctx context.Context, q commandQueue, fl enqueueFlow, items []node.EnqueueItem, size func(j int) int, bodies func(from, to int) func(),
	done func(from, n int, r node.Result), finish func(err error)) {
	left := int64(0)
	for j := range items {
		left += int64(size(j))
	}
	var (
		mu      sync.Mutex
		pending = 1 // the chunks submitted and not answered, and this call
		chunks  int
		failed  int
		first   error
	)
	// complete records the end of one chunk (from, n, r), or of the
	// submitting (n < 0), and runs finish after the last.
	complete := func(from, n int, r node.Result) {
		if n >= 0 {
			done(from, n, r)
		}
		mu.Lock()
		if n >= 0 {
			if err := r.Err; err != nil {
				failed++
				if first == nil {
					first = err
				}
			}
		}
		pending--
		last := pending == 0
		var err error
		if last && failed == chunks {
			err = first
		}
		mu.Unlock()
		if last {
			finish(err)
		}
	}
	// fail ends every item from from on with err, as one chunk.
	fail := func(from int, err error) {
		mu.Lock()
		chunks++
		pending++
		mu.Unlock()
		complete(from, len(items)-from, node.Result{Err: err})
	}
	defer complete(0, -1, node.Result{})
	for from := 0; from < len(items); {
		limit := int(fl.chunkBytes())
		to, n := from, 0
		for to < len(items) && to-from < enqueueChunkItems && (to == from || n+size(to) <= limit) {
			n += size(to)
			to++
		}
		bytes := int64(n)
		left -= bytes
		if !fl.waitEnqueueRoom(bytes, left) {
			fail(from, fmt.Errorf("connection closed: %w", fault.ErrUnavailable))
			return
		}
		free := bodies(from, to)
		mu.Lock()
		chunks++
		pending++
		mu.Unlock()
		sp := from
		if err := q.Enqueue(ctx, items[from:to], func(r node.Result) { free(); fl.enqueueDone(bytes); complete(sp, to-sp, r) }); err != nil {
			free()
			fl.enqueueDone(bytes)
			complete(from, to-from, node.Result{Err: err})
			if to < len(items) {
				fail(to, err)
			}
			return
		}
		if to == len(items) {
			return
		}
		if err := afterCommands(ctx, q); err != nil {
			fail(to, err)
			return
		}
		from = to
	}
}

// afterCommands waits until the shard has run every command this
// goroutine queued before the call.
func afterCommands(ctx context.Context, q commandQueue) error {
	ran := make(chan struct{})
	if err := q.Barrier(ctx, func() { close(ran) }); err != nil {
		return err
	}
	select {
	case <-ran:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("connection closed: %w", fault.ErrUnavailable)
	}
}

// checkMessage validates a message before it reaches the scheduler.
func (c *conn) subscribe(id uint32, f *wire.Subscribe) error {
	c.mu.Lock()
	if len(c.subs) >= c.s.cfg.MaxSubscriptions {
		c.mu.Unlock()
		return fmt.Errorf("more than %d subscriptions on one connection: %w", c.s.cfg.MaxSubscriptions, fault.ErrResourceExhausted)
	}
	if _, dup := c.subs[id]; dup {
		c.mu.Unlock()
		c.fail(id, wire.CodeProtocolViolation, fmt.Sprintf("request ID %d is an open subscription", id))
		return nil
	}
	sub := &subscription{c: c, id: node.SubID(c.s.subID.Add(1)), reqID: id, queue: f.Queue}
	c.subs[id] = sub
	c.mu.Unlock()

	// Prefetch 0 asks for as much as the broker allows: the scheduler
	// grants its cap on unsettled deliveries, as it does to a larger ask.
	credit := f.Prefetch
	if credit == 0 {
		credit = math.MaxUint32
	}
	limits := make([]node.RateLimit, len(f.RateLimits))
	for i, l := range f.RateLimits {
		limits[i] = node.RateLimit{Name: l.Name, Limit: l.Limit, Period: msDur(l.PeriodMS), Burst: l.Burst}
	}
	// The node checks the key once the subscription is where an ACL
	// change looks for it (Server.keyChanged): a change either sees it
	// there or is seen there.
	err := c.s.n.SubscribeLease(c.ctx, c.principal, sub.id, f.Queue, credit, limits, msDur(f.LeaseTimeoutMS), sub, func(r node.Result) {
		err := r.Err
		release := false
		c.mu.Lock()
		switch {
		case err != nil:
			if c.subs[id] == sub {
				delete(c.subs, id)
			}
			sub.ended.Store(true)
		case sub.ended.Load():
			// Ended before it opened (its key lost consume or was
			// revoked): the answer is why, and the shard's
			// subscription is released.
			err, release = sub.endErr, true
		default:
			sub.open = true
		}
		if err != nil {
			c.pushLocked(outItem{reqID: id, frame: errorFrame(err), request: true})
		} else if !release {
			c.pushLocked(outItem{reqID: id, frame: &wire.SubscribeOk{Prefetch: r.Subscribed.Credit}, request: true})
		}
		c.mu.Unlock()
		c.wake()
		if release {
			// Not on this goroutine, which completes storage groups and
			// must not wait for the shard's command channel.
			go c.release(sub)
		}
	})
	if err != nil {
		c.mu.Lock()
		delete(c.subs, id)
		c.mu.Unlock()
	}
	return err
}

func (c *conn) unsubscribe(id uint32, f *wire.Unsubscribe) error {
	c.mu.Lock()
	sub, ok := c.subs[f.Subscription]
	if ok {
		delete(c.subs, f.Subscription)
	}
	c.mu.Unlock()
	if !ok {
		return fmt.Errorf("subscription %d: %w", f.Subscription, fault.ErrSubscriptionNotFound)
	}
	// A queue deleted meanwhile took the subscription with it: closed
	// either way. (In a cluster the queue leaves the routes before its
	// replica ends its subscriptions.)
	err := c.s.n.Unsubscribe(c.ctx, sub.id, sub.queue, false, func(r node.Result) {
		if err := r.Err; err != nil && !errors.Is(err, fault.ErrQueueNotFound) {
			c.respondErr(id, err)
			return
		}
		c.respond(id, &wire.UnsubscribeOk{})
	})
	if errors.Is(err, fault.ErrQueueNotFound) {
		c.respond(id, &wire.UnsubscribeOk{})
		return nil
	}
	return err
}

func (c *conn) credit(f *wire.Credit) {
	c.mu.Lock()
	sub, ok := c.subs[f.Subscription]
	c.mu.Unlock()
	if !ok {
		c.push(outItem{reqID: f.Subscription, frame: &wire.ErrorFrame{Code: wire.CodeSubscriptionNotFound,
			Message: fmt.Sprintf("credit for subscription %d, which is not open", f.Subscription)}})
		return
	}
	// The key may have lost consume on the queue since the Subscribe: a
	// Credit never refills a subscription it could not open now.
	err := c.s.n.AddCredit(c.ctx, c.principal, sub.id, sub.queue, f.Credits)
	if errors.Is(err, fault.ErrForbidden) || errors.Is(err, fault.ErrUnauthorized) {
		if !c.principal.Valid() {
			c.revoked()
		} else {
			c.endSubscription(sub, c.lostConsume(sub.queue))
		}
	}
}

func (c *conn) extend(id uint32, f *wire.ExtendLease) error {
	items := make([]node.ExtendItem, len(f.Items))
	for i, it := range f.Items {
		items[i] = node.ExtendItem{LeaseRef: node.LeaseRef{Queue: it.Queue, ID: it.ID, Lease: it.Lease}, Duration: msDur(it.DurationMS)}
	}
	return c.s.n.ExtendLease(c.ctx, c.principal, items, func(res []node.ExtendResult, err error) {
		if err != nil {
			c.respondErr(id, err)
			return
		}
		results := make([]wire.ExtendLeaseItemResult, len(res))
		for i, r := range res {
			if r.Err != nil {
				results[i] = wire.ExtendLeaseItemResult{Code: CodeOf(r.Err), Message: r.Err.Error()}
				continue
			}
			results[i] = wire.ExtendLeaseItemResult{LeaseDeadlineAtMS: uint64(int64(r.Deadline) / 1e6)}
		}
		c.respond(id, &wire.ExtendLeaseResult{Results: results})
	})
}

func (c *conn) createQueue(id uint32, f *wire.CreateQueue) error {
	spec := node.QueueSpec{
		Name:              f.Name,
		VisibilityTimeout: msDur(f.VisibilityTimeoutMS),
		OnEnqueue:         f.OnEnqueue,
		OnFailure:         f.OnFailure,
		MaxAttempts:       f.MaxAttempts,
		BackoffBase:       msDur(f.BackoffBaseMS),
		BackoffMax:        msDur(f.BackoffMaxMS),
		DedupWindow:       msDur(f.DedupWindowMS),
		Policy:            f.Policy,
		LatencyBudget:     f.LatencyBudget,
		LatencyIdle:       msDur(f.LatencyIdleMS),
		TenantSeparator:   f.TenantSeparator,
		CostByTime:        f.CostByTime,
		MessageTTL:        msDur(f.MessageTTLMS),
		ExpiredAction:     f.ExpiredAction,
	}
	return c.s.n.CreateQueue(c.ctx, c.principal, spec, int(min(f.Shards, 1<<16)), func(r node.Result) {
		if err := r.Err; err != nil {
			c.respondErr(id, err)
			return
		}
		qc := r.Created
		c.audit(auditQueueCreated, "queue", qc.Name, "dead_letter_queue", qc.DLQ)
		c.respond(id, &wire.CreateQueueOk{Name: qc.Name, DeadLetterQueue: qc.DLQ})
	})
}

func (c *conn) statsFrame(st node.QueueStats) *wire.QueueStatsResult {
	r := &wire.QueueStatsResult{
		Name: st.Name, Ready: st.Ready, Delayed: st.Delayed, Leased: st.Leased, DeadLettered: st.DeadLettered,
		Subscriptions: st.Subscriptions, VisibilityTimeoutMS: uint64(st.VisibilityTimeout / time.Millisecond), MaxAttempts: st.MaxAttempts,
		Policy: st.Policy, LatencyBudget: st.LatencyBudget, LatencyIdleMS: uint64(st.LatencyIdle / time.Millisecond),
		TenantSeparator: st.TenantSeparator, CostByTime: st.CostByTime, Bytes: st.Bytes,
		MessageTTLMS: uint64(st.MessageTTL / time.Millisecond), ExpiredAction: st.ExpiredAction, MessagesExpired: st.Counts.TTLExpired,
		BackloggedKeys: st.BackloggedKeys, WindowMS: uint64(st.Window / time.Millisecond),
		WindowDelivered: st.WindowDelivered, JainIndex: st.JainIndex,
	}
	for _, k := range st.FairnessKeys {
		r.FairnessKeys = append(r.FairnessKeys, wire.FairnessKeyStats{
			Key: k.Key, Pending: k.Pending, Weight: k.Weight, Deficit: k.Deficit, Delivered: k.Delivered,
			EntitledShare: k.EntitledShare, WindowShare: k.WindowShare, WindowDelivered: k.WindowDelivered,
			Lane: k.Lane, Lag: k.Lag,
			DwellP50MS: uint64(k.DwellP50 / time.Millisecond), DwellP99MS: uint64(k.DwellP99 / time.Millisecond),
		})
	}
	for _, k := range st.ThrottleKeys {
		r.ThrottleKeys = append(r.ThrottleKeys, wire.ThrottleKeyStats{Key: k.Key, Rate: k.Rate, Burst: k.Burst, Tokens: k.Tokens, Waiting: k.Waiting})
	}
	r.MessagesPurged = st.Counts.Purged
	if rd := st.Redrive; rd != nil {
		r.RedriveRate, r.RedriveKey, r.RedriveMoved, r.RedriveRemaining = rd.Rate, rd.FairnessKey, rd.Moved, rd.Remaining
	}
	if hs, ok := c.s.n.HookStats(st.Name); ok {
		r.Hooks = wire.HookStats{
			OnEnqueueCalls: hs.OnEnqueueCalls, OnEnqueueFailures: hs.OnEnqueueFailures,
			OnFailureCalls: hs.OnFailureCalls, OnFailureFailures: hs.OnFailureFailures,
			CircuitOpen: hs.CircuitOpen, CircuitTrips: hs.CircuitTrips,
		}
	}
	return r
}

func (c *conn) config(id uint32, f wire.Frame) error {
	n, p := c.s.n, c.principal
	switch f := f.(type) {
	case *wire.SetConfig:
		if err := n.SetConfig(p, f.Key, f.Value); err != nil {
			return err
		}
		c.audit(auditConfigSet, "config_key", f.Key, "value_bytes", len(f.Value))
		c.respond(id, &wire.SetConfigOk{})
	case *wire.GetConfig:
		v, ok, err := n.GetConfig(p, f.Key)
		if err != nil {
			return err
		}
		c.respond(id, &wire.GetConfigResult{Found: ok, Value: v})
	case *wire.ListConfig:
		entries, err := n.ListConfig(p, f.Prefix)
		if err != nil {
			return err
		}
		c.respond(id, &wire.ListConfigResult{Entries: entries})
	case *wire.DeleteConfig:
		existed, err := n.DeleteConfig(p, f.Key)
		if err != nil {
			return err
		}
		c.audit(auditConfigDeleted, "config_key", f.Key, "existed", existed)
		c.respond(id, &wire.DeleteConfigOk{Existed: existed})
	}
	return nil
}

func (c *conn) keys(id uint32, f wire.Frame) error {
	n, p := c.s.n, c.principal
	switch f := f.(type) {
	case *wire.CreateAPIKey:
		perms := toAuth(f.Permissions)
		kid, secret, err := n.CreateKey(p, f.Name, perms)
		if err != nil {
			return err
		}
		c.audit(auditKeyCreated, "target_key_id", kid, "name", f.Name, "permissions", permStrings(perms))
		c.respond(id, &wire.CreateAPIKeyResult{KeyID: kid, Secret: secret})
	case *wire.RevokeAPIKey:
		// Revoking closes the key's connections before it returns (see
		// Server.keyChanged).
		if err := n.RevokeKey(p, f.KeyID); err != nil {
			return err
		}
		c.audit(auditKeyRevoked, "target_key_id", f.KeyID)
		c.respond(id, &wire.RevokeAPIKeyOk{})
	case *wire.ListAPIKeys:
		keys, err := n.ListKeys(p)
		if err != nil {
			return err
		}
		var ks []wire.APIKeyInfo
		for _, k := range keys {
			ks = append(ks, wire.APIKeyInfo{KeyID: k.ID, Name: k.Name, CreatedAtMS: uint64(k.CreatedAt.UnixMilli()), Permissions: fromAuth(k.Permissions)})
		}
		c.respond(id, &wire.ListAPIKeysResult{Keys: ks})
	case *wire.SetACL:
		// Setting an ACL ends the subscriptions it does not allow before
		// it returns (see Server.keyChanged).
		perms := toAuth(f.Permissions)
		if err := n.SetACL(p, f.KeyID, perms); err != nil {
			return err
		}
		c.audit(auditACLSet, "target_key_id", f.KeyID, "permissions", permStrings(perms))
		c.respond(id, &wire.SetACLOk{})
	case *wire.GetACL:
		ps, err := n.GetACL(p, f.KeyID)
		if err != nil {
			return err
		}
		c.respond(id, &wire.GetACLResult{Permissions: fromAuth(ps)})
	}
	return nil
}
