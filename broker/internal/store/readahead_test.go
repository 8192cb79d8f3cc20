package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestScanReadAhead: a scan of values written in key order, in groups of
// mixed sizes over several segments (some larger than half a window,
// which are read alone), with the cache off, returns every value intact
// and reads the files in windows, not once a value; a scan of keys whose
// values lie in random log order returns them intact too; and so does a
// scan after a reopen, when the files are all the store has.
func TestScanReadAhead(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir, Options{SegmentSize: 4 << 20, CacheSize: -1, UnsafeNoSync: true}, false)
	r := rand.New(rand.NewPCG(3, 4))
	const n = 6000
	want := make(map[string][]byte, n)
	key := func(q string, i int) []byte {
		var id [16]byte
		id[8], id[9], id[10] = byte(i>>16), byte(i>>8), byte(i)
		return append([]byte("m/"+q+"\x00"), id[:]...)
	}
	value := func(i int) []byte {
		size := 1 + r.IntN(2048)
		if i%997 == 0 {
			size = maxWindow/2 + 1 + r.IntN(maxWindow)
		}
		v := make([]byte, size)
		for j := range v {
			v[j] = byte(i + j*7)
		}
		return v
	}
	// Queue "a" in order, queue "b" in a random order of its keys,
	// interleaved in the log.
	perm := r.Perm(n)
	var b Batch
	for i := range n {
		ka, va := key("a", i), value(i)
		kb, vb := key("b", perm[i]), value(perm[i])
		b.Put(ka, va)
		b.Put(kb, vb)
		want[string(ka)], want[string(kb)] = va, vb
		if b.Len() >= 64 {
			if err := d.Apply(&b); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
	if err := d.Apply(&b); err != nil {
		t.Fatal(err)
	}
	check := func(d *Disk, q string, maxReads uint64) {
		t.Helper()
		before := d.Stats().CacheMisses
		got := 0
		err := d.Scan([]byte("m/"+q+"\x00"), []byte("m/"+q+"\x01"), func(k, v []byte) error {
			if w := want[string(k)]; !bytes.Equal(v, w) {
				return fmt.Errorf("value of %q: %d bytes, want %d, differing", k, len(v), len(w))
			}
			got++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Fatalf("scan of %s: %d keys, want %d", q, got, n)
		}
		if reads := d.Stats().CacheMisses - before; reads > maxReads {
			t.Errorf("scan of %s: %d reads of the files for %d values; want at most %d", q, reads, n, maxReads)
		}
	}
	check(d, "a", n/10)
	check(d, "b", n)
	d.Close()
	d = openT(t, dir, Options{SegmentSize: 4 << 20, CacheSize: -1}, false)
	check(d, "a", n/10)
	check(d, "b", n)
}
