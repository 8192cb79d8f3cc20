package auth

import (
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
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A testCA issues certificates for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

var serial int64

func newKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func template(cn string) *x509.Certificate {
	serial++
	return &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
	}
}

func newCA(t *testing.T, name string) *testCA {
	t.Helper()
	key := newKey(t)
	tmpl := template(name)
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue returns a PEM certificate and PEM key for a server (with
// 127.0.0.1 and localhost) or a client.
func (ca *testCA) issue(t *testing.T, cn string, server bool) (certPEM, keyPEM []byte) {
	t.Helper()
	key := newKey(t)
	tmpl := template(cn)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.DNSNames = []string{"localhost"}
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
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
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

func write(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// handshake runs a TLS handshake between a server with cfg and a client
// with ccfg over loopback TCP, then one byte each way, and returns the
// client's error and the server's. (A TLS 1.3 server checks the client
// certificate after the client's Handshake has returned; the verdict reaches
// the client on its next read.)
func handshake(t *testing.T, cfg, ccfg *tls.Config) (clientErr, serverErr error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// The deadline only keeps a broken test from hanging; nothing here
	// depends on timing.
	deadline := time.Now().Add(time.Minute)
	done := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			done <- err
			return
		}
		defer conn.Close()
		conn.SetDeadline(deadline)
		srv := tls.Server(conn, cfg)
		if err := srv.Handshake(); err != nil {
			done <- err
			return
		}
		b := make([]byte, 1)
		if _, err := srv.Read(b); err != nil {
			done <- err
			return
		}
		_, err = srv.Write(b)
		done <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	conn.SetDeadline(deadline)
	cli := tls.Client(conn, ccfg)
	clientErr = cli.Handshake()
	if clientErr == nil {
		_, clientErr = cli.Write([]byte{1})
	}
	if clientErr == nil {
		_, clientErr = cli.Read(make([]byte, 1))
	}
	conn.Close() // ends a server still waiting for a client that gave up
	return clientErr, <-done
}

func TestServerTLSConfig(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "fila test CA")
	other := newCA(t, "other CA")
	srvCert, srvKey := ca.issue(t, "fila-server", true)
	cliCert, cliKey := ca.issue(t, "client", false)
	badCert, badKey := other.issue(t, "stranger", false)

	certFile := write(t, dir, "server.crt", srvCert)
	keyFile := write(t, dir, "server.key", srvKey)
	caFile := write(t, dir, "clients.pem", ca.pem)

	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.pem)
	clientWith := func(certPEM, keyPEM []byte) *tls.Config {
		c := &tls.Config{RootCAs: roots, ServerName: "localhost"}
		if certPEM != nil {
			pair, err := tls.X509KeyPair(certPEM, keyPEM)
			if err != nil {
				t.Fatal(err)
			}
			c.Certificates = []tls.Certificate{pair}
		}
		return c
	}

	t.Run("without client CA", func(t *testing.T) {
		cfg, err := ServerTLSConfig(certFile, keyFile, "")
		if err != nil {
			t.Fatalf("ServerTLSConfig() = %v", err)
		}
		if cfg.MinVersion != tls.VersionTLS12 || cfg.ClientAuth != tls.NoClientCert || cfg.ClientCAs != nil {
			t.Errorf("config: MinVersion %x ClientAuth %v; want TLS 1.2 and no client certificate", cfg.MinVersion, cfg.ClientAuth)
		}
		if cerr, serr := handshake(t, cfg, clientWith(nil, nil)); cerr != nil || serr != nil {
			t.Errorf("handshake without a client certificate = %v / %v; want success", cerr, serr)
		}
		old := clientWith(nil, nil)
		old.MaxVersion = tls.VersionTLS11
		if cerr, _ := handshake(t, cfg, old); cerr == nil {
			t.Errorf("handshake at TLS 1.1 succeeded; want it refused")
		}
	})

	t.Run("with client CA", func(t *testing.T) {
		cfg, err := ServerTLSConfig(certFile, keyFile, caFile)
		if err != nil {
			t.Fatalf("ServerTLSConfig() = %v", err)
		}
		if cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil {
			t.Errorf("ClientAuth = %v; want RequireAndVerifyClientCert with a pool", cfg.ClientAuth)
		}
		if cerr, serr := handshake(t, cfg, clientWith(cliCert, cliKey)); cerr != nil || serr != nil {
			t.Errorf("handshake with a certificate from the CA = %v / %v; want success", cerr, serr)
		}
		if _, serr := handshake(t, cfg, clientWith(nil, nil)); serr == nil {
			t.Errorf("handshake without a client certificate succeeded; want it refused")
		}
		if _, serr := handshake(t, cfg, clientWith(badCert, badKey)); serr == nil {
			t.Errorf("handshake with a certificate from another CA succeeded; want it refused")
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, otherKey := ca.issue(t, "x", true)
		mismatched := write(t, dir, "other.key", otherKey)
		noPEM := write(t, dir, "empty.pem", []byte("not a certificate\n"))
		missing := filepath.Join(dir, "missing.pem")
		tests := []struct {
			name               string
			cert, key, ca, say string
		}{
			{"no cert", "", keyFile, "", "cert_file and key_file"},
			{"no key", certFile, "", "", "cert_file and key_file"},
			{"missing cert", missing, keyFile, "", missing},
			{"mismatched key", certFile, mismatched, "", mismatched},
			{"missing CA", certFile, keyFile, missing, missing},
			{"CA without PEM", certFile, keyFile, noPEM, noPEM},
		}
		for _, tt := range tests {
			cfg, err := ServerTLSConfig(tt.cert, tt.key, tt.ca)
			if err == nil || !strings.Contains(err.Error(), tt.say) {
				t.Errorf("%s: ServerTLSConfig() = %v, %v; want an error naming %q", tt.name, cfg, err, tt.say)
				continue
			}
			if strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("%s: error shows key material: %v", tt.name, err)
			}
		}
	})
}
