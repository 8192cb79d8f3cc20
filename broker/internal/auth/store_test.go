package auth

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// memKV is an in-memory KV that can be made to fail.
type memKV struct {
	mu   sync.Mutex
	m    map[string][]byte
	fail error
}

func newMemKV() *memKV { return &memKV{m: make(map[string][]byte)} }

func (kv *memKV) Put(key, value []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.fail != nil {
		return kv.fail
	}
	kv.m[string(key)] = bytes.Clone(value)
	return nil
}

func (kv *memKV) Delete(key []byte) error {
	kv.mu.Lock()
	defer kv.mu.Unlock()
	if kv.fail != nil {
		return kv.fail
	}
	delete(kv.m, string(key))
	return nil
}

func (kv *memKV) Scan(prefix []byte, fn func(key, value []byte) error) error {
	kv.mu.Lock()
	var keys []string
	for k := range kv.m {
		if strings.HasPrefix(k, string(prefix)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	kv.mu.Unlock()
	for _, k := range keys {
		if err := fn([]byte(k), kv.m[k]); err != nil {
			return err
		}
	}
	return nil
}

// dump returns every stored byte, to look for leaked secrets.
func (kv *memKV) dump() []byte {
	var b []byte
	for k, v := range kv.m {
		b = append(append(b, k...), v...)
	}
	return b
}

type tester interface {
	Helper()
	Fatalf(format string, args ...any)
}

var epoch = time.Date(2025, 6, 1, 12, 0, 0, 123456789, time.UTC)

func fakeClock() func() time.Time { return func() time.Time { return epoch } }

func mustOpen(t tester, kv KV, bootstrap string) *Store {
	t.Helper()
	s, err := Open(kv, bootstrap, fakeClock())
	if err != nil {
		t.Fatalf("Open() error = %v", err)
	}
	return s
}

func mustCreate(t tester, s *Store, name string, perms ...Permission) (string, string, Principal) {
	t.Helper()
	id, secret, err := s.Create(name, perms)
	if err != nil {
		t.Fatalf("Create(%q, %v) error = %v", name, perms, err)
	}
	p, err := s.Authenticate(secret)
	if err != nil {
		t.Fatalf("Authenticate(secret of %s) error = %v", id, err)
	}
	return id, secret, p
}

func TestCreateAndAuthenticate(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv, "")
	id, secret, p := mustCreate(t, s, "ci", Permission{Produce, "orders.*"})

	if !validID(id) {
		t.Errorf("Create key ID = %q; want 16 hex digits", id)
	}
	raw, ok := strings.CutPrefix(secret, SecretPrefix)
	if b, err := base64.RawURLEncoding.DecodeString(raw); !ok || err != nil || len(b) != 32 {
		t.Errorf("Create secret = %q; want %q and 32 bytes of base64url", secret, SecretPrefix)
	}
	if p.KeyID() != id || !p.Valid() {
		t.Errorf("Authenticate = %q valid %v; want %q valid", p.KeyID(), p.Valid(), id)
	}

	// The store keeps only the hash.
	stored := kv.dump()
	if bytes.Contains(stored, []byte(secret)) || bytes.Contains(stored, []byte(raw)) {
		t.Errorf("the KV holds the secret")
	}
	rawBytes, _ := base64.RawURLEncoding.DecodeString(raw)
	if bytes.Contains(stored, rawBytes) {
		t.Errorf("the KV holds the secret's random bytes")
	}
	h := sha256.Sum256([]byte(secret))
	if !bytes.Contains(kv.m[KeyPrefix+id], h[:]) {
		t.Errorf("the record of %s lacks SHA-256(secret)", id)
	}

	// Two keys never share a secret or an ID.
	id2, secret2, _ := mustCreate(t, s, "ci")
	if id2 == id || secret2 == secret {
		t.Errorf("second Create = %q, %q; want a new ID and secret", id2, secret2)
	}
}

func TestAuthenticateRejects(t *testing.T) {
	s := mustOpen(t, newMemKV(), "bootstrap-secret-0123456789")
	_, secret, _ := mustCreate(t, s, "ci")
	for _, bad := range []string{"", secret[:len(secret)-1], secret + "x", strings.ToUpper(secret), "bootstrap-secret-012345678", "fila_"} {
		p, err := s.Authenticate(bad)
		if !errors.Is(err, fault.ErrUnauthorized) {
			t.Errorf("Authenticate(%q) = %v, %v; want fault.ErrUnauthorized", bad, p.KeyID(), err)
		}
		if bad != "" && err != nil && strings.Contains(err.Error(), bad) {
			t.Errorf("Authenticate error %q shows the presented secret", err)
		}
		if p.Valid() || p.Allowed(Produce, "orders") {
			t.Errorf("Authenticate(%q) failed but returned a usable principal", bad)
		}
	}
}

func TestListNeverShowsSecrets(t *testing.T) {
	s := mustOpen(t, newMemKV(), "bootstrap-secret-0123456789")
	var ids []string
	var secrets []string
	for _, name := range []string{"b", "a", "c"} {
		id, secret, _ := mustCreate(t, s, name, Permission{Consume, name})
		ids = append(ids, id)
		secrets = append(secrets, secret)
	}
	list := s.List()
	if len(list) != 3 {
		t.Fatalf("List() = %d keys; want 3 (the bootstrap key is not stored)", len(list))
	}
	if !slices.IsSortedFunc(list, func(a, b KeyInfo) int { return strings.Compare(a.ID, b.ID) }) {
		t.Errorf("List() not sorted by ID: %v", list)
	}
	for _, k := range list {
		i := slices.Index(ids, k.ID)
		if i < 0 {
			t.Fatalf("List() has unknown ID %q", k.ID)
		}
		want := KeyInfo{ID: ids[i], Name: []string{"b", "a", "c"}[i], CreatedAt: epoch.Truncate(time.Millisecond),
			Permissions: []Permission{{Consume, []string{"b", "a", "c"}[i]}}}
		if !reflect.DeepEqual(k, want) {
			t.Errorf("List() entry = %+v; want %+v", k, want)
		}
	}
	shown := fmt.Sprintf("%+v", list)
	for _, secret := range secrets {
		raw := strings.TrimPrefix(secret, SecretPrefix)
		if strings.Contains(shown, raw) {
			t.Errorf("List() = %s shows a secret", shown)
		}
	}
	list[0].Permissions[0].Pattern = "changed"
	if acl, _ := s.GetACL(list[0].ID); acl[0].Pattern == "changed" {
		t.Errorf("List() shares permissions with the store")
	}
}

func TestRevoke(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv, "")
	id, secret, p := mustCreate(t, s, "worker", Permission{Consume, "orders"})
	if err := p.Authorize(OpAck, "orders"); err != nil {
		t.Fatalf("Authorize(ack, orders) before revoke = %v", err)
	}
	if err := s.Revoke(id); err != nil {
		t.Fatalf("Revoke(%q) = %v", id, err)
	}
	// The open connection's next request is refused.
	if err := p.Authorize(OpAck, "orders"); !errors.Is(err, fault.ErrUnauthorized) {
		t.Errorf("Authorize after Revoke = %v; want fault.ErrUnauthorized", err)
	}
	if err := p.Authorize(OpPing, ""); !errors.Is(err, fault.ErrUnauthorized) {
		t.Errorf("Authorize(ping) after Revoke = %v; want fault.ErrUnauthorized", err)
	}
	if p.Valid() || p.Allowed(Consume, "orders") || p.Visible("orders") {
		t.Errorf("principal of a revoked key is still valid or allowed")
	}
	if _, err := s.Authenticate(secret); !errors.Is(err, fault.ErrUnauthorized) {
		t.Errorf("Authenticate(revoked) = %v; want fault.ErrUnauthorized", err)
	}
	if _, ok := kv.m[KeyPrefix+id]; ok {
		t.Errorf("Revoke left the record in the KV")
	}
	if err := s.Revoke(id); !errors.Is(err, fault.ErrAPIKeyNotFound) {
		t.Errorf("second Revoke = %v; want fault.ErrAPIKeyNotFound", err)
	}
	for _, bad := range []string{"", "nope", BootstrapKeyID} {
		if err := s.Revoke(bad); !errors.Is(err, fault.ErrAPIKeyNotFound) {
			t.Errorf("Revoke(%q) = %v; want fault.ErrAPIKeyNotFound", bad, err)
		}
	}
	// A fresh store from the same KV agrees.
	if _, err := mustOpen(t, kv, "").Authenticate(secret); !errors.Is(err, fault.ErrUnauthorized) {
		t.Errorf("Authenticate(revoked) after reopen = %v; want fault.ErrUnauthorized", err)
	}
}

