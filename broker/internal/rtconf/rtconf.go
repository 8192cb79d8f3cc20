// Package rtconf is the runtime config store: a flat key-value map that
// operators change while the broker runs (SetConfig, DeleteConfig), that Lua
// hooks read with fila.get(key), and that the scheduler watches for
// throttle.* limits.
//
// Reads are lock-free: the current contents are an immutable snapshot behind
// an atomic pointer, replaced by each change (copy-on-write), so Get costs
// one atomic load, one hash and one map lookup however many goroutines call
// it. The snapshot's map is split into shards by key hash, so that a change
// copies one shard, about 1/64 of the entries, rather than all of them.
// Changes are serialized, made durable through a KV before they are
// published, and then reported to watchers in the order they were made.
//
// Keys are conventions grouped by prefix. Two prefixes are reserved:
//
//   - "throttle.": throttle.<key> = "rate,burst" sets the token bucket of a
//     throttle key; the broker registers a validator and a watcher for it.
//   - "fila.": settings of the broker itself. A key under it can be set only
//     once the broker has registered a validator covering it; none is
//     defined yet, so every such key is refused.
package rtconf

import (
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// KV is the durable storage the store persists through. The store keeps its
// entries under KeyPrefix and touches no other key.
type KV interface {
	// Put sets key to value; the change is durable when Put returns nil.
	Put(key, value []byte) error
	// Delete removes key if present; the change is durable when Delete
	// returns nil. Deleting a missing key is not an error.
	Delete(key []byte) error
	// Scan calls fn for every key starting with prefix, in key order, with
	// the whole key (prefix included). key and value are valid only during
	// the call. A non-nil error from fn stops the scan and is returned.
	Scan(prefix []byte, fn func(key, value []byte) error) error
}

// KeyPrefix starts every KV key the store writes: the entry for runtime key
// k is stored at KeyPrefix+k.
const KeyPrefix = "c/"

// Limits on keys and values.
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 1024
	// MaxValueLen is the longest value, in bytes: the protocol's string
	// limit.
	MaxValueLen = 65535
)

// Reserved prefixes.
const (
	// ThrottlePrefix starts the keys of token-bucket limits:
	// throttle.<throttle key> = "rate,burst".
	ThrottlePrefix = "throttle."
	// BrokerPrefix starts the keys of the broker's own settings; a key under
	// it is accepted only if a validator registered for it.
	BrokerPrefix = "fila."
)

// An Entry is one key and its value.
type Entry struct {
	Key, Value string
}

// A Store is the runtime config store. Its methods are safe for concurrent
// use; Get and List never block.
type Store struct {
	proposer atomic.Pointer[func(Change) error]
	kv       KV
	seed     maphash.Seed
	snap     atomic.Pointer[snapshot]

	mu         sync.Mutex // serializes changes, and guards the fields below
	validators []validator
	watchers   []watcher
}

// A snapshot is the immutable contents of the store at one point: never
// modified once published. A change makes a new snapshot that shares every
// shard but the one it changes.
type snapshot struct {
	shards [shards]map[string]string // key → value, by shardOf(key)
	keys   []string                  // every key, sorted
}

// shards is the number of shards of a snapshot, a power of two.
const shards = 64

func (s *Store) shardOf(key string) int {
	return int(maphash.String(s.seed, key) & (shards - 1))
}

type validator struct {
	prefix string
	fn     func(key, value string) error
}

type watcher struct {
	prefix string
	fn     func(key, value string, deleted bool)
}

// Open loads every entry stored in kv under KeyPrefix and returns the store.
// It fails if kv's scan fails or a stored key or value is invalid (see
// ValidateKey), which means the storage is corrupt.
func Open(kv KV) (*Store, error) {
	s := &Store{kv: kv, seed: maphash.MakeSeed()}
	snap, err := s.load()
	if err != nil {
		return nil, fmt.Errorf("load runtime config: %w", err)
	}
	s.snap.Store(snap)
	return s, nil
}

