package sched

import (
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

func TestParseThrottle(t *testing.T) {
	tests := []struct {
		in          string
		rate, burst float64
		ok          bool
	}{
		{"100,200", 100, 200, true},
		{" 0.5 , 1 ", 0.5, 1, true},
		{"0,0", 0, 0, true},
		{"0,3", 0, 3, true},
		{"\t2.25\t,\t10\t", 2.25, 10, true},
		{"007,010", 7, 10, true},
		{"100", 0, 0, false},
		// Only digits with an optional fraction: what ParseFloat also
		// takes is refused.
		{"0x1p-2,5", 0, 0, false},
		{"1_000,5", 0, 0, false},
		{"1e3,1e4", 0, 0, false},
		{"1E3,5", 0, 0, false},
		{"5,1e1", 0, 0, false},
		{"0x10,5", 0, 0, false},
		{"+1,5", 0, 0, false},
		{"1,+5", 0, 0, false},
		{"inf,1", 0, 0, false},
		{"Infinity,1", 0, 0, false},
		{"nan,1", 0, 0, false},
		{".5,1", 0, 0, false},
		{"5.,1", 0, 0, false},
		{"1.5.2,1", 0, 0, false},
		{"1 0,5", 0, 0, false},
		{"1,5 5", 0, 0, false},
		{"\n1,5", 0, 0, false},
		{"1,5\u00a0", 0, 0, false},
		{"\u0661,5", 0, 0, false},
		{",5", 0, 0, false},
		{"5,", 0, 0, false},
		{strings.Repeat("9", 400) + ",5", 0, 0, false},
		{"", 0, 0, false},
		{"a,b", 0, 0, false},
		{"1,b", 0, 0, false},
		{"-1,10", 0, 0, false},
		{"1,-10", 0, 0, false},
		{"NaN,1", 0, 0, false},
		{"1,NaN", 0, 0, false},
		{"Inf,1", 0, 0, false},
		{"10,0", 0, 0, false},
		{"10,0.5", 0, 0, false},
		{"1,2,3", 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			rate, burst, err := ParseThrottle(tt.in)
			if !tt.ok {
				if !errors.Is(err, fault.ErrInvalidConfigValue) || !strings.Contains(err.Error(), `"rate,burst"`) {
					t.Fatalf("ParseThrottle(%q) error = %v; want one wrapping ErrInvalidConfigValue and naming \"rate,burst\"", tt.in, err)
				}
				return
			}
			if err != nil || rate != tt.rate || burst != tt.burst {
				t.Fatalf("ParseThrottle(%q) = %v, %v, %v; want %v, %v, nil", tt.in, rate, burst, err, tt.rate, tt.burst)
			}
		})
	}
}

func TestBackoff(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: 60 * time.Second}
	tests := []struct {
		attempts uint32
		want     time.Duration
	}{
		{0, time.Second},
		{1, time.Second},
		{2, 2 * time.Second},
		{3, 4 * time.Second},
		{6, 32 * time.Second},
		{7, 60 * time.Second},
		{math.MaxUint32, 60 * time.Second},
	}
	for _, tt := range tests {
		if got := p.Backoff(tt.attempts); got != tt.want {
			t.Errorf("Backoff(%d) = %v; want %v", tt.attempts, got, tt.want)
		}
	}
	huge := RetryPolicy{BackoffBase: time.Duration(math.MaxInt64 / 3), BackoffMax: time.Duration(math.MaxInt64)}
	if got := huge.Backoff(10); got <= 0 {
		t.Errorf("Backoff(10) with a huge base = %v; want positive (no overflow)", got)
	}
	if got := (RetryPolicy{}).Backoff(5); got != 0 {
		t.Errorf("Backoff(5) of the zero policy = %v; want 0", got)
	}
}

func TestDefaultDecision(t *testing.T) {
	p := RetryPolicy{MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Minute}
	tests := []struct {
		attempts uint32
		want     Decision
	}{
		{1, Retry(time.Second)},
		{2, Retry(2 * time.Second)},
		{3, DeadLetter()},
		{4, DeadLetter()},
	}
	for _, tt := range tests {
		if got := DefaultDecision(p, tt.attempts); got != tt.want {
			t.Errorf("DefaultDecision(%+v, %d) = %+v; want %+v", p, tt.attempts, got, tt.want)
		}
	}
}

