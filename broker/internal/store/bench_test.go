package store

import (
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	benchRecords = flag.Int("store.records", 100_000, "records for BenchmarkRecovery, BenchmarkIndexMemory and BenchmarkPendingRSS")
	benchChurn   = flag.Int64("store.churn", 512<<20, "bytes enqueued then deleted by BenchmarkChurn")
	benchSegment = flag.Int64("store.segment", 0, "segment size of the append benchmarks (0: the default)")
	benchRange   = flag.Int("store.range", 2_000_000, "keys deleted by BenchmarkDeleteRange's range delete")
)

// brokerKey writes a key shaped like the scheduler's message keys,
// m/<queue>\x00<16-byte id>; the id is UUIDv7-like, ordered by i.
func brokerKey(dst []byte, queue string, i uint64) []byte {
	dst = append(dst[:0], "m/"...)
	dst = append(dst, queue...)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint64(dst, (epochMilli+i/1000)<<16|0x7000)
	return binary.BigEndian.AppendUint64(dst, i|0x8000_0000_0000_0000)
}

const epochMilli = 1_750_000_000_000

func value(n int) []byte {
	v := make([]byte, n)
	for i := range v {
		v[i] = byte(i*7 + 1)
	}
	return v
}

// reportCommits adds records/s, fsyncs/s and records/fsync to b.
func reportCommits(b *testing.B, d *Disk, before Stats, records int) {
	st := d.Stats()
	secs := b.Elapsed().Seconds()
	syncs := float64(st.Syncs - before.Syncs)
	b.ReportMetric(float64(records)/secs, "records/s")
	b.ReportMetric(syncs/secs, "fsyncs/s")
	if syncs > 0 {
		b.ReportMetric(float64(records)/syncs, "records/fsync")
	}
}

// BenchmarkApply: one goroutine applying groups of 1, 16 and 256 puts of
// 1 KiB values, each Apply waiting for its fsync.
func BenchmarkApply(b *testing.B) {
	v := value(1024)
	for _, size := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			d := openT(b, b.TempDir(), Options{SegmentSize: *benchSegment}, true)
			var batch Batch
			var key []byte
			before := d.Stats()
			b.SetBytes(int64(size * len(v)))
			b.ResetTimer()
			n := uint64(0)
			for range b.N {
				batch.Reset()
				for range size {
					key = brokerKey(key, "orders", n)
					n++
					batch.Put(key, v)
				}
				if err := d.Apply(&batch); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			reportCommits(b, d, before, b.N*size)
		})
	}
}

