package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// manyStore is what TestGetMany needs of Disk and Mem.
type manyStore interface {
	Apply(*Batch) error
	GetMany([][]byte, func(int, []byte) error) error
}

// TestGetMany checks that GetMany returns what Get returns for each key,
// absent keys skipped and values larger than a window included, and that
// a batch of values written one after another costs one read of the file,
// not one each.
func TestGetMany(t *testing.T) {
	for _, st := range []struct {
		name string
		open func(t *testing.T) (manyStore, *Disk)
	}{
		{"disk", func(t *testing.T) (manyStore, *Disk) {
			d := openT(t, t.TempDir(), Options{SegmentSize: 4 << 20, CacheSize: -1, UnsafeNoSync: true}, false)
			return d, d
		}},
		{"mem", func(t *testing.T) (manyStore, *Disk) {
			m := NewMem()
			t.Cleanup(func() { m.Close() })
			return m, nil
		}},
	} {
		t.Run(st.name, func(t *testing.T) {
			s, d := st.open(t)
			r := rand.New(rand.NewPCG(5, 6))
			const n = 3000
			key := func(i int) []byte {
				var id [16]byte
				id[8], id[9] = byte(i>>8), byte(i)
				return append([]byte("m/q\x00"), id[:]...)
			}
			want := make([][]byte, n)
			var b Batch
			for i := range n {
				size := 1 + r.IntN(2048)
				if i%701 == 0 {
					size = maxWindow + 1 + r.IntN(maxWindow)
				}
				v := make([]byte, size)
				for j := range v {
					v[j] = byte(i + j*11)
				}
				want[i] = v
				if i%10 == 9 {
					want[i] = nil // never written: absent
					continue
				}
				b.Put(key(i), v)
				if b.Len() >= 100 {
					if err := s.Apply(&b); err != nil {
						t.Fatal(err)
					}
					b.Reset()
				}
			}
			if err := s.Apply(&b); err != nil {
				t.Fatal(err)
			}
			// Batches of consecutive keys, of shuffled keys, and with a
			// key asked twice.
			batches := [][]int{}
			for lo := 0; lo < n; lo += 128 {
				var ks []int
				for i := lo; i < min(lo+128, n); i++ {
					ks = append(ks, i)
				}
				batches = append(batches, ks)
			}
			batches = append(batches, r.Perm(n)[:500], []int{7, 3, 7, 9, 1400})
			for _, ks := range batches {
				keys := make([][]byte, len(ks))
				for j, i := range ks {
					keys[j] = key(i)
				}
				got := make([][]byte, len(ks))
				err := s.GetMany(keys, func(j int, v []byte) error {
					if got[j] != nil {
						return fmt.Errorf("key %d reported twice", j)
					}
					got[j] = bytes.Clone(v)
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				for j, i := range ks {
					if !bytes.Equal(got[j], want[i]) || (got[j] == nil) != (want[i] == nil) {
						t.Fatalf("value %d: %d bytes, want %d (present %v)", i, len(got[j]), len(want[i]), want[i] != nil)
					}
				}
			}
			if d == nil {
				return
			}
			// 128 values written one after another, about 130 KiB: a
			// read or two (a segment boundary), not 128.
			keys := make([][]byte, 0, 128)
			for i := 1000; i < 1128; i++ {
				keys = append(keys, key(i))
			}
			before := d.Stats().CacheMisses
			if err := d.GetMany(keys, func(int, []byte) error { return nil }); err != nil {
				t.Fatal(err)
			}
			if reads := d.Stats().CacheMisses - before; reads > 3 {
				t.Errorf("GetMany of 128 consecutive values: %d reads of the files, want at most 3", reads)
			}
			// fn's error stops it.
			stop := errors.New("stop")
			calls := 0
			err := d.GetMany(keys, func(int, []byte) error { calls++; return stop })
			if !errors.Is(err, stop) || calls != 1 {
				t.Errorf("GetMany with fn failing: err %v after %d calls, want stop after 1", err, calls)
			}
		})
	}
}