func TestSetACLReplaces(t *testing.T) {
	s := mustOpen(t, newMemKV(), "")
	id, _, p := mustCreate(t, s, "svc", Permission{Produce, "orders.*"}, Permission{Consume, "billing"})
	if !p.Allowed(Produce, "orders.eu") || !p.Allowed(Consume, "billing") {
		t.Fatalf("initial ACL not in effect")
	}
	next := []Permission{{Admin, "billing"}}
	if err := s.SetACL(id, next); err != nil {
		t.Fatalf("SetACL(%q, %v) = %v", id, next, err)
	}
	if p.Allowed(Produce, "orders.eu") || p.Allowed(Consume, "billing") {
		t.Errorf("SetACL did not remove the old permissions from an open principal")
	}
	if !p.Allowed(Admin, "billing") {
		t.Errorf("SetACL did not grant the new permission to an open principal")
	}
	if got, err := s.GetACL(id); err != nil || !reflect.DeepEqual(got, next) {
		t.Errorf("GetACL(%q) = %v, %v; want %v", id, got, err, next)
	}
	next[0].Pattern = "mutated"
	if got, _ := s.GetACL(id); got[0].Pattern != "billing" {
		t.Errorf("SetACL kept the caller's slice")
	}

	if err := s.SetACL(id, nil); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetACL(id); len(got) != 0 || p.Allowed(Admin, "billing") {
		t.Errorf("SetACL(nil) left %v", got)
	}
	if err := s.SetACL("0000000000000000", nil); !errors.Is(err, fault.ErrAPIKeyNotFound) {
		t.Errorf("SetACL(unknown) = %v; want fault.ErrAPIKeyNotFound", err)
	}
	if _, err := s.GetACL("0000000000000000"); !errors.Is(err, fault.ErrAPIKeyNotFound) {
		t.Errorf("GetACL(unknown) = %v; want fault.ErrAPIKeyNotFound", err)
	}
	for _, bad := range [][]Permission{
		{{Kind(0), "orders"}}, {{Kind(4), "orders"}}, {{Produce, ""}}, {{Produce, "or*"}},
		make([]Permission, MaxPermissions+1),
	} {
		if err := s.SetACL(id, bad); !errors.Is(err, fault.ErrInvalidArgument) {
			t.Errorf("SetACL(%.40v) = %v; want fault.ErrInvalidArgument", bad, err)
		}
	}
}

