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
// key backlogged, under each policy. keys=1 is the FIFO baseline: the
// same machine with one fairness key, so the policy never rotates.
func BenchmarkSchedule(b *testing.B) {
	for _, run := range []struct {
		policy string
		keys   int
		sep    string // keys spread over 1,000 tenants with it
	}{{PolicyDRR, 1, ""}, {PolicyDRR, 10, ""}, {PolicyDRR, 10_000, ""}, {PolicyDRR, 1_000_000, ""},
		{PolicySTFQ, 10, ""}, {PolicySTFQ, 10_000, ""}, {PolicySTFQ, 1_000_000, ""},
		{PolicySTFQ, 10_000, "/"}, {PolicySTFQ, 1_000_000, "/"}} {
		nkeys := run.keys
		name := fmt.Sprintf("keys=%d", nkeys)
		if run.policy != PolicyDRR {
			name = fmt.Sprintf("%s/keys=%d", run.policy, nkeys)
		}
		if run.sep != "" {
			name = fmt.Sprintf("%s/tenants=1000/keys=%d", run.policy, nkeys)
		}
		b.Run(name, func(b *testing.B) {
			keys := benchKeys(nkeys)
			if run.sep != "" {
				for i := range keys {
					keys[i] = "t" + strconv.Itoa(i%1000) + run.sep + keys[i]
				}
			}
			// Nothing is acked: lift the cap on unsettled deliveries.
			s := New(Config{MaxDeliveryBatch: 4096, MaxUnsettled: math.MaxUint32})
			s.Tick(t0)
			s.CreateQueue(1, QueueSpec{Name: "q", Policy: run.policy, TenantSeparator: run.sep})
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
// each enqueue remembers one key and forgets one. With a producer, every
// message has the next sequence of one idempotent producer, in frames
// (Enqueue commands) of 100 or of 1: each remembers one sequence and
// forgets one (the queue holds the last 1024), and each frame writes a
// run record and the producer's record. frame=1 has its baseline without
// a producer. Pending messages are dropped every 500,000 (clock stopped)
// in every variant.
func BenchmarkEnqueue(b *testing.B) {
	body := make([]byte, 100)
	type variant struct {
		name     string
		window   int  // idempotency keys remembered; 0 for none
		producer bool // messages of one idempotent producer
		frame    int  // messages per Enqueue command
	}
	variants := []variant{{name: "idempotency=off", frame: 100}}
	for _, window := range []int{10_000, 100_000, 1_000_000} {
		variants = append(variants, variant{name: fmt.Sprintf("idempotency=on/window=%d", window), window: window, frame: 100})
	}
	variants = append(variants,
		variant{name: "producer=on/frame=100", producer: true, frame: 100},
		variant{name: "producer=off/frame=1", frame: 1},
		variant{name: "producer=on/frame=1", producer: true, frame: 1},
	)
	for _, v := range variants {
		window := v.window
		b.Run(v.name, func(b *testing.B) {
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
			producer := testProducer(1)
			b.ReportAllocs()
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for i := 0; i < b.N; i += len(items) {
				if i > 0 && i%500_000 == 0 {
					b.StopTimer()
					for x := range q.msgs.all() {
						m := s.msg(x)
						s.leave(x, m)
						s.remove(x, m)
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
					if v.producer {
						items[j].Msg.ProducerID, items[j].Msg.Sequence = producer, uint64(n)
					}
				}
				for j := 0; j < len(items); j += v.frame {
					s.Enqueue(2, items[j:j+v.frame])
				}
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

// BenchmarkProducerFootprint reports the memory an idempotent producer
// holds on a queue, its messages aside (they are acked): 10,000
// producers, each with one frame of one message, with a full ring of
// 1024 sequences sent in frames of 100, or in frames of 1. Run it with
// -benchtime=1x.
func BenchmarkProducerFootprint(b *testing.B) {
	for _, c := range []struct {
		name          string
		nprod, frames int // producers, frames each
		frame         int // messages per frame
	}{{"seqs=1", 10_000, 1, 1}, {"seqs=1024/frame=100", 1000, 11, 100}, {"seqs=1024/frame=1", 1000, 1024, 1}} {
		b.Run(c.name, func(b *testing.B) {
			for it := 0; it < b.N; it++ {
				s := New(Config{MaxDeliveryBatch: 1 << 20, MaxUnsettled: 1 << 30})
				s.Tick(t0)
				s.CreateQueue(1, QueueSpec{Name: "q"})
				s.Subscribe(2, 1, "q", 1<<30, nil)
				s.Advance(s.Ready())
				var n uint64
				items := make([]EnqueueItem, c.frame)
				acks := make([]LeaseRef, 0, c.frame)
				// Each producer sends its frames, each acked at once:
				// only the producers stay, and the Readys stay small.
				run := func(p0, p1 int) {
					for p := p0; p < p1; p++ {
						for f := 0; f < c.frames; f++ {
							for j := range items {
								n++
								items[j] = EnqueueItem{Queue: "q", Msg: Message{ID: testID(n), PayloadSize: 1,
									ProducerID: testProducer(uint64(p + 1)), Sequence: uint64(f*c.frame + j)}}
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
							s.Advance(s.Ready())
						}
					}
				}
				run(0, 2) // warm the free lists and buffers
				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				run(2, c.nprod+2)
				s.Advance(s.Ready())
				runtime.GC()
				runtime.ReadMemStats(&after)
				if q := s.queues["q"]; len(q.prods) != c.nprod+2 || q.msgs.len() != 0 {
					b.Fatalf("%d producers, %d messages", len(q.prods), q.msgs.len())
				}
				b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(c.nprod), "B/producer")
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
