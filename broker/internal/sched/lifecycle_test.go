package sched

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// sortIDs sorts message IDs in byte order.
func sortIDs(ids [][16]byte) {
	slices.SortFunc(ids, func(a, b [16]byte) int { return bytes.Compare(a[:], b[:]) })
}

// msgStates returns the IDs of queue q's messages by state.
func msgStates(s *Sched, q string) map[string][][16]byte {
	out := make(map[string][][16]byte)
	for x := range s.queues[q].msgs.all() {
		m := s.msg(x)
		out[m.state.String()] = append(out[m.state.String()], m.id)
	}
	for _, ids := range out {
		sortIDs(ids)
	}
	return out
}

// TestPurgeKeepsLeased: purging a queue holding messages in every state
// removes its ready, delayed and deciding messages with range deletes
// only, far fewer than one per message, keeps its leased messages (which
// can still be acked) and its DLQ's messages, which share its key range;
// a restart from the records finds exactly what is left. Purging the DLQ
// then, and the queue with its leased messages, leaves both empty.
func TestPurgeKeepsLeased(t *testing.T) {
	h := newHarness(Config{MaxDeliveryBatch: 1 << 20})
	h.s.SetThrottle("slow", 1, 1)
	h.throttles["slow"] = [2]float64{1, 1}
	fillForDelete(t, h, "other", 1<<32, 50)
	fillForDelete(t, h, "q", 1, 1000)
	before := msgStates(h.s, "q")
	dlqBefore := msgStates(h.s, "q.dlq")
	if len(before["leased"]) == 0 || len(before["ready"]) == 0 || len(before["delayed"]) == 0 || len(dlqBefore) == 0 {
		t.Fatalf("fill: %d ready, %d delayed, %d leased, dead %v; want some of each", len(before["ready"]), len(before["delayed"]), len(before["leased"]), dlqBefore)
	}
	otherDigest := h.s.QueueDigest("other")

	h.ref++
	ref := h.ref
	h.s.PurgeQueue(ref, "q", false)
	rd := h.s.Ready()
	for _, m := range rd.Persist {
		if !m.Delete || m.End == nil {
			t.Fatalf("purge wrote %s; want range deletes only", fmtMutation(m))
		}
	}
	kept := len(before["leased"]) + len(dlqBefore["ready"]) + len(dlqBefore["leased"]) + len(dlqBefore["delayed"])
	if len(rd.Persist) > 2*(kept+1) {
		t.Fatalf("purge wrote %d range deletes; want at most two per run between %d kept messages", len(rd.Persist), kept)
	}
	purged := uint64(len(before["ready"]) + len(before["delayed"]) + len(before["deciding"]))
	if got := rd.Replies[0].Value; got != (Purged{Count: purged}) {
		t.Fatalf("reply %+v; want %d purged", got, purged)
	}
	applyPersist(h.kv, rd.Persist)
	h.s.Advance(rd)
	if err := checkInvariants(h.s, true); err != nil {
		t.Fatal(err)
	}
	after := msgStates(h.s, "q")
	if len(after) != 1 || !slices.Equal(after["leased"], before["leased"]) {
		t.Fatalf("after purge: %v; want the %d leased messages only", after, len(before["leased"]))
	}
	if got := msgStates(h.s, "q.dlq"); fmt.Sprint(got) != fmt.Sprint(dlqBefore) {
		t.Fatal("purging q changed its DLQ")
	}
	if h.s.QueueDigest("other") != otherDigest {
		t.Fatal("purging q changed other")
	}
	// A kept lease is still good.
	id := after["leased"][0]
	h.ref++
	h.s.Ack(h.ref, []LeaseRef{{Queue: "q", ID: id, Lease: h.lease[id]}})
	rd = h.s.Ready()
	if errs := rd.Replies[0].Value.([]error); errs[0] != nil {
		t.Fatalf("ack of a kept lease: %v", errs[0])
	}
	applyPersist(h.kv, rd.Persist)
	h.s.Advance(rd)
	roundTrip(t, h.s)

	// The records hold what memory does; leases come back ready.
	h.restart(t)
	if got := msgStates(h.s, "q"); len(got) != 1 || !slices.Equal(got["ready"], after["leased"][1:]) {
		t.Fatalf("after restart: %v; want the kept messages ready", got)
	}
	if got := msgStates(h.s, "q.dlq"); len(got["ready"])+len(got["delayed"]) != len(dlqBefore["ready"])+len(dlqBefore["leased"])+len(dlqBefore["delayed"]) {
		t.Fatalf("DLQ after restart: %v; want it as before", got)
	}
	if rd := h.s.Ready(); len(rd.Persist) != 0 {
		t.Fatalf("the restart deletes %d orphans, %s first", len(rd.Persist), fmtMutation(rd.Persist[0]))
	}

	// The DLQ, then the queue with its leases.
	for _, c := range []struct {
		q      string
		leased bool
	}{{"q.dlq", false}, {"q", true}} {
		h.ref++
		h.s.Subscribe(h.ref, 99, "q", 2, nil)
		drainHarness(h)
		h.ref++
		h.s.Unsubscribe(h.ref, 99, false)
		h.ref++
		h.s.PurgeQueue(h.ref, c.q, c.leased)
		drainHarness(h)
	}
	if got := msgStates(h.s, "q.dlq"); len(got) != 0 {
		t.Fatalf("DLQ after purge: %v; want empty", got)
	}
	if got := msgStates(h.s, "q"); len(got) != 0 {
		t.Fatalf("q after purge with leases: %v; want empty", got)
	}
	if left := len(queueKeys(h.kv, "q")); left == 0 {
		t.Fatal("the queue's definition is gone")
	}
	for k := range h.kv {
		if strings.HasPrefix(k, prefixMsg+"q\x00") || strings.HasPrefix(k, prefixState+"q\x00") {
			t.Fatalf("message record %q left", k)
		}
	}
	h.restart(t)
	if st := h.s.queueStats(h.s.queues["q"], "q", 0); st.Ready+st.Delayed+st.Leased+st.DeadLettered != 0 {
		t.Fatalf("restarted: %+v; want empty", st)
	}
	h.ref++
	h.s.PurgeQueue(h.ref, "nope", false)
	if err, _ := h.s.Ready().Replies[0].Value.(error); !errors.Is(err, fault.ErrQueueNotFound) {
		t.Fatalf("purge of a missing queue: %v; want QUEUE_NOT_FOUND", err)
	}
}

