// Package auth holds the broker's access-control primitives: API keys and
// their ACLs (Store, Principal), the table of what each operation requires
// (Required), queue patterns (Match) and the server's TLS configuration
// (ServerTLSConfig). The server wires them to connections.
//
// An API key is a 256-bit random secret, shown once at creation; the store
// keeps only its SHA-256 hash. Because the secret is uniformly random and
// long, an unsalted fast hash is enough: there is nothing to guess, and the
// hash only keeps a leaked database from being a list of live credentials.
//
// Checks are lock-free: the keys are an immutable snapshot behind an atomic
// pointer, replaced by each change (copy-on-write), and a Principal looks its
// key up in the current snapshot on every check, so revocation and ACL
// changes apply to open connections from their next request on. Work that a
// check cannot do by itself, such as closing a revoked key's connections or
// ending subscriptions its ACL no longer allows, hangs on Store.OnChange.
package auth

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// KV is the durable storage the store persists through. The store keeps its
// keys under KeyPrefix and touches no other key.
type KV interface {
	// Put sets key to value; the change is durable when Put returns nil.
	Put(key, value []byte) error
	// Delete removes key if present; the change is durable when Delete
	// returns nil.
	Delete(key []byte) error
	// Scan calls fn for every key starting with prefix, in key order, with
	// the whole key (prefix included). key and value are valid only during
	// the call. A non-nil error from fn stops the scan and is returned.
	Scan(prefix []byte, fn func(key, value []byte) error) error
}

// KeyPrefix starts every KV key the store writes: API key <id> is stored at
// KeyPrefix+id.
const KeyPrefix = "k/"

// SecretPrefix starts every secret Create mints, so that a leaked secret is
// recognisable (by people and secret scanners) as a Fila API key.
const SecretPrefix = "fila_"

// BootstrapKeyID is the key ID of principals authenticated with the
// bootstrap key. No stored key has it.
const BootstrapKeyID = "bootstrap"

// Limits.
const (
	// MaxNameLen is the longest key name in bytes.
	MaxNameLen = 200
	// MinBootstrapLen is the shortest bootstrap secret in bytes.
	MinBootstrapLen = 16
)

// secretBytes is the number of random bytes in a secret: 256 bits.
const secretBytes = 32

// idBytes is the number of random bytes in a key ID, written as hex.
const idBytes = 8

// A Store holds the API keys. Its methods are safe for concurrent use;
// Authenticate and the Principal methods never block.
type Store struct {
	proposer     atomic.Pointer[func(Change) error]
	kv           KV
	now          func() time.Time
	bootstrap    [sha256.Size]byte
	hasBootstrap bool

	mu    sync.Mutex // serializes changes
	state atomic.Pointer[state]

	lmu       sync.Mutex
	listeners []func(keyID string)
}

// A state is an immutable snapshot of the keys.
type state struct {
	byID   map[string]*apiKey
	byHash map[[sha256.Size]byte]*apiKey
}

// An apiKey is one stored key; immutable once in a state.
type apiKey struct {
	id      string
	name    string
	created time.Time // millisecond precision
	hash    [sha256.Size]byte
	perms   []Permission
}

// KeyInfo describes a key for ListApiKeys; it never holds the secret.
type KeyInfo struct {
	ID          string
	Name        string
	CreatedAt   time.Time // UTC, millisecond precision
	Permissions []Permission
}

// Open loads the keys stored in kv under KeyPrefix. bootstrapSecret, when
// not empty, is a secret that authenticates as BootstrapKeyID with every
// permission on every queue; only its hash is kept. now supplies creation
// times; nil means time.Now.
//
// Open fails if the scan fails, if a stored record is corrupt (the error
// names its key ID), or if bootstrapSecret is shorter than MinBootstrapLen
// bytes (wrapping fault.ErrInvalidArgument; the secret is not shown).
func Open(kv KV, bootstrapSecret string, now func() time.Time) (*Store, error) {
	if now == nil {
		now = time.Now
	}
	s := &Store{kv: kv, now: now}
	if bootstrapSecret != "" {
		if len(bootstrapSecret) < MinBootstrapLen {
			return nil, fmt.Errorf("bootstrap API key: %w: shorter than %d bytes", fault.ErrInvalidArgument, MinBootstrapLen)
		}
		s.bootstrap = sha256.Sum256([]byte(bootstrapSecret))
		s.hasBootstrap = true
	}
	st, err := loadState(kv)
	if err != nil {
		return nil, fmt.Errorf("load API keys: %w", err)
	}
	s.state.Store(st)
	return s, nil
}

