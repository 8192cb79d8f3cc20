package main

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
)

// TestConsumeBrokerKilled: `fila consume --wait 2s --timeout 8s` whose
// broker is killed does not take the silence for an empty queue: it exits
// 1 with one line on stderr saying the connection was lost, instead of
// printing nothing and exiting 0. The broker dies while consume waits on
// an empty queue, or just after a delivery, while its ack is under way.
func TestConsumeBrokerKilled(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
	}{
		// --no-ack: consume waits for the next delivery as soon as it has
		// printed this one.
		{"waiting", []string{"--no-ack"}},
		// The ack of the delivery is under way, or done, when the broker
		// dies.
		{"acking", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := filatest.Start(t)
			c := newCLI(t, srv)
			c.ok("queue", "create", "jobs")
			c.ok("enqueue", "jobs", "first")
			run := startConsume(t, srv, append([]string{"consume", "jobs", "--wait", "2s", "--timeout", "8s"}, tc.args...)...)
			select {
			case line, ok := <-run.lines:
				if !ok || !strings.Contains(line, "first") {
					run.kill()
					t.Fatalf("fila consume printed %q (closed %v); want the delivery of first (stderr: %s)", line, !ok, run.stderr.String())
				}
			case <-time.After(time.Minute):
				run.kill()
				t.Fatalf("fila consume printed no delivery in a minute (stderr: %s)", run.stderr.String())
			}
			srv.Kill()
			run.wantLost(t)
		})
	}
}

// consumeRun is a fila process whose stdout is read line by line.
type consumeRun struct {
	cmd    *exec.Cmd
	lines  chan string // stdout, closed at its end
	stderr *strings.Builder
	done   chan error
}

func startConsume(t *testing.T, srv *filatest.Server, args ...string) *consumeRun {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = append(os.Environ(), "FILA_ADDR="+srv.Addr, "FILA_API_KEY=", "FILA_OUTPUT=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &consumeRun{cmd: cmd, lines: make(chan string, 1024), stderr: &strings.Builder{}, done: make(chan error, 1)}
	cmd.Stderr = r.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			r.lines <- sc.Text()
		}
		close(r.lines)
		io.Copy(io.Discard, stdout)
		r.done <- cmd.Wait()
	}()
	return r
}

func (r *consumeRun) kill() {
	r.cmd.Process.Kill()
	<-r.done
}

// wantLost waits for the process, whose broker was just killed, to end,
// and checks that it exited 1 with one line on stderr, "fila: consume
// jobs: ...connection lost...", and printed nothing more.
func (r *consumeRun) wantLost(t *testing.T) {
	t.Helper()
	killed := time.Now()
	var out []string
	for line := range r.lines {
		out = append(out, line)
	}
	select {
	case <-r.done:
	case <-time.After(2 * time.Minute):
		r.kill()
		t.Fatalf("fila consume with its broker killed: still running after 2 minutes (stderr: %s)", r.stderr.String())
	}
	msg := r.stderr.String()
	if code := r.cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("fila consume with its broker killed: exit %d, stderr %q; want exit 1", code, msg)
	}
	if len(out) != 0 {
		t.Errorf("fila consume printed %q after the kill; want nothing more", out)
	}
	if !strings.HasPrefix(msg, "fila: consume jobs: ") || !strings.Contains(msg, "connection lost") || strings.Count(msg, "\n") != 1 {
		t.Fatalf("fila consume with its broker killed: stderr %q; want one line \"fila: consume jobs: ... connection lost ...\"", msg)
	}
	t.Logf("exit 1 %v after the kill; stderr: %s", time.Since(killed).Round(time.Millisecond), msg)
}
