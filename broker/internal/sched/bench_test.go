package sched

import (
	"fmt"
	"math"
	"runtime"
	"strconv"
	"testing"
	"time"
)

// benchKeys returns n fairness key names, allocated once.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = "tenant-" + strconv.Itoa(i)
	}
	return keys
}

// drainAll takes Readys until want messages were delivered.
func drainAll(b *testing.B, s *Sched, want int) {
	got := 0
	for got < want {
		if !s.HasReady() {
			b.Fatalf("delivered %d of %d", got, want)
		}
		rd := s.Ready()
		for _, d := range rd.Deliveries {
			got += len(d.Msgs)
		}
		s.Advance(rd)
	}
}

// BenchmarkSchedule measures one scheduling decision of the state
// machine: the DRR choice of a fairness key, its lane, the lease (timer,
// lease ring, credit) and the Delivered handed to the shell, with every
// key backlogged. keys=1 is the FIFO baseline: the same machine with one
// fairness key, so DRR never rotates.
func BenchmarkSchedule(b *testing.B) {
	for _, nkeys := range []int{1, 10, 10_000, 1_000_000} {
		b.Run(fmt.Sprintf("keys=%d", nkeys), func(b *testing.B) {
			keys := benchKeys(nkeys)
			// Nothing is acked: lift the cap on unsettled deliveries.
			s := New(Config{MaxDeliveryBatch: 4096, MaxUnsettled: math.MaxUint32})
			s.Tick(t0)
			s.CreateQueue(1, QueueSpec{Name: "q"})
			// Every key backlogged for the whole run: b.N messages, at
			// least one per key.
			n := max(b.N, nkeys)
			items := make([]EnqueueItem, 0, 1024)
			for i := 0; i < n; i++ {
				items = append(items, EnqueueItem{Queue: "q", Msg: Message{ID: testID(uint64(i + 1)), FairnessKey: keys[i%nkeys], PayloadSize: 100}})
				if len(items) == cap(items) || i == n-1 {
					s.Enqueue(2, items)
					s.Advance(s.Ready())
					items = items[:0]
				}
			}
			s.Subscribe(3, 1, "q", 0, nil)
			s.Advance(s.Ready())
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			s.AddCredit(1, uint32(min(b.N, math.MaxUint32)))
			drainAll(b, s, b.N)
		})
	}
}

// BenchmarkOrderingKeys measures a delivery and its ack with 100,000
// ordering keys in one fairness key (each key holds its next message
// until the previous is acked), against the same load without ordering
// keys.
func BenchmarkOrderingKeys(b *testing.B) {
	const norder = 100_000
	for _, ordered := range []bool{false, true} {
		b.Run(fmt.Sprintf("ordered=%v", ordered), func(b *testing.B) {
			orders := benchKeys(norder)
			s := New(Config{MaxDeliveryBatch: 1000})
			s.Tick(t0)
			s.CreateQueue(1, QueueSpec{Name: "q"})
			n := max(b.N, norder)
			items := make([]EnqueueItem, 0, 1024)
			for i := 0; i < n; i++ {
				m := Message{ID: testID(uint64(i + 1)), FairnessKey: "k" + strconv.Itoa(i%10), PayloadSize: 100}
				if ordered {
					m.OrderingKey = orders[i%norder]
				}
				items = append(items, EnqueueItem{Queue: "q", Msg: m})
				if len(items) == cap(items) || i == n-1 {
					s.Enqueue(2, items)
					s.Advance(s.Ready())
					items = items[:0]
				}
			}
			s.Subscribe(3, 1, "q", 0, nil)
			s.Advance(s.Ready())
			acks := make([]LeaseRef, 0, 1000)
			runtime.GC()
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; {
				batch := min(1000, b.N-done)
				s.AddCredit(1, uint32(batch))
				if !s.HasReady() {
					b.Fatalf("nothing to deliver after %d", done)
				}
				rd := s.Ready()
				acks = acks[:0]
				for _, d := range rd.Deliveries {
					for _, m := range d.Msgs {
						acks = append(acks, LeaseRef{Queue: m.Queue, ID: m.ID, Lease: m.Lease})
					}
				}
				s.Advance(rd)
				s.Ack(4, acks)
				done += len(acks)
			}
		})
	}
}