func TestValidateName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"orders", true},
		{"Orders_2024-eu:prio.high", true},
		{strings.Repeat("a", 200), true},
		{strings.Repeat("a", 201), false},
		{"", false},
		{"a b", false},
		{"a/b", false},
		{"naïve", false},
		{"orders.dlq", false},
		{"orders\x00", false},
		{"orders~0", true},
		{"orders~255", true},
		{"orders~256", false},
		{"orders~01", false},
		{"orders~", false},
		{"~1", false},
		{"orders~1~2", false},
		{"orders~x", false},
	}
	for _, tt := range tests {
		err := validateName(tt.name)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, fault.ErrInvalidArgument)) {
			t.Errorf("validateName(%q) = %v; want ok %v (else ErrInvalidArgument)", tt.name, err, tt.ok)
		}
	}
}

func TestTimeAdd(t *testing.T) {
	if got := Time(math.MaxInt64 - 5).Add(time.Hour); got != math.MaxInt64 {
		t.Errorf("Add near the end of time = %d; want saturation at MaxInt64", got)
	}
	if got := Time(10).Add(5); got != 15 {
		t.Errorf("Time(10).Add(5) = %d; want 15", got)
	}
}

// takeReady runs the shell's loop once and returns the Ready.
func takeReady(t *testing.T, s *Sched) Ready {
	t.Helper()
	if !s.HasReady() {
		t.Fatalf("HasReady() = false; want true")
	}
	rd := s.Ready()
	s.Advance(rd)
	if err := checkInvariants(s, true); err != nil {
		t.Fatal(err)
	}
	return rd
}

func TestCommandErrors(t *testing.T) {
	s := New(Config{})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q"})
	s.Enqueue(2, []EnqueueItem{
		{Queue: "nope", Msg: Message{ID: testID(1)}},
		{Queue: "q", Msg: Message{}},
		{Queue: "q", Msg: Message{ID: testID(2), ThrottleKeys: []string{""}}},
		{Queue: "q", Msg: Message{ID: testID(3), ThrottleKeys: make([]string, MaxThrottleKeys+1)}},
		{Queue: "q", Msg: Message{ID: testID(4), FairnessKey: strings.Repeat("k", math.MaxUint16+1)}},
		{Queue: "q", Msg: Message{ID: testID(5), Delay: -time.Second}},
		{Queue: "q", Msg: Message{ID: testID(6)}},
		{Queue: "q", Msg: Message{ID: testID(6)}},
		{Queue: "q.dlq", Msg: Message{ID: testID(7)}},
	})
	s.Subscribe(3, 1, "nope", 1, nil)
	s.Subscribe(4, 1, "q", 1, []RateLimit{{Name: "", Limit: 1, Period: time.Second}})
	s.Subscribe(5, 1, "q", 1, []RateLimit{{Name: "a", Limit: 1}})
	s.Subscribe(6, 1, "q", 1, []RateLimit{{Name: "a", Limit: 1, Period: time.Second}, {Name: "a", Limit: 2, Period: time.Second}})
	s.Subscribe(7, 1, "q", 0, nil)
	s.Subscribe(8, 1, "q", 0, nil)
	s.Unsubscribe(9, 2, false)
	s.QueueStats(10, "nope", 0)
	s.CreateQueue(11, QueueSpec{Name: "neg", VisibilityTimeout: -1})
	rd := takeReady(t, s)
	var got []error
	for _, r := range rd.Replies {
		switch v := r.Value.(type) {
		case error:
			got = append(got, v)
		case []EnqueueResult:
			for _, e := range v {
				got = append(got, e.Err)
			}
		default:
			got = append(got, nil)
		}
	}
	want := []error{
		nil,
		fault.ErrQueueNotFound, fault.ErrInvalidArgument, fault.ErrInvalidArgument, fault.ErrInvalidArgument,
		fault.ErrInvalidArgument, fault.ErrInvalidArgument, nil, fault.ErrInvalidArgument, fault.ErrInvalidArgument,
		fault.ErrQueueNotFound, fault.ErrInvalidArgument, fault.ErrInvalidArgument, fault.ErrInvalidArgument, nil,
		fault.ErrInvalidArgument, fault.ErrSubscriptionNotFound, fault.ErrQueueNotFound, fault.ErrInvalidArgument,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d results %v; want %d", len(got), got, len(want))
	}
	for i := range want {
		if (want[i] == nil) != (got[i] == nil) || want[i] != nil && !errors.Is(got[i], want[i]) {
			t.Errorf("result %d = %v; want %v", i, got[i], want[i])
		}
	}
}