func TestCreateRejects(t *testing.T) {
	s := mustOpen(t, newMemKV(), "")
	for _, tt := range []struct {
		name  string
		perms []Permission
	}{
		{"", nil},
		{strings.Repeat("n", MaxNameLen+1), nil},
		{"tab\there", nil},
		{"\xff", nil},
		{"ok", []Permission{{Admin, "a*b"}}},
		{"ok", []Permission{{Kind(9), "*"}}},
	} {
		if _, _, err := s.Create(tt.name, tt.perms); !errors.Is(err, fault.ErrInvalidArgument) {
			t.Errorf("Create(%.20q, %v) = %v; want fault.ErrInvalidArgument", tt.name, tt.perms, err)
		}
	}
	if len(s.List()) != 0 {
		t.Errorf("rejected Creates stored keys: %v", s.List())
	}
}

func TestReopen(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv, "")
	id, secret, _ := mustCreate(t, s, "ci", Permission{Produce, "orders.*"}, Permission{Admin, "*"})
	before := s.List()

	s2 := mustOpen(t, kv, "")
	if got := s2.List(); !reflect.DeepEqual(got, before) {
		t.Errorf("List() after reopen = %+v; want %+v", got, before)
	}
	p, err := s2.Authenticate(secret)
	if err != nil || p.KeyID() != id || !p.Allowed(Admin, Everything) {
		t.Errorf("Authenticate after reopen = %q, %v; want %q with admin on *", p.KeyID(), err, id)
	}
}