// loadState reads the keys stored in kv under KeyPrefix.
func loadState(kv KV) (*state, error) {
	st := &state{byID: make(map[string]*apiKey), byHash: make(map[[sha256.Size]byte]*apiKey)}
	err := kv.Scan([]byte(KeyPrefix), func(k, v []byte) error {
		id, ok := strings.CutPrefix(string(k), KeyPrefix)
		if !ok || !validID(id) {
			return fmt.Errorf("stored key %q: not a key ID", k)
		}
		key, err := decodeRecord(id, v)
		if err != nil {
			return err
		}
		if _, dup := st.byHash[key.hash]; dup {
			return fmt.Errorf("key %s: hash shared with another key", id)
		}
		st.byID[id] = key
		st.byHash[key.hash] = key
		return nil
	})
	if err != nil {
		return nil, err
	}
	return st, nil
}

// Reload reads the keys from the KV again, after something other than
// the store replaced them there (a cluster node installing a snapshot of
// the meta group), makes them the ones checks see, and calls the
// OnChange listeners with the ID of every key added, changed or removed,
// in ID order, so that connections authenticated by a key that is gone
// or whose ACL changed are dealt with as after Revoke or SetACL. It fails,
// changing nothing, where Open would: a scan error, or a corrupt record.
func (s *Store) Reload() error {
	next, err := loadState(s.kv)
	if err != nil {
		return fmt.Errorf("reload API keys: %w", err)
	}
	s.mu.Lock()
	old := s.state.Load()
	s.state.Store(next)
	s.mu.Unlock()
	var ids []string
	for id, k := range old.byID {
		if n := next.byID[id]; n == nil || !bytes.Equal(encodeRecord(n), encodeRecord(k)) {
			ids = append(ids, id)
		}
	}
	for id := range next.byID {
		if old.byID[id] == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		s.changed(id)
	}
	return nil
}

// Create mints a key named name with the permissions perms, stores it
// durably, and returns its ID and its secret. The secret is returned here
// and nowhere else: it is SecretPrefix followed by 32 random bytes in
// unpadded base64url (48 characters), and the store keeps only its SHA-256
// hash. The ID is 16 hex digits.
//
// Create returns an error wrapping fault.ErrInvalidArgument if name is not 1
// to MaxNameLen bytes of UTF-8 without control characters or perms is not a
// valid ACL (see ValidatePattern; at most MaxPermissions), or the KV's error,
// wrapped.
func (s *Store) Create(name string, perms []Permission) (keyID, secret string, err error) {
	if err := validateName(name); err != nil {
		return "", "", err
	}
	if err := validatePermissions(perms); err != nil {
		return "", "", err
	}
	var raw [secretBytes]byte
	rand.Read(raw[:])
	secret = SecretPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	c := Change{
		Op:      ChangeCreate,
		Name:    name,
		Created: time.UnixMilli(max(s.now().UnixMilli(), 0)).UTC(),
		Hash:    sha256.Sum256([]byte(secret)),
		Perms:   clonePerms(perms),
	}
	for {
		var b [idBytes]byte
		rand.Read(b[:])
		if c.KeyID = hex.EncodeToString(b[:]); s.state.Load().byID[c.KeyID] == nil {
			break
		}
	}
	if err := s.propose(c); err != nil {
		return "", "", err
	}
	return c.KeyID, secret, nil
}

// propose applies c. On one node a change is applied where it is made; in
// a cluster it goes through the meta group's log, and every node applies
// it (Apply): see SetProposer.
func (s *Store) propose(c Change) error {
	if p := s.proposer.Load(); p != nil {
		return (*p)(c)
	}
	return s.Apply(c)
}

// SetProposer makes Create, Revoke and SetACL hand their change to fn
// instead of applying it: in a cluster, fn proposes it to the meta group
// and returns once this node has applied it (Apply), with Apply's error.
func (s *Store) SetProposer(fn func(Change) error) { s.proposer.Store(&fn) }

