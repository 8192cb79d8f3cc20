package node

import (
	"fmt"
	"time"

	"github.com/fila-mq/fila/broker/internal/auth"
	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/rtconf"
	"github.com/fila-mq/fila/sdk/core/wire"
)

// Admin operations: the runtime config and the API keys. Each needs the
// admin permission (auth.Everything for the operation) and fails with an
// error wrapping fault.ErrForbidden or fault.ErrUnauthorized without it,
// and with fault.ErrNotSupported when the node has no such store.

type (
	// Permission is one entry of an API key's ACL.
	Permission = auth.Permission
	// KeyInfo describes an API key, without its secret.
	KeyInfo = auth.KeyInfo
)

func (n *Node) runtime(p Principal, op auth.Op) (*rtconf.Store, error) {
	if n.cfg.Runtime == nil {
		return nil, fmt.Errorf("runtime config: %w", fault.ErrNotSupported)
	}
	if err := p.Authorize(op, auth.Everything); err != nil {
		return nil, err
	}
	return n.cfg.Runtime, nil
}

// SetConfig sets a runtime config key; the store checks the value
// (fault.ErrInvalidArgument).
func (n *Node) SetConfig(p Principal, key, value string) error {
	rc, err := n.runtime(p, auth.OpSetConfig)
	if err != nil {
		return err
	}
	return rc.Set(key, value)
}

// GetConfig reads a runtime config key.
func (n *Node) GetConfig(p Principal, key string) (value string, found bool, err error) {
	rc, err := n.runtime(p, auth.OpGetConfig)
	if err != nil {
		return "", false, err
	}
	value, found = rc.Get(key)
	return value, found, nil
}

// ListConfig lists the runtime config entries under prefix.
func (n *Node) ListConfig(p Principal, prefix string) ([]wire.ConfigEntry, error) {
	rc, err := n.runtime(p, auth.OpListConfig)
	if err != nil {
		return nil, err
	}
	es := rc.List(prefix)
	out := make([]wire.ConfigEntry, len(es))
	for i, e := range es {
		out[i] = wire.ConfigEntry{Key: e.Key, Value: e.Value}
	}
	return out, nil
}

// DeleteConfig deletes a runtime config key and reports whether it
// existed.
func (n *Node) DeleteConfig(p Principal, key string) (bool, error) {
	rc, err := n.runtime(p, auth.OpDeleteConfig)
	if err != nil {
		return false, err
	}
	return rc.Delete(key)
}

func (n *Node) keys(p Principal, op auth.Op) (*auth.Store, error) {
	if n.cfg.Keys == nil {
		return nil, fmt.Errorf("api keys: auth is not configured: %w", fault.ErrNotSupported)
	}
	if err := p.Authorize(op, auth.Everything); err != nil {
		return nil, err
	}
	return n.cfg.Keys, nil
}

// CreateKey mints an API key with an ACL and returns its ID and secret.
func (n *Node) CreateKey(p Principal, name string, perms []Permission) (keyID, secret string, err error) {
	ks, err := n.keys(p, auth.OpCreateAPIKey)
	if err != nil {
		return "", "", err
	}
	return ks.Create(name, perms)
}

// RevokeKey revokes an API key. The key store's watchers (the server's
// open connections) hear of it before it returns.
func (n *Node) RevokeKey(p Principal, keyID string) error {
	ks, err := n.keys(p, auth.OpRevokeAPIKey)
	if err != nil {
		return err
	}
	return ks.Revoke(keyID)
}

// ListKeys lists the API keys.
func (n *Node) ListKeys(p Principal) ([]KeyInfo, error) {
	ks, err := n.keys(p, auth.OpListAPIKeys)
	if err != nil {
		return nil, err
	}
	return ks.List(), nil
}

// SetACL replaces an API key's ACL. The key store's watchers hear of it
// before it returns.
func (n *Node) SetACL(p Principal, keyID string, perms []Permission) error {
	ks, err := n.keys(p, auth.OpSetACL)
	if err != nil {
		return err
	}
	return ks.SetACL(keyID, perms)
}

// GetACL reads an API key's ACL.
func (n *Node) GetACL(p Principal, keyID string) ([]Permission, error) {
	ks, err := n.keys(p, auth.OpGetACL)
	if err != nil {
		return nil, err
	}
	return ks.GetACL(keyID)
}

// msDur converts the protocol's milliseconds to a duration, saturating.
func msDur(ms uint64) time.Duration {
	if ms > uint64(1<<63-1)/uint64(time.Millisecond) {
		return 1<<63 - 1
	}
	return time.Duration(ms) * time.Millisecond
}
