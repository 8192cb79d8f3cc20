package conformance

import (
	"context"
	"errors"
	"os/exec"
	"path/filepath"
	"testing"
)

// pythonDriver is the Python client's conformance driver, the worked
// example of docs/conformance.md; the tests of the exec harness skip
// without python3.
func pythonDriver(t *testing.T, mode string) string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	src, err := filepath.Abs("../clients/python/src")
	if err != nil {
		t.Fatal(err)
	}
	return "env PYTHONPATH=" + src + " " + py + " -m fila.conformance " + mode
}

// TestExecCore replays transcripts against a foreign core through the
// JSON-lines driver protocol, and skips a cluster conversation.
func TestExecCore(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a driver process per transcript")
	}
	driver := pythonDriver(t, "core")
	byName := map[string]*Transcript{}
	for _, tr := range corpus(t) {
		byName[tr.Name] = tr
	}
	for _, name := range []string{"hotpath/enqueue_consume", "credit/lease_expiry_returns_credit", "robustness/truncated_server_frame"} {
		tr := byName[name]
		if tr == nil {
			t.Fatalf("no transcript %s", name)
		}
		if _, err := ReplayCore(tr, CoreOptions{Exec: driver}); err != nil {
			t.Errorf("ReplayCore(%s, exec) = %v", name, err)
		}
	}
	if _, err := ReplayCore(byName["cluster/redirect"], CoreOptions{Exec: driver}); !errors.Is(err, ErrSkipped) {
		t.Errorf("ReplayCore(cluster/redirect, exec) = %v; want ErrSkipped", err)
	}
	// A driver that exits at once fails the replay, not the runner.
	if _, err := ReplayCore(byName["hotpath/enqueue_consume"], CoreOptions{Exec: "true"}); err == nil {
		t.Error("ReplayCore with a silent driver passed")
	}
}

// TestExecClient runs a client program against the fake broker: a scenario
// it implements passes, one it does not (exit status 77) is skipped.
func TestExecClient(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a client process")
	}
	driver := pythonDriver(t, "client")
	byName := map[string]*Transcript{}
	for _, tr := range corpus(t) {
		byName[tr.Name] = tr
	}
	ctx := context.Background()
	if err := ExecClient(ctx, byName["hotpath/enqueue_consume"], driver, ClientOptions{}); err != nil {
		t.Errorf("ExecClient(hotpath/enqueue_consume) = %v", err)
	}
	if err := ExecClient(ctx, byName["session/connect_ping_close"], "exit 77 #", ClientOptions{}); !errors.Is(err, ErrSkipped) {
		t.Errorf("ExecClient with a program that exits 77 = %v; want ErrSkipped", err)
	}
	var f *Failure
	if err := ExecClient(ctx, byName["session/connect_ping_close"], "exit 3 #", ClientOptions{}); !errors.As(err, &f) {
		t.Errorf("ExecClient with a program that exits 3 = %v; want a *Failure", err)
	}
}