// TestReadyValidUntilNextReady checks the buffer contract: a Ready's
// slices keep their contents while later commands accumulate, until the
// next Ready.
func TestReadyValidUntilNextReady(t *testing.T) {
	s := New(Config{})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q"})
	s.Subscribe(2, 1, "q", 100, nil)
	s.Enqueue(3, []EnqueueItem{{Queue: "q", Msg: Message{ID: testID(1), Body: []byte("one")}}})
	rd := takeReady(t, s)
	persist := slices.Clone(rd.Persist)
	key := string(rd.Deliveries[0].Msgs[0].Key)
	for i := uint64(2); i < 200; i++ {
		s.Enqueue(Ref(i+2), []EnqueueItem{{Queue: "q", Msg: Message{ID: testID(i), Body: []byte("xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx")}}})
	}
	s.HasReady()
	for i, m := range rd.Persist {
		if string(m.Key) != string(persist[i].Key) || string(m.Value) != string(persist[i].Value) {
			t.Fatalf("Persist[%d] changed before the next Ready", i)
		}
	}
	if got := string(rd.Deliveries[0].Msgs[0].Key); got != key {
		t.Fatalf("delivered key changed to %q before the next Ready; want %q", got, key)
	}
	if r := rd.Replies[len(rd.Replies)-1].Value.([]EnqueueResult); r[0].ID != testID(1) {
		t.Fatalf("enqueue result changed before the next Ready")
	}
}

// TestDeliveriesCarryBacklog: each delivery carries the messages of its
// queue left ready once its Ready's deliveries were made, which a client
// consuming several shards shares its credit by.
func TestDeliveriesCarryBacklog(t *testing.T) {
	s := New(Config{})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q"})
	var items []EnqueueItem
	for i := range 10 {
		items = append(items, EnqueueItem{Queue: "q", Msg: Message{ID: testID(uint64(i + 1))}})
	}
	s.Enqueue(2, items)
	s.Subscribe(3, 1, "q", 3, nil)
	rd := takeReady(t, s)
	if len(rd.Deliveries) != 1 || len(rd.Deliveries[0].Msgs) != 3 {
		t.Fatalf("Deliveries = %+v; want 3", rd.Deliveries)
	}
	for _, m := range rd.Deliveries[0].Msgs {
		if m.Backlog != 7 {
			t.Fatalf("Backlog = %d; want 7", m.Backlog)
		}
	}
}

// TestQueueStatsBytes: a queue's stats count its messages' payload bytes,
// its DLQ's included, and forget those acked.
func TestQueueStatsBytes(t *testing.T) {
	s := New(Config{})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q", MaxAttempts: 1})
	s.Enqueue(2, []EnqueueItem{
		{Queue: "q", Msg: Message{ID: testID(1), PayloadSize: 10}},
		{Queue: "q", Msg: Message{ID: testID(2), PayloadSize: 20}},
		{Queue: "q", Msg: Message{ID: testID(3), PayloadSize: 30}},
	})
	s.Subscribe(3, 1, "q", 2, nil)
	rd := takeReady(t, s)
	ds := rd.Deliveries[0].Msgs
	s.Ack(4, []LeaseRef{{Queue: "q", ID: ds[0].ID, Lease: ds[0].Lease}})
	s.Nack(5, []NackItem{{LeaseRef: LeaseRef{Queue: "q", ID: ds[1].ID, Lease: ds[1].Lease}, Reason: "bad"}})
	takeReady(t, s)
	s.QueueStats(6, "q", 0)
	rd = takeReady(t, s)
	st := rd.Replies[len(rd.Replies)-1].Value.(QueueStats)
	if want := uint64(60 - 10); st.Bytes != want || st.DeadLettered != 1 {
		t.Fatalf("Bytes = %d, dead-lettered %d; want %d, 1", st.Bytes, st.DeadLettered, want)
	}
}