// Revoke deletes the key keyID durably. From then on Authenticate refuses
// its secret, and every Principal of it fails its checks (see
// Principal.Authorize); the OnChange listeners run before Revoke returns.
// Revoke returns an error wrapping fault.ErrAPIKeyNotFound if no stored key
// has the ID (the bootstrap key is not stored: remove it from the
// configuration instead), or the KV's error, wrapped.
func (s *Store) Revoke(keyID string) error {
	if s.state.Load().byID[keyID] == nil {
		return notFound(OpRevokeAPIKey, keyID)
	}
	return s.propose(Change{Op: ChangeRevoke, KeyID: keyID})
}

// SetACL replaces the permissions of key keyID with perms, durably; checks
// made after it returns see the new set, and the OnChange listeners run
// before it returns. It returns an error wrapping fault.ErrAPIKeyNotFound
// for an unknown ID, fault.ErrInvalidArgument for an invalid ACL, or the
// KV's error, wrapped.
func (s *Store) SetACL(keyID string, perms []Permission) error {
	if err := validatePermissions(perms); err != nil {
		return err
	}
	if s.state.Load().byID[keyID] == nil {
		return notFound(OpSetACL, keyID)
	}
	return s.propose(Change{Op: ChangeSetACL, KeyID: keyID, Perms: clonePerms(perms)})
}

// GetACL returns a copy of the permissions of key keyID, or an error
// wrapping fault.ErrAPIKeyNotFound.
func (s *Store) GetACL(keyID string) ([]Permission, error) {
	key := s.state.Load().byID[keyID]
	if key == nil {
		return nil, notFound(OpGetACL, keyID)
	}
	return slices.Clone(key.perms), nil
}

