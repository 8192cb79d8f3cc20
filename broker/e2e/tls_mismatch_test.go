package e2e

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

// These tests connect clients that disagree with the broker about TLS,
// and check that each side says what is wrong.

// waitLog waits until the server's log has a line containing every one
// of parts, and returns it; the test's context bounds the wait.
func waitLog(t *testing.T, ctx context.Context, srv *filatest.Server, parts ...string) string {
	t.Helper()
	for {
		for _, line := range strings.Split(srv.Log(), "\n") {
			found := true
			for _, p := range parts {
				found = found && strings.Contains(line, p)
			}
			if found {
				return line
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no log line with %q", parts)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// runCLI runs the fila CLI and returns its stderr and exit code.
func runCLI(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(cliBinary(t), args...)
	cmd.Env = append(cmd.Environ(), "FILA_API_KEY=", "FILA_OUTPUT=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return stderr.String(), cmd.ProcessState.ExitCode()
}

func TestPlaintextClientOnTLSPort(t *testing.T) {
	dir := t.TempDir()
	ca := filatest.NewCA(t, "fila test CA")
	scert, skey := ca.Issue(t, dir, "server", "localhost", "127.0.0.1")
	srv := filatest.Start(t, filatest.WithEnv("FILA_TLS_CERT_FILE="+scert, "FILA_TLS_KEY_FILE="+skey))
	ctx := ctxT(t, time.Minute)

	// The broker answers a plaintext Handshake with a plaintext Error.
	rc := dialRaw(t, srv.Addr, false)
	rc.send(1, &wire.Handshake{MinVersion: 1, MaxVersion: 1, ClientName: "raw"})
	h, f := rc.recv()
	if ef, ok := f.(*wire.ErrorFrame); !ok || h.RequestID != 0 || ef.Code != wire.CodeProtocolViolation || ef.Message != "this port requires TLS; connect with TLS" {
		t.Fatalf("plaintext Handshake on the TLS port answered by %v on %d %+v", h.Opcode, h.RequestID, f)
	}
	if _, _, err := rc.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the Error: %v; want the connection closed", err)
	}
	waitLog(t, ctx, srv, "msg=audit", "event=tls.handshake_failed", `reason="plaintext client on the TLS port"`, "remote=127.0.0.1:")

	// The SDK reports the broker's message.
	_, err := fila.Connect(ctx, srv.Addr)
	t.Logf("plaintext Connect to the TLS port: %v", err)
	if !errors.Is(err, fila.ErrProtocolViolation) || !strings.Contains(err.Error(), "this port requires TLS; connect with TLS") {
		t.Errorf("plaintext Connect to the TLS port = %v; want PROTOCOL_VIOLATION saying TLS is required", err)
	}
	// So does the CLI.
	if out, code := runCLI(t, "--addr", srv.Addr, "queue", "list"); code != 1 || !strings.Contains(out, "this port requires TLS; connect with TLS") {
		t.Errorf("fila queue list without --tls: exit %d, %q; want exit 1 saying TLS is required", code, out)
	}
	// The server still serves TLS clients.
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: ca.Pool()}); err != nil {
		t.Errorf("TLS client after the mismatches: %v", err)
	}
	// The certificate expires within 30 days (filatest issues day-long
	// ones): startup warned.
	waitLog(t, ctx, srv, "level=WARN", "TLS certificate expires soon", "file="+scert)
}

func TestTLSClientOnPlaintextPort(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, time.Minute)
	const want = "the broker does not speak TLS on this port (is TLS enabled on the broker?)"

	_, err := fila.Connect(ctx, srv.Addr, fila.WithTLS(&tls.Config{InsecureSkipVerify: true}))
	t.Logf("TLS Connect to the plaintext port: %v", err)
	var rhe tls.RecordHeaderError
	if err == nil || !strings.Contains(err.Error(), "fila: connect "+srv.Addr+": "+want) || !errors.As(err, &rhe) {
		t.Errorf("TLS Connect to the plaintext port = %v; want %q wrapping the TLS library's error", err, want)
	}
	waitLog(t, ctx, srv, "msg=audit", "event=tls.handshake_failed", `reason="TLS client on the plaintext port"`)
	if out, code := runCLI(t, "--addr", srv.Addr, "--tls", "queue", "list"); code != 1 || !strings.Contains(out, want) {
		t.Errorf("fila --tls queue list: exit %d, %q; want exit 1 and %q", code, out, want)
	}
	// The server still serves plaintext clients.
	c, err := fila.Connect(ctx, srv.Addr)
	if err != nil {
		t.Fatalf("plaintext client after the mismatches: %v", err)
	}
	c.Close()
}

// TestPlaintextClientOnTLSProxy plays a TLS endpoint that answers
// plaintext with a TLS alert, as TLS-terminating proxies do: the SDK says
// TLS is required instead of reporting an oversize frame.
func TestPlaintextClientOnTLSProxy(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			// A fatal protocol_version alert in a TLS 1.2 record.
			nc.Write([]byte{0x15, 0x03, 0x03, 0x00, 0x02, 0x02, 0x46})
			nc.Close()
		}
	}()
	ctx := ctxT(t, time.Minute)
	_, err = fila.Connect(ctx, ln.Addr().String())
	t.Logf("plaintext Connect to a TLS endpoint: %v", err)
	const want = "the broker requires TLS on this port; connect with TLS"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("plaintext Connect to a TLS endpoint = %v; want %q", err, want)
	}
}