// TestPeekPages: Peek lists a queue's messages by ID, whatever their
// state, a page at a time, with a cursor that resumes after the last one
// listed, filtered by fairness key; it changes nothing and works on a
// DLQ.
func TestPeekPages(t *testing.T) {
	s := New(Config{})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q", MaxAttempts: 1})
	var items []EnqueueItem
	for i := range 25 {
		m := Message{ID: testID(uint64(100 - i)), FairnessKey: fmt.Sprint("k", i%3), PayloadSize: 5}
		if i == 4 {
			m.Delay = time.Minute
		}
		items = append(items, EnqueueItem{Queue: "q", Msg: m})
	}
	s.Enqueue(2, items)
	s.Subscribe(3, 1, "q", 2, nil)
	rd := takeReady(t, s)
	d := slices.Clone(rd.Deliveries[0].Msgs)
	s.Nack(4, []NackItem{{LeaseRef: LeaseRef{Queue: "q", ID: d[0].ID, Lease: d[0].Lease}, Reason: "boom"}})
	takeReady(t, s)
	digest := s.Digest()

	page := func(q string, after [16]byte, n int, key string) PeekPage {
		t.Helper()
		s.Peek(9, q, after, n, key)
		rd := takeReady(t, s)
		p, ok := rd.Replies[0].Value.(PeekPage)
		if !ok {
			t.Fatalf("Peek(%s): %v", q, rd.Replies[0].Value)
		}
		return p
	}
	var got [][16]byte
	states := map[string]int{}
	var after [16]byte
	for pages := 0; ; pages++ {
		p := page("q", after, 10, "")
		for _, m := range p.Msgs {
			got = append(got, m.ID)
			states[m.State]++
		}
		if p.Next == ([16]byte{}) {
			if pages != 2 || len(p.Msgs) != 4 {
				t.Fatalf("last page %d with %d messages; want page 2 with 4", pages, len(p.Msgs))
			}
			break
		}
		if p.Next != p.Msgs[len(p.Msgs)-1].ID || len(p.Msgs) != 10 {
			t.Fatalf("page %d: %d messages, next %s; want 10 and the last one's ID", pages, len(p.Msgs), idName(p.Next))
		}
		after = p.Next
	}
	if len(got) != 24 || !slices.IsSortedFunc(got, func(a, b [16]byte) int { return slices.Compare(a[:], b[:]) }) {
		t.Fatalf("listed %d messages, sorted %v; want the 24 left in ID order", len(got), slices.IsSortedFunc(got, func(a, b [16]byte) int { return slices.Compare(a[:], b[:]) }))
	}
	if states["leased"] != 1 || states["delayed"] != 1 || states["ready"] != 22 {
		t.Fatalf("states %v; want 1 leased, 1 delayed, 22 ready", states)
	}
	p := page("q", [16]byte{}, 0, "k1")
	for _, m := range p.Msgs {
		if m.FairnessKey != "k1" {
			t.Fatalf("key filter k1 listed a message of %s", m.FairnessKey)
		}
	}
	if len(p.Msgs) != 8 { // 9 of k1, one dead-lettered
		t.Fatalf("k1: %d messages; want 8", len(p.Msgs))
	}
	p = page("q.dlq", [16]byte{}, 0, "")
	if len(p.Msgs) != 1 || !p.Msgs[0].DeadLettered || p.Msgs[0].LastError != "boom" || p.Msgs[0].Attempts != 1 || p.Msgs[0].ID != d[0].ID {
		t.Fatalf("DLQ page: %+v; want the nacked message with its reason", p.Msgs)
	}
	if s.Digest() != digest {
		t.Fatal("Peek changed the scheduler")
	}
}

