package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"slices"
	"testing"
)

// quiet is a logger that drops everything; tests that check log lines use
// their own.
var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// openT opens a Disk in dir for a test, without background compaction
// unless auto is set, and closes it at the end of the test.
func openT(t testing.TB, dir string, opts Options, auto bool) *Disk {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet
	}
	d, err := open(dir, opts, auto)
	if err != nil {
		t.Fatalf("Open(%q) = %v", dir, err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// store is what Disk and Mem share, for tests that run on both.
type store interface {
	Apply(*Batch) error
	ApplyAsync(*Batch, func(error))
	Get([]byte) ([]byte, error)
	Scan(start, end []byte, fn func(key, value []byte) error) error
	ScanKeys(start, end []byte, fn func(key []byte) error) error
	Stats() Stats
	Close() error
}

var (
	_ store = (*Disk)(nil)
	_ store = (*Mem)(nil)
)

// dump returns every key and value of s.
func dump(t testing.TB, s store) map[string]string {
	t.Helper()
	m := map[string]string{}
	var prev []byte
	err := s.Scan(nil, nil, func(k, v []byte) error {
		if prev != nil && bytes.Compare(prev, k) >= 0 {
			return fmt.Errorf("scan out of order: %q then %q", prev, k)
		}
		prev = append(prev[:0], k...)
		m[string(k)] = string(v)
		return nil
	})
	if err != nil {
		t.Fatalf("Scan = %v", err)
	}
	for k, v := range m {
		got, err := s.Get([]byte(k))
		if err != nil || string(got) != v {
			t.Fatalf("Get(%q) = %q, %v; want %q (as scanned)", k, got, err, v)
		}
	}
	return m
}

// diffState describes how got differs from want, or returns "".
func diffState(got, want map[string]string) string {
	if maps.Equal(got, want) {
		return ""
	}
	var out bytes.Buffer
	keys := slices.Sorted(maps.Keys(got))
	for _, k := range keys {
		if w, ok := want[k]; !ok {
			fmt.Fprintf(&out, "extra %q; ", k)
		} else if w != got[k] {
			fmt.Fprintf(&out, "%q = %d bytes, want %d; ", k, len(got[k]), len(w))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if _, ok := got[k]; !ok {
			fmt.Fprintf(&out, "missing %q; ", k)
		}
	}
	if out.Len() > 600 {
		return out.String()[:600] + "..."
	}
	return out.String()
}

var errCrash = errors.New("simulated crash")

// stateOf returns the state after applying groups in order.
func stateOf(groups []*Batch) map[string]string {
	st := map[string]string{}
	for _, b := range groups {
		muts := b.mutations()
		for pos := 0; pos < len(muts); {
			m, next, err := nextMutation(muts, pos)
			if err != nil {
				panic(err)
			}
			pos = next
			switch m.kind {
			case kindDelete:
				delete(st, string(m.key))
			case kindDeleteRange:
				for k := range st {
					if k >= string(m.key) && k < string(m.end) {
						delete(st, k)
					}
				}
			default:
				st[string(m.key)] = string(m.value)
			}
		}
	}
	return st
}
