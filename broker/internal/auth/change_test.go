package auth

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

func sampleChanges() []Change {
	return []Change{
		{Op: ChangeCreate, KeyID: "00000000000000a1", Name: "ci", Created: epoch.Truncate(time.Millisecond),
			Hash: sha256.Sum256([]byte("fila_one")), Perms: []Permission{{Produce, "orders.*"}, {Consume, "orders"}}},
		{Op: ChangeCreate, KeyID: "00000000000000b2", Name: "ops", Created: epoch.Truncate(time.Millisecond),
			Hash: sha256.Sum256([]byte("fila_two")), Perms: []Permission{{Admin, "*"}}},
		{Op: ChangeSetACL, KeyID: "00000000000000a1", Perms: []Permission{{Consume, "billing.*"}}},
		{Op: ChangeSetACL, KeyID: "00000000000000b2"},
		{Op: ChangeRevoke, KeyID: "00000000000000b2"},
	}
}

// TestChangeRoundTrip encodes and decodes a change of every op.
func TestChangeRoundTrip(t *testing.T) {
	ops := map[ChangeOp]bool{}
	for _, c := range sampleChanges() {
		ops[c.Op] = true
		got, err := DecodeChange(c.AppendTo(nil))
		if err != nil {
			t.Fatalf("DecodeChange(%+v): %v", c, err)
		}
		if !bytes.Equal(got.AppendTo(nil), c.AppendTo(nil)) || got.KeyID != c.KeyID || got.Op != c.Op || len(got.Perms) != len(c.Perms) {
			t.Fatalf("round trip of %+v gave %+v", c, got)
		}
	}
	if len(ops) != 3 {
		t.Fatalf("the samples cover %d ops; want every one", len(ops))
	}
}

// TestChangesApplyAlike: the same changes, encoded, decoded and applied
// in the same order to two stores, give the same keys, the same stored
// bytes, and the same answers to checks; each store's listeners hear of
// every change it applies.
func TestChangesApplyAlike(t *testing.T) {
	kvs := []*memKV{newMemKV(), newMemKV()}
	stores := []*Store{mustOpen(t, kvs[0], ""), mustOpen(t, kvs[1], "")}
	heard := make([][]string, 2)
	for i, s := range stores {
		s.OnChange(func(id string) { heard[i] = append(heard[i], id) })
	}
	for _, c := range sampleChanges() {
		enc := c.AppendTo(nil)
		for i, s := range stores {
			d, err := DecodeChange(enc)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Apply(d); err != nil {
				t.Fatalf("store %d: Apply(%+v): %v", i, d, err)
			}
		}
	}
	if a, b := cloneKV(kvs[0]), cloneKV(kvs[1]); len(a) != len(b) {
		t.Fatalf("stores hold %d and %d keys", len(a), len(b))
	} else {
		for k, v := range a {
			if !bytes.Equal(v, b[k]) {
				t.Fatalf("key %q differs: % x and % x", k, v, b[k])
			}
		}
	}
	for i, s := range stores {
		p, err := s.Authenticate("fila_one")
		if err != nil || !p.Allowed(Consume, "billing.x") || p.Allowed(Produce, "orders.x") {
			t.Fatalf("store %d: the key after its ACL change: %v", i, err)
		}
		if _, err := s.Authenticate("fila_two"); err == nil {
			t.Fatalf("store %d: a revoked key authenticates", i)
		}
		if len(heard[i]) != len(sampleChanges()) {
			t.Fatalf("store %d: listeners heard %v; want every change", i, heard[i])
		}
	}
}

