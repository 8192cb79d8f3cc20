package auth

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
)

// ServerTLSConfig returns the listener's TLS configuration from the [tls]
// section's files: the server's PEM certificate chain and private key, and,
// when clientCAFile is not empty, a PEM bundle of the CAs that sign client
// certificates. The configuration accepts TLS 1.2 and later. With a client
// CA file, every client must present a certificate that chains to one of its
// CAs (tls.RequireAndVerifyClientCert), or the handshake fails: mTLS. The
// client certificate authenticates the connection's transport only; with
// [auth] enabled the handshake still needs an API key.
//
// It returns an error naming the file when certFile or keyFile is empty, a
// file cannot be read, the certificate and key do not parse or do not match,
// or clientCAFile holds no PEM certificate. Errors never include key
// material.
func ServerTLSConfig(certFile, keyFile, clientCAFile string) (*tls.Config, error) {
	if certFile == "" || keyFile == "" {
		return nil, errors.New("TLS: cert_file and key_file must both be set")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS: load certificate %s and key %s: %w", certFile, keyFile, err)
	}
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
	}
	if clientCAFile != "" {
		pem, err := os.ReadFile(clientCAFile)
		if err != nil {
			return nil, fmt.Errorf("TLS: client CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS: client CA file %s: no PEM certificate", clientCAFile)
		}
		cfg.ClientCAs = pool
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}
