// Package fault holds the broker's error values: one per protocol error code
// in spec/protocol.toml, named Err followed by the code in CamelCase
// (QUEUE_NOT_FOUND is ErrQueueNotFound).
//
// Broker packages return these values, usually wrapped with context:
//
//	fmt.Errorf("enqueue %s: %w", queue, fault.ErrQueueNotFound)
//
// The server maps an error to its wire code with the generated
// server.CodeOf, which finds the first *fault.Error in the chain. Because
// that generated mapping names every value below, a code added to the spec
// without a value here fails the build. This package imports nothing of the
// broker's, so every broker package may use it, the scheduler included.
package fault

// An Error is a broker error value that corresponds to one protocol code.
// Compare with errors.Is; the values are never copied.
type Error struct {
	text string
}

func (e *Error) Error() string { return e.text }

// Connection-scoped failures: the server answers with an Error frame and
// closes the connection.
var (
	// ErrMalformedFrame: a frame could not be decoded.
	ErrMalformedFrame = &Error{"malformed frame"}
	// ErrFrameTooLarge: a frame or a reassembled value is over the limit.
	ErrFrameTooLarge = &Error{"frame too large"}
	// ErrProtocolViolation: a well-formed frame that is not allowed here.
	ErrProtocolViolation = &Error{"protocol violation"}
	// ErrUnsupportedVersion: no protocol version in common.
	ErrUnsupportedVersion = &Error{"unsupported protocol version"}
)

// Status failures any operation may return.
var (
	// ErrUnknownOpcode: a request opcode the broker does not know.
	ErrUnknownOpcode = &Error{"unknown opcode"}
	// ErrUnauthorized: no valid API key.
	ErrUnauthorized = &Error{"unauthorized"}
	// ErrForbidden: the key's ACL does not allow this.
	ErrForbidden = &Error{"forbidden"}
	// ErrNotLeader: another node leads the queue.
	ErrNotLeader = &Error{"not leader"}
	// ErrUnavailable: the broker cannot serve now (shutting down, storage failed).
	ErrUnavailable = &Error{"unavailable"}
	// ErrInternal: a bug or unexpected failure in the broker.
	ErrInternal = &Error{"internal error"}
	// ErrNotSupported: in the protocol, not supported by this broker.
	ErrNotSupported = &Error{"not supported"}
	// ErrInvalidArgument: a field value the operation does not accept.
	ErrInvalidArgument = &Error{"invalid argument"}
	// ErrResourceExhausted: a limit was reached.
	ErrResourceExhausted = &Error{"resource exhausted"}
)

// Domain failures, returned by the operations the spec lists them for.
var (
	// ErrQueueNotFound: no queue has this name.
	ErrQueueNotFound = &Error{"queue not found"}
	// ErrQueueExists: a queue with this name already exists.
	ErrQueueExists = &Error{"queue already exists"}
	// ErrMessageTooLarge: payload and headers exceed the max message size.
	ErrMessageTooLarge = &Error{"message too large"}
	// ErrMessageNotFound: no such message in the queue.
	ErrMessageNotFound = &Error{"message not found"}
	// ErrLeaseExpired: the named lease is no longer the message's current one.
	ErrLeaseExpired = &Error{"lease expired"}
	// ErrNotADLQ: redrive of a queue that is not a dead-letter queue.
	ErrNotADLQ = &Error{"not a dead-letter queue"}
	// ErrSubscriptionNotFound: no such subscription on this connection.
	ErrSubscriptionNotFound = &Error{"subscription not found"}
	// ErrInvalidConfigValue: a runtime-config value of the wrong form.
	ErrInvalidConfigValue = &Error{"invalid config value"}
	// ErrScriptError: a Lua script failed to compile.
	ErrScriptError = &Error{"script error"}
	// ErrAPIKeyNotFound: no API key has this ID.
	ErrAPIKeyNotFound = &Error{"api key not found"}
)
