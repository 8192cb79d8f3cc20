package sched

import (
	"bytes"
	"encoding/binary"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// The decoders read records from disk, so they must reject any bytes
// cleanly, and what they accept must encode back to the same bytes.
// Seed corpora are in testdata/fuzz/<FuzzName>.

func FuzzDecodeMessageRecord(f *testing.F) {
	f.Add(appendMsgRecord(nil, &MessageMeta{EnqueuedAt: t0, Due: t0 + 5, Weight: 3, PayloadSize: 7, FairnessKey: "tenant", ThrottleKeys: []string{"a", "b"}, OrderingKey: "o"}, []byte("body")))
	f.Fuzz(func(t *testing.T, value []byte) {
		meta, body, err := DecodeMessageRecord(value)
		fast, ferr := MessageBody(value)
		if (err == nil) != (ferr == nil) {
			t.Fatalf("DecodeMessageRecord error %v, MessageBody error %v; want both or neither", err, ferr)
		}
		if err != nil {
			return
		}
		if !bytes.Equal(body, fast) {
			t.Fatalf("MessageBody = %q; DecodeMessageRecord body = %q", fast, body)
		}
		if got := appendMsgRecord(nil, &meta, body); !bytes.Equal(got, value) {
			t.Fatalf("re-encoded %x; want %x", got, value)
		}
	})
}

func FuzzDecodeStateRecord(f *testing.F) {
	f.Add(appendStateRecord(nil, &stateRecord{dead: true, attempts: 3, due: t0, lastErr: "boom"}))
	f.Fuzz(func(t *testing.T, value []byte) {
		r, err := decodeStateRecord(value)
		if err != nil || len(r.lastErr) > MaxReasonLen {
			return
		}
		if got := appendStateRecord(nil, &r); !bytes.Equal(got, value) {
			t.Fatalf("re-encoded %x; want %x", got, value)
		}
	})
}

func FuzzDecodeDedupRecord(f *testing.F) {
	f.Add(appendDedupRecord(nil, testID(1), t0))
	f.Fuzz(func(t *testing.T, value []byte) {
		id, exp, err := decodeDedupRecord(value)
		if err != nil {
			return
		}
		if got := appendDedupRecord(nil, id, exp); !bytes.Equal(got, value) {
			t.Fatalf("re-encoded %x; want %x", got, value)
		}
	})
}

func FuzzDecodeRunRecord(f *testing.F) {
	f.Add(uint64(9), appendRunRecord(nil, []pentry{{seq: 7, id: testID(1)}, {seq: 9, id: testID(2)}}))
	f.Fuzz(func(t *testing.T, last uint64, value []byte) {
		run, err := decodeRunRecord(value, last)
		if err != nil {
			return
		}
		if got := appendRunRecord(nil, run); !bytes.Equal(got, value) {
			t.Fatalf("re-encoded %x; want %x", got, value)
		}
	})
}

func FuzzDecodeQueueRecord(f *testing.F) {
	f.Add(appendQueueRecord(nil, &QueueSpec{VisibilityTimeout: time.Second, MaxAttempts: 5, OnEnqueue: "e", OnFailure: "f"}))
	f.Add(appendQueueRecord(nil, &QueueSpec{Policy: PolicySTFQ, LatencyBudget: 3, TenantSeparator: "/", CostByTime: true}))
	f.Add(appendQueueRecord(nil, &QueueSpec{Policy: PolicySTFQ, CostByTime: true}))
	f.Fuzz(func(t *testing.T, value []byte) {
		spec, err := decodeQueueRecord("q", value)
		if err != nil {
			return
		}
		if got := appendQueueRecord(nil, &spec); !bytes.Equal(got, value) {
			t.Fatalf("re-encoded %x; want %x", got, value)
		}
	})
}

// FuzzRestore feeds arbitrary records to Restore, as a damaged data
// directory would, then runs the scheduler: it may refuse records, never
// panic or break its invariants. The input is a sequence of records,
// each a 1-byte key length, the key, a 2-byte value length, the value;
// they are restored sorted by key, as the shell does.
func FuzzRestore(f *testing.F) {
	f.Add(encodeRecords(sampleRecords()))
	f.Fuzz(func(t *testing.T, data []byte) {
		recs := decodeRecords(data)
		s := New(Config{})
		for _, r := range recs {
			s.Restore(r[0], r[1])
		}
		s.Tick(t0)
		if err := checkInvariants(s, false); err != nil {
			t.Fatalf("after restore: %v", err)
		}
		for name := range s.queues {
			s.Subscribe(1, SubID(len(name)+int(s.lease)), name, 100, nil)
			s.QueueStats(2, name, 0)
		}
		for i := 0; i < 3 && s.HasReady(); i++ {
			if err := checkInvariants(s, true); err != nil {
				t.Fatalf("after restore: %v", err)
			}
			s.Advance(s.Ready())
			s.Tick(s.Now().Add(time.Minute))
		}
	})
}

// sampleRecords returns the records of a small but varied state: queues,
// an idempotency key, messages with keys, delays and ordering, failures,
// a dead-lettered message.
func sampleRecords() [][2][]byte {
	h := newHarness(Config{})
	s := h.s
	s.CreateQueue(1, QueueSpec{Name: "q", DedupWindow: time.Minute})
	s.Enqueue(2, []EnqueueItem{
		{Queue: "q", Msg: Message{ID: testID(1), FairnessKey: "a", IdempotencyKey: "i", Body: []byte("x")}},
		{Queue: "q", Msg: Message{ID: testID(2), FairnessKey: "b", ThrottleKeys: []string{"t"}, OrderingKey: "o", Body: []byte("y"),
			ProducerID: testProducer(1), Sequence: 7}},
		{Queue: "q", Msg: Message{ID: testID(3), FairnessKey: "b", OrderingKey: "o", Delay: time.Second,
			ProducerID: testProducer(1), Sequence: 8}},
	})
	s.Subscribe(3, 1, "q", 10, nil)
	h.ready(false)
	s.Nack(4, []NackItem{{LeaseRef: LeaseRef{Queue: "q", ID: testID(1), Lease: h.lease[testID(1)]}, Reason: "r"}})
	s.RetryAfter(5, []RetryItem{{LeaseRef: LeaseRef{Queue: "q", ID: testID(2), Lease: h.lease[testID(2)]}, Delay: time.Hour}})
	h.ready(false)
	var recs [][2][]byte
	for _, k := range sortedKeys(h.kv, func(a, b string) int { return bytes.Compare([]byte(a), []byte(b)) }) {
		recs = append(recs, [2][]byte{[]byte(k), h.kv[k]})
	}
	// And a dead-lettered message.
	recs = append(recs, [2][]byte{appendMsgKey(nil, "q", testID(9)), appendMsgRecord(nil, &MessageMeta{FairnessKey: "d"}, nil)})
	recs = append(recs, [2][]byte{appendStateKey(nil, "q", testID(9)), appendStateRecord(nil, &stateRecord{dead: true, attempts: 3, lastErr: "e"})})
	return recs
}

func encodeRecords(recs [][2][]byte) []byte {
	var b []byte
	for _, r := range recs {
		b = append(b, byte(len(r[0])))
		b = append(b, r[0]...)
		b = binary.BigEndian.AppendUint16(b, uint16(len(r[1])))
		b = append(b, r[1]...)
	}
	return b
}

func decodeRecords(b []byte) [][2][]byte {
	var recs [][2][]byte
	for len(b) > 0 {
		n := int(b[0])
		b = b[1:]
		if len(b) < n+2 {
			break
		}
		k := b[:n]
		v := int(binary.BigEndian.Uint16(b[n:]))
		b = b[n+2:]
		if len(b) < v {
			v = len(b)
		}
		recs = append(recs, [2][]byte{k, b[:v]})
		b = b[v:]
	}
	sortRecords(recs)
	return recs
}

func sortRecords(recs [][2][]byte) {
	for i := 1; i < len(recs); i++ {
		for j := i; j > 0 && bytes.Compare(recs[j][0], recs[j-1][0]) < 0; j-- {
			recs[j], recs[j-1] = recs[j-1], recs[j]
		}
	}
}

// FuzzParseThrottle checks that ParseThrottle accepts exactly two decimal
// numbers (digits with an optional fraction) around a comma, values
// ValidateThrottle accepts, and refuses everything else with
// fault.ErrInvalidConfigValue.
func FuzzParseThrottle(f *testing.F) {
	for _, s := range []string{"100,200", " 0.5 , 1 ", "0,0", "0x1p-2,5", "1_000,5", "1e3,5", "+1,5", "inf,1", "NaN,1", ".5,1", "10,0"} {
		f.Add(s)
	}
	decimal := regexp.MustCompile(`^[ \t]*[0-9]+(\.[0-9]+)?[ \t]*$`)
	f.Fuzz(func(t *testing.T, value string) {
		rate, burst, err := ParseThrottle(value)
		r, b, comma := strings.Cut(value, ",")
		form := comma && decimal.MatchString(r) && decimal.MatchString(b)
		if err != nil {
			if !errors.Is(err, fault.ErrInvalidConfigValue) {
				t.Fatalf("ParseThrottle(%q) error %v; want one wrapping ErrInvalidConfigValue", value, err)
			}
			if form {
				if pr, perr := strconv.ParseFloat(strings.Trim(r, " \t"), 64); perr == nil {
					pb, _ := strconv.ParseFloat(strings.Trim(b, " \t"), 64)
					if ValidateThrottle(pr, pb) == nil {
						t.Fatalf("ParseThrottle(%q) refused a valid decimal value: %v", value, err)
					}
				}
			}
			return
		}
		if !form {
			t.Fatalf("ParseThrottle(%q) = %v, %v; want it refused: not two decimal numbers", value, rate, burst)
		}
		if err := ValidateThrottle(rate, burst); err != nil {
			t.Fatalf("ParseThrottle(%q) = %v, %v, which ValidateThrottle refuses: %v", value, rate, burst, err)
		}
		again := strconv.FormatFloat(rate, 'f', -1, 64) + "," + strconv.FormatFloat(burst, 'f', -1, 64)
		if r2, b2, err := ParseThrottle(again); err != nil || r2 != rate || b2 != burst {
			t.Fatalf("ParseThrottle(%q) = %v, %v, %v; want %v, %v (from %q)", again, r2, b2, err, rate, burst, value)
		}
	})
}