// TestUnsubscribeUndoesUntakenDeliveries: deliveries are decided in
// HasReady; a subscription closed before the Ready is taken receives
// nothing, and its messages are ready again without an attempt counted.
func TestUnsubscribeUndoesUntakenDeliveries(t *testing.T) {
	s := New(Config{})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q"})
	s.Enqueue(2, []EnqueueItem{{Queue: "q", Msg: Message{ID: testID(1)}}, {Queue: "q", Msg: Message{ID: testID(2)}}})
	s.Subscribe(3, 1, "q", 10, nil)
	if !s.HasReady() {
		t.Fatal("HasReady() = false; want true")
	}
	if n := len(s.cur.dl); n != 2 {
		t.Fatalf("decided %d deliveries; want 2", n)
	}
	s.Unsubscribe(4, 1, true)
	rd := takeReady(t, s)
	if len(rd.Deliveries) != 0 {
		t.Fatalf("Deliveries = %v; want none after unsubscribe", rd.Deliveries)
	}
	q := s.queues["q"]
	for x := range q.msgs.all() {
		if m := s.msg(x); m.state != stReady || s.attempts(m) != 0 {
			t.Errorf("message %s: state %v attempts %d; want ready, 0", idName(m.id), m.state, s.attempts(m))
		}
	}
	s.Subscribe(5, 2, "q", 10, nil)
	rd = takeReady(t, s)
	if len(rd.Deliveries) != 1 || len(rd.Deliveries[0].Msgs) != 2 || rd.Deliveries[0].Msgs[0].ID != testID(1) {
		t.Fatalf("Deliveries = %+v; want m1, m2 to sub 2", rd.Deliveries)
	}
}

func TestRestoreOrphansAndErrors(t *testing.T) {
	h := newHarness(Config{})
	h.s.CreateQueue(1, QueueSpec{Name: "q"})
	h.s.Enqueue(2, []EnqueueItem{{Queue: "q", Msg: Message{ID: testID(1), IdempotencyKey: "k", Body: []byte("b")}}})
	h.ready(false)
	// Records of a queue that no longer exists.
	h.kv[string(appendMsgKey(nil, "gone", testID(2)))] = h.kv[string(appendMsgKey(nil, "q", testID(1)))]
	h.kv[string(appendStateKey(nil, "gone", testID(2)))] = appendStateRecord(nil, &stateRecord{attempts: 1})
	h.kv[string(appendStateKey(nil, "q", testID(9)))] = appendStateRecord(nil, &stateRecord{attempts: 1})
	h.kv[string(appendDedupKey(nil, "gone", "k"))] = appendDedupRecord(nil, testID(2), t0)
	// A producer of a queue that no longer exists, and a run of a
	// producer with no record.
	h.kv[string(appendProducerKey(nil, "gone", testProducer(1)))] = appendProducerRecord(nil, 0, t0+1)
	h.kv[string(appendRunKey(nil, "gone", testProducer(1), 3))] = appendRunRecord(nil, []pentry{{3, testID(3)}})
	h.kv[string(appendRunKey(nil, "q", testProducer(2), 3))] = appendRunRecord(nil, []pentry{{3, testID(3)}})
	if got := h.restart(t); got != "restored 10 records" {
		t.Fatalf("restart = %q", got)
	}
	rd := takeReady(t, h.s)
	var deleted []string
	for _, m := range rd.Persist {
		if !m.Delete {
			t.Errorf("unexpected put %q", m.Key)
		}
		deleted = append(deleted, fmtMutation(m))
	}
	want := []string{"del idk gone k", "del msg gone m2", "del producer gone p1", "del run gone p1 ..3", "del run q p2 ..3", "del state gone m2", "del state q m9"}
	if !slices.Equal(deleted, want) {
		t.Fatalf("first Ready deletes %q; want %q", deleted, want)
	}

	id1 := testID(1)
	for _, tt := range []struct {
		key, value string
	}{
		{"s/zzz/x", ""},
		{prefixQueue + "q", "\x02"},
		{prefixQueue + "bad name", string(appendQueueRecord(nil, &QueueSpec{}))},
		{prefixMsg + "q\x00short", "\x01"},
		{prefixMsg + "q\x00" + string(id1[:]), "\x01\x00"},
		{prefixState + "q\x00" + string(id1[:]), "\x01\x07"},
		{prefixDedup + "q", string(appendDedupRecord(nil, testID(1), t0))},
		{prefixProducer + "q\x00short", string(appendProducerRecord(nil, 0, t0))},
		{string(appendProducerKey(nil, "q", [16]byte{})), string(appendProducerRecord(nil, 0, t0))},
		{string(appendProducerKey(nil, "q", testProducer(1))), "\x01\x00"},
		{string(appendRunKey(nil, "q", testProducer(1), 4)), string(appendRunRecord(nil, []pentry{{3, testID(3)}}))},
		{string(appendRunKey(nil, "q", testProducer(1), 3)), string(appendRunRecord(nil, []pentry{{3, testID(3)}, {3, testID(4)}}))},
		{string(appendRunKey(nil, "q", testProducer(1), 3)), "\x01"},
	} {
		s := New(Config{})
		s.Restore(appendQueueKey(nil, "q"), appendQueueRecord(nil, &QueueSpec{Name: "q"}))
		err := s.Restore([]byte(tt.key), []byte(tt.value))
		if err == nil || !strings.Contains(err.Error(), "restore record") {
			t.Errorf("Restore(%q, %q) = %v; want an error naming the key", tt.key, tt.value, err)
		}
	}
}

