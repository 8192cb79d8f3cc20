// Package core is the sans-io client core of the Fila protocol: a
// deterministic state machine over bytes and time, with no sockets, no
// goroutines and no clock of its own. It owns what every client must get
// exactly right: the codec, the handshake and version negotiation,
// request-ID allocation and correlation, delivery routing to subscriptions,
// delivery-credit accounting, keepalive, and the interpretation of leader
// redirects and shutdowns. A language's SDK is a thin I/O shell around it
// (sdk/go is one), in the way etcd raft's node.go drives its RawNode.
//
// # Usage
//
//	c := core.New(core.Config{ClientName: "my-app/1.0"})
//	c.Tick(now)                        // the shell's monotonic clock
//	id, _ := c.Enqueue(msgs)           // queues bytes; the result comes in a Ready
//	for {
//		if c.HasReady() {
//			rd := c.Ready()
//			write(rd.Out)                  // 1. write all of Out, in order
//			for _, cp := range rd.Completions { ... } // responses by request ID
//			for _, d := range rd.Deliveries { ... }   // messages by subscription
//			for _, e := range rd.Expired { ... }      // leases that ended unsettled
//			c.Advance(rd)                  // 2. then Advance
//		}
//		n := read(buf)                     // wait for bytes, a request, or rd.Deadline
//		c.Tick(now)
//		if err := c.Receive(buf[:n]); err != nil { ... } // connection-scoped: close it
//	}
//
// # The caller's obligations
//
//  1. Call Tick with the current monotonic time before Receive and at or
//     after every Ready's Deadline; the core has no timers and measures
//     keepalive only by the times it is given.
//  2. Write a Ready's Out completely, in order, before calling Advance,
//     or copy it first into a queue that a writer drains in order (the
//     Go SDK does, so that it keeps reading while a write is blocked).
//  3. A Ready is read-only and its slices are valid until Advance: copy
//     what must outlive it. Delivered payloads are the exception: each
//     frame is decoded from its own buffer, so a payload stays valid after
//     Advance.
//  4. An error from Receive, or a Ready whose State reports Failed, is
//     connection-scoped: close the connection. Every request still in flight
//     is completed with ErrConnectionLost in that Ready.
//  5. Report each delivery the application has finished with (acked,
//     nacked, retried, released) with Settle(sub, lease) (a Router's
//     SettleIn(sub, queue, lease), for sharded queues), before sending
//     the request that settles it, so its subscription's credit is
//     replenished. Settling a delivery whose lease expired (Ready.Expired)
//     is harmless: the broker already gave its credit back, and the core
//     does not return it twice.
//
// # Batches and the handshake
//
// Requests made before HandshakeOk are held and written once it arrives,
// because only then is the broker's batch cap known (State.MaxBatchSize).
// A batch request with more items than the cap is written as several
// requests of at most the cap, in order, and completes once, on the ID
// the call returned, with the results joined in order; a shell need not
// know the cap.
//
// # Clusters: the Router
//
// A Conn speaks to one node. A Router speaks to a cluster: it keeps a Conn
// per node it needs, a routing table from queue to leader (and from the
// meta group to its leader, for admin operations), and follows leadership
// as it moves. The shell hands it requests without naming a node; the
// Router picks the node, asks the shell to dial it (RouterReady.Dial),
// follows NOT_LEADER redirects (at most RouterConfig.MaxRedirects per
// request, with backoff while an election leaves no hint), resends what
// was in flight on a connection that failed when that is safe (an Enqueue
// stamped with the producer ID and a sequence, a settle, a read), and
// opens again a subscription that ended with NOT_LEADER on the new leader,
// with the credit its unsettled deliveries leave.
//
//	r := core.NewRouter(core.RouterConfig{Seeds: []string{"a:5555", "b:5555"}, ProducerID: id})
//	r.Tick(now)
//	id, _ := r.Enqueue(msgs, deadline)
//	for r.HasReady() {
//		rd := r.Ready()
//		for _, addr := range rd.Dial { ... }   // dial; then r.Connected(addr) or r.DialFailed(addr, err)
//		for _, w := range rd.Writes { ... }    // write w.Out to w.Addr's connection
//		for _, addr := range rd.Close { ... }  // close it
//		...                                    // completions, deliveries, ended, as for a Conn
//		r.Advance(rd)
//	}
//	r.Receive(addr, buf[:n])               // bytes read from addr's connection
//	r.ConnLost(addr, err)                  // addr's connection failed
//
// # Sharded queues
//
// A queue created with several shards is one queue per shard,
// "<queue>~<i>", each its own Raft group with its own leader; the broker
// does not route between them, and answers an Enqueue or Subscribe naming
// the queue itself QUEUE_SHARDED, having done nothing. The Router then
// asks Topology for the queue's shards (their names and leaders, and the
// queue's tenant separator) and keeps that map for its life:
//
//   - Enqueue: each message goes to the shard its fairness key hashes to
//     (ShardOf: FNV-1a 32 of the key, or of its tenant part, mod the
//     shards), the request split per shard leader and its results joined
//     in the caller's order. Once the map is known, later Enqueues go to
//     the shards at once. The caller's frame is not changed.
//   - Subscribe: the subscription becomes one subscription per shard,
//     each opened, moved and reopened on its shard's leader on its own,
//     merged under the caller's ID. Its prefetch is shared: each shard
//     keeps at least 1 credit, the rest goes to the shards in proportion
//     to the backlog their Deliveries report (DeliveryBatch.Backlog), a
//     share changing only when it moves by a quarter or more.
//   - Settle: lease numbers are per shard, so settle a sharded
//     subscription's deliveries with SettleIn, naming the queue each
//     delivery came from; Ack and the other settling requests name it
//     already, and go to its shard's leader by themselves.
//
// If Topology fails, the request or subscription fails with the
// QUEUE_SHARDED error.
//
// The Router is in this package, beside Conn, rather than in one of its
// own: it drives Conns through unexported hooks (their events are taken
// at once, their bytes when the shell writes them) and shares their
// determinism rules.
//
// # Determinism
//
// The same sequence of calls with the same arguments produces the same
// Readys, byte for byte. This is what lets the conformance suite replay
// recorded transcripts against the core.
//
// # What the core does with unexpected input
//
// A frame the core cannot decode, a response to a request it did not send,
// a delivery beyond a subscription's credit, reusing a lease the
// subscription holds, or to a subscription it does not have, a LeaseExpired
// for a subscription it does not have, or a frame over the max frame size
// is a connection error
// (*wire.ConnError). A frame with an opcode the core does not know is
// ignored and counted (Stats.UnknownFrames), so a newer server may add
// informational pushes without breaking older clients.
package core
