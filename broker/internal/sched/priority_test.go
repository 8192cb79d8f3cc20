package sched

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// priorityRun enqueues n messages to each of two fairness keys, a of
// weight 1 and b of weight 2, with random payload sizes, and returns the
// keys of the deliveries in order and a's messages in the order they
// were delivered. With prios, a's messages have random priorities (b's
// stay at the default); the payload sizes are the same either way.
func priorityRun(t *testing.T, policy string, prios bool, n int) (keys []string, aOrder []Message) {
	t.Helper()
	s := New(Config{Policy: policy})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q"})
	rnd := rand.New(rand.NewPCG(1, 2))
	msgs := map[[16]byte]Message{}
	var items []EnqueueItem
	for i := range n {
		for j, k := range []string{"a", "b"} {
			m := Message{ID: testID(uint64(2*i + j + 1)), FairnessKey: k, Weight: uint32(j + 1), PayloadSize: uint32(50 + rnd.IntN(200))}
			if policy == PolicyDRR {
				m.PayloadSize = 100 // drr shares bytes: the same sizes in the same turns
			}
			if p := uint8(rnd.IntN(MaxPriority + 2)); prios && k == "a" {
				m.Priority = p
			}
			msgs[m.ID] = m
			items = append(items, EnqueueItem{Queue: "q", Msg: m})
		}
	}
	s.Enqueue(2, items)
	s.Subscribe(3, 1, "q", math.MaxUint32, nil)
	for s.HasReady() {
		rd := s.Ready()
		var acks []LeaseRef
		for _, d := range rd.Deliveries {
			for _, m := range d.Msgs {
				keys = append(keys, m.FairnessKey)
				if m.FairnessKey == "a" {
					aOrder = append(aOrder, msgs[m.ID])
				}
				acks = append(acks, LeaseRef{Queue: "q", ID: m.ID, Lease: m.Lease})
			}
		}
		s.Advance(rd)
		if len(acks) > 0 {
			s.Ack(4, acks)
			s.AddCredit(1, uint32(len(acks)))
		}
	}
	if len(keys) != 2*n {
		t.Fatalf("%s: delivered %d of %d", policy, len(keys), 2*n)
	}
	return keys, aOrder
}

// TestPriorityKeepsShares: priorities order a key's own messages and
// change nothing across keys. Key a, with messages of random priorities,
// gets exactly the turns it gets with all its messages at the default
// priority, under each policy (drr with equal payload sizes, as it
// shares bytes), so its share of deliveries (measured
// over the first half, while both keys are backlogged) is unchanged;
// within its turns, a higher priority goes first, FIFO within one.
func TestPriorityKeepsShares(t *testing.T) {
	const n = 400
	for _, policy := range []string{PolicyDRR, PolicySTFQ} {
		plain, _ := priorityRun(t, policy, false, n)
		mixed, aOrder := priorityRun(t, policy, true, n)
		if !slices.Equal(plain, mixed) {
			t.Errorf("%s: the order of keys served changed with a's priorities", policy)
		}
		share := func(keys []string) float64 {
			c := 0
			for _, k := range keys[:n] {
				if k == "a" {
					c++
				}
			}
			return float64(c) / float64(n)
		}
		t.Logf("%s: a's share over the first %d deliveries: %.3f plain, %.3f with priorities", policy, n, share(plain), share(mixed))
		if s := share(mixed); policy == PolicySTFQ && math.Abs(s-1.0/3) > 0.01 {
			t.Errorf("%s: a's share %.3f; want 1/3 (weights 1:2)", policy, s)
		}
		for i := 1; i < len(aOrder); i++ {
			p, c := aOrder[i-1], aOrder[i]
			rp, rc := rankOf(p.Priority), rankOf(c.Priority)
			if rp < rc || rp == rc && slices.Compare(p.ID[:], c.ID[:]) > 0 {
				t.Fatalf("%s: a's delivery %d: priority %d (%x) after %d (%x)", policy, i, rc, c.ID[15], rp, p.ID[15])
			}
		}
	}
}
