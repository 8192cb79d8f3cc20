package server

import (
	"log/slog"
	"sync"
	"time"
)

// Audit events. Each is logged at INFO as one line with the message
// "audit" and the attribute event set to one of these names, plus:
//
//	every event        conn (the connection's number) and remote (the
//	                   client's address), from the connection's logger;
//	                   for events of a connection past its handshake,
//	                   client (its Handshake client name) and, with auth
//	                   on, key_id (the acting key's ID: "bootstrap" for
//	                   the bootstrap key)
//	api_key.created    target_key_id, name, permissions
//	api_key.revoked    target_key_id
//	acl.set            target_key_id, permissions
//	queue.created      queue
//	queue.deleted      queue
//	queue.purged       queue, purged
//	queue.move_planned queue, replicas (the node IDs it moves to)
//	node.drain_planned node_id, queues (the queues whose move it planned)
//	node.drain_undone  node_id
//	node.added         node_id, peer_addr
//	node.removed       node_id
//	cluster.rebalance_planned  moves, leads (how many of each it planned)
//	config.set         config_key, value_bytes (never the value)
//	config.deleted     config_key, existed
//	auth.failed        client, reason, and key_id when the key was
//	                   revoked during the handshake (rate-limited)
//	tls.handshake_failed  reason (rate-limited)
//
// A rate-limited event is logged at most once per second across all
// connections; see limitedAudit for the summary lines, which add
// suppressed and note.
//
// Secrets never appear: API-key secrets are not logged anywhere, and
// runtime-config values are not logged because Lua hooks read that store
// and operators may keep sensitive values in it.
const (
	auditKeyCreated       = "api_key.created"
	auditKeyRevoked       = "api_key.revoked"
	auditACLSet           = "acl.set"
	auditQueueCreated     = "queue.created"
	auditQueueDeleted     = "queue.deleted"
	auditQueuePurged      = "queue.purged"
	auditQueueMovePlanned = "queue.move_planned"
	auditNodeDrainPlanned = "node.drain_planned"
	auditNodeDrainUndone  = "node.drain_undone"
	auditNodeAdded        = "node.added"
	auditNodeRemoved      = "node.removed"
	auditRebalancePlanned = "cluster.rebalance_planned"
	auditConfigSet        = "config.set"
	auditConfigDeleted    = "config.deleted"
	auditAuthFailed       = "auth.failed"
	auditTLSFailed        = "tls.handshake_failed"
	auditSuppressedNote   = "events since the previous line, the last one shown"
)

// auditInterval is the least time between two lines of a rate-limited
// audit event.
const auditInterval = time.Second

// audit logs an audit event of the connection c at INFO. Events that
// anyone who can reach the port may cause go through a limitedAudit
// instead.
func (c *conn) audit(event string, attrs ...any) {
	c.log.Info("audit", append([]any{"event", event}, attrs...)...)
}

// A limitedAudit logs one audit event that unauthenticated clients can
// cause (failed authentication, failed TLS handshakes), at most one line
// per auditInterval across all connections, so that a flood of failures
// cannot flood the log. After a quiet spell an event is logged at once;
// events within auditInterval of the last line are counted instead, and
// when the interval ends one summary line reports how many there were
// (suppressed=N, never 0 on a summary) with the attributes of the last of
// them. Safe for concurrent use.
type limitedAudit struct {
	log   *slog.Logger
	event string
	// now and after are time.Now and time.AfterFunc; tests replace them.
	now   func() time.Time
	after func(d time.Duration, f func())

	mu         sync.Mutex
	last       time.Time // when the last line was written
	suppressed int       // events since then not logged
	lastAttrs  []any     // the attributes of the last of them
	pending    bool      // a summary is scheduled
}

func newLimitedAudit(log *slog.Logger, event string) *limitedAudit {
	return &limitedAudit{
		log:   log,
		event: event,
		now:   time.Now,
		after: func(d time.Duration, f func()) { time.AfterFunc(d, f) },
	}
}

// record logs the event with attrs, or counts it toward the next summary
// if a line was written less than auditInterval ago.
func (a *limitedAudit) record(attrs ...any) {
	a.mu.Lock()
	now := a.now()
	if !a.pending && (a.last.IsZero() || now.Sub(a.last) >= auditInterval) {
		a.last = now
		a.mu.Unlock()
		a.log.Info("audit", append([]any{"event", a.event}, attrs...)...)
		return
	}
	a.suppressed++
	a.lastAttrs = attrs
	schedule := !a.pending
	a.pending = true
	wait := max(a.last.Add(auditInterval).Sub(now), 0)
	a.mu.Unlock()
	if schedule {
		a.after(wait, a.flush)
	}
}

// flush writes the summary of the events counted since the last line.
func (a *limitedAudit) flush() {
	a.mu.Lock()
	n, attrs := a.suppressed, a.lastAttrs
	a.pending = false
	a.suppressed, a.lastAttrs = 0, nil
	if n == 0 {
		a.mu.Unlock()
		return
	}
	a.last = a.now()
	a.mu.Unlock()
	a.log.Info("audit", append(append([]any{"event", a.event}, attrs...), "suppressed", n, "note", auditSuppressedNote)...)
}
