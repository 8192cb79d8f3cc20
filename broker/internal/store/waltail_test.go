package store

import (
	"testing"

	"github.com/tidwall/wal"
)

// TestRoomyTail: roomyTail knows the layout of the tidwall/wal version in
// go.mod (a version that changes it fails here, not silently in speed),
// and gives the tail segment's buffer a segment's capacity with its bytes
// unchanged, so that the log still reads back every entry.
func TestRoomyTail(t *testing.T) {
	l, err := wal.Open(t.TempDir(), &wal.Options{NoSync: true, SegmentSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Write(1, []byte("first")); err != nil {
		t.Fatal(err)
	}
	if !roomyTail(l, 1<<20) {
		t.Fatal("roomyTail does not know this tidwall/wal's layout")
	}
	if p := tailBuffer(l); p == nil || cap(*p) < 1<<20 {
		t.Fatalf("tail buffer after roomyTail: %v", p)
	}
	var b wal.Batch
	for i := uint64(2); i <= 100; i++ {
		b.Write(i, []byte{byte(i)})
	}
	if err := l.WriteBatch(&b); err != nil {
		t.Fatal(err)
	}
	for i := uint64(1); i <= 100; i++ {
		got, err := l.Read(i)
		want := []byte{byte(i)}
		if i == 1 {
			want = []byte("first")
		}
		if err != nil || string(got) != string(want) {
			t.Fatalf("entry %d: %q, %v; want %q", i, got, err, want)
		}
	}
	if roomyTail(nil, 1) {
		t.Error("roomyTail(nil) = true")
	}
}
