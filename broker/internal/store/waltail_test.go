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
	l := openWal(t, "first")
	buf := roomyTail(l, 1<<20, nil)
	if buf == nil {
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
	if roomyTail(nil, 1, nil) != nil {
		t.Error("roomyTail(nil) returned a buffer")
	}

	// A new log's tail takes the spare buffer, once the first log no
	// longer uses it, and keeps its bytes.
	l.Close()
	l2 := openWal(t, "second")
	got := roomyTail(l2, 1<<20, buf)
	if &got[:1][0] != &buf[:1][0] {
		t.Error("the spare buffer was not reused")
	}
	if data, err := l2.Read(1); err != nil || string(data) != "second" {
		t.Errorf("entry 1 of the second log: %q, %v", data, err)
	}
}

// openWal opens a log of 64 KiB segments in a new directory, closed at the
// end of the test, holding one entry, first.
func openWal(t *testing.T, first string) *wal.Log {
	t.Helper()
	l, err := wal.Open(t.TempDir(), &wal.Options{NoSync: true, SegmentSize: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := l.Write(1, []byte(first)); err != nil {
		t.Fatal(err)
	}
	return l
}
