package typescript

import (
	"strings"
	"testing"

	"github.com/fila-mq/fila/gen/internal/spec"
)

func TestNames(t *testing.T) {
	for _, tc := range []struct {
		f    func(string) string
		in   string
		want string
	}{
		{FieldName, "lease_deadline_at_ms", "leaseDeadlineAtMs"},
		{FieldName, "queue", "queue"},
		{PascalName, "QUEUE_NOT_FOUND", "QueueNotFound"},
		{PascalName, "OK", "Ok"},
		{ErrorClass, "QUEUE_NOT_FOUND", "QueueNotFoundError"},
		{ErrorClass, "SCRIPT_ERROR", "ScriptError"},
		{TypeName, "Error", "ErrorFrame"},
		{TypeName, "Enqueue", "Enqueue"},
	} {
		if got := tc.f(tc.in); got != tc.want {
			t.Errorf("name(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}

// TestEveryCodeHasItsClass renders a small spec and checks the error
// classes, the per-operation code types and the optional-field encoding.
func TestEveryCodeHasItsClass(t *testing.T) {
	s, err := spec.Parse([]byte(`
[protocol]
version = 1
min_version = 1
default_port = 5555
header_size = 12
default_max_frame_size = 16777216
min_max_frame_size = 4096
max_reassembled_size = 268435456
max_batch_size = 10

[[codes]]
name = "OK"
value = 0
scope = "ok"
doc = "Success."

[[codes]]
name = "GONE"
value = 40
scope = "domain"
text = "gone"
doc = "It is gone."

[[frames]]
name = "Fetch"
opcode = 0x0001
kind = "request"
section = "hot path"
doc = "Fetch something."
fields = [
  { name = "key", type = "string", doc = "Key." },
  { name = "ttl_ms", type = "u64", optional = true, doc = "TTL." },
]

[[frames]]
name = "FetchOk"
opcode = 0x0002
kind = "response"
section = "hot path"
doc = "Fetched."
fields = []

[[operations]]
name = "Fetch"
request = "Fetch"
response = "FetchOk"
codes = ["GONE"]
`))
	if err != nil {
		t.Fatal(err)
	}
	files, err := Files(s)
	if err != nil {
		t.Fatal(err)
	}
	errs, wire := string(files["errors_gen.ts"]), string(files["wire_gen.ts"])
	for _, want := range []string{
		"export class GoneError extends FilaError {",
		"case Code.Gone:\n      return new GoneError(detail, leaderHint, op);",
		"export type FetchCode = Code.Gone | StatusCode;",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("errors_gen.ts lacks %q", want)
		}
	}
	for _, want := range []string{
		"if (m.ttlMs !== 0n) {\n      w.u64(m.ttlMs);",
		"if (r.more()) {\n      v_ttl_ms = r.u64(\"ttl_ms\");",
	} {
		if !strings.Contains(wire, want) {
			t.Errorf("wire_gen.ts lacks %q", want)
		}
	}
}
