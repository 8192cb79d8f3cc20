package sched

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

// oldMsgRecord encodes a message record as brokers wrote them before
// TTLs and priorities: version 1, the body last.
func oldMsgRecord(enq Time, fk string, body string) []byte {
	b := []byte{1}
	b = binary.BigEndian.AppendUint64(b, uint64(enq))
	b = binary.BigEndian.AppendUint64(b, 0) // due
	b = binary.BigEndian.AppendUint32(b, 1) // weight
	b = binary.BigEndian.AppendUint32(b, uint32(len(body)))
	b = binary.BigEndian.AppendUint16(b, uint16(len(fk)))
	b = append(b, fk...)
	b = binary.BigEndian.AppendUint16(b, 0) // no throttle keys
	b = binary.BigEndian.AppendUint16(b, 0) // no ordering key
	return append(b, body...)
}

// TestRecordsWithoutTTLUnchanged: a message without a TTL or priority,
// and a queue without a message TTL, are stored byte for byte as before
// TTLs, so that a data directory stays readable by an older broker.
func TestRecordsWithoutTTLUnchanged(t *testing.T) {
	meta := MessageMeta{EnqueuedAt: t0, Weight: 1, PayloadSize: 5, FairnessKey: "acme"}
	if got, want := appendMsgRecord(nil, &meta, []byte("hello")), oldMsgRecord(t0, "acme", "hello"); !bytes.Equal(got, want) {
		t.Errorf("message record = %x; want %x", got, want)
	}
	spec := QueueSpec{Name: "q", Policy: PolicySTFQ, TenantSeparator: "/", CostByTime: true}
	rec := appendQueueRecord(nil, &spec)
	if rec[len(rec)-1] != 1 || len(rec) != 1+8+4+8+8+8+4+4+4+4+4+8+4+1+1 {
		t.Errorf("queue record of %d bytes ending %x; want the layout before TTLs", len(rec), rec[len(rec)-1])
	}
}

// TestRestoreRecordsFromBeforeTTL restores records written before TTLs
// (version 1 message records, queue records of every older layout, state
// records without the no-TTL flag) and gets the messages back, without
// TTLs, at the default priority.
func TestRestoreRecordsFromBeforeTTL(t *testing.T) {
	s := New(Config{})
	specs := []QueueSpec{{Name: "a"}, {Name: "b", Policy: PolicyDRR}, {Name: "c", Policy: PolicySTFQ, TenantSeparator: "/"}, {Name: "d", Policy: PolicySTFQ, CostByTime: true}}
	for _, sp := range specs {
		if err := s.Restore(appendQueueKey(nil, sp.Name), appendQueueRecord(nil, &sp)); err != nil {
			t.Fatal(err)
		}
	}
	for i, sp := range specs {
		if err := s.Restore(appendMsgKey(nil, sp.Name, testID(uint64(i+1))), oldMsgRecord(t0, "k", "body")); err != nil {
			t.Fatal(err)
		}
	}
	st := appendStateRecord(nil, &stateRecord{dead: true, attempts: 3, lastErr: "boom"})
	if st[1] != stateDead {
		t.Fatalf("state record flags %#x; want only dead", st[1])
	}
	if err := s.Restore(appendStateKey(nil, "a", testID(1)), st); err != nil {
		t.Fatal(err)
	}
	s.Tick(t0.Add(365 * 24 * time.Hour))
	if s.HasReady() {
		s.Advance(s.Ready())
	}
	for i, sp := range specs {
		q := s.queues[sp.Name]
		x := q.msgs.get(&s.recs, testID(uint64(i+1)))
		if i == 0 {
			x = q.dlq.msgs.get(&s.recs, testID(1))
		}
		if x == 0 {
			t.Fatalf("queue %s: message %d not restored", sp.Name, i+1)
		}
		m := s.msg(x)
		if m.state != stReady || s.expiresAt(m) != 0 || s.prioOf(m) != 0 || q.counts.TTLExpired != 0 {
			t.Errorf("queue %s: restored %v, expiry %d, priority %d; want ready, none, default", sp.Name, m.state, s.expiresAt(m), s.prioOf(m))
		}
	}
	if err := checkInvariants(s, false); err != nil {
		t.Fatal(err)
	}
}

