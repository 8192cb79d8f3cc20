package main

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/config"
	"github.com/fila-mq/fila/broker/internal/server"
)

// howToMintKeys says how to get a first API key, for the errors that
// refuse a start no client could authenticate to.
var howToMintKeys = fmt.Sprintf("set auth.bootstrap_apikey (or FILA_AUTH_BOOTSTRAP_APIKEY) to a secret of at least %d bytes, "+
	"start fila-server, mint a key with FILA_API_KEY=<that secret> fila auth create --name admin --perm 'admin:*', "+
	"then remove the bootstrap key and restart (docs/security.md)", auth.MinBootstrapLen)

// errNoKey refuses a single node with auth on, no API key stored and no
// bootstrap key.
var errNoKey = errors.New("auth is enabled, but no API key is stored and no bootstrap key is set, so no client could connect: " + howToMintKeys)

// errNoClusterKey refuses a cluster node with auth on, no bootstrap key
// and an empty data directory that does not join a running cluster.
var errNoClusterKey = errors.New("auth is enabled, but this node starts on an empty data directory without cluster.join and no bootstrap key is set: " +
	"if it founds a new cluster, no client could connect; " + howToMintKeys +
	"; a node that replaces a lost machine of a running cluster needs the bootstrap key for that start too")

// checkFirstStart refuses a first start with auth on and no bootstrap
// key, before anything listens and before the data directory is created:
// a data directory that is missing or empty holds no API key, so no
// client could authenticate. A node joining a running cluster
// (cluster.join) is let through: it gets the cluster's keys from the
// meta group. A data directory that holds data is checked by
// configureSecurity.
func checkFirstStart(cfg config.Config) error {
	if !cfg.Auth.Enabled || cfg.Auth.BootstrapAPIKey != "" || (cfg.Cluster.Enabled() && cfg.Cluster.Join) {
		return nil
	}
	entries, err := os.ReadDir(cfg.Storage.DataDir)
	if len(entries) > 0 || (err != nil && !errors.Is(err, fs.ErrNotExist)) {
		return nil // an unreadable directory fails as the store opens it
	}
	if cfg.Cluster.Enabled() {
		return errNoClusterKey
	}
	return errNoKey
}

// configureSecurity opens the API-key store and sets up TLS from the
// [auth] and [tls] sections. With auth on, a single node refuses to
// start if it holds no API key and has no bootstrap key. A cluster node
// does not: the meta group holds the cluster's keys, and its peers send
// them to a node that lacks them (checkFirstStart refuses a node that
// would found a cluster without them).
func configureSecurity(scfg *server.Config, cfg config.Config, kv storeKV, log *slog.Logger) error {
	keys, err := auth.Open(kv, string(cfg.Auth.BootstrapAPIKey), nil)
	if err != nil {
		return err
	}
	if cfg.Auth.Enabled && cfg.Auth.BootstrapAPIKey == "" && !cfg.Cluster.Enabled() && len(keys.List()) == 0 {
		return errNoKey
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
