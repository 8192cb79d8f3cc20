package main

import (
	"log/slog"

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
	}
	return nil
}
