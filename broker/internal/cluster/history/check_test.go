package history

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// id returns a message ID whose last byte is n.
func id(n byte) [16]byte { return [16]byte{0x01, 0x90, 15: n} }

// TestCheck runs Check over hand-built histories, each a script of
// Recorder calls: the clean cases report no violation, the others exactly
// the violations listed.
func TestCheck(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts uint32
		record      func(r *Recorder)
		want        []Violation // Kind, Token, ID; Detail checked by substring
		detail      []string    // a substring of each want's Detail, in order
		counts      Report      // without Violations
	}{
		{
			name:   "empty",
			record: func(r *Recorder) {},
		},
		{
			name: "enqueue, deliver, ack",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(1), 1)
				r.AckInvoked("c1", id(1))
				r.AckOK("c1", id(1))
			},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1, Acked: 1},
		},
		{
			name: "delivered before the enqueue's answer",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.Delivered("c1", "t1", id(1), 1)
				r.EnqueueOK("p1", "t1", id(1))
			},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1},
		},
		{
			name:        "redelivery after lease expiry, then ack",
			maxAttempts: 3,
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(1), 1)
				r.Delivered("c2", "t1", id(1), 2) // c1's lease expired
				r.AckInvoked("c1", id(1))
				r.AckFailed("c1", id(1)) // lease lost
				r.Delivered("c2", "t1", id(1), 3)
				r.AckInvoked("c2", id(1))
				r.AckOK("c2", id(1))
			},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1, Redelivered: 2, Acked: 1},
		},
		{
			name: "a failed ack does not count",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(1), 1)
				r.AckInvoked("c1", id(1))
				r.AckFailed("c1", id(1))
				r.Delivered("c1", "t1", id(1), 2)
			},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1, Redelivered: 1},
		},
		{
			name: "an ack with no outcome does not count",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(1), 1)
				r.AckInvoked("c1", id(1))
				r.Delivered("c2", "t1", id(1), 2)
			},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1, Redelivered: 1},
		},
		{
			name: "unknown outcome, never delivered",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueFailed("p1", "t1", false)
			},
			counts: Report{Enqueued: 1},
		},
		{
			name: "unknown outcome, delivered once",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueFailed("p1", "t1", false)
				r.Delivered("c1", "t1", id(1), 1)
			},
			counts: Report{Enqueued: 1, Delivered: 1},
		},
		{
			name: "no outcome recorded, delivered",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.Delivered("c1", "t1", id(1), 1)
			},
			counts: Report{Enqueued: 1, Delivered: 1},
		},
		{
			name: "retried after unknown outcome, one message",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueFailed("p1", "t1", false)
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(1), 1)
			},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1},
		},
		{
			name: "definite failure, not delivered",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueFailed("p1", "t1", true)
			},
			counts: Report{Enqueued: 1},
		},
		{
			name: "definite failure, retried, delivered",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueFailed("p1", "t1", true)
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(1), 1)
			},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1},
		},
		{
			name: "lost",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.EnqueueInvoked("p1", "t2")
				r.EnqueueOK("p1", "t2", id(2))
				r.Delivered("c1", "t2", id(2), 1)
			},
			want:   []Violation{{Kind: KindLost, Token: "t1", ID: id(1)}},
			detail: []string{"enqueue acknowledged to p1 at #2, never delivered"},
			counts: Report{Enqueued: 2, Acknowledged: 2, Delivered: 1},
		},
		{
			name: "delivered under another ID than acknowledged",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(2), 1)
			},
			want: []Violation{
				{Kind: KindDuplicate, Token: "t1", ID: id(2)},
				{Kind: KindLost, Token: "t1", ID: id(1)},
			},
			detail: []string{"the token became 2 messages: " + FormatID(id(1)) + " (#2), " + FormatID(id(2)) + " (#3)", "never delivered"},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1},
		},
		{
			name: "unknown token",
			record: func(r *Recorder) {
				r.Delivered("c1", "ghost", id(9), 1)
				r.Delivered("c1", "ghost", id(9), 2)
			},
			want:   []Violation{{Kind: KindUnknownToken, Token: "ghost", ID: id(9)}},
			detail: []string{"delivered to c1 at #1, but no enqueue of the token was invoked before"},
			counts: Report{Delivered: 1, Redelivered: 1},
		},
		{
			name: "delivered before the enqueue was invoked",
			record: func(r *Recorder) {
				r.Delivered("c1", "t1", id(1), 1)
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
			},
			want:   []Violation{{Kind: KindUnknownToken, Token: "t1", ID: id(1)}},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1},
		},
		{
			name: "unknown outcome, delivered twice with two IDs",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueFailed("p1", "t1", false)
				r.Delivered("c1", "t1", id(1), 1)
				r.Delivered("c2", "t1", id(2), 1)
			},
			want:   []Violation{{Kind: KindDuplicate, Token: "t1", ID: id(2)}},
			detail: []string{"the token became 2 messages"},
			counts: Report{Enqueued: 1, Delivered: 2},
		},
		{
			name: "retry acknowledged under a second ID",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueFailed("p1", "t1", false)
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(2))
				r.Delivered("c1", "t1", id(1), 1)
				r.Delivered("c1", "t1", id(2), 1)
			},
			want:   []Violation{{Kind: KindDuplicate, Token: "t1", ID: id(1)}},
			detail: []string{FormatID(id(2)) + " (#4), " + FormatID(id(1)) + " (#5)"},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 2},
		},
		{
			name: "one ID for two tokens",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.EnqueueInvoked("p1", "t2")
				r.EnqueueOK("p1", "t2", id(1))
				r.Delivered("c1", "t1", id(1), 1)
			},
			want:   []Violation{{Kind: KindIDReused, Token: "t2", ID: id(1)}},
			detail: []string{"the ID was given to 2 tokens: t1, t2"},
			counts: Report{Enqueued: 2, Acknowledged: 2, Delivered: 1},
		},
		{
			name: "delivered after ack",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(1), 1)
				r.AckInvoked("c1", id(1))
				r.AckOK("c1", id(1))
				r.Delivered("c2", "t1", id(1), 2)
			},
			want:   []Violation{{Kind: KindDeliveredAfterAck, Token: "t1", ID: id(1)}},
			detail: []string{"delivered to c2 as attempt 2 at #6, after c1's ack of attempt 1 was confirmed at #5"},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1, Redelivered: 1, Acked: 1},
		},
		{
			name: "delivered between ack invoked and confirmed",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(1), 1)
				r.AckInvoked("c1", id(1))
				r.Delivered("c2", "t1", id(1), 2)
				r.AckOK("c1", id(1))
			},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1, Redelivered: 1, Acked: 1},
		},
		{
			name:        "too many attempts",
			maxAttempts: 2,
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(1), 1)
				r.Delivered("c1", "t1", id(1), 2)
				r.Delivered("c1", "t1", id(1), 3)
			},
			want:   []Violation{{Kind: KindTooManyAttempts, Token: "t1", ID: id(1)}},
			detail: []string{"delivered to c1 as attempt 3 at #5; at most 2 allowed"},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1, Redelivered: 2},
		},
		{
			name: "attempts unchecked with maxAttempts 0",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueOK("p1", "t1", id(1))
				r.Delivered("c1", "t1", id(1), 1000)
			},
			counts: Report{Enqueued: 1, Acknowledged: 1, Delivered: 1},
		},
		{
			name: "delivered after a definite failure",
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "t1")
				r.EnqueueFailed("p1", "t1", true)
				r.Delivered("c1", "t1", id(1), 1)
			},
			want:   []Violation{{Kind: KindDeliveredAfterFailure, Token: "t1", ID: id(1)}},
			detail: []string{"delivered to c1 at #3, but all 1 enqueues of the token failed definitely"},
			counts: Report{Enqueued: 1, Delivered: 1},
		},
		{
			name:        "every violation, sorted",
			maxAttempts: 1,
			record: func(r *Recorder) {
				r.EnqueueInvoked("p1", "b")
				r.EnqueueOK("p1", "b", id(2))
				r.EnqueueInvoked("p1", "a")
				r.EnqueueOK("p1", "a", id(1))
				r.Delivered("c1", "a", id(1), 1)
				r.AckOK("c1", id(1))
				r.Delivered("c1", "a", id(1), 2)
				r.Delivered("c1", "z", id(3), 1)
			},
			want: []Violation{
				{Kind: KindDeliveredAfterAck, Token: "a", ID: id(1)},
				{Kind: KindLost, Token: "b", ID: id(2)},
				{Kind: KindTooManyAttempts, Token: "a", ID: id(1)},
				{Kind: KindUnknownToken, Token: "z", ID: id(3)},
			},
			counts: Report{Enqueued: 2, Acknowledged: 2, Delivered: 2, Redelivered: 1, Acked: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var r Recorder
			tt.record(&r)
			h := r.History()
			got := Check(h, tt.maxAttempts)
			counts := got
			counts.Violations = nil
			if !reflect.DeepEqual(counts, tt.counts) {
				t.Errorf("Check() counts = %+v; want %+v", counts, tt.counts)
			}
			if len(got.Violations) != len(tt.want) {
				t.Fatalf("Check() = %v; want %d violations %v", got, len(tt.want), tt.want)
			}
			for i, v := range got.Violations {
				w := tt.want[i]
				if v.Kind != w.Kind || v.Token != w.Token || v.ID != w.ID {
					t.Errorf("violation %d = %v; want kind %s token %s id %s", i, v, w.Kind, w.Token, FormatID(w.ID))
				}
				if i < len(tt.detail) && !strings.Contains(v.Detail, tt.detail[i]) {
					t.Errorf("violation %d detail = %q; want it to contain %q", i, v.Detail, tt.detail[i])
				}
			}
			// Check is a function of the history: the same answer again.
			if again := Check(h, tt.maxAttempts); !reflect.DeepEqual(again, got) {
				t.Errorf("Check() twice = %v, then %v", got, again)
			}
		})
	}
}

