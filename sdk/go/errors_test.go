package fila

import (
	"testing"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// TestFormatErrorSaysItOnce: an error's line names the operation, its
// target and the code once, whatever part of them the broker's message
// already holds.
func TestFormatErrorSaysItOnce(t *testing.T) {
	for _, tc := range []struct {
		op, target string
		code       wire.Code
		msg, want  string
	}{
		{"enqueue", "orders", wire.CodeQueueNotFound, "", "fila: enqueue orders: queue not found"},
		{"enqueue", "orders", wire.CodeQueueNotFound, "queue not found", "fila: enqueue orders: queue not found"},
		// The broker names the operation and its target.
		{"enqueue", "orders", wire.CodeQueueNotFound, "enqueue orders: queue not found", "fila: enqueue orders: queue not found"},
		{"ack", "orders", wire.CodeLeaseExpired, "ack orders 0190: lease 7: lease expired", "fila: ack orders 0190: lease 7: lease expired"},
		{"revoke api key", "3f9c", wire.CodeAPIKeyNotFound, `revoke api key "3f9c": api key not found`, `fila: revoke api key "3f9c": api key not found`},
		{"enqueue", "billing", wire.CodeForbidden, `enqueue billing: forbidden: key 3f9c needs produce on "billing"`,
			`fila: enqueue billing: forbidden: key 3f9c needs produce on "billing"`},
		// The broker names the operation alone: the target goes after it.
		{"set config", "region", wire.CodeForbidden, `set config: forbidden: key 3f9c needs admin on "*"`,
			`fila: set config region: forbidden: key 3f9c needs admin on "*"`},
		// The message holds the code's text, not the operation.
		{"handshake", "", wire.CodeUnauthorized, "unauthorized: no API key", "fila: handshake: unauthorized: no API key"},
		{"create queue", "", wire.CodeInvalidArgument, `queue name "a b": byte 1: invalid argument`, `fila: create queue: queue name "a b": byte 1: invalid argument`},
		{"drain node", "2", wire.CodeNotSupported, "a single node has no other node: not supported", "fila: drain node 2: a single node has no other node: not supported"},
		// Neither: the code's text goes first.
		{"enqueue", "orders", wire.CodeUnavailable, "shutting down", "fila: enqueue orders: unavailable: shutting down"},
		// A word that starts like the operation is not the operation.
		{"ack", "q", wire.CodeInternal, "acknowledged twice: internal error", "fila: ack q: acknowledged twice: internal error"},
	} {
		if got := formatError(tc.op, tc.target, tc.code, tc.msg); got != tc.want {
			t.Errorf("formatError(%q, %q, %v, %q) = %q; want %q", tc.op, tc.target, tc.code, tc.msg, got, tc.want)
		}
	}
}