func TestOpenCorrupt(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv, "")
	id, _, _ := mustCreate(t, s, "ci")
	rec := kv.m[KeyPrefix+id]
	for name, mutate := range map[string]func(){
		"truncated":       func() { kv.m[KeyPrefix+id] = rec[:len(rec)-1] },
		"trailing":        func() { kv.m[KeyPrefix+id] = append(bytes.Clone(rec), 0) },
		"version":         func() { b := bytes.Clone(rec); b[0] = 9; kv.m[KeyPrefix+id] = b },
		"bad id":          func() { kv.m[KeyPrefix+"XYZ"] = rec },
		"duplicate hash":  func() { kv.m[KeyPrefix+"ffffffffffffffff"] = rec },
		"bad permissions": func() { kv.m[KeyPrefix+id] = append(bytes.Clone(rec[:len(rec)-2]), 0, 1, 0, 0, 1, 'x') },
	} {
		t.Run(name, func(t *testing.T) {
			saved := cloneKV(kv)
			defer func() { kv.m = saved }()
			mutate()
			if _, err := Open(kv, "", nil); err == nil || !strings.HasPrefix(err.Error(), "load API keys: ") {
				t.Errorf("Open(%s record) = %v; want a load API keys: error", name, err)
			}
		})
	}
	boom := errors.New("io error")
	if _, err := Open(failingScan{boom}, "", nil); !errors.Is(err, boom) {
		t.Errorf("Open(failing scan) = %v; want it to wrap %v", err, boom)
	}
}

func cloneKV(kv *memKV) map[string][]byte {
	m := make(map[string][]byte, len(kv.m))
	for k, v := range kv.m {
		m[k] = v
	}
	return m
}

type failingScan struct{ err error }

func (f failingScan) Put(key, value []byte) error { return nil }
func (f failingScan) Delete(key []byte) error     { return nil }
func (f failingScan) Scan(prefix []byte, fn func(key, value []byte) error) error {
	return f.err
}

func TestKVFailureChangesNothing(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv, "")
	id, _, p := mustCreate(t, s, "svc", Permission{Produce, "orders"})
	boom := errors.New("disk full")
	kv.fail = boom
	if _, _, err := s.Create("x", nil); !errors.Is(err, boom) {
		t.Errorf("Create with a failing KV = %v; want it to wrap %v", err, boom)
	}
	if err := s.SetACL(id, nil); !errors.Is(err, boom) {
		t.Errorf("SetACL with a failing KV = %v; want it to wrap %v", err, boom)
	}
	if err := s.Revoke(id); !errors.Is(err, boom) {
		t.Errorf("Revoke with a failing KV = %v; want it to wrap %v", err, boom)
	}
	if len(s.List()) != 1 || !p.Allowed(Produce, "orders") {
		t.Errorf("failed changes changed the store: %v", s.List())
	}
}