// TestThrottledKeyedRedrive: a throttled redrive of one fairness key
// moves that key's dead letters, and no other's, at its rate as the
// clock advances in uneven steps (under a second): exactly rate ×
// elapsed, +1 for the first, moved at once. It shows its progress in the
// stats of its queue, survives in images, and ends by itself. After a
// gap of seconds in the ticks it catches up one second's worth at most;
// and it can be cancelled.
func TestThrottledKeyedRedrive(t *testing.T) {
	s := New(Config{})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q", MaxAttempts: 1})
	var items []EnqueueItem
	for i := range 300 {
		items = append(items, EnqueueItem{Queue: "q", Msg: Message{ID: testID(uint64(i + 1)), FairnessKey: fmt.Sprint("k", i%3)}})
	}
	s.Enqueue(2, items)
	s.Subscribe(3, 1, "q", 1000, nil)
	rd := takeReady(t, s)
	var nacks []NackItem
	for _, m := range rd.Deliveries[0].Msgs {
		nacks = append(nacks, NackItem{LeaseRef: LeaseRef{Queue: "q", ID: m.ID, Lease: m.Lease}, Reason: "down"})
	}
	s.Nack(4, nacks)
	s.Unsubscribe(5, 1, false)
	takeReady(t, s)
	if n := s.queues["q.dlq"].ready; n != 300 {
		t.Fatalf("%d dead letters; want 300", n)
	}

	s.RedriveWith(6, "q.dlq", RedriveSpec{Rate: 10, FairnessKey: "k1"})
	rd = takeReady(t, s)
	if got := rd.Replies[0].Value; got != (Redriven{Moved: 1, Pending: 99}) {
		t.Fatalf("reply %+v; want 1 moved, 99 pending", got)
	}
	start := s.Now()
	moved := func() uint64 { return s.queues["q"].ready }
	steps := []time.Duration{30 * time.Millisecond, 250 * time.Millisecond, time.Millisecond, 700 * time.Millisecond, 900 * time.Millisecond, 90 * time.Millisecond}
	for i := 0; moved() < 100; i++ {
		if i > 1000 {
			t.Fatalf("moved %d of 100", moved())
		}
		if i == 7 {
			c, _ := roundTrip(t, s)
			s = c
		}
		step := steps[i%len(steps)]
		if dl := s.Deadline(); dl != 0 && i%2 == 0 {
			step = time.Duration(dl - s.Now()) // as the shell's timer would
		}
		s.Tick(s.Now().Add(step))
		if s.HasReady() {
			takeReady(t, s)
		}
		elapsed := time.Duration(s.Now() - start)
		if want := 1 + uint64(elapsed/(100*time.Millisecond)); moved() != min(want, 100) {
			t.Fatalf("after %v: moved %d; want %d at 10 a second", elapsed, moved(), min(want, 100))
		}
		if moved() < 100 {
			s.QueueStats(7, "q", 0)
			st := takeReady(t, s).Replies[0].Value.(QueueStats)
			if r := st.Redrive; r == nil || r.Rate != 10 || r.FairnessKey != "k1" || r.Moved != moved() || r.Moved+r.Remaining != 100 {
				t.Fatalf("stats of q: redrive %+v; want key k1 at 10/s, %d moved of 100", r, moved())
			}
		}
	}
	for x := range s.queues["q"].msgs.all() {
		if k := s.laneOf(s.msg(x)).key.name; k != "k1" {
			t.Fatalf("redrove a message of %s", k)
		}
	}
	if s.queues["q.dlq"].redrive != nil || s.Deadline() != 0 {
		t.Fatal("the redrive did not end")
	}

	// A redrive of everything, ticked after five seconds, then cancelled.
	s.RedriveWith(8, "q.dlq", RedriveSpec{Rate: 50})
	takeReady(t, s)
	s.Tick(s.Now().Add(5 * time.Second))
	if s.HasReady() {
		takeReady(t, s)
	}
	s.CancelRedrive(9, "q.dlq")
	rd = takeReady(t, s)
	if got := rd.Replies[0].Value; got != (Redriven{Moved: 52, Pending: 148}) {
		t.Fatalf("cancel: %+v; want 52 moved (the first, then one second's worth) and 148 left", got)
	}
	s.Tick(s.Now().Add(time.Minute))
	if s.HasReady() {
		takeReady(t, s)
	}
	if n := s.queues["q.dlq"].ready; n != 148 {
		t.Fatalf("%d dead letters after the cancel; want 148", n)
	}
	s.RedriveWith(10, "q", RedriveSpec{Rate: 1})
	if err, _ := takeReady(t, s).Replies[0].Value.(error); !errors.Is(err, fault.ErrNotADLQ) {
		t.Fatalf("redrive of a queue: %v; want NOT_A_DLQ", err)
	}
}

