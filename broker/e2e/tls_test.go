package e2e

import (
	"context"
	"crypto/tls"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

func dialTLS(addr string, cfg *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := fila.Connect(ctx, addr, fila.WithTLS(cfg))
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Admin().ListQueues(ctx)
	return err
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := filatest.NewCA(t, "fila test CA"), filatest.NewCA(t, "another CA")
	scert, skey := ca.Issue(t, dir, "server", "localhost", "127.0.0.1")
	srv := filatest.Start(t, filatest.WithEnv("FILA_TLS_CERT_FILE="+scert, "FILA_TLS_KEY_FILE="+skey))
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: ca.Pool()}); err != nil {
		t.Errorf("client trusting the server's CA: %v", err)
	}
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: other.Pool()}); err == nil {
		t.Errorf("client trusting another CA connected")
	}
	// A plain-TCP client cannot talk to a TLS listener.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c, err := fila.Connect(ctx, srv.Addr, fila.WithDialTimeout(3*time.Second)); err == nil {
		c.Close()
		t.Errorf("plain TCP client connected to a TLS listener")
	}
}

func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, other := filatest.NewCA(t, "fila test CA"), filatest.NewCA(t, "another CA")
	scert, skey := ca.Issue(t, dir, "server", "localhost", "127.0.0.1")
	srv := filatest.Start(t, filatest.WithEnv(
		"FILA_TLS_CERT_FILE="+scert,
		"FILA_TLS_KEY_FILE="+skey,
		"FILA_TLS_CLIENT_CA_FILE="+ca.WriteFile(t, dir, "clients.pem"),
	))
	good, goodKey := ca.Issue(t, dir, "worker")
	bad, badKey := other.Issue(t, dir, "intruder")
	cert := func(c, k string) []tls.Certificate {
		pair, err := tls.LoadX509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{pair}
	}
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: ca.Pool(), Certificates: cert(good, goodKey)}); err != nil {
		t.Errorf("client with a certificate from the client CA: %v", err)
	}
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: ca.Pool()}); err == nil {
		t.Errorf("client without a certificate was served under mTLS")
	}
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: ca.Pool(), Certificates: cert(bad, badKey)}); err == nil {
		t.Errorf("client with a certificate from another CA was served under mTLS")
	}
}

// cliBinary returns the fila CLI: $FILA_TEST_CLI_BIN, or one built now.
func cliBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FILA_TEST_CLI_BIN"); p != "" {
		return p
	}
	p := filepath.Join(t.TempDir(), "fila")
	if out, err := exec.Command("go", "build", "-o", p, "github.com/fila-mq/fila/cli/cmd/fila").CombinedOutput(); err != nil {
		t.Fatalf("build fila: %v\n%s", err, out)
	}
	return p
}

// TestCLIOverMutualTLS runs the fila CLI against a broker that requires
// mTLS: with the CA, a client certificate and the server name it works;
// without the client certificate it fails.
func TestCLIOverMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca := filatest.NewCA(t, "fila test CA")
	scert, skey := ca.Issue(t, dir, "server", "localhost", "127.0.0.1")
	caFile := ca.WriteFile(t, dir, "ca.pem")
	srv := filatest.Start(t, filatest.WithEnv(
		"FILA_TLS_CERT_FILE="+scert,
		"FILA_TLS_KEY_FILE="+skey,
		"FILA_TLS_CLIENT_CA_FILE="+caFile,
	))
	certFile, keyFile := ca.Issue(t, dir, "operator")
	fila := cliBinary(t)
	run := func(args ...string) (string, error) {
		cmd := exec.Command(fila, append([]string{"--addr", srv.Addr}, args...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	tlsArgs := []string{"--tls-ca", caFile, "--tls-cert", certFile, "--tls-key", keyFile, "--tls-server-name", "localhost"}
	if out, err := run(append(tlsArgs, "queue", "create", "secure")...); err != nil {
		t.Fatalf("fila queue create over mTLS: %v\n%s", err, out)
	}
	if out, err := run(append(tlsArgs, "enqueue", "secure", "hello")...); err != nil {
		t.Fatalf("fila enqueue over mTLS: %v\n%s", err, out)
	}
	out, err := run(append(tlsArgs, "consume", "secure", "--count", "1")...)
	if err != nil || !strings.Contains(out, "hello") {
		t.Fatalf("fila consume over mTLS = %q, %v; want hello", out, err)
	}
	if out, err := run("--tls-ca", caFile, "--tls-server-name", "localhost", "queue", "list"); err == nil {
		t.Fatalf("fila without a client certificate succeeded under mTLS:\n%s", out)
	}
}