func TestBootstrap(t *testing.T) {
	const boot = "bootstrap-secret-0123456789"
	s := mustOpen(t, newMemKV(), boot)
	p, err := s.Authenticate(boot)
	if err != nil || p.KeyID() != BootstrapKeyID {
		t.Fatalf("Authenticate(bootstrap) = %q, %v; want %q", p.KeyID(), err, BootstrapKeyID)
	}
	for op := OpPing; op < opEnd; op++ {
		if err := p.Authorize(op, "any.queue"); err != nil {
			t.Errorf("bootstrap Authorize(%v) = %v; want nil", op, err)
		}
	}
	if !p.Allowed(Produce, "x") || !p.Allowed(Consume, "x") || !p.Allowed(Admin, Everything) || !p.Visible("x") {
		t.Errorf("bootstrap key lacks a permission")
	}
	// It can mint real keys, which keep working once it is removed.
	_, secret, _ := mustCreate(t, s, "admin", Permission{Admin, "*"})
	if len(s.List()) != 1 {
		t.Errorf("List() = %v; want only the minted key", s.List())
	}
	if err := s.Revoke(BootstrapKeyID); !errors.Is(err, fault.ErrAPIKeyNotFound) {
		t.Errorf("Revoke(bootstrap) = %v; want fault.ErrAPIKeyNotFound", err)
	}

	const short = "tooshort"
	_, err = Open(newMemKV(), short, nil)
	if !errors.Is(err, fault.ErrInvalidArgument) || strings.Contains(err.Error(), short) {
		t.Errorf("Open(short bootstrap) = %v; want fault.ErrInvalidArgument without the secret", err)
	}
	s2 := mustOpen(t, s.kv, "")
	if _, err := s2.Authenticate(boot); !errors.Is(err, fault.ErrUnauthorized) {
		t.Errorf("Authenticate(bootstrap) without it configured = %v; want fault.ErrUnauthorized", err)
	}
	if _, err := s2.Authenticate(secret); err != nil {
		t.Errorf("minted key after bootstrap removal: %v", err)
	}
}

func TestUnrestrictedAndZero(t *testing.T) {
	u := Unrestricted()
	if !u.Valid() || u.KeyID() != "" || u.Authorize(OpSetConfig, "") != nil || !u.Allowed(Admin, Everything) {
		t.Errorf("Unrestricted() is not allowed everything")
	}
	var z Principal
	if z.Valid() || z.Allowed(AnyKind, "x") || z.Visible("x") {
		t.Errorf("zero Principal is allowed something")
	}
	if err := z.Authorize(OpPing, ""); !errors.Is(err, fault.ErrUnauthorized) {
		t.Errorf("zero Principal Authorize(ping) = %v; want fault.ErrUnauthorized", err)
	}
}

// TestAuthorizeBatch checks items one by one, as the server does for a
// batch: a forbidden item fails alone with FORBIDDEN.
func TestAuthorizeBatch(t *testing.T) {
	s := mustOpen(t, newMemKV(), "")
	_, _, p := mustCreate(t, s, "producer", Permission{Produce, "orders.*"}, Permission{Produce, "audit"})
	items := []struct {
		queue string
		ok    bool
	}{
		{"orders.eu", true}, {"billing", false}, {"orders", false}, {"ordersx", false},
		{"audit", true}, {"audit.dlq", false}, {"orders.eu.dlq", true},
	}
	for _, it := range items {
		err := p.Authorize(OpEnqueue, it.queue)
		if it.ok && err != nil {
			t.Errorf("Authorize(enqueue, %q) = %v; want nil", it.queue, err)
		}
		if !it.ok {
			if !errors.Is(err, fault.ErrForbidden) {
				t.Errorf("Authorize(enqueue, %q) = %v; want fault.ErrForbidden", it.queue, err)
			} else if !strings.Contains(err.Error(), "needs produce on \""+it.queue+"\"") {
				t.Errorf("Authorize(enqueue, %q) error %q; want it to name the missing permission", it.queue, err)
			}
		}
		if err := p.Authorize(OpSubscribe, it.queue); !errors.Is(err, fault.ErrForbidden) {
			t.Errorf("Authorize(subscribe, %q) with produce only = %v; want fault.ErrForbidden", it.queue, err)
		}
	}
}

