package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"log/slog"
	"os"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/config"
	"github.com/fila-mq/fila/broker/internal/server"
)

// configureSecurity opens the API-key store and sets up TLS from the
// [auth] and [tls] sections.
func configureSecurity(scfg *server.Config, cfg config.Config, kv storeKV, log *slog.Logger) error {
	keys, err := auth.Open(kv, string(cfg.Auth.BootstrapAPIKey), nil)
	if err != nil {
		return err
	}
	scfg.Auth = keys
	scfg.RequireAuth = cfg.Auth.Enabled
	if cfg.Auth.Enabled && string(cfg.Auth.BootstrapAPIKey) != "" {
		log.Warn("a bootstrap API key is configured: mint real keys with it, then remove it from the configuration")
	}
	if cfg.TLS.CertFile != "" || cfg.TLS.KeyFile != "" || cfg.TLS.ClientCAFile != "" {
		tc, err := auth.ServerTLSConfig(cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLS.ClientCAFile)
		if err != nil {
			return err
		}
		scfg.TLS = tc
		now := time.Now()
		checkCertExpiry(log, cfg.TLS.CertFile, chain(tc.Certificates[0]), now)
		if f := cfg.TLS.ClientCAFile; f != "" {
			checkCertExpiry(log, f, pemCerts(f), now)
		}
	}
	return nil
}

// certExpiryWarning is how long before a certificate's expiry startup
// warns about it.
const certExpiryWarning = 30 * 24 * time.Hour

// checkCertExpiry logs, for each certificate read from file, an ERROR if
// it has expired or is not valid yet at now (clients that verify it fail
// their TLS handshake), or a WARN if it expires within certExpiryWarning.
// The broker serves either way: certificates are read at startup, so
// renewing one means replacing the file and restarting.
func checkCertExpiry(log *slog.Logger, file string, certs []*x509.Certificate, now time.Time) {
	for _, c := range certs {
		attrs := []any{"file", file, "subject", c.Subject.String(), "not_after", c.NotAfter.UTC().Format(time.RFC3339)}
		switch {
		case now.After(c.NotAfter):
			log.Error("TLS certificate has expired: clients will refuse it; renew it and restart", attrs...)
		case now.Before(c.NotBefore):
			log.Error("TLS certificate is not valid yet: clients will refuse it", append(attrs, "not_before", c.NotBefore.UTC().Format(time.RFC3339))...)
		case c.NotAfter.Sub(now) < certExpiryWarning:
			log.Warn("TLS certificate expires soon: renew it and restart", append(attrs, "days_left", int(c.NotAfter.Sub(now).Hours()/24))...)
		}
	}
}

// chain parses the certificates of a loaded key pair, leaf first.
func chain(kp tls.Certificate) []*x509.Certificate {
	var out []*x509.Certificate
	for _, der := range kp.Certificate {
		if c, err := x509.ParseCertificate(der); err == nil {
			out = append(out, c)
		}
	}
	return out
}

// pemCerts parses the certificates of a PEM file; what does not parse is
// skipped (ServerTLSConfig has already checked the file).
func pemCerts(file string) []*x509.Certificate {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil
	}
	var out []*x509.Certificate
	for {
		var blk *pem.Block
		blk, b = pem.Decode(b)
		if blk == nil {
			return out
		}
		if blk.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(blk.Bytes); err == nil {
			out = append(out, c)
		}
	}
}
