package measure

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	got := Summarize([]time.Duration{5, 1, 4, 2, 3})
	want := Latency{Count: 5, P50: 3, P95: 5, P99: 5, Max: 5, Mean: 3}
	if got != want {
		t.Errorf("Summarize(5,1,4,2,3) = %+v; want %+v", got, want)
	}
	if got := Summarize(nil); got != (Latency{}) {
		t.Errorf("Summarize(nil) = %+v; want zero", got)
	}
}

// TestLatencyRun drives the workload against a broker that delivers each
// message at once: every message gives one sample in its phase, and the
// samples are non-negative.
func TestLatencyRun(t *testing.T) {
	rec := NewRecorder()
	deliver := func(_ context.Context, b []byte) error {
		rec.Delivered(append([]byte(nil), b...))
		return nil
	}
	run := LatencyRun{Size: 16, Count: 20, Rate: 1000, Duration: 50 * time.Millisecond, Send: deliver, Offer: deliver}
	res, err := run.Measure(context.Background(), rec)
	if err != nil {
		t.Fatal(err)
	}
	if res.Unloaded.Count != 20 || res.Loaded.Count != 50 {
		t.Fatalf("samples: unloaded %d, loaded %d; want 20 and 50", res.Unloaded.Count, res.Loaded.Count)
	}
	if res.Unloaded.P50 < 0 || res.Loaded.Max < res.Loaded.P50 || res.Achieved <= 0 {
		t.Errorf("result %+v: want non-negative, ordered latencies and a positive rate", res)
	}

	if _, err := (LatencyRun{Size: 4, Count: 1, Send: deliver}).Measure(context.Background(), NewRecorder()); err == nil {
		t.Error("Size 4: no error; want one (the stamp needs 8 bytes)")
	}
	fail := errors.New("refused")
	_, err = (LatencyRun{Size: 8, Count: 1, Send: func(context.Context, []byte) error { return fail }}).Measure(context.Background(), NewRecorder())
	if !errors.Is(err, fail) {
		t.Errorf("failing Send: %v; want it wrapped", err)
	}
}