func TestSpecs(t *testing.T) {
	s := New(Config{})
	s.CreateQueue(1, QueueSpec{Name: "b", OnFailure: "f"})
	s.CreateQueue(2, QueueSpec{Name: "a", OnEnqueue: "e"})
	got := s.Specs()
	if len(got) != 2 || got[0].Name != "a" || got[0].OnEnqueue != "e" || got[1].Name != "b" || got[1].OnFailure != "f" {
		t.Fatalf("Specs() = %+v; want a (on_enqueue), b (on_failure)", got)
	}
}

func TestReasonCut(t *testing.T) {
	long := strings.Repeat("é", MaxReasonLen) // 2 bytes each
	got := cutReason(long)
	if len(got) > MaxReasonLen || !strings.HasPrefix(long, got) || len(got) < MaxReasonLen-1 {
		t.Fatalf("cutReason: %d bytes; want at most %d on a character boundary", len(got), MaxReasonLen)
	}
	if got := cutReason("short"); got != "short" {
		t.Fatalf("cutReason(%q) = %q", "short", got)
	}
}

// TestProducersRestoreExactly: the idempotent producers restored from
// their records are the ones in memory before (sequences, floors, gaps,
// runs, expiries), with a small bound and a bound lowered at the restart.
func TestProducersRestoreExactly(t *testing.T) {
	h := newHarness(Config{ProducerSeqs: 5})
	h.s.CreateQueue(1, QueueSpec{Name: "q", DedupWindow: time.Minute})
	h.s.CreateQueue(2, QueueSpec{Name: "r"})
	var n uint64
	enqueue := func(queue string, producer, seq uint64, count int) {
		items := make([]EnqueueItem, count)
		for i := range items {
			n++
			items[i] = EnqueueItem{Queue: queue, Msg: Message{ID: testID(n), ProducerID: testProducer(producer), Sequence: seq + uint64(i), Body: []byte("b")}}
		}
		h.s.Enqueue(3, items)
	}
	enqueue("q", 1, 10, 3)
	h.s.Tick(t0 + Time(time.Second))
	enqueue("q", 1, 20, 2)
	enqueue("q", 1, 14, 1) // in a gap; 10 forgotten
	enqueue("q", 2, 1, 7)  // more than the bound in one command
	enqueue("r", 1, 13, 1)
	h.ready(false)
	want := [2][32]byte{h.s.QueueDigest("q"), h.s.QueueDigest("r")}
	h.restart(t)
	if got := [2][32]byte{h.s.QueueDigest("q"), h.s.QueueDigest("r")}; got != want {
		t.Fatal("the restored queues differ from the queues before the restart")
	}
	if rd := h.s.Ready(); len(rd.Persist) != 0 {
		t.Fatalf("the restore wrote %d mutations", len(rd.Persist))
	}
	// A lower bound at the restart forgets the oldest sequences.
	h.cfg.ProducerSeqs = 2
	h.restart(t)
	p := h.s.queues["q"].prods[testProducer(1)]
	if p.n != 2 || p.floor != 15 || p.at(0).seq != 20 {
		t.Fatalf("after lowering the bound: %d sequences from %d, floor %d; want 20, 21 and floor 15", p.n, p.at(0).seq, p.floor)
	}
	h.ready(false)
	want = [2][32]byte{h.s.QueueDigest("q"), h.s.QueueDigest("r")}
	h.restart(t)
	if got := [2][32]byte{h.s.QueueDigest("q"), h.s.QueueDigest("r")}; got != want {
		t.Fatal("the restore after lowering the bound is not what it wrote")
	}
}

