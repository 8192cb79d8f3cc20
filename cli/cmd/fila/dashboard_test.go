package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
)

// TestDashboardCommand runs "fila dashboard" on a free port, reads the
// URL it prints, fetches its pages, and stops it with an interrupt.
func TestDashboardCommand(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	c.ok("queue", "create", "orders")
	c.ok("enqueue", "orders", "hello", "--fairness-key", "acme")

	cmd := exec.Command(binary(t), "dashboard", "--listen", "127.0.0.1:0", "--interval", "200ms", "-o", "json")
	cmd.Env = append(os.Environ(), "FILA_ADDR="+srv.Addr, "FILA_API_KEY=", "FILA_OUTPUT=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	})
	lines := make(chan string, 1)
	go func() {
		// The first JSON object is the startup line.
		dec := json.NewDecoder(bufio.NewReader(stdout))
		var v map[string]string
		if dec.Decode(&v) == nil {
			lines <- v["url"]
		}
		close(lines)
		io.Copy(io.Discard, stdout)
		exited <- cmd.Wait()
	}()
	var url string
	select {
	case url = <-lines:
	case <-time.After(2 * time.Minute):
		t.Fatalf("fila dashboard printed no URL in 2 minutes; stderr: %s", stderr.String())
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") {
		t.Fatalf("fila dashboard -o json: url %q; want http://127.0.0.1:PORT/; stderr: %s", url, stderr.String())
	}
	cl := &http.Client{Timeout: time.Minute}
	for path, want := range map[string]string{
		"":                        `data-queue="orders"`,
		"queue?name=orders":       `data-key="acme"`,
		"dlq?name=orders.dlq":     "Browsing leases and releases",
		"config":                  "Runtime config",
		"static/dashboard.js":     "data-confirm",
		"api/queue?name=orders":   `"parts"`,
		"dlq?name=orders.dlq&n=5": "Redrive",
	} {
		resp, err := cl.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(b), want) {
			t.Errorf("GET /%s: %d; want 200 with %q:\n%s", path, resp.StatusCode, want, b)
		}
	}

	// An interrupt stops it cleanly.
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		stopped = true
		if err != nil {
			t.Errorf("fila dashboard after SIGINT: %v; want exit 0; stderr: %s", err, stderr.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("fila dashboard did not stop within a minute of SIGINT")
	}
}

func TestDashboardUsage(t *testing.T) {
	c := &cli{t: t, addr: "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"dashboard", "--interval", "1ms"}, "--interval 1ms: want at least 100ms"},
		{[]string{"dashboard", "--history", "1"}, "--history 1: want 2 to 100000"},
		{[]string{"dashboard", "--top", "0"}, "--top 0: want 1 to 1000"},
		{[]string{"dashboard", "--max-queues", "0"}, "--max-queues 0: want 1 or more"},
		{[]string{"dashboard", "extra"}, "accepts 0 arg(s)"},
	} {
		c.fails(2, tc.want, tc.args...)
	}
	if out := c.ok("dashboard", "--help"); !strings.Contains(out, "--listen") || !strings.Contains(out, "releases what it delivers") {
		t.Errorf("dashboard --help = %q; want the flags and what browsing does", out)
	}
}