// TestDLQRules pins the documented dead-letter-queue rules.
func TestDLQRules(t *testing.T) {
	s := mustOpen(t, newMemKV(), "")
	tests := []struct {
		name  string
		perms []Permission
		op    Op
		queue string
		ok    bool
	}{
		{"consume of a DLQ needs consume on its name", []Permission{{Consume, "orders"}}, OpSubscribe, "orders.dlq", false},
		{"exact DLQ name grants it", []Permission{{Consume, "orders.dlq"}}, OpSubscribe, "orders.dlq", true},
		{"prefix covers the DLQ", []Permission{{Consume, "orders.*"}}, OpSubscribe, "orders.dlq", true},
		{"redrive needs admin on the DLQ", []Permission{{Admin, "orders"}}, OpRedrive, "orders.dlq", false},
		{"redrive needs admin on the parent", []Permission{{Admin, "orders.dlq"}}, OpRedrive, "orders.dlq", false},
		{"prefix alone misses the parent", []Permission{{Admin, "orders.*"}}, OpRedrive, "orders.dlq", false},
		{"admin on both", []Permission{{Admin, "orders"}, {Admin, "orders.dlq"}}, OpRedrive, "orders.dlq", true},
		{"admin on parent and prefix", []Permission{{Admin, "orders"}, {Admin, "orders.*"}}, OpRedrive, "orders.dlq", true},
		{"admin on everything", []Permission{{Admin, "*"}}, OpRedrive, "orders.dlq", true},
		{"produce does not redrive", []Permission{{Produce, "*"}}, OpRedrive, "orders.dlq", false},
		{"config needs admin on *", []Permission{{Admin, "orders.*"}}, OpSetConfig, "", false},
		{"config with admin on *", []Permission{{Admin, "*"}}, OpListConfig, "", true},
		{"api keys need admin on *", []Permission{{Admin, "orders"}, {Produce, "*"}, {Consume, "*"}}, OpCreateAPIKey, "", false},
		{"topology with any kind", []Permission{{Produce, "orders"}}, OpTopology, "orders", true},
		{"topology needs some kind", []Permission{{Produce, "orders"}}, OpTopology, "billing", false},
		{"cluster status needs admin on *", []Permission{{Admin, "orders.*"}, {Produce, "*"}, {Consume, "*"}}, OpClusterStatus, Everything, false},
		{"cluster status with admin on *", []Permission{{Admin, "*"}}, OpClusterStatus, Everything, true},
		{"moving a queue needs admin on *, not on the queue", []Permission{{Admin, "orders"}, {Admin, "orders.*"}, {Produce, "*"}, {Consume, "*"}}, OpMoveQueue, Everything, false},
		{"moving a queue with admin on *", []Permission{{Admin, "*"}}, OpMoveQueue, Everything, true},
		{"draining a node needs admin on *", []Permission{{Admin, "orders"}, {Admin, "orders.*"}, {Produce, "*"}, {Consume, "*"}}, OpDrainNode, Everything, false},
		{"draining a node with admin on *", []Permission{{Admin, "*"}}, OpDrainNode, Everything, true},
		{"rebalancing needs admin on *", []Permission{{Admin, "orders"}, {Produce, "*"}}, OpRebalance, Everything, false},
		{"adding a node needs admin on *", []Permission{{Admin, "orders"}, {Consume, "*"}}, OpAddNode, Everything, false},
		{"removing a node with admin on *", []Permission{{Admin, "*"}}, OpRemoveNode, Everything, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, _, p := mustCreate(t, s, "k", tt.perms...)
			err := p.Authorize(tt.op, tt.queue)
			if tt.ok && err != nil {
				t.Errorf("Authorize(%v, %q) with %v = %v; want nil", tt.op, tt.queue, tt.perms, err)
			}
			if !tt.ok && !errors.Is(err, fault.ErrForbidden) {
				t.Errorf("Authorize(%v, %q) with %v = %v; want fault.ErrForbidden", tt.op, tt.queue, tt.perms, err)
			}
		})
	}
}

