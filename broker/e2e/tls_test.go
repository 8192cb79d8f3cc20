package e2e

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// testCA is a certificate authority made inside the test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a leaf certificate and key (PEM) for a server (with
// 127.0.0.1 and localhost) or a client.
func (ca *testCA) issue(t *testing.T, name string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
		tmpl.DNSNames = []string{"localhost"}
	} else {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func writeFile(t *testing.T, dir, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func pool(ca *testCA) *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

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
	ca, other := newCA(t, "fila test CA"), newCA(t, "another CA")
	scert, skey := ca.issue(t, "fila-server", true)
	srv := filatest.Start(t, filatest.WithEnv(
		"FILA_TLS_CERT_FILE="+writeFile(t, dir, "server.pem", scert),
		"FILA_TLS_KEY_FILE="+writeFile(t, dir, "server.key", skey),
	))
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: pool(ca)}); err != nil {
		t.Errorf("client trusting the server's CA: %v", err)
	}
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: pool(other)}); err == nil {
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
	ca, other := newCA(t, "fila test CA"), newCA(t, "another CA")
	scert, skey := ca.issue(t, "fila-server", true)
	srv := filatest.Start(t, filatest.WithEnv(
		"FILA_TLS_CERT_FILE="+writeFile(t, dir, "server.pem", scert),
		"FILA_TLS_KEY_FILE="+writeFile(t, dir, "server.key", skey),
		"FILA_TLS_CLIENT_CA_FILE="+writeFile(t, dir, "clients.pem", ca.pem),
	))
	good, goodKey := ca.issue(t, "worker", false)
	bad, badKey := other.issue(t, "intruder", false)
	cert := func(c, k []byte) []tls.Certificate {
		pair, err := tls.X509KeyPair(c, k)
		if err != nil {
			t.Fatal(err)
		}
		return []tls.Certificate{pair}
	}
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: pool(ca), Certificates: cert(good, goodKey)}); err != nil {
		t.Errorf("client with a certificate from the client CA: %v", err)
	}
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: pool(ca)}); err == nil {
		t.Errorf("client without a certificate was served under mTLS")
	}
	if err := dialTLS(srv.Addr, &tls.Config{RootCAs: pool(ca), Certificates: cert(bad, badKey)}); err == nil {
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
	ca := newCA(t, "fila test CA")
	scert, skey := ca.issue(t, "fila-server", true)
	srv := filatest.Start(t, filatest.WithEnv(
		"FILA_TLS_CERT_FILE="+writeFile(t, dir, "server.pem", scert),
		"FILA_TLS_KEY_FILE="+writeFile(t, dir, "server.key", skey),
		"FILA_TLS_CLIENT_CA_FILE="+writeFile(t, dir, "clients.pem", ca.pem),
	))
	ccert, ckey := ca.issue(t, "operator", false)
	caFile := writeFile(t, dir, "ca.pem", ca.pem)
	certFile := writeFile(t, dir, "client.pem", ccert)
	keyFile := writeFile(t, dir, "client.key", ckey)
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
