package sched

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
)

// fillForDelete gives queue q of h n messages in every state a queue's
// messages can be in, with every record a queue stores: ready ones with
// throttle and ordering keys, delayed ones, leased ones (to an open and a
// closed subscription), failed ones with state records, dead-lettered
// ones (ready and leased in the DLQ), one waiting for an on_failure
// decision, idempotency keys and an idempotent producer's sequences. The
// messages are numbered from first.
func fillForDelete(t *testing.T, h *harness, q string, first uint64, n int) {
	t.Helper()
	s := h.s
	h.ref++
	s.CreateQueue(h.ref, QueueSpec{Name: q, MaxAttempts: 1, OnFailure: "hook"})
	items := make([]EnqueueItem, n)
	for i := range items {
		m := Message{ID: testID(first + uint64(i)), FairnessKey: fmt.Sprint("k", i%7), PayloadSize: 10, Body: []byte("b")}
		switch i % 5 {
		case 1:
			m.Delay = time.Hour
		case 2:
			m.ThrottleKeys = []string{"slow"}
		case 3:
			m.OrderingKey = fmt.Sprint("o", i%3)
		}
		if i%4 == 0 {
			m.IdempotencyKey = fmt.Sprint("idem-", i)
		}
		if i%6 == 0 {
			m.ProducerID, m.Sequence = testProducer(1), uint64(i)
		}
		items[i] = EnqueueItem{Queue: q, Msg: m}
	}
	h.ref++
	s.Enqueue(h.ref, items)
	h.ref++
	s.Subscribe(h.ref, SubID(first), q, 6, nil)
	drainHarness(h)
	// Fail three deliveries: each waits for its on_failure decision; one
	// is dead-lettered, one retried later.
	var failed []LeaseRef
	for id, lease := range h.lease {
		if x := s.queues[q].msgs.get(&s.recs, id); x != 0 && s.holds(x, lease) && len(failed) < 3 {
			failed = append(failed, LeaseRef{Queue: q, ID: id, Lease: lease})
		}
	}
	for _, lr := range failed {
		h.ref++
		s.Nack(h.ref, []NackItem{{LeaseRef: lr, Reason: "no"}})
	}
	drainHarness(h)
	s.Decide(q, failed[0].ID, DeadLetter())
	s.Decide(q, failed[1].ID, Retry(time.Minute))
	// Leases of a closed subscription run on.
	h.ref++
	s.Unsubscribe(h.ref, SubID(first), false)
	h.ref++
	s.Subscribe(h.ref, SubID(first+1), q, 2, nil)
	h.ref++
	s.Subscribe(h.ref, SubID(first+2), q+DLQSuffix, 1, nil)
	drainHarness(h)
}

// drainHarness takes Readys until there are none.
func drainHarness(h *harness) {
	for h.s.HasReady() {
		h.ready(false)
	}
}

// queueKeys returns the stored keys of queue q's records.
func queueKeys(kv map[string][]byte, q string) []string {
	var out []string
	for k := range kv {
		for _, r := range QueueRanges(q) {
			if string(r.Start) <= k && k < string(r.End) {
				out = append(out, k)
			}
		}
	}
	return out
}

