package e2e

import (
	"net/http"
	"os"
	"regexp"
	"testing"
)

// TestGCPercent: the broker runs its collector at server.gc_percent,
// by default sized from the live heap (100 for a broker holding little),
// unless GOGC is set, which wins. The runtime reports the setting on
// /metrics as go_gc_gogc_percent.
func TestGCPercent(t *testing.T) {
	if os.Getenv("GOGC") != "" {
		t.Skip("GOGC is set in the test's environment, and the broker inherits it")
	}
	re := regexp.MustCompile(`(?m)^go_gc_gogc_percent (\d+)$`)
	for _, tc := range []struct {
		env  []string
		want string
	}{
		{nil, "100"},
		{[]string{"FILA_SERVER_GC_PERCENT=70"}, "70"},
		{[]string{"FILA_SERVER_GC_PERCENT=70", "GOGC=120"}, "120"},
	} {
		_, base := httpServer(t, "127.0.0.1", tc.env...)
		code, body := get(t, base+"/metrics", "")
		if code != http.StatusOK {
			t.Fatalf("%v: GET /metrics = %d", tc.env, code)
		}
		m := re.FindStringSubmatch(body)
		if m == nil || m[1] != tc.want {
			t.Errorf("%v: go_gc_gogc_percent = %v; want %s", tc.env, m, tc.want)
		}
	}
}