// BenchmarkEnqueue measures enqueue throughput through the state machine
// in a steady state: batches of 100 messages of 100 bytes across 1,000
// fairness keys, the Ready taken after each, the clock advancing 1ms per
// batch. With idempotency keys, every message has a key not seen within
// the window, which holds the last 10,000, 100,000 or 1,000,000 keys:
// each enqueue remembers one key and forgets one. Pending messages are dropped every 500,000 (clock stopped)
// in every variant.
func BenchmarkEnqueue(b *testing.B) {
	body := make([]byte, 100)
	for _, window := range []int{0, 10_000, 100_000, 1_000_000} {
		name := "idempotency=off"
		if window > 0 {
			name = fmt.Sprintf("idempotency=on/window=%d", window)
		}
		b.Run(name, func(b *testing.B) {
			keys := benchKeys(1000)
			s := New(Config{})
			s.Tick(t0)
			s.CreateQueue(1, QueueSpec{Name: "q", DedupWindow: time.Duration(window) * 10 * time.Microsecond})
			s.Advance(s.Ready())
			q := s.queues["q"]
			items := make([]EnqueueItem, 100)
			// Keys repeat after twice the window, when they have expired.
			var idems []string
			if window > 0 {
				idems = benchKeys(2*window + 1)
			}
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for i := 0; i < b.N; i += len(items) {
				if i > 0 && i%500_000 == 0 {
					b.StopTimer()
					for m := range q.msgs.all() {
						s.leave(m)
						s.remove(m)
					}
					s.Advance(s.Ready())
					b.StartTimer()
				}
				for j := range items {
					n := i + j
					items[j] = EnqueueItem{Queue: "q", Msg: Message{ID: testID(uint64(n + 1)), FairnessKey: keys[n%len(keys)], PayloadSize: 100, Body: body}}
					if window > 0 {
						items[j].Msg.IdempotencyKey = idems[n%len(idems)]
					}
				}
				s.Enqueue(2, items)
				s.Tick(s.Now().Add(time.Millisecond))
				s.Advance(s.Ready())
			}
		})
	}
}

// BenchmarkFootprint reports the memory held per pending message: one
// million messages in one fairness key, one million messages across one
// million keys (each key's own state included), and one million messages
// in one key, each with an idempotency key of 12 bytes (the remembered
// key included). Run it with -benchtime=1x.
func BenchmarkFootprint(b *testing.B) {
	const n = 1_000_000
	for _, c := range []struct {
		name  string
		nkeys int
		idem  bool
	}{{"keys=1", 1, false}, {"keys=1000000", n, false}, {"keys=1/idempotency", 1, true}} {
		b.Run(c.name, func(b *testing.B) {
			keys := benchKeys(c.nkeys)
			var idems []string
			if c.idem {
				idems = make([]string, n)
				for i := range idems {
					idems[i] = fmt.Sprintf("order-%06d", i)
				}
			}
			for it := 0; it < b.N; it++ {
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				s := New(Config{})
				s.Tick(t0)
				s.CreateQueue(1, QueueSpec{Name: "q"})
				items := make([]EnqueueItem, 0, 1024)
				for i := 0; i < n; i++ {
					m := Message{ID: testID(uint64(i + 1)), FairnessKey: keys[i%c.nkeys], PayloadSize: 100}
					if c.idem {
						m.IdempotencyKey = idems[i]
					}
					items = append(items, EnqueueItem{Queue: "q", Msg: m})
					if len(items) == cap(items) || i == n-1 {
						s.Enqueue(2, items)
						s.Advance(s.Ready())
						items = items[:0]
					}
				}
				s.Advance(s.Ready()) // release the last buffers
				runtime.GC()
				runtime.ReadMemStats(&after)
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "B/msg")
				runtime.KeepAlive(s)
			}
		})
	}
}

// BenchmarkRedeliveryCycle measures a message's whole life in steady
// state: enqueue, delivery and ack, one Ready per 100 messages.
func BenchmarkRedeliveryCycle(b *testing.B) {
	s := New(Config{MaxDeliveryBatch: 1000})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q"})
	s.Subscribe(2, 1, "q", math.MaxUint32, nil)
	s.Advance(s.Ready())
	keys := benchKeys(100)
	items := make([]EnqueueItem, 100)
	acks := make([]LeaseRef, 0, 100)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i += len(items) {
		for j := range items {
			items[j] = EnqueueItem{Queue: "q", Msg: Message{ID: testID(uint64(i + j + 1)), FairnessKey: keys[j], PayloadSize: 100}}
		}
		s.Enqueue(3, items)
		rd := s.Ready()
		acks = acks[:0]
		for _, d := range rd.Deliveries {
			for _, m := range d.Msgs {
				acks = append(acks, LeaseRef{Queue: m.Queue, ID: m.ID, Lease: m.Lease})
			}
		}
		s.Advance(rd)
		s.Ack(4, acks)
		s.Tick(s.Now().Add(time.Microsecond))
	}
}
