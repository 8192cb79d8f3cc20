package auth

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// A ChangeOp is what a Change does.
type ChangeOp uint8

// The changes to the stored keys.
const (
	// ChangeCreate stores a new key.
	ChangeCreate ChangeOp = 1
	// ChangeSetACL replaces a key's permissions.
	ChangeSetACL ChangeOp = 2
	// ChangeRevoke deletes a key.
	ChangeRevoke ChangeOp = 3
)

// A Change is one change to the stored keys, as data: proposing a change
// (Create, SetACL, Revoke) is apart from applying it (Apply), which is the
// one path that writes the keys and tells the OnChange listeners. A Change
// holds everything its application needs, the new key's ID, hash and
// creation time included, so Apply generates nothing and reads no clock,
// and applying the same changes in the same order to two stores gives the
// same keys. In a cluster, a change is an entry of the meta group's log,
// applied on every node.
type Change struct {
	Op    ChangeOp
	KeyID string
	// Name, Created and Hash are the new key's (ChangeCreate).
	Name    string
	Created time.Time // UTC, millisecond precision
	Hash    [sha256.Size]byte
	// Perms is the key's ACL (ChangeCreate, ChangeSetACL).
	Perms []Permission
}

// changeVersion is the first byte of an encoded Change.
const changeVersion = 1

// AppendTo appends the encoding of c to b:
//
//	+-----------+------+--------+--------+-------------------------------+
//	| version 1 | op 1 | idlen 2| key ID | body                          |
//	+-----------+------+--------+--------+-------------------------------+
//
// The body is the key's stored record (record.go) for ChangeCreate, its
// permissions in the record's layout for ChangeSetACL, and empty for
// ChangeRevoke. Integers are big-endian.
func (c *Change) AppendTo(b []byte) []byte {
	b = append(b, changeVersion, byte(c.Op))
	b = binary.BigEndian.AppendUint16(b, uint16(len(c.KeyID)))
	b = append(b, c.KeyID...)
	switch c.Op {
	case ChangeCreate:
		b = append(b, encodeRecord(&apiKey{name: c.Name, created: c.Created, hash: c.Hash, perms: c.Perms})...)
	case ChangeSetACL:
		b = appendPerms(b, c.Perms)
	}
	return b
}

// DecodeChange decodes what AppendTo wrote. It fails, without
// allocating more than b's size, on any other version or op, an invalid key
// ID, short or trailing bytes, and names or permissions Create and SetACL
// would refuse.
func DecodeChange(b []byte) (Change, error) {
	if len(b) < 2 {
		return Change{}, fmt.Errorf("API key change: %w", errShort)
	}
	if b[0] != changeVersion {
		return Change{}, fmt.Errorf("API key change: version %d, want %d", b[0], changeVersion)
	}
	c := Change{Op: ChangeOp(b[1])}
	id, rest, err := readString(b[2:])
	if err != nil {
		return Change{}, fmt.Errorf("API key change: %w", err)
	}
	if !validID(id) {
		return Change{}, fmt.Errorf("API key change: key ID %q", id)
	}
	c.KeyID = id
	switch c.Op {
	case ChangeCreate:
		k, err := parseRecord(rest)
		if err != nil {
			return Change{}, fmt.Errorf("API key change: key %s: %w", id, err)
		}
		c.Name, c.Created, c.Hash, c.Perms = k.name, k.created, k.hash, k.perms
	case ChangeSetACL:
		if c.Perms, err = parsePerms(rest); err != nil {
			return Change{}, fmt.Errorf("API key change: key %s: %w", id, err)
		}
	case ChangeRevoke:
		if len(rest) != 0 {
			return Change{}, fmt.Errorf("API key change: %d trailing bytes", len(rest))
		}
	default:
		return Change{}, fmt.Errorf("API key change: op %d", c.Op)
	}
	return c, nil
}

// Apply applies c: it makes the change durable, then visible to checks,
// then calls the OnChange listeners with the key's ID, before it returns.
// It returns an error wrapping fault.ErrAPIKeyNotFound when c sets the ACL
// of, or revokes, a key that is not stored; fault.ErrInvalidArgument when
// c creates a key whose ID or secret hash is in use, or holds an invalid
// name, ID or ACL; or the KV's error, wrapped. A change that fails
// changes nothing.
func (s *Store) Apply(c Change) error {
	if err := s.apply(&c); err != nil {
		return err
	}
	s.changed(c.KeyID)
	return nil
}

func (s *Store) apply(c *Change) error {
	if !validID(c.KeyID) {
		return fmt.Errorf("key ID %q: %w: want %d hex digits", clip(c.KeyID), fault.ErrInvalidArgument, 2*idBytes)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.state.Load()
	cur := old.byID[c.KeyID]
	switch c.Op {
	case ChangeCreate:
		if err := validateName(c.Name); err != nil {
			return err
		}
		if err := validatePermissions(c.Perms); err != nil {
			return err
		}
		if cur != nil || old.byHash[c.Hash] != nil {
			return fmt.Errorf("%s %s: %w: key ID or secret already in use", OpCreateAPIKey, c.KeyID, fault.ErrInvalidArgument)
		}
		key := &apiKey{id: c.KeyID, name: c.Name, created: c.Created.UTC(), hash: c.Hash, perms: clonePerms(c.Perms)}
		if err := s.kv.Put(storageKey(c.KeyID), encodeRecord(key)); err != nil {
			return fmt.Errorf("%s %s: %w", OpCreateAPIKey, c.KeyID, err)
		}
		s.publish(old, key, "")
	case ChangeSetACL:
		if err := validatePermissions(c.Perms); err != nil {
			return err
		}
		if cur == nil {
			return notFound(OpSetACL, c.KeyID)
		}
		key := *cur
		key.perms = clonePerms(c.Perms)
		if err := s.kv.Put(storageKey(c.KeyID), encodeRecord(&key)); err != nil {
			return fmt.Errorf("%s %s: %w", OpSetACL, c.KeyID, err)
		}
		s.publish(old, &key, "")
	case ChangeRevoke:
		if cur == nil {
			return notFound(OpRevokeAPIKey, c.KeyID)
		}
		if err := s.kv.Delete(storageKey(c.KeyID)); err != nil {
			return fmt.Errorf("%s %s: %w", OpRevokeAPIKey, c.KeyID, err)
		}
		s.publish(old, nil, c.KeyID)
	default:
		return fmt.Errorf("API key change: %w: op %d", fault.ErrInvalidArgument, c.Op)
	}
	return nil
}