// load reads every entry stored in the KV.
func (s *Store) load() (*snapshot, error) {
	snap := &snapshot{}
	for i := range snap.shards {
		snap.shards[i] = make(map[string]string)
	}
	err := s.kv.Scan([]byte(KeyPrefix), func(k, v []byte) error {
		key, ok := strings.CutPrefix(string(k), KeyPrefix)
		if !ok {
			return fmt.Errorf("key %q outside prefix %q", k, KeyPrefix)
		}
		if err := ValidateKey(key); err != nil {
			return err
		}
		value := string(v)
		if err := validateValue(key, value); err != nil {
			return err
		}
		snap.shards[s.shardOf(key)][key] = value
		snap.keys = append(snap.keys, key)
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(snap.keys) // KV scans are ordered, but cheap to be sure
	return snap, nil
}

// Reload reads the entries from the KV again, after something other than
// the store replaced them there (a cluster node installing a snapshot of
// the meta group), makes them the ones Get and List see, and reports every
// key set, changed or deleted by it to the watchers, in key order, as
// Apply would have. It fails, changing nothing, where Open would: a scan
// error, or an invalid stored key or value.
func (s *Store) Reload() error {
	next, err := s.load()
	if err != nil {
		return fmt.Errorf("reload runtime config: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := s.snap.Load()
	s.snap.Store(next)
	i, j := 0, 0
	for i < len(old.keys) || j < len(next.keys) {
		switch {
		case j == len(next.keys) || i < len(old.keys) && old.keys[i] < next.keys[j]:
			s.notify(old.keys[i], "", true)
			i++
		case i == len(old.keys) || next.keys[j] < old.keys[i]:
			k := next.keys[j]
			s.notify(k, next.shards[s.shardOf(k)][k], false)
			j++
		default:
			k := next.keys[j]
			if v := next.shards[s.shardOf(k)][k]; v != old.shards[s.shardOf(k)][k] {
				s.notify(k, v, false)
			}
			i++
			j++
		}
	}
	return nil
}

// Get returns the value of key and whether it is set. It never blocks and
// does not allocate; it is the read behind Lua's fila.get(key).
func (s *Store) Get(key string) (string, bool) {
	v, ok := s.snap.Load().shards[s.shardOf(key)][key]
	return v, ok
}

// List returns the entries whose keys start with prefix ("" for all),
// sorted by key. It never blocks.
func (s *Store) List(prefix string) []Entry {
	snap := s.snap.Load()
	i, _ := slices.BinarySearch(snap.keys, prefix)
	j := i
	for j < len(snap.keys) && strings.HasPrefix(snap.keys[j], prefix) {
		j++
	}
	if i == j {
		return nil
	}
	out := make([]Entry, j-i)
	for n, k := range snap.keys[i:j] {
		out[n] = Entry{Key: k, Value: snap.shards[s.shardOf(k)][k]}
	}
	return out
}

// Set sets key to value, durably, then calls the watchers of key. It
// returns an error wrapping fault.ErrInvalidArgument for an invalid key
// (see ValidateKey), a value over MaxValueLen bytes or not UTF-8, or a key
// under BrokerPrefix that no validator covers; the error of a validator,
// wrapping fault.ErrInvalidConfigValue, when one rejects the value; or the
// KV's error, wrapped, when the value could not be stored (the store is
// then unchanged). Setting a key to its current value changes nothing and
// calls no watcher.
func (s *Store) Set(key, value string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := validateValue(key, value); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	covered := false
	for _, v := range s.validators {
		if !strings.HasPrefix(key, v.prefix) {
			continue
		}
		covered = true
		if err := v.fn(key, value); err != nil {
			if errors.Is(err, fault.ErrInvalidConfigValue) {
				return fmt.Errorf("set config %s: %w", key, err)
			}
			return fmt.Errorf("set config %s: %w: %w", key, fault.ErrInvalidConfigValue, err)
		}
	}
	if !covered && strings.HasPrefix(key, BrokerPrefix) {
		return fmt.Errorf("set config %s: %w: the prefix %q is reserved for the broker's own settings",
			key, fault.ErrInvalidArgument, BrokerPrefix)
	}

	// Validated: propose, with the lock held, so that no validator
	// registered meanwhile is skipped; in a cluster the change goes to
	// the meta group, which applies it here (Apply) before it returns.
	c := Change{Op: ChangeSet, Key: key, Value: value}
	if p := s.proposer.Load(); p != nil {
		s.mu.Unlock()
		defer s.mu.Lock()
		return (*p)(c)
	}
	_, err := s.applyLocked(c)
	return err
}

// SetProposer makes Set and Delete hand their change to fn instead of
// applying it: in a cluster, fn proposes it to the meta group and returns
// once this node has applied it (Apply), with Apply's error.
func (s *Store) SetProposer(fn func(Change) error) { s.proposer.Store(&fn) }

// Delete removes key, durably, then calls the watchers of key. existed is
// false, and nothing is written, if key was not set. It returns an error
// wrapping fault.ErrInvalidArgument for an invalid key, or the KV's error,
// wrapped, when the deletion could not be stored (the store is then
// unchanged).
func (s *Store) Delete(key string) (existed bool, err error) {
	if err := ValidateKey(key); err != nil {
		return false, err
	}
	if p := s.proposer.Load(); p != nil {
		_, had := s.Get(key)
		if !had {
			return false, nil
		}
		return true, (*p)(Change{Op: ChangeDelete, Key: key})
	}
	return s.Apply(Change{Op: ChangeDelete, Key: key})
}

// Apply applies c, the one path by which entries change: it makes the
// change durable, then visible to Get, then calls the watchers of its key,
// in the order changes are applied. changed is false, and nothing is
// written, when c sets a key to its current value or deletes a key that
// is not set. Apply checks the key and the value's form (the errors of
// Set and Delete), not the validators, which ran when the change was
// proposed: applying the same changes in the same order to two stores
// gives the same entries. Set and Delete apply their change at once; in a
// cluster, a change is an entry of the meta group's log, applied on every
// node.
func (s *Store) Apply(c Change) (changed bool, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.applyLocked(c)
}

func (s *Store) applyLocked(c Change) (bool, error) {
	if err := ValidateKey(c.Key); err != nil {
		return false, err
	}
	old := s.snap.Load()
	shard := s.shardOf(c.Key)
	cur, existed := old.shards[shard][c.Key]
	next := *old
	switch c.Op {
	case ChangeSet:
		if err := validateValue(c.Key, c.Value); err != nil {
			return false, err
		}
		if existed && cur == c.Value {
			return false, nil
		}
		if err := s.kv.Put(storageKey(c.Key), []byte(c.Value)); err != nil {
			return false, fmt.Errorf("set config %s: %w", c.Key, err)
		}
		next.shards[shard] = maps.Clone(old.shards[shard])
		next.shards[shard][c.Key] = c.Value
		if !existed {
			i, _ := slices.BinarySearch(old.keys, c.Key)
			next.keys = slices.Insert(slices.Clip(old.keys), i, c.Key) // copies: old.keys is shared
		}
	case ChangeDelete:
		if !existed {
			return false, nil
		}
		if err := s.kv.Delete(storageKey(c.Key)); err != nil {
			return false, fmt.Errorf("delete config %s: %w", c.Key, err)
		}
		next.shards[shard] = maps.Clone(old.shards[shard])
		delete(next.shards[shard], c.Key)
		i, _ := slices.BinarySearch(old.keys, c.Key)
		next.keys = slices.Delete(slices.Clone(old.keys), i, i+1) // old.keys is shared
	default:
		return false, fmt.Errorf("config change: %w: op %d", fault.ErrInvalidArgument, c.Op)
	}
	s.snap.Store(&next)
	s.notify(c.Key, c.Value, c.Op == ChangeDelete)
	return true, nil
}

// RegisterValidator makes Set call fn before storing a key that starts with
// prefix; a non-nil error from fn rejects the value and is returned by Set,
// wrapping fault.ErrInvalidConfigValue. Every validator whose prefix matches
// runs, in registration order. Deleting a key needs no validation. fn runs
// with the store's change lock held: it must not call Set, Delete, Watch or
// RegisterValidator.
//
// Values stored before a validator was registered are not checked again.
// The broker registers ThrottlePrefix with the scheduler's "rate,burst"
// parser.
func (s *Store) RegisterValidator(prefix string, fn func(key, value string) error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.validators = append(s.validators, validator{prefix, fn})
}

// Watch calls fn for every entry whose key starts with prefix, at once and
// in key order (deleted false), then for every later change of such a key:
// after the change is durable and visible to Get, in the order the changes
// were applied, on the goroutine that applied it (Apply). A deletion passes value "" and
// deleted true. Between the entries replayed at registration and the
// changes that follow, none is missed and none is reported twice.
//
// fn runs with the store's change lock held, so it must be quick (a
// bounded-channel send to the scheduler is fine) and must not call Set,
// Delete, Watch or RegisterValidator; Get and List are safe. A watcher
// lives as long as the store.
func (s *Store) Watch(prefix string, fn func(key, value string, deleted bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range s.List(prefix) {
		fn(e.Key, e.Value, false)
	}
	s.watchers = append(s.watchers, watcher{prefix, fn})
}

// notify calls the watchers of key. s.mu is held.
func (s *Store) notify(key, value string, deleted bool) {
	for _, w := range s.watchers {
		if strings.HasPrefix(key, w.prefix) {
			w.fn(key, value, deleted)
		}
	}
}

func storageKey(key string) []byte {
	b := make([]byte, 0, len(KeyPrefix)+len(key))
	return append(append(b, KeyPrefix...), key...)
}

// ValidateKey checks that key is a valid runtime-config key: 1 to MaxKeyLen
// bytes of UTF-8 with no control characters. The error wraps
// fault.ErrInvalidArgument.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return fmt.Errorf("key: %w: empty", fault.ErrInvalidArgument)
	case len(key) > MaxKeyLen:
		return fmt.Errorf("key %s: %w: %d bytes, over the limit of %d",
			show(key), fault.ErrInvalidArgument, len(key), MaxKeyLen)
	case !utf8.ValidString(key):
		return fmt.Errorf("key %s: %w: not valid UTF-8", show(key), fault.ErrInvalidArgument)
	}
	for _, r := range key {
		if r < 0x20 || 0x7f <= r && r < 0xa0 {
			return fmt.Errorf("key %s: %w: control character %U", show(key), fault.ErrInvalidArgument, r)
		}
	}
	return nil
}

// validateValue checks that value may be stored under key. The error wraps
// fault.ErrInvalidArgument.
func validateValue(key, value string) error {
	if len(value) > MaxValueLen {
		return fmt.Errorf("value of %s: %w: %d bytes, over the limit of %d",
			show(key), fault.ErrInvalidArgument, len(value), MaxValueLen)
	}
	if !utf8.ValidString(value) {
		return fmt.Errorf("value of %s: %w: not valid UTF-8", show(key), fault.ErrInvalidArgument)
	}
	return nil
}

// show quotes s for an error message, cut to a readable length.
func show(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q…", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
