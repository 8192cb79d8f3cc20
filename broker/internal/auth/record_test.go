package auth

import (
	"bytes"
	"crypto/sha256"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestRecordRoundTrip(t *testing.T) {
	keys := []*apiKey{
		{name: "n", created: time.UnixMilli(0).UTC()},
		{name: "ci runner", created: epoch.Truncate(time.Millisecond), hash: sha256.Sum256([]byte("s")),
			perms: []Permission{{Produce, "orders.*"}, {Consume, "orders.dlq"}, {Admin, "*"}}},
		{name: strings.Repeat("é", MaxNameLen/2), created: time.UnixMilli(1 << 41).UTC(),
			perms: []Permission{{Admin, strings.Repeat("q", MaxPatternLen)}}},
	}
	for _, k := range keys {
		b := encodeRecord(k)
		got, err := decodeRecord("00000000000000aa", b)
		if err != nil {
			t.Fatalf("decodeRecord(encodeRecord(%+v)) error = %v", k, err)
		}
		got.id = k.id
		if !reflect.DeepEqual(got, k) {
			t.Errorf("decodeRecord(encodeRecord(%+v)) = %+v", k, got)
		}
	}
}

func TestRecordLayout(t *testing.T) {
	k := &apiKey{name: "ab", created: time.UnixMilli(0x0102030405).UTC(), perms: []Permission{{Consume, "q"}}}
	k.hash[0], k.hash[31] = 0xAA, 0xBB
	want := []byte{1, 0, 0, 0, 0x01, 0x02, 0x03, 0x04, 0x05}
	want = append(want, k.hash[:]...)
	want = append(want, 0, 2, 'a', 'b', 0, 1, 2, 0, 1, 'q')
	if got := encodeRecord(k); !bytes.Equal(got, want) {
		t.Errorf("encodeRecord(%+v) =\n% x\nwant\n% x", k, got, want)
	}
}

// FuzzDecodeRecord feeds arbitrary bytes to the decoder of stored records.
// It must not panic, and what it accepts must encode back to the same bytes
// (the encoding is canonical) and hold only valid names and permissions.
func FuzzDecodeRecord(f *testing.F) {
	f.Add(encodeRecord(&apiKey{name: "ci", created: epoch, perms: []Permission{{Produce, "orders.*"}}}))
	f.Add(encodeRecord(&apiKey{name: "x", created: time.UnixMilli(0)}))
	f.Add([]byte{1})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := decodeRecord("00000000000000aa", b)
		if err != nil {
			return
		}
		if err := validateName(k.name); err != nil {
			t.Fatalf("decoded an invalid name: %v", err)
		}
		if err := validatePermissions(k.perms); err != nil {
			t.Fatalf("decoded an invalid ACL: %v", err)
		}
		if back := encodeRecord(k); !bytes.Equal(back, b) {
			t.Fatalf("encodeRecord(decodeRecord(% x)) = % x", b, back)
		}
	})
}