func TestVisible(t *testing.T) {
	s := mustOpen(t, newMemKV(), "")
	_, _, p := mustCreate(t, s, "k", Permission{Admin, "billing"}, Permission{Consume, "orders.*"}, Permission{Produce, "audit"})
	for q, want := range map[string]bool{
		"billing": true, "orders.eu": true, "orders.dlq": true, "orders": false, "audit": false, "other": false,
	} {
		if got := p.Visible(q); got != want {
			t.Errorf("Visible(%q) = %v; want %v", q, got, want)
		}
	}
}

// TestConcurrentChecks runs checks while the ACL changes and the key is
// revoked; run it with -race. A reader sees either the old or the new ACL,
// never a mix, and after Revoke returns every check fails.
func TestConcurrentChecks(t *testing.T) {
	s := mustOpen(t, newMemKV(), "")
	aclA := []Permission{{Produce, "a"}}
	aclB := []Permission{{Produce, "b"}, {Consume, "b"}}
	id, _, p := mustCreate(t, s, "k", aclA...)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = p.Allowed(Produce, "a")
				_ = p.Authorize(OpEnqueue, "b")
				acl, err := s.GetACL(id)
				if err != nil {
					continue // revoked at the end
				}
				if !reflect.DeepEqual(acl, aclA) && !reflect.DeepEqual(acl, aclB) {
					t.Errorf("GetACL = %v; want %v or %v", acl, aclA, aclB)
					return
				}
			}
		}()
	}
	for i := 0; i < 500; i++ {
		q, acl := "a", aclA
		if i%2 == 1 {
			q, acl = "b", aclB
		}
		if err := s.SetACL(id, acl); err != nil {
			t.Fatal(err)
		}
		if !p.Allowed(Produce, q) {
			t.Fatalf("Allowed(produce, %q) = false right after SetACL granted it", q)
		}
		if i%100 == 0 {
			_, _, _ = s.Create("churn", nil)
		}
	}
	if err := s.Revoke(id); err != nil {
		t.Fatal(err)
	}
	if p.Valid() || p.Allowed(Produce, "a") || p.Allowed(Produce, "b") {
		t.Errorf("principal allowed after Revoke returned")
	}
	close(stop)
	wg.Wait()
}

// TestOnChange checks that listeners hear of every applied change, after
// checks see it and outside the store's lock, and of no failed one.
func TestOnChange(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv, "")
	type seen struct {
		id      string
		valid   bool
		consume bool
	}
	var got []seen
	var p Principal
	s.OnChange(func(id string) {
		// The change is visible to checks, and the store's lock is free:
		// reading the key through the store must not deadlock.
		s.List()
		got = append(got, seen{id, p.Valid(), p.Allowed(Consume, "orders")})
	})
	id, secret, err := s.Create("svc", []Permission{{Consume, "orders"}})
	if err != nil {
		t.Fatal(err)
	}
	if p, err = s.Authenticate(secret); err != nil {
		t.Fatal(err)
	}
	if err := s.SetACL(id, []Permission{{Produce, "orders"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetACL(id, []Permission{{Kind(9), "orders"}}); err == nil {
		t.Fatal("SetACL with an invalid kind succeeded")
	}
	kv.fail = errors.New("disk full")
	if err := s.Revoke(id); err == nil {
		t.Fatal("Revoke with a failing KV succeeded")
	}
	kv.fail = nil
	if err := s.Revoke("0123456789abcdef"); !errors.Is(err, fault.ErrAPIKeyNotFound) {
		t.Fatalf("Revoke of an unknown key = %v", err)
	}
	if err := s.Revoke(id); err != nil {
		t.Fatal(err)
	}
	want := []seen{
		{id, false, false}, // Create: p is not yet authenticated
		{id, true, false},  // SetACL to produce only
		{id, false, false}, // Revoke
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("OnChange saw %+v; want %+v", got, want)
	}
}
