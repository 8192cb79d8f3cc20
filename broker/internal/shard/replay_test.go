package shard

import (
	"context"
	"crypto/sha256"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// replica is one fresh shard of TestSameCommandsSameState, with a fixed
// clock, its own store and a sink that records every delivery.
type replica struct {
	sh   *Shard
	st   *store.Mem
	sink *recSink
	hold chan struct{} // on_failure hooks wait on it: only Decide commands decide
}

func newReplica(t *testing.T, clock func() time.Time) *replica {
	t.Helper()
	r := &replica{st: store.NewMem(), sink: newRecSink(), hold: make(chan struct{})}
	sh, err := Open(Config{Logger: quiet, Clock: clock,
		Failure: func(context.Context, sched.Failure, []byte) (sched.Decision, error) {
			<-r.hold
			return sched.Decision{}, context.Canceled
		}}, r.st)
	if err != nil {
		t.Fatal(err)
	}
	r.sh = sh
	t.Cleanup(func() {
		close(r.hold)
		sh.Close()
		r.st.Close()
	})
	return r
}

// apply decodes each encoded command, replays them on the shard, and
// waits until their storage groups are durable and their deliveries
// reached the sink.
func (r *replica) apply(t *testing.T, encoded [][]byte) []sched.Delivered {
	t.Helper()
	ctx := context.Background()
	cmds := make([]Command, len(encoded))
	for i, b := range encoded {
		c, err := DecodeCommand(b)
		if err != nil {
			t.Fatal(err)
		}
		cmds[i] = c
		if s, ok := c.(*Subscribe); ok {
			sub := s.Sub
			if err := r.sh.Barrier(ctx, func() { r.sh.sinks[sub] = r.sink }); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := r.sh.Replay(ctx, cmds); err != nil {
		t.Fatal(err)
	}
	ran := make(chan struct{})
	if err := r.sh.Barrier(ctx, func() { close(ran) }); err != nil {
		t.Fatal(err)
	}
	<-ran
	r.st.Apply(new(store.Batch)) // every earlier group has completed
	var got []sched.Delivered
	for {
		select {
		case msgs := <-r.sink.delivered:
			got = append(got, msgs...)
			continue
		default:
		}
		return got
	}
}

// digest returns the digest of the scheduler's state and of everything
// stored.
func (r *replica) digest(t *testing.T) (state, stored [32]byte) {
	t.Helper()
	done := make(chan struct{})
	if err := r.sh.Barrier(context.Background(), func() { state = r.sh.s.Digest(); close(done) }); err != nil {
		t.Fatal(err)
	}
	<-done
	h := sha256.New()
	end := prefixEnd([]byte(sched.Prefix))
	if err := r.st.Scan([]byte(sched.Prefix), end, func(k, v []byte) error {
		h.Write(AppendCommand(nil, &DeleteQueue{Name: string(k)})) // length-prefixed
		h.Write(AppendCommand(nil, &DeleteQueue{Name: string(v)}))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	h.Sum(stored[:0])
	return state, stored
}

// TestSameCommandsSameState encodes commands of every kind, decodes them,
// and applies them to two fresh shards: the two make the same deliveries
// and end with the same state and the same stored records. This is what
// replaying a command log at recovery, and replicating it with Raft, rely
// on.
func TestSameCommandsSameState(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return t0 }
	a, b := newReplica(t, clock), newReplica(t, clock)
	fresh, _ := a.digest(t)

	at := func(d time.Duration) Command { return &Tick{Now: sched.Time(t0.Add(d).UnixNano())} }
	id := func(n byte) [16]byte { return [16]byte{0x01, 0x9a, 0, 0, 0, 0, 0x70, 0, 0x80, 0, 0, 0, 0, 0, 0, n} }
	msg := func(queue string, n byte, m sched.Message) sched.EnqueueItem {
		m.ID = id(n)
		m.Body = []byte{1, 0, 'm', n}
		m.PayloadSize = 2
		return sched.EnqueueItem{Queue: queue, Msg: m}
	}
	kinds := map[Kind]bool{}
	var delivered []sched.Delivered
	step := func(cmds ...Command) []sched.Delivered {
		t.Helper()
		enc := make([][]byte, len(cmds))
		for i, c := range cmds {
			enc[i] = AppendCommand(nil, c)
			kinds[c.Kind()] = true
		}
		da, db := a.apply(t, enc), b.apply(t, enc)
		if !reflect.DeepEqual(da, db) {
			t.Fatalf("the replicas delivered differently:\n%+v\n%+v", da, db)
		}
		sa, _ := a.digest(t)
		sb, _ := b.digest(t)
		if sa != sb {
			t.Fatalf("after %d commands from %v, the replicas' states differ", len(cmds), cmds[0].Kind())
		}
		delivered = append(delivered, da...)
		return da
	}
	ref := func(d sched.Delivered) sched.LeaseRef {
		return sched.LeaseRef{Queue: d.Queue, ID: d.ID, Lease: d.Lease}
	}

	ds := step(
		&LeaseEpoch{Base: uint64(t0.Add(time.Hour).UnixNano())},
		&CreateQueue{Spec: sched.QueueSpec{Name: "jobs", MaxAttempts: 1, VisibilityTimeout: 30 * time.Second}},
		&CreateQueue{Spec: sched.QueueSpec{Name: "hooked", OnFailure: "return {action = 'dlq'}"}},
		&SetThrottle{Key: "provider", Rate: 1, Burst: 2},
		&Enqueue{Items: []sched.EnqueueItem{
			msg("jobs", 1, sched.Message{FairnessKey: "acme", Weight: 2}),
			msg("jobs", 2, sched.Message{FairnessKey: "acme", IdempotencyKey: "k1"}),
			msg("jobs", 3, sched.Message{FairnessKey: "globex", ThrottleKeys: []string{"provider"}}),
			msg("jobs", 4, sched.Message{FairnessKey: "globex", OrderingKey: "cart"}),
			msg("jobs", 5, sched.Message{FairnessKey: "initech"}),
			msg("jobs", 6, sched.Message{FairnessKey: "acme", Delay: time.Second}),
			msg("jobs", 7, sched.Message{FairnessKey: "acme", IdempotencyKey: "k1"}), // a duplicate
			msg("hooked", 8, sched.Message{}),
		}},
		&Subscribe{Sub: 1, Queue: "jobs", Credit: 5, Limits: []sched.RateLimit{{Name: "api", Limit: 100, Period: time.Second}}},
		&Subscribe{Sub: 2, Queue: "hooked", Credit: 1},
		&Deliver{},
	)
	if len(ds) != 6 {
		t.Fatalf("%d deliveries; want 5 of jobs and 1 of hooked", len(ds))
	}
	var jobs []sched.Delivered
	var hooked sched.Delivered
	for _, d := range ds {
		if d.Queue == "jobs" {
			jobs = append(jobs, d)
		} else {
			hooked = d
		}
	}
	step(
		at(2*time.Second),
		&Ack{Items: []sched.LeaseRef{ref(jobs[0])}},
		&Nack{Items: []sched.NackItem{{LeaseRef: ref(jobs[1]), Reason: "boom"}}}, // max attempts 1: to the DLQ
		&RetryAfter{Items: []sched.RetryItem{{LeaseRef: ref(jobs[2]), Delay: 10 * time.Millisecond}}},
		&Extend{Items: []sched.ExtendItem{{LeaseRef: ref(jobs[3]), Duration: time.Minute}}},
		&Release{Items: []sched.LeaseRef{ref(jobs[4])}},
		&Nack{Items: []sched.NackItem{{LeaseRef: ref(hooked), Reason: "hook decides"}}},
		&AddCredit{Sub: 1, N: 3},
		&Deliver{},
	)
	step(
		at(3*time.Second),
		&Decide{Queue: "hooked", ID: hooked.ID, Decision: sched.DeadLetter()},
		&Redrive{DLQ: "jobs.dlq", N: 0},
		&Deliver{},
	)
	step(
		at(2*time.Minute), // leases expire
		&RemoveThrottle{Key: "provider"},
		&Unsubscribe{Sub: 1, Release: true},
		&Deliver{},
	)
	// An idempotent producer's frame, then the frame resent (new IDs,
	// as a new leader fills in): duplicates, nothing enqueued.
	producer := [16]byte{0x01, 0x9a, 15: 1}
	step(
		&Enqueue{Items: []sched.EnqueueItem{
			msg("jobs", 10, sched.Message{FairnessKey: "acme", ProducerID: producer, Sequence: 41}),
			msg("jobs", 11, sched.Message{FairnessKey: "acme", ProducerID: producer, Sequence: 42}),
		}},
		&Enqueue{Items: []sched.EnqueueItem{
			msg("jobs", 12, sched.Message{FairnessKey: "acme", ProducerID: producer, Sequence: 41}),
			msg("jobs", 13, sched.Message{FairnessKey: "acme", ProducerID: producer, Sequence: 42}),
		}},
		&Deliver{},
	)
	// The message lifecycle: a subscription with its own lease, a
	// throttled redrive of one key, cancelled, a purge.
	step(
		&Subscribe{Sub: 4, Queue: "jobs", Credit: 1, Lease: time.Minute},
		&Redrive{DLQ: "jobs.dlq", Rate: 5, FairnessKey: "acme"},
		at(3*time.Minute),
		&CancelRedrive{DLQ: "jobs.dlq"},
		&PurgeQueue{Name: "jobs.dlq", IncludeLeased: true},
		&Deliver{},
	)
	// TTLs and priorities: a queue whose messages expire to be dropped,
	// a message that expires to the DLQ, priorities within a key.
	step(
		&CreateQueue{Spec: sched.QueueSpec{Name: "quotes", MessageTTL: time.Second, ExpiredAction: sched.ExpireDrop}},
		&Enqueue{Items: []sched.EnqueueItem{
			msg("quotes", 20, sched.Message{FairnessKey: "acme"}),
			msg("jobs", 21, sched.Message{FairnessKey: "acme", TTL: 500 * time.Millisecond, Priority: 10}),
			msg("jobs", 22, sched.Message{FairnessKey: "acme", Priority: 1}),
		}},
		at(4*time.Minute),
		&Deliver{},
	)
	step(
		&DeleteQueue{Name: "hooked"},
		&Subscribe{Sub: 3, Queue: "jobs", Credit: 100},
		&Deliver{},
	)

	for k := Kind(1); int(k) < len(kindNames); k++ {
		if !kinds[k] {
			t.Errorf("no %v command applied", k)
		}
	}
	sa, storedA := a.digest(t)
	sb, storedB := b.digest(t)
	if sa != sb || storedA != storedB {
		t.Fatalf("the replicas ended in different states (state equal: %v, stored equal: %v)", sa == sb, storedA == storedB)
	}
	if sa == fresh {
		t.Fatal("the commands left the state unchanged")
	}
	if len(delivered) < 10 {
		t.Fatalf("%d deliveries in all; want the commands to have exercised delivery", len(delivered))
	}
	// The digest sees a difference: one more command on one replica.
	a.apply(t, [][]byte{AppendCommand(nil, &Enqueue{Items: []sched.EnqueueItem{msg("jobs", 9, sched.Message{Delay: time.Hour})}})})
	if sa, _ := a.digest(t); sa == sb {
		t.Fatal("an enqueue on one replica left the digests equal")
	}
}

// TestQueueMovesAlone: a queue's records, found by sched.QueueRanges,
// copied into an empty store, restore that queue and its dead-letter
// queue whole (messages ready, delayed, failed and dead-lettered,
// idempotency keys and producers) and nothing of the other queues: a
// queue is one unit of state, as snapshotting and moving it need.
func TestQueueMovesAlone(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return t0 }
	src := store.NewMem()
	defer src.Close()
	sh, err := Open(Config{Logger: quiet, Clock: clock}, src)
	if err != nil {
		t.Fatal(err)
	}
	for _, spec := range []sched.QueueSpec{{Name: "a", MaxAttempts: 1}, {Name: "a.b", MaxAttempts: 3}, {Name: "b"}} {
		if r := call(t, sh, &CreateQueue{Spec: spec}); r.Err != nil {
			t.Fatal(r.Err)
		}
	}
	for _, q := range []string{"a", "a.b", "b"} {
		for i := range 6 {
			m := sched.Message{PayloadSize: 1, Body: []byte{1, 0, 'x'}, FairnessKey: fmt.Sprint("k", i%2)}
			if i == 0 {
				m.IdempotencyKey = "once"
			}
			if i == 1 {
				m.ProducerID, m.Sequence = [16]byte{1}, 5
			}
			if i == 5 {
				m.Delay = time.Hour
			}
			if r := call(t, sh, &Enqueue{Items: []sched.EnqueueItem{{Queue: q, Msg: m}}}); r.Err != nil {
				t.Fatal(r.Err)
			}
		}
		sink := newRecSink()
		subscribe(t, sh, sched.SubID(len(q)+10*int(q[len(q)-1])), q, sink)
		ds := receive(t, sink.delivered, "deliveries")
		call(t, sh, &Ack{Items: []sched.LeaseRef{{Queue: q, ID: ds[0].ID, Lease: ds[0].Lease}}})
		call(t, sh, &Nack{Items: []sched.NackItem{{LeaseRef: sched.LeaseRef{Queue: q, ID: ds[1].ID, Lease: ds[1].Lease}, Reason: "boom"}}})
	}
	sh.Close()

	dst := store.NewMem()
	defer dst.Close()
	var b store.Batch
	for _, r := range sched.QueueRanges("a") {
		if err := src.Scan(r.Start, r.End, func(k, v []byte) error { b.Put(k, v); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	if err := dst.Apply(&b); err != nil {
		t.Fatal(err)
	}

	orig, err := Open(Config{Logger: quiet, Clock: clock}, src)
	if err != nil {
		t.Fatal(err)
	}
	defer orig.Close()
	moved, err := Open(Config{Logger: quiet, Clock: clock}, dst)
	if err != nil {
		t.Fatal(err)
	}
	defer moved.Close()
	queueDigest := func(sh *Shard, name string) (d [32]byte) {
		done := make(chan struct{})
		sh.Barrier(context.Background(), func() { d = sh.s.QueueDigest(name); close(done) })
		<-done
		return d
	}
	if queueDigest(orig, "a") != queueDigest(moved, "a") {
		t.Fatal("queue a restored from its ranges differs from queue a restored from the whole store")
	}
	if (queueDigest(moved, "a") == [32]byte{}) || queueDigest(moved, "a.b") != [32]byte{} || queueDigest(moved, "b") != [32]byte{} {
		t.Fatal("the moved store holds more, or less, than queue a")
	}
	st := stats(t, moved, "a").Stats
	if st.Ready+st.Delayed == 0 || st.DeadLettered != 1 {
		t.Fatalf("moved queue a: %+v; want its messages and one dead letter", st)
	}
}

// TestReplaySplitChangesNothing: the same commands replayed in one call
// and one call each make the same deliveries and end in the same state:
// deliveries are decided at the Deliver commands, not wherever a call to
// Replay ends (two messages of key a, a subscription, then one of key b:
// a Deliver after all of them serves a and b by DRR; deciding after the
// subscription would have served a twice).
func TestReplaySplitChangesNothing(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return t0 }
	whole, split := newReplica(t, clock), newReplica(t, clock)
	msg := func(n byte, key string) sched.EnqueueItem {
		return sched.EnqueueItem{Queue: "q", Msg: sched.Message{ID: [16]byte{0x01, 15: n}, FairnessKey: key, PayloadSize: 1, Body: []byte{1, 0, 'x'}}}
	}
	cmds := []Command{
		&Tick{Now: sched.Time(t0.Add(time.Second).UnixNano())},
		&CreateQueue{Spec: sched.QueueSpec{Name: "q"}},
		&Enqueue{Items: []sched.EnqueueItem{msg(1, "a"), msg(2, "a")}},
		&Subscribe{Sub: 1, Queue: "q", Credit: 2},
		&Enqueue{Items: []sched.EnqueueItem{msg(3, "b")}},
		&Deliver{},
	}
	enc := make([][]byte, len(cmds))
	for i, c := range cmds {
		enc[i] = AppendCommand(nil, c)
	}
	dw := whole.apply(t, enc)
	var ds []sched.Delivered
	for _, e := range enc {
		ds = append(ds, split.apply(t, [][]byte{e})...)
	}
	keys := func(ds []sched.Delivered) string {
		var k []string
		for _, d := range ds {
			k = append(k, d.FairnessKey)
		}
		return strings.Join(k, ",")
	}
	if keys(dw) != "a,b" || keys(ds) != keys(dw) {
		t.Fatalf("deliveries: %s replayed at once, %s replayed one by one; want a,b both times", keys(dw), keys(ds))
	}
	sw, _ := whole.digest(t)
	ss, _ := split.digest(t)
	if sw != ss {
		t.Fatal("the same commands replayed in one call and one by one end in different states")
	}
}
