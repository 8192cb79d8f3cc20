package sched

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// benchFill enqueues n messages of 100 bytes to queue, numbered from
// first, spread over keys round robin; every delayEvery-th (0: none) is
// delayed by an hour. It takes a Ready per 1,024 messages.
func benchFill(s *Sched, queue string, first uint64, n int, keys []string, delayEvery int) {
	items := make([]EnqueueItem, 0, 1024)
	for i := 0; i < n; i++ {
		m := Message{ID: testID(first + uint64(i)), FairnessKey: keys[i%len(keys)], PayloadSize: 100}
		if delayEvery > 0 && i%delayEvery == 0 {
			m.Delay = time.Hour
		}
		items = append(items, EnqueueItem{Queue: queue, Msg: m})
		if len(items) == cap(items) || i == n-1 {
			s.Enqueue(2, items)
			s.Advance(s.Ready())
			items = items[:0]
		}
	}
}

// BenchmarkMsgTable measures the message table alone at 2^20 messages:
// the per-message records and a queue's ID index. insert allocates a
// record and indexes it, the table emptied every 2^20 inserts (clock
// stopped); get looks a message up by ID, in a random order, in a table
// of 2^20; del looks a message up, unindexes it and frees its record, in
// a random order (as acks come), the table refilled when empty (clock
// stopped).
func BenchmarkMsgTable(b *testing.B) {
	const n = 1 << 20
	ids := make([][16]byte, n)
	for i := range ids {
		ids[i] = testID(uint64(i + 1))
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(n)
	empty := func() (*Sched, *queue) {
		s := New(Config{})
		s.CreateQueue(1, QueueSpec{Name: "q"})
		s.Advance(s.Ready())
		return s, s.queues["q"]
	}
	full := func() (*Sched, *queue) {
		s, q := empty()
		for _, id := range ids {
			tableInsert(s, q, id)
		}
		return s, q
	}
	b.Run("insert", func(b *testing.B) {
		s, q := empty()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if i%n == 0 && i > 0 {
				b.StopTimer()
				s, q = empty()
				runtime.GC()
				b.StartTimer()
			}
			tableInsert(s, q, ids[i%n])
		}
	})
	b.Run("get", func(b *testing.B) {
		s, q := full()
		runtime.GC()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if !tableGet(s, q, ids[order[i%n]]) {
				b.Fatal("missing")
			}
		}
	})
	// miss looks up IDs that are not in the table of 2^20, as each
	// enqueue does to check that its ID is unused: new=newer than every
	// ID in it (UUIDv7s in order, the enqueue's case), old=older.
	for _, c := range []struct {
		name string
		base uint64
	}{{"miss/new", n + 1}, {"miss/old", 0}} {
		b.Run(c.name, func(b *testing.B) {
			s, q := full()
			missing := make([][16]byte, n)
			for i := range missing {
				missing[i] = testID(uint64(i+1) + c.base)
				if c.base == 0 {
					missing[i][6]-- // older than every ID in the table
				}
			}
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if tableGet(s, q, missing[order[i%n]]) {
					b.Fatal("found")
				}
			}
		})
	}
	b.Run("del", func(b *testing.B) {
		s, q := full()
		runtime.GC()
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if i%n == 0 && i > 0 {
				b.StopTimer()
				s, q = full()
				runtime.GC()
				b.StartTimer()
			}
			tableDel(s, q, ids[order[i%n]])
		}
	})
}

// BenchmarkGCMark reports the time of a forced garbage collection (the
// fastest of five, in ms/gc) with a million pending messages in one
// fairness key, and across a million keys, the scheduler reachable: what
// the collector spends marking the scheduler's state. Run it with
// -benchtime=1x.
func BenchmarkGCMark(b *testing.B) {
	const n = 1_000_000
	for _, nkeys := range []int{1, n} {
		b.Run(fmt.Sprintf("keys=%d", nkeys), func(b *testing.B) {
			keys := benchKeys(nkeys)
			for range b.N {
				s := New(Config{})
				s.Tick(t0)
				s.CreateQueue(1, QueueSpec{Name: "q"})
				benchFill(s, "q", 1, n, keys, 0)
				best := time.Duration(1<<63 - 1)
				for range 5 {
					start := time.Now()
					runtime.GC()
					best = min(best, time.Since(start))
				}
				b.ReportMetric(float64(best)/1e6, "ms/gc")
				runtime.KeepAlive(s)
			}
		})
	}
}

// BenchmarkDeleteQueue measures DeleteQueue of a queue holding 1M or 2M
// messages of 100 bytes in 1,000 fairness keys, one in a hundred delayed,
// through the Ready that carries its mutations: the time and allocations
// of both, the mutations (mutations/op) and the bytes of their keys and
// values (persist-B/op). Run it with -benchtime=1x.
func BenchmarkDeleteQueue(b *testing.B) {
	keys := benchKeys(1000)
	for _, n := range []int{1_000_000, 2_000_000} {
		b.Run(fmt.Sprintf("msgs=%d", n), func(b *testing.B) {
			var muts, size int
			for range b.N {
				b.StopTimer()
				s := New(Config{})
				s.Tick(t0)
				s.CreateQueue(1, QueueSpec{Name: "q"})
				benchFill(s, "q", 1, n, keys, 100)
				runtime.GC()
				b.ReportAllocs()
				b.StartTimer()
				s.DeleteQueue(3, "q")
				rd := s.Ready()
				b.StopTimer()
				muts = len(rd.Persist)
				size = 0
				for _, m := range rd.Persist {
					size += len(m.Key) + len(m.Value)
				}
				s.Advance(rd)
				runtime.KeepAlive(s)
			}
			b.ReportMetric(float64(muts), "mutations/op")
			b.ReportMetric(float64(size), "persist-B/op")
		})
	}
}

// The message table operations BenchmarkMsgTable measures.

// tableInsert allocates a record for a message of 100 bytes with ID id
// and indexes it in q.
func tableInsert(s *Sched, q *queue, id [16]byte) {
	x, m := s.newMsg()
	m.id, m.cost, m.weight = id, 100, 1
	q.msgs.put(&s.recs, x)
}

// tableGet reports whether q indexes a message with ID id.
func tableGet(s *Sched, q *queue, id [16]byte) bool { return q.msgs.get(&s.recs, id) != 0 }

// tableDel looks the message with ID id up in q, unindexes it and frees
// its record.
func tableDel(s *Sched, q *queue, id [16]byte) {
	x := q.msgs.get(&s.recs, id)
	q.msgs.del(&s.recs, x)
	s.freeMsg(x)
}
