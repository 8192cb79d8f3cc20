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
