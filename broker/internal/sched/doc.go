// Package sched is Fila's scheduling engine: a deterministic state machine
// that owns every queue of one shard and decides who gets which message
// when. Commands and the current time go in; storage mutations, replies,
// deliveries, hook requests and the next wake-up time come out.
//
// The package does no I/O, starts no goroutines, reads no clock and draws
// no random numbers: IDs, time and lease tokens all enter through
// commands (StartLeaseEpoch, Message.ID, Tick). The same sequence of
// calls always produces the same Readys, which is what lets a log of
// commands be replayed at recovery or replicated with Raft later.
//
// # Usage
//
// A shell goroutine (the shard package) owns a Sched the way etcd raft's
// node owns a RawNode:
//
//	s := sched.New(cfg)
//	// Restore every stored record under sched.Prefix, in key order.
//	for key, value := range storedRecords {
//		if err := s.Restore(key, value); err != nil { ... }
//	}
//	for {
//		select {
//		case <-timer.C:
//			s.Tick(sched.Time(now()))
//		case cmd := <-commands:
//			s.Tick(sched.Time(now()))
//			cmd.apply(s) // s.Enqueue(ref, items), s.Ack(ref, items), ...
//		}
//		if s.HasReady() {
//			rd := s.Ready()
//			store.Apply(rd.Persist)   // 1. durable, as one atomic group
//			release(rd.Replies, rd.Expired, rd.Deliveries, rd.Ended) // 2. then send
//			runHooks(rd.Failures)     // answers come back as s.Decide
//			timer.Reset(rd.Deadline)  // 3. wake up by then (0: no timer)
//			s.Advance(rd)
//		}
//	}
//
// The caller's obligations, in order, for each Ready:
//
//  1. Write Persist durably as one atomic group before releasing anything
//     of the same Ready: an enqueue's reply promises the message is
//     stored, an ack's reply that it is gone. (Persist before send.)
//  2. Release Replies (one per command that took a Ref, in command order),
//     Expired, then Deliveries: a subscription hears of the leases that
//     ended, and of the credit they gave back, before the deliveries that
//     may spend it. Deliver Failures to the on_failure hooks.
//  3. Call Tick no later than Deadline. Leases, delays, backoffs, token
//     refills and idempotency windows all run off that one timer; there
//     is no polling.
//  4. Call Advance, then take the next Ready. A Ready's slices stay valid
//     until the next call of Ready, so the shell may write Ready N
//     durably while commands accumulate into N+1. A shell that takes
//     N+1 before N is durable copies out what it still needs, writes the
//     groups in Ready order, and releases each Ready's effects only once
//     its own group is durable.
//
// At startup, the shell passes every record under Prefix to Restore, in
// key order, before the first Tick and the first command; Specs then
// lists the queues whose hooks it must compile. Records that refer to
// nothing (a consistent store holds none; a damaged one might) are
// deleted in the first Ready.
//
// Commands may be called at any time in between; their effects go into
// the next Ready. Deliveries are decided in HasReady (and Ready): all the
// commands given since the last Ready are taken into account at once.
//
// # Scheduling
//
// Each queue runs Deficit Round Robin (M. Shreedhar and G. Varghese,
// SIGCOMM 1995; see package drr) across its fairness keys. The cost of a
// delivery is the message's payload size in bytes (at least 1): a key's
// share of delivery bandwidth is proportional to its weight. A key of
// weight w earns w × Config.Quantum bytes of deficit per round. Visits
// serve one message and rotate, so a key that becomes backlogged while K
// others are is served within K deliveries however large their bursts. A
// key's weight is that of its most recently enqueued message.
//
// Within a key, messages are grouped into lanes by throttle key set,
// ordering key and, without an ordering key, priority; each lane is
// FIFO, and the key serves its runnable lanes highest priority first
// (priority.go), which changes nothing across keys. A lane whose next message lacks a
// token from one of its buckets parks on that bucket and the key serves
// its other lanes; a key whose lanes are all parked leaves the round with
// its deficit kept and rejoins when a bucket wakes a lane at the time its
// next token is due. A lane with an ordering key delivers one message at
// a time: the next waits until the previous is acked or dead-lettered,
// and a retried message keeps its place at the head.
//
// Subscriptions on a queue share its deliveries round robin among those
// with credit (and tokens, for their declared rate limits) that hold fewer
// than Config.MaxUnsettled leases. Credit is spent one per delivery and
// comes back with AddCredit, or by itself when a lease expires (reported
// in Ready.Expired); the cap holds whatever credit a subscription has. A
// queue without credit anywhere does no scheduling work; an idle fairness
// key costs nothing and keeps no deficit.
//
// # Messages
//
// A message is in exactly one state: ready (including waiting for tokens
// or behind an ordering key), delayed (an enqueue delay, a retry backoff,
// or waiting for an on_failure decision), or leased. Deliveries are not
// persisted: after a restart, messages that were leased are ready again
// with the attempts recorded before (the interrupted attempt is not
// counted). Bodies are written into the message records and never kept
// in memory; Delivered.Key tells the shell where to read them.
//
// A message with a TTL that passes while it is ready or delayed expires:
// it is dead-lettered with reason ReasonExpired, or dropped, off the same
// timer heap as delays and leases (ttl.go).
//
// A message is a duplicate, and is not enqueued, when its queue holds its
// idempotency key (dedup.go) or its producer ID and sequence (an
// idempotent producer's resent frame; producer.go).
//
// The failure policy without an on_failure hook: a failed attempt (nack,
// lease expiry) is retried after BackoffBase × 2^(attempts-1), at most
// BackoffMax, until MaxAttempts deliveries have failed; then the message
// moves to the queue's DLQ, "<queue>.dlq", keeping its ID, keys, weight
// and body, with its attempts and last error. Redrive moves messages back
// with attempts reset, at once or, throttled, a number a second off Tick
// (redrive.go); PurgeQueue removes a queue's messages by key range
// (purge.go) and Peek lists them (peek.go). DLQs apply fairness but
// neither throttle keys nor ordering keys (they stay on the messages as
// metadata), and a failure in a DLQ retries with backoff forever: a DLQ
// has no DLQ.
//
// # Errors
//
// Errors in replies wrap the broker's protocol error values (package
// fault) with context, for instance
// "ack orders 0190...: lease 7: lease expired" wrapping
// fault.ErrLeaseExpired.
package sched