// TestApplyRefuses: changes that do not fit the store's keys fail and
// change nothing.
func TestApplyRefuses(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv, "")
	create := sampleChanges()[0]
	if err := s.Apply(create); err != nil {
		t.Fatal(err)
	}
	before := cloneKV(kv)
	for _, tc := range []struct {
		name string
		c    Change
		want error
	}{
		{"create an ID in use", create, fault.ErrInvalidArgument},
		{"set the ACL of an unknown key", Change{Op: ChangeSetACL, KeyID: "00000000000000ff"}, fault.ErrAPIKeyNotFound},
		{"revoke an unknown key", Change{Op: ChangeRevoke, KeyID: "00000000000000ff"}, fault.ErrAPIKeyNotFound},
		{"invalid ID", Change{Op: ChangeRevoke, KeyID: "../x"}, fault.ErrInvalidArgument},
		{"unknown op", Change{Op: 9, KeyID: "00000000000000a1"}, fault.ErrInvalidArgument},
	} {
		if err := s.Apply(tc.c); !errors.Is(err, tc.want) {
			t.Errorf("%s: Apply = %v; want %v", tc.name, err, tc.want)
		}
	}
	after := cloneKV(kv)
	if len(before) != len(after) {
		t.Fatal("a refused change changed the stored keys")
	}
}

func FuzzDecodeChange(f *testing.F) {
	for _, c := range sampleChanges() {
		f.Add(c.AppendTo(nil))
	}
	f.Add([]byte{1, 3, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeChange(b)
		if err != nil {
			return
		}
		if back := c.AppendTo(nil); !bytes.Equal(back, b) {
			t.Fatalf("AppendTo(DecodeChange(% x)) = % x", b, back)
		}
	})
}

// TestReload: a store whose keys are replaced underneath it, in its KV,
// by another store's (as a cluster node installs a snapshot of the meta
// group), checks against the new keys after Reload, and its listeners
// hear of every key added, changed or removed, once each, in ID order.
func TestReload(t *testing.T) {
	behind, ahead := newMemKV(), newMemKV()
	s := mustOpen(t, behind, "")
	other := mustOpen(t, ahead, "")
	changes := sampleChanges()
	for _, c := range changes[:2] { // both keys, as created
		if err := s.Apply(c); err != nil {
			t.Fatal(err)
		}
	}
	s.Apply(Change{Op: ChangeCreate, KeyID: "00000000000000c3", Name: "gone", Created: epoch.Truncate(time.Millisecond),
		Hash: sha256.Sum256([]byte("fila_three")), Perms: []Permission{{Admin, "*"}}})
	for _, c := range append(changes, Change{Op: ChangeCreate, KeyID: "00000000000000d4", Name: "new", Created: epoch.Truncate(time.Millisecond),
		Hash: sha256.Sum256([]byte("fila_four")), Perms: []Permission{{Produce, "*"}}}) {
		if err := other.Apply(c); err != nil {
			t.Fatal(err)
		}
	}
	var heard []string
	s.OnChange(func(id string) { heard = append(heard, id) })
	behind.m = cloneKV(ahead)
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	// a1's ACL changed, b2 and c3 are gone, d4 is new.
	if want := "00000000000000a1 00000000000000b2 00000000000000c3 00000000000000d4"; fmt.Sprint(heard) != "["+want+"]" {
		t.Fatalf("listeners heard %v; want [%s]", heard, want)
	}
	p, err := s.Authenticate("fila_one")
	if err != nil || !p.Allowed(Consume, "billing.x") || p.Allowed(Produce, "orders.x") {
		t.Fatalf("the key whose ACL changed: %v", err)
	}
	for _, gone := range []string{"fila_two", "fila_three"} {
		if _, err := s.Authenticate(gone); err == nil {
			t.Fatalf("%s authenticates after the reload removed its key", gone)
		}
	}
	if _, err := s.Authenticate("fila_four"); err != nil {
		t.Fatalf("the key the reload added: %v", err)
	}
	heard = nil
	if err := s.Reload(); err != nil || len(heard) != 0 {
		t.Fatalf("a reload that changes nothing: %v, listeners heard %v", err, heard)
	}
	behind.m["k/zz"] = []byte("x")
	if err := s.Reload(); err == nil {
		t.Fatal("a reload of a corrupt KV succeeds")
	}
	if _, err := s.Authenticate("fila_four"); err != nil {
		t.Fatalf("a failed reload changed the keys: %v", err)
	}
}
