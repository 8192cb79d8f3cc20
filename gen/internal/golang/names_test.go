package golang

import "testing"

// TestGoName: spec names become Go names with Go's initialisms in
// capitals, whatever the case of the spec name.
func TestGoName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// lower_snake fields
		{"id", "ID"},
		{"key_id", "KeyID"},
		{"lease_deadline_at_ms", "LeaseDeadlineAtMS"},
		{"tls_required", "TLSRequired"},
		{"dlq_name", "DLQName"},
		{"callback_url", "CallbackURL"},
		// UPPER_SNAKE codes and enum values
		{"OK", "OK"},
		{"API_KEY_NOT_FOUND", "APIKeyNotFound"},
		{"NOT_A_DLQ", "NotADLQ"},
		{"QUEUE_NOT_FOUND", "QueueNotFound"},
		// CamelCase frames, structs, enums and operations
		{"CreateApiKey", "CreateAPIKey"},
		{"CreateApiKeyResult", "CreateAPIKeyResult"},
		{"ListApiKeys", "ListAPIKeys"},
		{"ApiKeyInfo", "APIKeyInfo"},
		{"SetAcl", "SetACL"},
		{"SetAclOk", "SetACLOk"},
		{"GetAclResult", "GetACLResult"},
		{"HandshakeOk", "HandshakeOk"},
		{"Enqueue", "Enqueue"},
		{"Error", "Error"},
		{"HttpJsonUrl", "HTTPJSONURL"},
		{"DLQStats", "DLQStats"},
		{"PermissionKind", "PermissionKind"},
	} {
		if got := GoName(tc.in); got != tc.want {
			t.Errorf("GoName(%q) = %q; want %q", tc.in, got, tc.want)
		}
	}
}
