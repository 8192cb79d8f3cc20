// Package fault holds the broker's error values: one per protocol error code
// in spec/protocol.toml, named Err followed by the code in CamelCase
// (QUEUE_NOT_FOUND is ErrQueueNotFound), generated from the spec with the
// code's text (errors_gen.go).
//
// Broker packages return these values, usually wrapped with context:
//
//	fmt.Errorf("enqueue %s: %w", queue, fault.ErrQueueNotFound)
//
// The server maps an error to its wire code with the generated
// server.CodeOf, which finds the first *fault.Error in the chain. This
// package imports nothing of the broker's, so every broker package may use
// it, the scheduler included.
package fault

// An Error is a broker error value that corresponds to one protocol code.
// Compare with errors.Is; the values are never copied.
type Error struct {
	text string
}

func (e *Error) Error() string { return e.text }

// NotLeader is the error of an operation sent to a node that does not lead
// its queue (or, for an admin operation, the cluster's meta group). It
// wraps ErrNotLeader, so it answers NOT_LEADER; Leader is the leader's
// client address, host:port, for the Error frame's leader_hint, or empty
// while no leader is known (an election is running: retry after a
// backoff).
type NotLeader struct {
	// Leader is the client address of the node that leads, or "".
	Leader string
	// What names what is led elsewhere, e.g. "queue orders"; may be "".
	What string
}

func (e *NotLeader) Error() string {
	what := e.What
	if what == "" {
		what = "the operation's group"
	}
	if e.Leader == "" {
		return what + " has no leader yet (an election is running): " + ErrNotLeader.text
	}
	return what + " is led by another node, at " + e.Leader + ": " + ErrNotLeader.text
}

// Unwrap returns ErrNotLeader.
func (e *NotLeader) Unwrap() error { return ErrNotLeader }