// TestCheckOrdersBySeq: events out of slice order are taken in Seq order.
func TestCheckOrdersBySeq(t *testing.T) {
	var r Recorder
	r.EnqueueInvoked("p1", "t1")
	r.EnqueueOK("p1", "t1", id(1))
	r.Delivered("c1", "t1", id(1), 1)
	r.AckOK("c1", id(1))
	h := r.History()
	// Reversed: a Seq-blind checker would see the delivery before the
	// enqueue and the ack before the delivery.
	for i, j := 0, len(h.Events)-1; i < j; i, j = i+1, j-1 {
		h.Events[i], h.Events[j] = h.Events[j], h.Events[i]
	}
	before := fmt.Sprint(h.Events)
	if rep := Check(h, 0); len(rep.Violations) != 0 {
		t.Errorf("Check(reversed) = %v; want no violations", rep)
	}
	if fmt.Sprint(h.Events) != before {
		t.Errorf("Check modified its history")
	}
}

func TestReportString(t *testing.T) {
	clean := Report{Enqueued: 3, Acknowledged: 2, Delivered: 2, Redelivered: 1, Acked: 2}
	if got, want := clean.String(), "history: 3 enqueued, 2 acknowledged, 2 delivered (1 redelivered), 2 acked; no violations"; got != want {
		t.Errorf("String() = %q; want %q", got, want)
	}
	var r Report
	for i := range 25 {
		r.Violations = append(r.Violations, Violation{Kind: KindLost, Token: fmt.Sprintf("t%02d", i), ID: id(byte(i)), Detail: "never delivered"})
	}
	s := r.String()
	lines := strings.Split(s, "\n")
	if len(lines) != 1+maxListed+1 || !strings.HasSuffix(lines[0], "25 violations:") || lines[len(lines)-1] != "  … and 5 more" {
		t.Errorf("String() =\n%s\nwant a summary, %d violations and a count of the rest", s, maxListed)
	}
	if want := "  lost token=t00 id=01900000-0000-0000-0000-000000000000: never delivered"; lines[1] != want {
		t.Errorf("String() line 2 = %q; want %q", lines[1], want)
	}
	r.Violations = r.Violations[:1]
	if s := r.String(); !strings.Contains(s, "; 1 violation:\n") {
		t.Errorf("String() = %q; want it to say 1 violation", s)
	}
}

