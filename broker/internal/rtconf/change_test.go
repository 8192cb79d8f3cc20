package rtconf

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"testing"

	"github.com/fila-mq/fila/broker/internal/fault"
)

func sampleChanges() []Change {
	return []Change{
		{Op: ChangeSet, Key: "weight.acme", Value: "5"},
		{Op: ChangeSet, Key: "throttle.provider:x", Value: "10,20"},
		{Op: ChangeSet, Key: "weight.acme", Value: "7"},
		{Op: ChangeSet, Key: "empty", Value: ""},
		{Op: ChangeDelete, Key: "throttle.provider:x"},
		{Op: ChangeDelete, Key: "never.set"},
	}
}

// TestChangeRoundTrip encodes and decodes a change of every op.
func TestChangeRoundTrip(t *testing.T) {
	for _, c := range sampleChanges() {
		got, err := DecodeChange(c.AppendTo(nil))
		if err != nil || got != c {
			t.Fatalf("DecodeChange(AppendTo(%+v)) = %+v, %v", c, got, err)
		}
	}
}

// TestChangesApplyAlike: the same changes, encoded, decoded and applied
// in the same order to two stores, give the same entries and the same
// watcher calls on each.
func TestChangesApplyAlike(t *testing.T) {
	kvs := []*memKV{newMemKV(), newMemKV()}
	stores := []*Store{mustOpen(t, kvs[0]), mustOpen(t, kvs[1])}
	heard := make([][]string, 2)
	for i, s := range stores {
		s.Watch("", func(key, value string, deleted bool) {
			heard[i] = append(heard[i], fmt.Sprintf("%s=%q deleted=%v", key, value, deleted))
		})
	}
	for _, c := range sampleChanges() {
		enc := c.AppendTo(nil)
		for i, s := range stores {
			d, err := DecodeChange(enc)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := s.Apply(d); err != nil {
				t.Fatalf("store %d: Apply(%+v): %v", i, d, err)
			}
		}
	}
	if !maps.Equal(kvs[0].m, kvs[1].m) {
		t.Fatalf("stored entries differ: %v and %v", kvs[0].m, kvs[1].m)
	}
	if fmt.Sprint(stores[0].List("")) != fmt.Sprint(stores[1].List("")) {
		t.Fatalf("entries differ: %v and %v", stores[0].List(""), stores[1].List(""))
	}
	if fmt.Sprint(heard[0]) != fmt.Sprint(heard[1]) || len(heard[0]) != 5 {
		t.Fatalf("watchers heard %v and %v; want the same 5 changes", heard[0], heard[1])
	}
}

// TestApplyChecksForm: Apply refuses a change whose key or value Set
// would refuse for its form, or an unknown op, and changes nothing.
func TestApplyChecksForm(t *testing.T) {
	s := mustOpen(t, newMemKV())
	for _, c := range []Change{
		{Op: ChangeSet, Key: "", Value: "x"},
		{Op: ChangeSet, Key: "k", Value: string([]byte{0xff})},
		{Op: 9, Key: "k"},
	} {
		if _, err := s.Apply(c); !errors.Is(err, fault.ErrInvalidArgument) {
			t.Errorf("Apply(%+v) = %v; want INVALID_ARGUMENT", c, err)
		}
	}
	if n := len(s.List("")); n != 0 {
		t.Fatalf("%d entries after refused changes", n)
	}
}

func FuzzDecodeChange(f *testing.F) {
	for _, c := range sampleChanges() {
		f.Add(c.AppendTo(nil))
	}
	f.Add([]byte{1, 1, 0, 1, 'k', 0xff, 0xff, 0xff, 0xff})
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

// TestReload: a store whose entries are replaced underneath it, in its
// KV (as a cluster node installs a snapshot of the meta group), reads
// the new entries after Reload, and its watchers hear of every key set,
// changed or deleted, in key order; keys left as they were are not
// reported.
func TestReload(t *testing.T) {
	kv := newMemKV()
	s := mustOpen(t, kv)
	mustSet(t, s, "a.same", "1")
	mustSet(t, s, "b.changed", "old")
	mustSet(t, s, "c.deleted", "x")
	var events []string
	s.Watch("", func(k, v string, deleted bool) { events = append(events, fmt.Sprintf("%s=%s/%v", k, v, deleted)) })
	events = nil
	kv.m = map[string]string{KeyPrefix + "a.same": "1", KeyPrefix + "b.changed": "new", KeyPrefix + "d.added": "y"}
	if err := s.Reload(); err != nil {
		t.Fatal(err)
	}
	if want := "[b.changed=new/false c.deleted=/true d.added=y/false]"; fmt.Sprint(events) != want {
		t.Fatalf("watchers heard %v; want %s", events, want)
	}
	if got := fmt.Sprint(s.List("")); got != "[{a.same 1} {b.changed new} {d.added y}]" {
		t.Fatalf("List after the reload: %s", got)
	}
	if v, ok := s.Get("c.deleted"); ok {
		t.Fatalf("a deleted key reads %q", v)
	}
	kv.m[KeyPrefix+"bad\x01key"] = "z"
	if err := s.Reload(); err == nil {
		t.Fatal("a reload of an invalid stored key succeeds")
	}
	if v, _ := s.Get("d.added"); v != "y" {
		t.Fatalf("a failed reload changed the entries: d.added = %q", v)
	}
}
