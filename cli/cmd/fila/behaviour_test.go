package main

import (
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
)

// TestInterruptWithBrokerGone: `fila consume` waiting for deliveries from
// a broker that went away ends soon after an interrupt, instead of waiting
// out --timeout (30s) to unsubscribe from a broker that is not coming
// back; a second interrupt ends it at once.
func TestInterruptWithBrokerGone(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	c.ok("queue", "create", "jobs")

	for _, signals := range []int{1, 2} {
		cmd := exec.Command(binary(t), "consume", "jobs")
		cmd.Env = append(os.Environ(), "FILA_ADDR="+srv.Addr, "FILA_API_KEY=", "FILA_OUTPUT=")
		var errb strings.Builder
		cmd.Stderr = &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		// Subscribed once the queue shows it.
		for deadline := time.Now().Add(time.Minute); !strings.Contains(c.ok("queue", "inspect", "jobs", "-o", "json"), `"subscriptions": 1`); {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				t.Fatal("fila consume never subscribed")
			}
			time.Sleep(20 * time.Millisecond)
		}
		srv.Kill()
		for range signals {
			cmd.Process.Signal(syscall.SIGINT)
			time.Sleep(100 * time.Millisecond)
		}
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("%d interrupt(s) with the broker gone: fila consume still running after 20s (stderr: %s)", signals, errb.String())
		}
		srv.Restart(t)
	}
}

// TestEnqueueStdinNamesRejectedLines: of the lines of `fila enqueue -`,
// a rejected one is named by its number, with one "fila:" prefix, and the
// others are enqueued.
func TestEnqueueStdinNamesRejectedLines(t *testing.T) {
	srv := filatest.Start(t, filatest.WithEnv("FILA_SERVER_MAX_MESSAGE_SIZE=64KB"))
	c := newCLI(t, srv)
	c.ok("queue", "create", "jobs")
	r := c.runIn("ok\n"+strings.Repeat("x", 100<<10)+"\nok\n", "enqueue", "jobs", "-")
	if ids := strings.Fields(r.stdout); r.code != 1 || len(ids) != 2 || !strings.HasPrefix(r.stderr, "fila: line 2: ") || strings.Contains(r.stderr, "fila: fila:") {
		t.Errorf("enqueue - with line 2 too large = exit %d, %q, %q; want 1, two IDs, and line 2 named once", r.code, r.stdout, r.stderr)
	}
}
