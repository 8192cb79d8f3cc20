package server

import (
	"context"
	"fmt"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// Changes to an API key reach its open connections through a registry of
// connections by key ID, which auth.Store.OnChange drives:
//
//   - A revoked key's connections are sent a connection-scoped Error
//     (UNAUTHORIZED, on request ID 0) and closed, and their subscriptions
//     are released at once: their leased messages are ready again, each
//     attempt counted as failed, as when a consumer disconnects.
//   - After an ACL change, each subscription of the key's connections
//     whose queue the key may no longer consume ends with an Error on the
//     subscription's request ID (FORBIDDEN, naming the queue and the
//     missing permission), and is released the same way. The connection
//     stays open.
//
// A subscription that ends so writes none of the deliveries still queued
// for it: their leases were released. The bootstrap key and connections
// without auth are never registered: their access cannot change.

// register adds c to the registry of its key, after the handshake set its
// principal. It returns false if the key was revoked before the
// registration could see it: the caller closes the connection. Runs on
// c's reader goroutine.
func (s *Server) register(c *conn) bool {
	id := c.principal.KeyID()
	if id == "" || id == auth.BootstrapKeyID {
		return true
	}
	s.keysMu.Lock()
	set := s.byKey[id]
	if set == nil {
		set = map[*conn]struct{}{}
		s.byKey[id] = set
	}
	set[c] = struct{}{}
	s.keysMu.Unlock()
	c.registered = true
	// A revocation that published its state before the registration may
	// have looked for the key's connections before this one was added:
	// check again now that a later one cannot miss it.
	return c.principal.Valid()
}

// unregister removes c from the registry. Runs on c's reader goroutine.
func (s *Server) unregister(c *conn) {
	if !c.registered {
		return
	}
	id := c.principal.KeyID()
	s.keysMu.Lock()
	if set := s.byKey[id]; set != nil {
		delete(set, c)
		if len(set) == 0 {
			delete(s.byKey, id)
		}
	}
	s.keysMu.Unlock()
}

// keyChanged is the auth store's OnChange listener: it brings the
// connections of key keyID in line with the key's current state. It runs
// on the goroutine that changed the key, before the change's reply is
// sent, so that when RevokeApiKey or SetAcl succeeds the key's connections
// are closing or its forbidden subscriptions ended, and their leases are
// on their way back to the queues ahead of any later command.
func (s *Server) keyChanged(keyID string) {
	s.keysMu.Lock()
	set := s.byKey[keyID]
	conns := make([]*conn, 0, len(set))
	for c := range set {
		conns = append(conns, c)
	}
	s.keysMu.Unlock()
	for _, c := range conns {
		c.recheck()
	}
}

// recheck applies the current state of the connection's key: closes the
// connection if the key was revoked, else ends the subscriptions it may
// no longer consume.
func (c *conn) recheck() {
	if !c.principal.Valid() {
		c.revoked()
		return
	}
	c.mu.Lock()
	var lost []*subscription
	for _, sub := range c.subs {
		if !c.principal.Allowed(auth.Consume, sub.queue) {
			lost = append(lost, sub)
		}
	}
	c.mu.Unlock()
	for _, sub := range lost {
		c.endSubscription(sub, c.lostConsume(sub.queue))
	}
}

// lostConsume is the error that ends a subscription to queue whose key no
// longer holds consume on it.
func (c *conn) lostConsume(queue string) error {
	return fmt.Errorf("%w: subscription to %s ended: key %s no longer holds consume on %q",
		fault.ErrForbidden, queue, c.principal.KeyID(), queue)
}

// revoked closes the connection of a revoked key: its subscriptions are
// released, then an UNAUTHORIZED Error on request ID 0 is queued after
// what is already queued (deliveries excepted), then the connection
// closes. So when the client reads the Error, the leases are already on
// their way back. A subscription whose Subscribe is not answered yet is
// released when the shard answers it (see subscribe).
func (c *conn) revoked() {
	c.revokeOnce.Do(func() {
		c.mu.Lock()
		var open []*subscription
		for id, sub := range c.subs {
			sub.ended.Store(true)
			delete(c.subs, id)
			if sub.open {
				open = append(open, sub)
			}
		}
		c.mu.Unlock()
		for _, sub := range open {
			c.release(sub)
		}
		msg := fmt.Sprintf("API key %s was revoked", c.principal.KeyID())
		c.log.Info("closing connection", "code", wire.CodeUnauthorized, "reason", msg)
		c.mu.Lock()
		c.pushLocked(outItem{frame: &wire.ErrorFrame{Code: wire.CodeUnauthorized, Message: msg}, closeAfter: true})
		c.closed = true
		c.mu.Unlock()
		c.wake()
	})
}

// endSubscription ends sub with err (an Error frame on its request ID)
// and releases it: its leased messages return to the queue at once (before
// the Error is queued), and deliveries queued for it are not written. If
// the Subscribe has not been answered yet, its answer is err instead (see
// subscribe). Ending a subscription twice does nothing.
func (c *conn) endSubscription(sub *subscription, err error) {
	c.mu.Lock()
	if sub.ended.Load() {
		c.mu.Unlock()
		return
	}
	sub.ended.Store(true)
	if c.subs[sub.reqID] == sub {
		delete(c.subs, sub.reqID)
	}
	if !sub.open {
		sub.endErr = err
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	c.log.Info("subscription ended", "queue", sub.queue, "err", err)
	c.release(sub)
	c.push(outItem{reqID: sub.reqID, frame: errorFrame(err)})
}

// release closes sub in the shard, returning its leased messages to the
// queue at once, each attempt counted as failed.
func (c *conn) release(sub *subscription) {
	if err := c.s.n.Unsubscribe(context.Background(), sub.id, sub.queue, true, nil); err != nil {
		c.log.Debug("release subscription", "queue", sub.queue, "err", err)
	}
}
