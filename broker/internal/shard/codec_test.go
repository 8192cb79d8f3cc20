package shard

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched"
)

// everyCommand returns one command of each kind, with every field set.
func everyCommand() []Command {
	ref := sched.LeaseRef{Queue: "jobs", ID: [16]byte{1, 2, 3}, Lease: 1 << 40}
	return []Command{
		&Tick{Now: 1_700_000_000_123_456_789},
		&LeaseEpoch{Base: 1_700_000_000_000_000_000},
		&CreateQueue{Spec: sched.QueueSpec{Name: "jobs", VisibilityTimeout: 30 * time.Second,
			OnEnqueue: "return {}", OnFailure: "return {action = 'dlq'}", MaxAttempts: 5,
			BackoffBase: time.Second, BackoffMax: time.Minute, DedupWindow: 5 * time.Minute}},
		&DeleteQueue{Name: "jobs"},
		&Enqueue{Items: []sched.EnqueueItem{
			{Queue: "jobs", Msg: sched.Message{ID: [16]byte{9}, FairnessKey: "acme", Weight: 3,
				ThrottleKeys: []string{"provider:a", "provider:b"}, OrderingKey: "cart-1", IdempotencyKey: "job-1",
				Delay: time.Hour, PayloadSize: 5, Body: []byte("\x01\x00hello")}},
			{Queue: "jobs", Msg: sched.Message{ID: [16]byte{10}, Body: []byte{}}},
		}},
		&Enqueue{Items: []sched.EnqueueItem{
			{Queue: "jobs", Msg: sched.Message{ID: [16]byte{11}, IdempotencyKey: "job-2", PayloadSize: 1, Body: []byte("\x01\x00x"),
				ProducerID: [16]byte{0x01, 0x9a, 15: 7}, Sequence: 1 << 40}},
			{Queue: "other", Msg: sched.Message{ID: [16]byte{12}, Body: []byte{},
				ProducerID: [16]byte{0x01, 0x9a, 15: 7}, Sequence: 1<<40 + 1}},
			{Queue: "jobs", Msg: sched.Message{ID: [16]byte{13}, Body: []byte{}}}, // no producer
		}},
		&Subscribe{Sub: 7, Queue: "jobs", Credit: 100, Limits: []sched.RateLimit{{Name: "api", Limit: 10, Period: time.Second, Burst: 20}}},
		&Unsubscribe{Sub: 7, Release: true},
		&AddCredit{Sub: 7, N: 25},
		&Ack{Items: []sched.LeaseRef{ref}},
		&Nack{Items: []sched.NackItem{{LeaseRef: ref, Reason: "bad input"}}},
		&RetryAfter{Items: []sched.RetryItem{{LeaseRef: ref, Delay: -time.Second}}},
		&Extend{Items: []sched.ExtendItem{{LeaseRef: ref, Duration: time.Minute}}},
		&Release{Items: []sched.LeaseRef{ref, {Queue: "jobs.dlq", ID: [16]byte{4}, Lease: 1}}},
		&Redrive{DLQ: "jobs.dlq", N: 10},
		&Redrive{DLQ: "jobs.dlq", Rate: 100, FairnessKey: "acme"},
		&CancelRedrive{DLQ: "jobs.dlq"},
		&PurgeQueue{Name: "jobs", IncludeLeased: true},
		&Subscribe{Sub: 8, Queue: "jobs", Credit: 1, Lease: 5 * time.Minute},
		&Decide{Queue: "jobs", ID: [16]byte{5}, Decision: sched.Decision{DeadLetter: true, Delay: time.Second}},
		&SetThrottle{Key: "provider:a", Rate: 12.5, Burst: 100},
		&RemoveThrottle{Key: "provider:a"},
		&Deliver{},
		&Enqueue{Items: []sched.EnqueueItem{
			{Queue: "jobs", Msg: sched.Message{ID: [16]byte{14}, TTL: 90 * time.Second, Priority: 10, Body: []byte{},
				ProducerID: [16]byte{0x01, 0x9a, 15: 8}, Sequence: 3}},
			{Queue: "jobs", Msg: sched.Message{ID: [16]byte{15}, Body: []byte{}}}, // neither
		}},
		&CreateQueue{Spec: sched.QueueSpec{Name: "ttl", MessageTTL: time.Hour, ExpiredAction: sched.ExpireDrop, CostByTime: true, Policy: sched.PolicySTFQ}},
	}
}

