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
//
// CodeOf reads the protocol code of any of them as a Code, to compare with
// the Code constants (CodeQueueNotFound and the others, generated in
// errors_gen.go) without importing the codec package:
//
//	if code, ok := fila.CodeOf(err); ok && code == fila.CodeLeaseExpired { ... }

// A Code is a protocol error code, such as CodeQueueNotFound; its String
// method returns the code's name in the spec ("QUEUE_NOT_FOUND"). Code is
// the codec's type (wire.Code of sdk/core/wire) and the Code constants of
// this package are the codec's values, so a program reads and compares
// codes without importing the codec.
type Code = wire.Code

// coded is an SDK error that carries a protocol code: *StatusError and
// the operations' own error types.
type coded interface {
	error
	code() Code
}

// CodeOf returns the protocol code of err and true: the code of the first
// error in err's chain (errors.As) that carries one, which is a
// *StatusError, an operation's own error type (*EnqueueError, *AckError,
// ...), or the connection-scoped Error with which the broker closed the
// connection of a call (UNAUTHORIZED after its key was revoked). It
// returns 0 and false for nil and for errors that carry no code: a
// connection lost without one (ErrConnectionLost), a closed client
// (ErrClosed), a context's error.
func CodeOf(err error) (Code, bool) {
	if err == nil {
		return 0, false
	}
	var c coded
	if errors.As(err, &c) {
		return c.code(), true
	}
	var ce *wire.ConnError
	if errors.As(err, &ce) {
		return ce.Code, true
	}
	return 0, false
}

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

// code returns e.Code, for CodeOf.
func (e *StatusError) code() Code { return e.Code }

// Is reports whether target is the sentinel of e's code.
func (e *StatusError) Is(target error) bool {
	return target != nil && target == sentinel(e.Code)
}

// formatError renders "fila: enqueue orders: queue not found", adding the
// broker's detail when it says more than the code's name, so that the
// line says each thing once. The broker's messages are colon-separated
// parts, one of them the code's text, and usually start with the
// operation:
//
//   - "ack orders 0190...: lease 7: lease expired" names the operation
//     and its target: it is used whole, after "fila: ".
//   - "set config: forbidden: key 3f9c needs admin on "*"" names the
//     operation only: the SDK's target goes after it.
//   - "queue name "a b": byte 1: ...: invalid argument" holds the code's
//     text: it follows the SDK's operation and target.
//   - any other message follows the code's text.
func formatError(op, target string, code Code, msg string) string {
	head := "fila: " + op
	if target != "" {
		head += " " + target
	}
	what := codeText(code)
	if msg == "" || msg == what {
		return head + ": " + what
	}
	if rest, ok := strings.CutPrefix(msg, op); ok && hasPart(msg, what) {
		switch {
		case strings.HasPrefix(rest, ": "):
			return head + rest
		case strings.HasPrefix(rest, " "):
			return "fila: " + msg
		}
	}
	if hasPart(msg, what) {
		return head + ": " + msg
	}
	return fmt.Sprintf("%s: %s: %s", head, what, msg)
}

// hasPart reports whether part is one of the colon-separated parts of msg
// ("part: ...", "...: part", "...: part: ...").
func hasPart(msg, part string) bool {
	return strings.HasPrefix(msg, part+": ") || strings.HasSuffix(msg, ": "+part) || strings.Contains(msg, ": "+part+": ")
}

// codeText is the code's sentinel text without the "fila: " prefix, or
// the code's number for a code this SDK does not know.
func codeText(c Code) string {
	if s := sentinel(c); s != nil {
		return s.Error()[len("fila: "):]
	}
	return fmt.Sprintf("error code %d", int(c))
}
