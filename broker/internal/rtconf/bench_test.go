package rtconf

import (
	"strconv"
	"testing"
)

// nopKV stores nothing, so benchmarks measure the store, not the disk.
type nopKV struct{}

func (nopKV) Put(key, value []byte) error                                { return nil }
func (nopKV) Delete(key []byte) error                                    { return nil }
func (nopKV) Scan(prefix []byte, fn func(key, value []byte) error) error { return nil }

func filled(b *testing.B, n int) *Store {
	s := mustOpen(b, nopKV{})
	for i := 0; i < n; i++ {
		mustSet(b, s, "throttle.tenant-"+strconv.Itoa(i), "100,200")
	}
	return s
}

var sizes = []int{10, 10000}

// BenchmarkGet is the cost of fila.get(key) as Lua hooks on every shard
// call it, concurrently.
func BenchmarkGet(b *testing.B) {
	for _, n := range sizes {
		b.Run("entries="+strconv.Itoa(n), func(b *testing.B) {
			s := filled(b, n)
			key := "throttle.tenant-" + strconv.Itoa(n/2)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, ok := s.Get(key); !ok {
						b.Fatal("missing key")
					}
				}
			})
		})
	}
}

// BenchmarkSet is the cost of one change (copy-on-write of the snapshot),
// without the KV's fsync.
func BenchmarkSet(b *testing.B) {
	for _, n := range sizes {
		b.Run("entries="+strconv.Itoa(n), func(b *testing.B) {
			s := filled(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := s.Set("throttle.tenant-1", strconv.Itoa(i)+",1"); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkList is the cost of ListConfig("throttle.") over every entry.
func BenchmarkList(b *testing.B) {
	for _, n := range sizes {
		b.Run("entries="+strconv.Itoa(n), func(b *testing.B) {
			s := filled(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if len(s.List(ThrottlePrefix)) != n {
					b.Fatal("short list")
				}
			}
		})
	}
}
