package wire

import "testing"

func TestUndeclared(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   Opcode
		f    Frame
		code Code
		bad  bool
	}{
		{"domain code of the operation", OpEnqueue, &ErrorFrame{Code: CodeQueueNotFound}, 0, false},
		{"status code", OpEnqueue, &ErrorFrame{Code: CodeForbidden}, 0, false},
		{"domain code of another operation", OpEnqueue, &ErrorFrame{Code: CodeQueueExists}, CodeQueueExists, true},
		{"per-item codes", OpAck, &AckResult{Results: []ItemResult{{Code: CodeOK}, {Code: CodeLeaseExpired}, {Code: CodeNotADLQ}}}, CodeNotADLQ, true},
		{"success", OpCreateQueue, &CreateQueueOk{}, 0, false},
		{"unknown opcode", Opcode(0x7f01), &ErrorFrame{Code: CodeUnknownOpcode}, 0, false},
	} {
		code, bad := tc.op.Undeclared(tc.f)
		if code != tc.code || bad != tc.bad {
			t.Errorf("%s: Undeclared = %v, %v; want %v, %v", tc.name, code, bad, tc.code, tc.bad)
		}
	}
}
