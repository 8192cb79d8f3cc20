package filatest

import (
	"strings"
	"testing"
)

// TestUndeclaredFindsBothFormats: the lines fila-server logs for an
// answer with an undeclared code are found in the text and the JSON log
// formats, and no other line is.
func TestUndeclaredFindsBothFormats(t *testing.T) {
	s := &Server{log: NewLog(10)}
	for _, line := range []string{
		`time=2026-12-02T06:00:00Z level=INFO msg="fila-server listening" addr=127.0.0.1:1`,
		`time=2026-12-02T06:00:01Z level=ERROR msg="` + UndeclaredCodeMsg + `" op=Enqueue code=QUEUE_EXISTS request=3`,
		`{"time":"2026-12-02T06:00:02Z","level":"ERROR","msg":"` + UndeclaredCodeMsg + `","op":"Ack","code":"NOT_A_DLQ"}`,
		`{"time":"2026-12-02T06:00:03Z","level":"INFO","msg":"shutting down"}`,
	} {
		s.log.add(line)
	}
	got := s.undeclared()
	if n := strings.Count(got, "\n") + 1; n != 2 || !strings.Contains(got, "QUEUE_EXISTS") || !strings.Contains(got, "NOT_A_DLQ") {
		t.Fatalf("undeclared() = %q; want the two lines of undeclared codes", got)
	}
	s = &Server{log: NewLog(10)}
	s.log.add(`level=INFO msg="fila-server listening"`)
	if got := s.undeclared(); got != "" {
		t.Fatalf("undeclared() = %q on a clean log; want nothing", got)
	}
}

// TestListenAddrFindsBothFormats: the address fila-server listens on is
// read from its line in the text and the JSON log formats.
func TestListenAddrFindsBothFormats(t *testing.T) {
	for line, want := range map[string]string{
		`time=2026-12-02T06:00:00Z level=INFO msg="fila-server listening" addr=127.0.0.1:5555 node_id=a`:                     "127.0.0.1:5555",
		`{"time":"2026-12-02T06:00:00Z","level":"INFO","msg":"fila-server listening","addr":"127.0.0.1:5556","node_id":"a"}`: "127.0.0.1:5556",
		`{"time":"2026-12-02T06:00:00Z","level":"INFO","msg":"shutting down"}`:                                               "",
	} {
		if got := listenAddr(line); got != want {
			t.Errorf("listenAddr(%s) = %q; want %q", line, got, want)
		}
	}
}