// TestQueueCounts: a queue's stats count its enqueues (not duplicates),
// deliveries, acks, nacks, expired leases, dead letters and redrives,
// and a throttle bucket counts the deliveries it held back; AllQueueStats
// lists every queue with them.
func TestQueueCounts(t *testing.T) {
	s := New(Config{})
	s.Tick(t0)
	s.CreateQueue(1, QueueSpec{Name: "q", MaxAttempts: 1, VisibilityTimeout: time.Second})
	s.SetThrottle("t", 1, 1)
	s.Enqueue(2, []EnqueueItem{
		{Queue: "q", Msg: Message{ID: testID(1), IdempotencyKey: "k"}},
		{Queue: "q", Msg: Message{ID: testID(2), IdempotencyKey: "k"}}, // a duplicate
		{Queue: "q", Msg: Message{ID: testID(3)}},
		{Queue: "q", Msg: Message{ID: testID(4)}},
		{Queue: "q", Msg: Message{ID: testID(5), ThrottleKeys: []string{"t"}}},
		{Queue: "q", Msg: Message{ID: testID(6), ThrottleKeys: []string{"t"}}},
	})
	s.Subscribe(3, 1, "q", 10, nil)
	ds := slices.Clone(takeReady(t, s).Deliveries[0].Msgs)
	if len(ds) != 4 { // 1, 3, 4 and one of the throttled pair
		t.Fatalf("delivered %d; want 4", len(ds))
	}
	ref := func(i int) LeaseRef { return LeaseRef{Queue: "q", ID: ds[i].ID, Lease: ds[i].Lease} }
	// The bucket is listed while a message waits for it.
	s.QueueStats(4, "q", 0)
	rd := takeReady(t, s)
	var held uint64
	for _, tk := range rd.Replies[len(rd.Replies)-1].Value.(QueueStats).ThrottleKeys {
		if tk.Key == "t" {
			held = tk.HeldBack
		}
	}
	if held != 1 {
		t.Errorf("bucket t held back %d deliveries; want 1", held)
	}
	s.Ack(5, []LeaseRef{ref(0)})
	s.Nack(6, []NackItem{{LeaseRef: ref(1), Reason: "bad"}})
	takeReady(t, s)
	s.Tick(t0.Add(1500 * time.Millisecond)) // the other two leases expire; the held message gets its token
	takeReady(t, s)
	s.Redrive(7, "q"+DLQSuffix, 1)
	takeReady(t, s)
	s.AllQueueStats(8, 0)
	rd = takeReady(t, s)
	all := rd.Replies[len(rd.Replies)-1].Value.([]QueueStats)
	if len(all) != 2 || all[0].Name != "q" || all[1].Name != "q"+DLQSuffix {
		t.Fatalf("AllQueueStats = %d queues; want q and its DLQ", len(all))
	}
	// Delivered: four, then the throttled one once its token came, then
	// the one redriven.
	want := QueueCounts{Enqueued: 5, Delivered: 6, Acked: 1, Nacked: 1, Expired: 2, DeadLettered: 3, Redriven: 1}
	if got := all[0].Counts; got != want {
		t.Errorf("q counts = %+v; want %+v", got, want)
	}
	if got := all[1].Counts.Redriven; got != 1 {
		t.Errorf("DLQ redriven = %d; want 1", got)
	}
}