// TestCommandRoundTrip encodes every kind of command, decodes it, and
// gets the same command back; the kinds are all covered and named.
func TestCommandRoundTrip(t *testing.T) {
	seen := map[Kind]bool{}
	for _, c := range everyCommand() {
		b := AppendCommand(nil, c)
		if Kind(b[0]) != c.Kind() {
			t.Errorf("%v encodes with tag %d", c.Kind(), b[0])
		}
		got, err := DecodeCommand(b)
		if err != nil {
			t.Fatalf("DecodeCommand(%v): %v", c.Kind(), err)
		}
		if !reflect.DeepEqual(got, c) {
			t.Errorf("%v: decoded %+v; want %+v", c.Kind(), got, c)
		}
		seen[c.Kind()] = true
		// Truncated, it fails with ErrBadCommand; with a byte more, too.
		for n := 1; n < len(b); n++ {
			if _, err := DecodeCommand(b[:n]); !errors.Is(err, ErrBadCommand) {
				t.Errorf("%v cut to %d of %d bytes: %v; want ErrBadCommand", c.Kind(), n, len(b), err)
			}
		}
		if _, err := DecodeCommand(append(b, 0)); !errors.Is(err, ErrBadCommand) {
			t.Errorf("%v with a byte left over: %v; want ErrBadCommand", c.Kind(), err)
		}
	}
	for k := Kind(1); int(k) < len(kindNames); k++ {
		if !seen[k] {
			t.Errorf("no %v in everyCommand", k)
		}
		if k.String() == "" || k.String()[0] == 'K' {
			t.Errorf("kind %d has no name", k)
		}
	}
	if _, err := DecodeCommand([]byte{byte(len(kindNames))}); !errors.Is(err, ErrBadCommand) {
		t.Errorf("unknown kind: %v; want ErrBadCommand", err)
	}
}

// TestEnqueueEncodingWithoutProducers: an Enqueue without producers keeps
// the encoding it had before producers existed (KindEnqueue, no producer
// fields), so a decoder that predates them reads it; one with a producer
// is KindEnqueueSeq, which such a decoder refuses rather than misreads.
func TestEnqueueEncodingWithoutProducers(t *testing.T) {
	item := sched.EnqueueItem{Queue: "q", Msg: sched.Message{ID: [16]byte{1}, FairnessKey: "k", PayloadSize: 1, Body: []byte("b")}}
	// The encoding of this item before producers: kind, count, then queue,
	// ID, fairness key, weight, throttle keys, ordering key, idempotency
	// key, delay, payload size, body.
	old := append([]byte{byte(KindEnqueue), 1, 1, 'q'}, item.Msg.ID[:]...)
	old = append(old, 1, 'k', 0, 0, 0, 0, 0, 1, 1, 'b')
	if got := AppendCommand(nil, &Enqueue{Items: []sched.EnqueueItem{item}}); !bytes.Equal(got, old) {
		t.Fatalf("AppendCommand(Enqueue) = %x; want %x, the encoding before producers", got, old)
	}
	item.Msg.ProducerID, item.Msg.Sequence = [16]byte{2}, 300
	b := AppendCommand(nil, &Enqueue{Items: []sched.EnqueueItem{item}})
	want := append(append([]byte{byte(KindEnqueueSeq)}, old[1:]...), item.Msg.ProducerID[:]...)
	want = append(want, 0xac, 0x02) // 300
	if !bytes.Equal(b, want) {
		t.Fatalf("AppendCommand(Enqueue with a producer) = %x; want %x", b, want)
	}
}