// List returns every stored key, sorted by ID, without secrets.
func (s *Store) List() []KeyInfo {
	st := s.state.Load()
	out := make([]KeyInfo, 0, len(st.byID))
	for _, k := range st.byID {
		out = append(out, KeyInfo{ID: k.id, Name: k.name, CreatedAt: k.created, Permissions: slices.Clone(k.perms)})
	}
	slices.SortFunc(out, func(a, b KeyInfo) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// OnChange registers fn to be told of every change applied to a stored
// key: after Apply (which Create, Revoke and SetACL go through) has made
// the change durable and visible to checks, fn is called with the key's
// ID, on the goroutine that applied it, outside the store's lock, before
// Apply returns.
// fn is told only which key changed: it reads the key's current state
// (Principal.Valid, Principal.Allowed), so notifications of concurrent
// changes may arrive in any order. fn must not call the store's change
// methods. Listeners cannot be removed.
func (s *Store) OnChange(fn func(keyID string)) {
	s.lmu.Lock()
	s.listeners = append(s.listeners, fn)
	s.lmu.Unlock()
}

// changed calls the OnChange listeners for keyID. s.mu is not held.
func (s *Store) changed(keyID string) {
	s.lmu.Lock()
	ls := s.listeners
	s.lmu.Unlock()
	for _, fn := range ls {
		fn(keyID)
	}
}

// publish installs a state made from old with key added or replaced, or
// with the key removeID removed. s.mu is held.
func (s *Store) publish(old *state, key *apiKey, removeID string) {
	next := &state{byID: maps.Clone(old.byID), byHash: maps.Clone(old.byHash)}
	if removeID != "" {
		delete(next.byHash, old.byID[removeID].hash)
		delete(next.byID, removeID)
	}
	if key != nil {
		next.byID[key.id] = key
		next.byHash[key.hash] = key
	}
	s.state.Store(next)
}

// Authenticate returns the principal whose secret this is, or an error
// wrapping fault.ErrUnauthorized that never contains the secret. The
// secret is hashed and the hash looked up and then compared in constant
// time; as the lookup is keyed by a SHA-256 hash, its timing reveals nothing
// about any secret.
func (s *Store) Authenticate(secret string) (Principal, error) {
	if secret == "" {
		return Principal{}, fmt.Errorf("%w: no API key", fault.ErrUnauthorized)
	}
	h := sha256.Sum256([]byte(secret))
	if s.hasBootstrap && subtle.ConstantTimeCompare(h[:], s.bootstrap[:]) == 1 {
		return Principal{store: s, keyID: BootstrapKeyID, super: true}, nil
	}
	if key := s.state.Load().byHash[h]; key != nil && subtle.ConstantTimeCompare(h[:], key.hash[:]) == 1 {
		return Principal{store: s, keyID: key.id}, nil
	}
	return Principal{}, fmt.Errorf("%w: unknown or revoked API key", fault.ErrUnauthorized)
}

// A Principal is the identity of a connection: an API key, the bootstrap
// key, or Unrestricted when auth is off. Its checks read the key's current
// state in the store, so a revocation or an ACL change applies to the next
// check. The zero Principal is allowed nothing. A Principal is a small
// value, safe to copy and for concurrent use.
type Principal struct {
	store *Store
	keyID string
	super bool // every permission: the bootstrap key, or auth off
}

// Unrestricted returns the principal of every connection when auth is off:
// valid and allowed everything. Its KeyID is "".
func Unrestricted() Principal { return Principal{super: true} }

// KeyID returns the ID of the principal's key: BootstrapKeyID for the
// bootstrap key, "" for Unrestricted. It is not secret and may be logged.
func (p Principal) KeyID() string { return p.keyID }

// current returns the principal's key in the current state, or nil once it
// is revoked. Not for super principals.
func (p Principal) current() *apiKey {
	if p.store == nil {
		return nil
	}
	return p.store.state.Load().byID[p.keyID]
}

// Valid reports whether the principal's key still exists: false after
// Revoke, and for the zero Principal.
func (p Principal) Valid() bool { return p.super || p.current() != nil }

// Allowed reports whether the principal holds kind (any kind for AnyKind)
// on queue now. It is false for a revoked key. It does not allocate.
func (p Principal) Allowed(kind Kind, queue string) bool {
	if p.super {
		return true
	}
	key := p.current()
	return key != nil && allows(key.perms, kind, queue)
}

// Visible reports whether queue belongs in the principal's ListQueues
// result: whether it holds admin or consume on it.
func (p Principal) Visible(queue string) bool {
	if p.super {
		return true
	}
	key := p.current()
	return key != nil && (allows(key.perms, Admin, queue) || allows(key.perms, Consume, queue))
}

// Authorize checks one request, or one item of a batch, against Required:
// it returns nil if the principal may do op on queue now; an error wrapping
// fault.ErrUnauthorized if its key was revoked (a request that races the
// revocation; the server then closes the connection); or an error wrapping
// fault.ErrForbidden naming the operation, the queue and the missing
// permission. It does not allocate when it returns nil.
func (p Principal) Authorize(op Op, queue string) error {
	if p.super {
		return nil
	}
	key := p.current()
	if key == nil {
		return fmt.Errorf("%s: %w: API key revoked", op, fault.ErrUnauthorized)
	}
	needs, n := Required(op, queue)
	for _, need := range needs[:n] {
		if !allows(key.perms, need.Kind, need.Queue) {
			// An operation on every queue (config, API keys, the
			// cluster) is named alone: "*" is its permission's
			// pattern, not its target.
			if queue == "" || queue == Everything {
				return fmt.Errorf("%s: %w: key %s needs %s on %q", op, fault.ErrForbidden, key.id, need.Kind, clip(need.Queue))
			}
			return fmt.Errorf("%s %s: %w: key %s needs %s on %q", op, clip(queue), fault.ErrForbidden,
				key.id, need.Kind, clip(need.Queue))
		}
	}
	return nil
}

// clonePerms copies an ACL, the empty one as nil, as decodeRecord reads it.
func clonePerms(perms []Permission) []Permission {
	if len(perms) == 0 {
		return nil
	}
	return slices.Clone(perms)
}

// notFound is the error of op on a key ID that no stored key has.
func notFound(op Op, keyID string) error {
	return fmt.Errorf("%s %q: %w", op, clip(keyID), fault.ErrAPIKeyNotFound)
}

func storageKey(id string) []byte { return []byte(KeyPrefix + id) }

// validID reports whether id has the form Create gives key IDs.
func validID(id string) bool {
	if len(id) != 2*idBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// validateName checks a key's name: 1 to MaxNameLen bytes of UTF-8 without
// control characters. The error wraps fault.ErrInvalidArgument.
func validateName(name string) error {
	if name == "" || len(name) > MaxNameLen || !utf8.ValidString(name) {
		return fmt.Errorf("key name %q: %w: want 1 to %d bytes of UTF-8", clip(name), fault.ErrInvalidArgument, MaxNameLen)
	}
	for _, r := range name {
		if r < 0x20 || 0x7f <= r && r < 0xa0 {
			return fmt.Errorf("key name %q: %w: control character %U", clip(name), fault.ErrInvalidArgument, r)
		}
	}
	return nil
}
