package fila

import (
	"errors"
	"fmt"
	"strings"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// Errors come in two layers.
//
// Each operation that has failures of its own returns its own error type
// (*EnqueueError, *AckError, *CreateQueueError, ...) whose Code admits only
// that operation's codes, so a switch over it lists exactly what can happen:
//
//	var e *fila.EnqueueError
//	if errors.As(err, &e) && e.Code == fila.EnqueueQueueNotFound { ... }
//
// Failures any operation may meet (unauthorized, forbidden, not leader,
// unavailable, connection lost, ...) are *StatusError.
//
// Every error also matches one of the sentinels (ErrQueueNotFound and the
// others, generated from the spec in errors_gen.go) with errors.Is,
// whichever operation returned it:
//
//	if errors.Is(err, fila.ErrQueueNotFound) { ... }

// A Code is a protocol error code, such as wire.CodeQueueNotFound.
type Code = wire.Code

// ErrClosed is returned by operations on a Client after Close or after
// the client ended (a broker refused its key, or, with WithoutReconnect,
// a connection failed).
var ErrClosed = errors.New("fila: client closed")

// StatusError is a failure that any operation may meet: a status code from
// the broker (UNAUTHORIZED, FORBIDDEN, NOT_LEADER, UNAVAILABLE, INTERNAL,
// NOT_SUPPORTED, INVALID_ARGUMENT, ...), or a connection-scoped code after
// which the connection was closed. errors.Is matches the code's sentinel.
type StatusError struct {
	Code Code
	// Op is the operation, such as "enqueue".
	Op string
	// Target is what the failure concerns (a queue name); may be empty.
	Target string
	// Message is the broker's detail.
	Message string
	// LeaderHint is, for NOT_LEADER, the host:port of the leader if known.
	LeaderHint string
}

func (e *StatusError) Error() string {
	s := formatError(e.Op, e.Target, e.Code, e.Message)
	if e.LeaderHint != "" {
		s += " (leader: " + e.LeaderHint + ")"
	}
	return s
}

// Is reports whether target is the sentinel of e's code.
func (e *StatusError) Is(target error) bool {
	return target != nil && target == sentinel(e.Code)
}

// formatError renders "fila: enqueue orders: queue not found", adding the
// broker's detail when it says more than the code's name. The broker's
// messages usually name the operation and end with the code's text
// ("ack orders 0190...: lease 7: lease expired"); such a message is used
// whole rather than repeated after the SDK's own prefix.
func formatError(op, target string, code Code, msg string) string {
	head := "fila: " + op
	if target != "" {
		head += " " + target
	}
	what := codeText(code)
	switch {
	case msg == "" || msg == what:
		return head + ": " + what
	case strings.HasPrefix(msg, op) && strings.HasSuffix(msg, what):
		return "fila: " + msg
	case strings.HasPrefix(msg, what):
		return head + ": " + msg
	default:
		return fmt.Sprintf("%s: %s: %s", head, what, msg)
	}
}

// codeText is the code's sentinel text without the "fila: " prefix, or
// the code's number for a code this SDK does not know.
func codeText(c Code) string {
	if s := sentinel(c); s != nil {
		return s.Error()[len("fila: "):]
	}
	return fmt.Sprintf("error code %d", int(c))
}