// TestSubscribeLeaseTimeout: a subscription's own lease length replaces
// the queue's visibility timeout for its deliveries only, and one above
// max_lease_extension is refused.
func TestSubscribeLeaseTimeout(t *testing.T) {
	s := New(Config{MaxLeaseExtension: time.Hour})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q", VisibilityTimeout: 30 * time.Second})
	s.Enqueue(2, []EnqueueItem{{Queue: "q", Msg: Message{ID: testID(1)}}, {Queue: "q", Msg: Message{ID: testID(2)}}})
	s.SubscribeLease(3, 1, "q", 1, nil, 5*time.Minute)
	s.Subscribe(4, 2, "q", 1, nil)
	rd := takeReady(t, s)
	deadlines := map[SubID]Time{}
	for _, d := range rd.Deliveries {
		deadlines[d.Sub] = d.Msgs[0].LeaseDeadline
	}
	if deadlines[1] != t0.Add(5*time.Minute) || deadlines[2] != t0.Add(30*time.Second) {
		t.Fatalf("lease deadlines %v; want +5m for the subscription's own, +30s for the queue's", deadlines)
	}
	roundTrip(t, s)
	s.SubscribeLease(5, 3, "q", 1, nil, 2*time.Hour)
	if err, _ := takeReady(t, s).Replies[0].Value.(error); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Fatalf("lease above the maximum: %v; want INVALID_ARGUMENT", err)
	}
}