// TestDeleteQueueByRange: deleting a queue holding messages in every
// state, idempotency keys and producers writes the same few mutations
// whatever it holds (range deletes of its key ranges and its definition's
// key); nothing of it is left in storage or memory; nothing of another
// queue is touched; a restart from the records finds no trace of it; and
// a queue created under its name afterwards starts clean.
func TestDeleteQueueByRange(t *testing.T) {
	for _, n := range []int{10, 1000} {
		t.Run(fmt.Sprint("msgs=", n), func(t *testing.T) {
			h := newHarness(Config{MaxDeliveryBatch: 1 << 20})
			h.s.SetThrottle("slow", 1, 1)
			h.throttles["slow"] = [2]float64{1, 1}
			fillForDelete(t, h, "other", 1<<32, 50)
			fillForDelete(t, h, "q", 1, n)
			if len(queueKeys(h.kv, "q")) < n {
				t.Fatalf("%d records of q stored; want at least %d", len(queueKeys(h.kv, "q")), n)
			}
			others := len(queueKeys(h.kv, "other"))
			otherDigest := h.s.QueueDigest("other")

			h.ref++
			h.s.DeleteQueue(h.ref, "q")
			if !h.s.HasReady() {
				t.Fatal("no Ready after DeleteQueue")
			}
			rd := h.s.Ready()
			var got []string
			for _, m := range rd.Persist {
				got = append(got, fmtMutation(m))
			}
			want := []string{"del range idk q", "del range msg q", "del range producer q", "del range state q", "del queue q"}
			if strings.Join(got, "; ") != strings.Join(want, "; ") {
				t.Fatalf("DeleteQueue of %d messages: mutations %q; want %q", n, got, want)
			}
			for _, m := range rd.Persist {
				if m.End != nil && bytes.Compare(m.Key, m.End) >= 0 {
					t.Fatalf("range delete %q..%q: empty or reversed", m.Key, m.End)
				}
			}
			applyPersist(h.kv, rd.Persist)
			h.s.Advance(rd)
			if err := checkInvariants(h.s, true); err != nil {
				t.Fatal(err)
			}
			if left := queueKeys(h.kv, "q"); len(left) > 0 {
				t.Fatalf("%d records of q left, %q first", len(left), left[0])
			}
			if got := len(queueKeys(h.kv, "other")); got != others {
				t.Fatalf("records of other: %d, had %d", got, others)
			}
			if h.s.queues["q"] != nil || h.s.queues["q.dlq"] != nil {
				t.Fatal("q or its DLQ still in memory")
			}
			if h.s.QueueDigest("other") != otherDigest {
				t.Fatal("deleting q changed other")
			}
			if h.s.recs.len() != h.s.queues["other"].msgs.len()+h.s.queues["other.dlq"].msgs.len() {
				t.Fatalf("%d message records in use for the messages of other", h.s.recs.len())
			}
			roundTrip(t, h.s)

			// A restart from the records: no trace of q, nothing to clean.
			h.restart(t)
			if h.s.queues["q"] != nil {
				t.Fatal("q restored")
			}
			if rd := h.s.Ready(); len(rd.Persist) > 0 {
				t.Fatalf("the restart deletes %d orphans, %q first", len(rd.Persist), fmtMutation(rd.Persist[0]))
			}

			// q again, in the running scheduler and after a restart: its
			// old idempotency keys and producer sequences are forgotten.
			h.ref++
			h.s.CreateQueue(h.ref, QueueSpec{Name: "q"})
			h.ref++
			h.s.Enqueue(h.ref, []EnqueueItem{
				{Queue: "q", Msg: Message{ID: testID(1), IdempotencyKey: "idem-0", Body: []byte("b")}},
				{Queue: "q", Msg: Message{ID: testID(2), ProducerID: testProducer(1), Sequence: 0, Body: []byte("b")}},
			})
			drainHarness(h)
			st := h.s.queueStats(h.s.queues["q"], "q", 0)
			if st.Ready != 2 || st.Delayed != 0 || st.Leased != 0 || st.DeadLettered != 0 || st.Subscriptions != 0 {
				t.Fatalf("q created again: %+v; want 2 ready messages", st)
			}
			want2 := h.s.QueueDigest("q")
			h.restart(t)
			if h.s.QueueDigest("q") != want2 {
				t.Fatal("q created again: restored differently")
			}
			if err := checkInvariants(h.s, false); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestDeleteQueueTimers: the timers of a deleted queue's messages leave
// the timer heap as removing them one by one in ID order would (as
// deleting its messages one by one did), whether they are a few of it or
// most of it, and the other queues' timers fire as they would have.
func TestDeleteQueueTimers(t *testing.T) {
	for _, c := range []struct {
		name        string
		mine, other int // delayed messages of the deleted queue and of another
	}{{"few", 20, 500}, {"most", 500, 20}} {
		t.Run(c.name, func(t *testing.T) {
			build := func() *Sched {
				s := New(Config{})
				s.Tick(t0)
				s.CreateQueue(1, QueueSpec{Name: "q"})
				s.CreateQueue(2, QueueSpec{Name: "r"})
				var items []EnqueueItem
				nq := 0
				for i := range c.mine + c.other {
					q := "r"
					if i%((c.mine+c.other)/c.mine) == 0 && nq < c.mine {
						q = "q"
						nq++
					}
					// Deadlines in no particular order, some equal.
					d := time.Duration((i*7919)%97) * time.Second
					items = append(items, EnqueueItem{Queue: q, Msg: Message{ID: testID(uint64(1000 - i)), Delay: d + time.Second}})
				}
				s.Enqueue(3, items)
				s.Advance(s.Ready())
				return s
			}
			s := build()
			s.DeleteQueue(4, "q")
			s.Advance(s.Ready())
			if err := checkInvariants(s, true); err != nil {
				t.Fatal(err)
			}
			// The reference: the same timers removed one at a time, by ID.
			ref := build()
			q := ref.queues["q"]
			var ms []mref
			for x := range q.msgs.all() {
				ms = append(ms, x)
			}
			ref.sortByID(ms)
			for _, x := range ms {
				ref.timers.remove(ref.msg(x).ext)
			}
			order := func(s *Sched) (ids [][16]byte) {
				for _, t := range s.timers.a {
					ids = append(ids, s.msg(s.exts.at(uint32(t)).msg).id)
				}
				return ids
			}
			got, want := order(s), order(ref)
			if len(got) != len(want) {
				t.Fatalf("%d timers left; want %d", len(got), len(want))
			}
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("timer %d: %s; removing one by one leaves %s", i, idName(got[i]), idName(want[i]))
				}
			}
			// The rest fire, each delivered once it is due.
			fired := make(map[[16]byte]bool)
			s.Subscribe(5, 1, "r", 1<<20, nil)
			for i := 0; i < 1000 && s.Deadline() != 0 && len(fired) < len(want); i++ {
				s.Tick(s.Deadline())
				rd := s.Ready()
				for _, d := range rd.Deliveries {
					for _, m := range d.Msgs {
						fired[m.ID] = true
						s.Ack(6, []LeaseRef{{Queue: m.Queue, ID: m.ID, Lease: m.Lease}})
					}
				}
				s.Advance(rd)
			}
			if len(fired) != len(want) {
				t.Fatalf("%d of the other queue's %d delayed messages delivered", len(fired), len(want))
			}
		})
	}
}