// TestRecorderConcurrent records from many goroutines: every event is
// kept, numbered 1…n in slice order.
func TestRecorderConcurrent(t *testing.T) {
	var r Recorder
	var wg sync.WaitGroup
	const workers, each = 8, 200
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := fmt.Sprintf("p%d", w)
			for i := range each {
				token := fmt.Sprintf("%s-%d", client, i)
				r.EnqueueInvoked(client, token)
				r.EnqueueOK(client, token, [16]byte{byte(w), byte(i), byte(i >> 8)})
			}
		}()
	}
	wg.Wait()
	h := r.History()
	if len(h.Events) != workers*each*2 {
		t.Fatalf("History() has %d events; want %d", len(h.Events), workers*each*2)
	}
	for i, e := range h.Events {
		if e.Seq != uint64(i+1) {
			t.Fatalf("event %d has Seq %d; want %d", i, e.Seq, i+1)
		}
	}
	// History is a copy: recording more does not change it.
	r.AckOK("c1", id(1))
	if len(h.Events) != workers*each*2 {
		t.Errorf("History() changed after more events were recorded")
	}
}

func TestIDFormat(t *testing.T) {
	x := [16]byte{0x01, 0x90, 0xa3, 0xc4, 0x5d, 0x6e, 0x7f, 0x80, 0x91, 0xa2, 0xb3, 0xc4, 0xd5, 0xe6, 0xf7, 0x08}
	const s = "0190a3c4-5d6e-7f80-91a2-b3c4d5e6f708"
	if got := FormatID(x); got != s {
		t.Errorf("FormatID() = %q; want %q", got, s)
	}
	for _, in := range []string{s, strings.ReplaceAll(s, "-", ""), strings.ToUpper(s)} {
		if got, err := ParseID(in); err != nil || got != x {
			t.Errorf("ParseID(%q) = %v, %v; want %v", in, got, err, x)
		}
	}
	for _, bad := range []string{"", "0190", s + "0", strings.Replace(s, "0", "g", 1), "0190a3c4-5d6e-7f80-91a2b-3c4d5e6f708"} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) = nil error; want one", bad)
		}
	}
}

func TestOpString(t *testing.T) {
	for op := OpEnqueueInvoked; op <= OpAckFailed; op++ {
		back, ok := parseOp(op.String())
		if !ok || back != op {
			t.Errorf("parseOp(%q) = %v, %v; want %v", op.String(), back, ok, op)
		}
	}
	if got := Op(0).String(); got != "op(0)" {
		t.Errorf("Op(0).String() = %q; want \"op(0)\"", got)
	}
	if got := Op(99).String(); got != "op(99)" {
		t.Errorf("Op(99).String() = %q; want \"op(99)\"", got)
	}
}
