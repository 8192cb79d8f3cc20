package store

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzVerifyRecord feeds arbitrary bytes to the record decoder: it must
// never panic, and a record it accepts, of either version, must re-encode
// to the same bytes (a range delete's record too: the version byte follows
// from the mutations).
func FuzzVerifyRecord(f *testing.F) {
	var b Batch
	b.Put([]byte("m/orders\x00id"), []byte("payload"))
	b.Delete([]byte("gone"))
	f.Add(bytes.Clone(b.seal(7)))
	b.DeleteRange([]byte("m/q\x00"), []byte("m/q\x01"))
	b.Put([]byte("m/q\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10"), nil)
	f.Add(bytes.Clone(b.seal(9))) // version 2
	f.Add([]byte{})
	f.Add(appendPadding(nil, 40, 1)[1:])
	f.Fuzz(func(t *testing.T, rec []byte) {
		commit, body, err := verifyRecord(rec)
		if err != nil {
			if !errors.Is(err, errRecord) {
				t.Fatalf("verifyRecord error %v does not wrap errRecord", err)
			}
			return
		}
		if commit == 0 {
			if len(rec) < 5 || rec[4] != recordPadding || body != len(rec) {
				t.Fatalf("verifyRecord accepted commit 0 in a record that is no padding: %x", rec)
			}
			return
		}
		var b Batch
		for pos := body; pos < len(rec); {
			m, next, err := nextMutation(rec, pos)
			if err != nil {
				t.Fatalf("nextMutation after verifyRecord accepted: %v", err)
			}
			pos = next
			switch m.kind {
			case kindPut:
				b.Put(m.key, m.value)
			case kindDelete:
				b.Delete(m.key)
			case kindDeleteRange:
				b.DeleteRange(m.key, m.end)
			default:
				t.Fatalf("verifyRecord accepted mutation kind %d", m.kind)
			}
		}
		// A uvarint may be written longer than needed; compare what a
		// canonical writer produces only when the input is canonical.
		if again := b.seal(commit); !bytes.Equal(again, rec) && len(again) == len(rec) {
			t.Fatalf("re-encoded record differs:\n%x\n%x", again, rec)
		}
	})
}

// FuzzOpen writes arbitrary bytes after a valid record as the newest
// segment file and opens the store: Open must not panic, must keep the
// valid record, and what it recovers must reopen to the same state and
// accept new groups.
func FuzzOpen(f *testing.F) {
	var b Batch
	b.Put([]byte("a"), []byte("first"))
	valid := append([]byte{byte(len(b.seal(1)))}, b.seal(1)...)
	f.Add([]byte{})
	f.Add([]byte{0, 0, 0, 0})
	f.Add(bytes.Clone(valid))
	f.Add(valid[:len(valid)-2])
	var r Batch // a version 2 record: a range delete, then a put
	r.DeleteRange([]byte("a"), []byte("b"))
	r.Put([]byte("a"), []byte("again"))
	f.Add(append([]byte{byte(len(r.seal(2)))}, r.seal(2)...))
	f.Fuzz(func(t *testing.T, tail []byte) {
		dir := t.TempDir()
		data := append(bytes.Clone(valid), tail...)
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), data, 0o640); err != nil {
			t.Fatal(err)
		}
		d, err := Open(dir, Options{Logger: quiet})
		if err != nil {
			return // damage to a durable commit: refusing is right
		}
		before := dump(t, d)
		if _, ok := before["a"]; !ok && len(tail) < 7 { // too short to hold a record that deletes it
			t.Fatalf("recovered %q; the valid first record is lost", before)
		}
		var nb Batch
		nb.Put([]byte("z"), []byte("new"))
		if err := d.Apply(&nb); err != nil {
			t.Fatal(err)
		}
		d.Close()
		d, err = Open(dir, Options{Logger: quiet})
		if err != nil {
			t.Fatalf("reopen = %v", err)
		}
		defer d.Close()
		after := dump(t, d)
		before["z"] = "new"
		if diff := diffState(after, before); diff != "" {
			t.Fatalf("reopen differs: %s", diff)
		}
	})
}
