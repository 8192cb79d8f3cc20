package measure

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
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

// pipe is a broker stand-in: each message published is acknowledged at
// once and queued for a consumer.
type pipe struct {
	queued chan struct{}
	sent   int64
	fail   error
}

func (p *pipe) Publish(ctx context.Context, _ []byte) error {
	if p.fail != nil {
		return p.fail
	}
	select {
	case p.queued <- struct{}{}:
		p.sent++
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *pipe) Flush(time.Duration) (int64, error) { return p.sent, nil }

func TestLifecycle(t *testing.T) {
	ctx := context.Background()
	q := make(chan struct{}, 1000)
	pubs := []Publisher{&pipe{queued: q}, &pipe{queued: q}}
	var took atomic.Int64
	start := time.Now()
	go func() {
		for range q {
			took.Add(1)
		}
	}()
	res, err := Lifecycle(ctx, ProduceSpec{Producers: 2, Size: 8, Count: 500}, pubs, start, func() (int64, error) { return took.Load(), nil })
	close(q)
	if err != nil {
		t.Fatal(err)
	}
	if res.Produce.Messages != 500 || res.Consume.Messages != 500 || res.Consume.Elapsed <= 0 {
		t.Errorf("Lifecycle = %+v; want 500 produced and 500 consumed", res)
	}

	// A consumer that reports a failure ends the run with it.
	gone := errors.New("channel closed")
	_, err = Lifecycle(ctx, ProduceSpec{Producers: 1, Size: 8, Count: 10}, []Publisher{&pipe{queued: make(chan struct{}, 10)}}, start,
		func() (int64, error) { return 3, gone })
	if !errors.Is(err, gone) {
		t.Errorf("Lifecycle with a failed consumer = %v; want its error", err)
	}

	// A consumer that stops taking messages ends the run after stall.
	saved := stall
	stall = 20 * time.Millisecond
	defer func() { stall = saved }()
	res, err = Lifecycle(ctx, ProduceSpec{Producers: 1, Size: 8, Count: 10}, []Publisher{&pipe{queued: make(chan struct{}, 10)}}, start,
		func() (int64, error) { return 4, nil })
	if err == nil || !strings.Contains(err.Error(), "after 4 of 10") || res.Produce.Messages != 10 {
		t.Errorf("Lifecycle with a stalled consumer = %+v, %v; want the produce figures and an error at 4 of 10", res, err)
	}

	// A producer's failure ends the run before waiting for the consumer.
	refused := errors.New("refused")
	_, err = Lifecycle(ctx, ProduceSpec{Producers: 1, Size: 8, Count: 10}, []Publisher{&pipe{fail: refused}}, start,
		func() (int64, error) { return 0, nil })
	if !errors.Is(err, refused) {
		t.Errorf("Lifecycle with a failing producer = %v; want its error", err)
	}
}