// TestTTLRecordsRoundTrip: queue records with a message TTL, message
// records with an expiry or a priority, and state records with the
// no-TTL flag decode to what was encoded, whatever else the queue sets;
// a message record cut short fails to decode.
func TestTTLRecordsRoundTrip(t *testing.T) {
	for _, sp := range []QueueSpec{
		{Name: "q", MessageTTL: time.Minute},
		{Name: "q", ExpiredAction: ExpireDrop},
		{Name: "q", Policy: PolicySTFQ, TenantSeparator: "/", MessageTTL: time.Hour, ExpiredAction: ExpireDeadLetter},
		{Name: "q", Policy: PolicySTFQ, CostByTime: true, MessageTTL: time.Millisecond},
		{Name: "q", Policy: PolicyDRR, LatencyBudget: 0, MessageTTL: MaxTTL},
	} {
		got, err := decodeQueueRecord("q", appendQueueRecord(nil, &sp))
		if err != nil || got != sp {
			t.Errorf("queue record of %+v decodes to %+v, %v", sp, got, err)
		}
	}
	for _, meta := range []MessageMeta{
		{EnqueuedAt: t0, Weight: 2, PayloadSize: 3, FairnessKey: "k", Expires: t0.Add(time.Second)},
		{EnqueuedAt: t0, Weight: 1, PayloadSize: 3, FairnessKey: "k", ThrottleKeys: []string{"a"}, OrderingKey: "o", Priority: 10},
	} {
		rec := appendMsgRecord(nil, &meta, []byte("abc"))
		got, body, err := DecodeMessageRecord(rec)
		if err != nil || got.Expires != meta.Expires || got.Priority != meta.Priority || string(body) != "abc" {
			t.Errorf("message record of %+v decodes to %+v, %q, %v", meta, got, body, err)
		}
		if b, err := MessageBody(rec); err != nil || string(b) != "abc" {
			t.Errorf("MessageBody = %q, %v; want abc", b, err)
		}
		if rec[0] != msgRecordVersion2 {
			t.Errorf("message record version %d; want %d", rec[0], msgRecordVersion2)
		}
	}
	bad := appendMsgRecord(nil, &MessageMeta{EnqueuedAt: t0, Weight: 1, FairnessKey: "k", Priority: 11}, nil)
	if _, _, err := DecodeMessageRecord(bad); err == nil {
		t.Error("a message record with priority 11 decodes")
	}
	r := stateRecord{noTTL: true, attempts: 0}
	if got, err := decodeStateRecord(appendStateRecord(nil, &r)); err != nil || got != r {
		t.Errorf("state record %+v decodes to %+v, %v", r, got, err)
	}
}

// TestMessageWithoutTTLHasNoExtension: a ready message without a TTL
// holds no extension record and no timer, whatever its priority; one
// with a TTL holds one of each.
func TestMessageWithoutTTLHasNoExtension(t *testing.T) {
	s := New(Config{})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q"})
	s.Enqueue(2, []EnqueueItem{{Queue: "q", Msg: Message{ID: testID(1), Priority: 10}}, {Queue: "q", Msg: Message{ID: testID(2), TTL: time.Minute}}})
	if n := s.exts.len(); n != 1 || len(s.timers.a) != 1 {
		t.Fatalf("%d extension records, %d timers; want 1 and 1 (the message with a TTL)", n, len(s.timers.a))
	}
	if m := s.msg(s.queues["q"].msgs.get(&s.recs, testID(1))); m.ext != 0 {
		t.Errorf("the message without a TTL has an extension record")
	}
}