// FuzzDecodeCommand: any bytes decode to a command or to ErrBadCommand,
// never a panic or an allocation out of proportion to the input; a
// decoded command encodes to bytes that decode to the same command.
func FuzzDecodeCommand(f *testing.F) {
	for _, c := range everyCommand() {
		f.Add(AppendCommand(nil, c))
	}
	f.Add([]byte{byte(KindEnqueue), 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Add([]byte{byte(KindEnqueueSeq), 0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, err := DecodeCommand(b)
		if err != nil {
			if !errors.Is(err, ErrBadCommand) {
				t.Fatalf("error %v does not wrap ErrBadCommand", err)
			}
			return
		}
		enc := AppendCommand(nil, c)
		again, err := DecodeCommand(enc)
		if err != nil {
			t.Fatalf("re-encoded %v does not decode: %v", c.Kind(), err)
		}
		if !bytes.Equal(AppendCommand(nil, again), enc) {
			t.Fatalf("%v: encoding is not stable across a round trip", c.Kind())
		}
	})
}

// TestCreateQueuePolicy: a queue's policy, when it names one, survives
// the round trip; a command written before policies decodes with none;
// an empty or unknown policy is refused.
func TestCreateQueuePolicy(t *testing.T) {
	with := &CreateQueue{Spec: sched.QueueSpec{Name: "jobs", Policy: sched.PolicySTFQ}}
	b := AppendCommand(nil, with)
	got, err := DecodeCommand(b)
	if err != nil || !reflect.DeepEqual(got, with) {
		t.Fatalf("round trip: %+v, %v; want %+v", got, err, with)
	}
	without := AppendCommand(nil, &CreateQueue{Spec: sched.QueueSpec{Name: "jobs"}})
	if got, err := DecodeCommand(without); err != nil || got.(*CreateQueue).Spec.Policy != "" {
		t.Fatalf("without a policy: %+v, %v", got, err)
	}
	for _, p := range []string{"\x00", "\x03fifo"} {
		if _, err := DecodeCommand(append(slices.Clone(without), p...)); !errors.Is(err, ErrBadCommand) {
			t.Errorf("policy bytes %q: %v; want ErrBadCommand", p, err)
		}
	}
	tenants := &CreateQueue{Spec: sched.QueueSpec{Name: "jobs", Policy: sched.PolicySTFQ, TenantSeparator: "/"}}
	b = AppendCommand(nil, tenants)
	if got, err := DecodeCommand(b); err != nil || !reflect.DeepEqual(got, tenants) {
		t.Fatalf("round trip with a tenant separator: %+v, %v; want %+v", got, err, tenants)
	}
	byTime := &CreateQueue{Spec: sched.QueueSpec{Name: "jobs", Policy: sched.PolicySTFQ, CostByTime: true}}
	if got, err := DecodeCommand(AppendCommand(nil, byTime)); err != nil || !reflect.DeepEqual(got, byTime) {
		t.Fatalf("round trip with cost by time: %+v, %v; want %+v", got, err, byTime)
	}
	// An empty separator, where one is written, is refused.
	if _, err := DecodeCommand(append(AppendCommand(nil, with), 0)); !errors.Is(err, ErrBadCommand) {
		t.Errorf("an empty tenant separator: %v; want ErrBadCommand", err)
	}
}

// TestEntryRoundTrip: an entryEncoder used for several proposals encodes
// each to exactly what DecodeEntry reads back, whatever it encoded before
// (its scratch buffer is reused, the entries are not).
func TestEntryRoundTrip(t *testing.T) {
	var e entryEncoder
	all := everyCommand()
	big := &Enqueue{Items: []sched.EnqueueItem{{Queue: "jobs", Msg: sched.Message{ID: [16]byte{1}, Body: bytes.Repeat([]byte("x"), 300)}}}}
	proposals := [][]Command{all, {&Tick{Now: 5}}, {big, &Deliver{}}, all[:3], {}}
	var entries [][]byte
	for i, cmds := range proposals {
		entries = append(entries, e.append(nil, 7, uint64(i+1), cmds))
	}
	for i, b := range entries {
		proposer, seq, cmds, err := DecodeEntry(b)
		if err != nil {
			t.Fatalf("entry %d: %v", i, err)
		}
		if proposer != 7 || seq != uint64(i+1) {
			t.Errorf("entry %d: proposer %d, seq %d", i, proposer, seq)
		}
		want := proposals[i]
		if len(cmds) != len(want) {
			t.Fatalf("entry %d: %d commands, want %d", i, len(cmds), len(want))
		}
		for j := range cmds {
			if !bytes.Equal(AppendCommand(nil, cmds[j]), AppendCommand(nil, want[j])) {
				t.Errorf("entry %d command %d: %+v, want %+v", i, j, cmds[j], want[j])
			}
		}
		// One allocation of about the entry's size (up to the allocator's
		// size class), not a buffer grown by appending.
		if cap(b) > len(b)*5/4+16 {
			t.Errorf("entry %d: %d bytes in a buffer of %d", i, len(b), cap(b))
		}
	}
}