// BenchmarkApplyConcurrent: 64 goroutines each applying groups of 1 and
// of 16 puts of 1 KiB, waiting for each; b.N counts records.
func BenchmarkApplyConcurrent(b *testing.B) {
	v := value(1024)
	for _, tc := range []struct{ writers, batch int }{{64, 1}, {64, 16}} {
		writers := tc.writers
		b.Run(fmt.Sprintf("writers=%d/batch=%d", writers, tc.batch), func(b *testing.B) {
			d := openT(b, b.TempDir(), Options{SegmentSize: *benchSegment}, true)
			before := d.Stats()
			b.SetBytes(int64(len(v)))
			b.ResetTimer()
			var wg sync.WaitGroup
			// b.N counts records: each writer applies per/batch groups.
			per := (b.N + writers*tc.batch - 1) / (writers * tc.batch) * tc.batch
			for w := range writers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var batch Batch
					var key []byte
					for i := 0; i < per; i += tc.batch {
						batch.Reset()
						for j := range tc.batch {
							key = brokerKey(key, "q"+strconv.Itoa(w), uint64(i+j))
							batch.Put(key, v)
						}
						if err := d.Apply(&batch); err != nil {
							b.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			b.StopTimer()
			reportCommits(b, d, before, per*writers)
		})
	}
}

// BenchmarkApplyAsync: one goroutine submitting one-put groups of 1 KiB
// with ApplyAsync and going on at once, as the scheduler does, with at most
// 4096 groups in flight; b.N counts records.
func BenchmarkApplyAsync(b *testing.B) {
	v := value(1024)
	d := openT(b, b.TempDir(), Options{SegmentSize: *benchSegment}, true)
	const inflight = 4096
	free := make(chan *Batch, inflight)
	for range inflight {
		free <- new(Batch)
	}
	done := func(batch *Batch) func(error) {
		return func(err error) {
			if err != nil {
				b.Error(err)
			}
			free <- batch
		}
	}
	before := d.Stats()
	b.SetBytes(int64(len(v)))
	b.ResetTimer()
	var key []byte
	for i := range b.N {
		batch := <-free
		batch.Reset()
		key = brokerKey(key, "orders", uint64(i))
		batch.Put(key, v)
		d.ApplyAsync(batch, done(batch))
	}
	for range inflight {
		<-free
	}
	b.StopTimer()
	reportCommits(b, d, before, b.N)
}

// BenchmarkGet reads 1 KiB values written before, from the cache and
// (cache disabled) with pread from the page cache.
func BenchmarkGet(b *testing.B) {
	v := value(1024)
	for _, tc := range []struct {
		name  string
		cache int64
	}{{"cache", 64 << 20}, {"pread", -1}} {
		b.Run(tc.name, func(b *testing.B) {
			d := openT(b, b.TempDir(), Options{CacheSize: tc.cache, UnsafeNoSync: true}, false)
			const n = 10_000
			var batch Batch
			keys := make([][]byte, n)
			for i := range n {
				keys[i] = brokerKey(nil, "orders", uint64(i))
				batch.Put(keys[i], v)
				if batch.Len() == 256 || i == n-1 {
					if err := d.Apply(&batch); err != nil {
						b.Fatal(err)
					}
					batch.Reset()
				}
			}
			b.SetBytes(int64(len(v)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := d.Get(keys[i%n]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// fillStore applies records 1 KiB puts of broker-shaped keys spread over
// queues, in groups of 256.
func fillStore(tb testing.TB, d *Disk, records int, queues int) {
	v := value(1024)
	var batch Batch
	var key []byte
	for i := range records {
		key = brokerKey(key, "q"+strconv.Itoa(i%queues), uint64(i))
		batch.Put(key, v)
		if batch.Len() == 256 || i == records-1 {
			if err := d.Apply(&batch); err != nil {
				tb.Fatal(err)
			}
			batch.Reset()
		}
	}
}

// BenchmarkRecovery measures Open of a store holding -store.records
// pending 1 KiB records (default 100,000; the documented figure uses
// 1,000,000), with the files in the page cache.
func BenchmarkRecovery(b *testing.B) {
	dir := b.TempDir()
	d := openT(b, dir, Options{UnsafeNoSync: true}, false)
	fillStore(b, d, *benchRecords, 10)
	if err := d.Close(); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		d, err := Open(dir, Options{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if got := d.Stats().Keys; got != *benchRecords {
			b.Fatalf("recovered %d keys; want %d", got, *benchRecords)
		}
		d.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(*benchRecords)/(b.Elapsed().Seconds()/float64(b.N)), "records/s")
}

// BenchmarkIndexMemory reports the heap the index costs per key, with
// -store.records keys of the scheduler's shape (m/<queue>\x00<16-byte id>,
// ten queues): in all (index-bytes/key), beyond the key bytes
// (heap-bytes/key, the measure of earlier versions, whose index held each
// key in a string), and the part of it the garbage collector scans
// (scan-bytes/key).
func BenchmarkIndexMemory(b *testing.B) {
	scan := []metrics.Sample{{Name: "/gc/scan/heap:bytes"}}
	for range b.N {
		d := openT(b, b.TempDir(), Options{UnsafeNoSync: true, CacheSize: -1}, false)
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		metrics.Read(scan)
		scanBefore := scan[0].Value.Uint64()
		var batch Batch
		var key []byte
		keyBytes := 0
		for i := range *benchRecords {
			key = brokerKey(key, "q"+strconv.Itoa(i%10), uint64(i))
			keyBytes += len(key)
			batch.Put(key, nil)
			if batch.Len() == 4096 {
				if err := d.Apply(&batch); err != nil {
					b.Fatal(err)
				}
				batch.Reset()
			}
		}
		if err := d.Apply(&batch); err != nil {
			b.Fatal(err)
		}
		batch = Batch{}
		runtime.GC()
		runtime.ReadMemStats(&after)
		metrics.Read(scan)
		// The log's in-memory tail segment is not index memory.
		tail := d.opts.SegmentSize
		heap := float64(after.HeapAlloc) - float64(before.HeapAlloc) - float64(tail)
		n := float64(*benchRecords)
		b.ReportMetric(heap/n, "index-bytes/key")
		b.ReportMetric(heap/n-float64(keyBytes)/n, "heap-bytes/key")
		b.ReportMetric(float64(keyBytes)/n, "key-bytes/key")
		b.ReportMetric((float64(scan[0].Value.Uint64())-float64(scanBefore))/n, "scan-bytes/key")
		runtime.KeepAlive(d)
		d.Close()
	}
}

// BenchmarkPendingRSS applies -store.records pending 1 KiB messages and
// reports the process's resident set and Go heap afterwards.
func BenchmarkPendingRSS(b *testing.B) {
	for range b.N {
		d := openT(b, b.TempDir(), Options{SegmentSize: *benchSegment}, true)
		fillStore(b, d, *benchRecords, 10)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(rss())/(1<<20), "RSS-MiB")
		b.ReportMetric(float64(ms.HeapAlloc)/(1<<20), "heap-MiB")
		d.Close()
		debug.FreeOSMemory()
	}
}

// BenchmarkDeleteRange measures one range delete of every key of a
// prefix: -store.range keys (default 2,000,000) of the scheduler's shape,
// beside as many keys of another queue, whose prefix extends the deleted
// one ("m/orders.dlq" beside "m/orders"). It reports the time of the Apply
// that carries the range delete (ms), the bytes allocated meanwhile
// (alloc-MiB, a bound on its transient heap growth), the heap growth over
// the Apply without a collection (heap-growth-MiB), and the heap freed
// once collected (freed-MiB). Values are empty: the index's cost does not
// depend on them.
func BenchmarkDeleteRange(b *testing.B) {
	n := *benchRange
	for range b.N {
		b.StopTimer()
		d := openT(b, b.TempDir(), Options{UnsafeNoSync: true}, false)
		var batch Batch
		var key []byte
		for i := range n {
			for _, q := range []string{"orders", "orders.dlq"} {
				key = brokerKey(key, q, uint64(i))
				batch.Put(key, nil)
			}
			if batch.Len() >= 8192 || i == n-1 {
				if err := d.Apply(&batch); err != nil {
					b.Fatal(err)
				}
				batch.Reset()
			}
		}
		batch = Batch{}
		batch.DeleteRange([]byte("m/orders\x00"), []byte("m/orders\x01"))
		runtime.GC()
		var before, mid, after runtime.MemStats
		runtime.ReadMemStats(&before)
		b.StartTimer()
		start := time.Now()
		if err := d.Apply(&batch); err != nil {
			b.Fatal(err)
		}
		took := time.Since(start)
		b.StopTimer()
		runtime.ReadMemStats(&mid)
		runtime.GC()
		runtime.ReadMemStats(&after)
		if st := d.Stats(); st.Keys != n {
			b.Fatalf("%d keys left; want %d", st.Keys, n)
		}
		b.ReportMetric(float64(took.Microseconds())/1000, "ms")
		b.ReportMetric(float64(mid.TotalAlloc-before.TotalAlloc)/(1<<20), "alloc-MiB")
		b.ReportMetric((float64(mid.HeapAlloc)-float64(before.HeapAlloc))/(1<<20), "heap-growth-MiB")
		b.ReportMetric((float64(before.HeapAlloc)-float64(after.HeapAlloc))/(1<<20), "freed-MiB")
		d.Close()
		b.StartTimer()
	}
}

// rss returns the resident set size of this process in bytes, or 0.
func rss() int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.Fields(rest)[0], 10, 64)
			return kb << 10
		}
	}
	return 0
}

func dirSize(tb testing.TB, dir string) int64 {
	var n int64
	ents, err := os.ReadDir(dir)
	if err != nil {
		tb.Fatal(err)
	}
	for _, e := range ents {
		fi, err := os.Stat(filepath.Join(dir, e.Name()))
		if err == nil {
			n += fi.Size()
		}
	}
	return n
}

// BenchmarkChurn enqueues 1 KiB messages and deletes each about 10,000
// messages later (a queue with a steady backlog), -store.churn bytes in
// all, and reports the disk used afterwards as a share of the traffic.
func BenchmarkChurn(b *testing.B) {
	v := value(1024)
	for range b.N {
		dir := b.TempDir()
		d := openT(b, dir, Options{}, true)
		total := int(*benchChurn / int64(len(v)))
		const backlog = 10_000
		var batch Batch
		var key, old []byte
		for i := range total + backlog {
			if i < total {
				key = brokerKey(key, "orders", uint64(i))
				batch.Put(key, v)
			}
			if i >= backlog {
				old = brokerKey(old, "orders", uint64(i-backlog))
				batch.Delete(old)
			}
			if batch.Len() >= 512 {
				if err := d.Apply(&batch); err != nil {
					b.Fatal(err)
				}
				batch.Reset()
			}
		}
		if err := d.Apply(&batch); err != nil {
			b.Fatal(err)
		}
		if err := d.Compact(); err != nil {
			b.Fatal(err)
		}
		st := d.Stats()
		used := dirSize(b, dir)
		b.ReportMetric(float64(used)/float64(*benchChurn)*100, "disk-%-of-traffic")
		b.ReportMetric(float64(used)/(1<<20), "disk-MiB")
		b.ReportMetric(float64(st.CopiedBytes)/(1<<20), "copied-MiB")
		d.Close()
	}
}

// BenchmarkCompaction measures one pass over 64 MiB of old segments in
// which one record in ten is still live: the live tenth is copied forward
// and the segments deleted. b.N counts passes.
func BenchmarkCompaction(b *testing.B) {
	v := value(1024)
	const records = 64 << 10
	b.SetBytes(records * int64(len(v)))
	for range b.N {
		b.StopTimer()
		d := openT(b, b.TempDir(), Options{SegmentSize: 8 << 20}, false)
		fillStore(b, d, records, 1)
		var batch Batch
		var key []byte
		for i := range records {
			if i%10 != 0 {
				key = brokerKey(key, "q0", uint64(i))
				batch.Delete(key)
			}
		}
		// Start a fresh tail so that every old segment may go.
		fillStore(b, d, 10_000, 7)
		if err := d.Apply(&batch); err != nil {
			b.Fatal(err)
		}
		before := d.Stats()
		b.StartTimer()
		if err := d.Compact(); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		st := d.Stats()
		b.ReportMetric(float64(st.CopiedBytes-before.CopiedBytes)/(1<<20), "copied-MiB")
		b.ReportMetric(float64(st.ReclaimedBytes-before.ReclaimedBytes)/(1<<20), "reclaimed-MiB")
		d.Close()
		b.StartTimer()
	}
}

// BenchmarkDiskFsync measures the disk under the store: a write of 1 KiB
// or 64 KiB followed by an fsync, the unit of a group commit. Store
// figures are only meaningful next to these.
func BenchmarkDiskFsync(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(fmt.Sprintf("write=%dKiB", size>>10), func(b *testing.B) {
			f, err := os.Create(filepath.Join(b.TempDir(), "probe"))
			if err != nil {
				b.Fatal(err)
			}
			defer f.Close()
			buf := value(size)
			b.SetBytes(int64(size))
			for range b.N {
				if _, err := f.Write(buf); err != nil {
					b.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "fsyncs/s")
		})
	}
}

// BenchmarkMarkerWrite: the durable-position marker's cost per commit, one
// 32-byte pwrite (no fsync), beside the commit's own fsync (BenchmarkApply).
func BenchmarkMarkerWrite(b *testing.B) {
	mf, err := openMarker(b.TempDir(), marker{last: 1, tailIndex: 1}, false)
	if err != nil {
		b.Fatal(err)
	}
	defer mf.f.Close()
	b.ReportAllocs()
	for i := range b.N {
		if err := mf.write(marker{last: uint64(i), tailIndex: 1, tailSize: int64(i)}); err != nil {
			b.Fatal(err)
		}
	}
}
