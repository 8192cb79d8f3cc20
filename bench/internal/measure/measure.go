// Package measure is what the comparison's broker drivers (natsbench,
// rabbitbench) share, so that every broker is measured the way
// "fila bench" measures Fila: rates, latency summaries by the
// nearest-rank method, and the latency workload itself, with the send
// time carried in the first 8 payload bytes.
package measure

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Result is a count of messages over an elapsed time.
type Result struct {
	Messages int64
	Elapsed  time.Duration
}

// PerSecond returns messages per second (0 when nothing elapsed).
func (r Result) PerSecond() float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(r.Messages) / r.Elapsed.Seconds()
}

// Latency summarises samples by the nearest-rank method.
type Latency struct {
	Count              int
	P50, P95, P99, Max time.Duration
	Mean               time.Duration
}

// Summarize sorts s in place and summarises it; the zero Latency for no
// samples.
func Summarize(s []time.Duration) Latency {
	if len(s) == 0 {
		return Latency{}
	}
	slices.Sort(s)
	pct := func(p float64) time.Duration {
		r := int(math.Ceil(p / 100 * float64(len(s))))
		return s[min(max(r, 1), len(s))-1]
	}
	var sum float64
	for _, d := range s {
		sum += float64(d)
	}
	return Latency{Count: len(s), P50: pct(50), P95: pct(95), P99: pct(99), Max: s[len(s)-1],
		Mean: time.Duration(sum / float64(len(s)))}
}

var epoch = time.Now()

// Now returns the time since the process's first use of the package, the
// clock of the stamps in latency payloads.
func Now() time.Duration { return time.Since(epoch) }

// LatencyResult is the outcome of a latency workload.
type LatencyResult struct {
	Unloaded Latency
	Loaded   Latency
	// Achieved is the loaded phase's delivered rate, msgs/s.
	Achieved float64
}

// A Recorder collects the latencies of deliveries whose payloads carry
// their send time. Safe for concurrent use.
type Recorder struct {
	mu      sync.Mutex
	samples []time.Duration
	got     atomic.Int64
	arrived chan struct{}
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder { return &Recorder{arrived: make(chan struct{}, 1)} }

// Delivered records the delivery, now, of body; a body shorter than 8
// bytes counts as delivered but gives no sample.
func (r *Recorder) Delivered(body []byte) {
	at := Now()
	if len(body) >= 8 {
		r.mu.Lock()
		r.samples = append(r.samples, at-time.Duration(binary.LittleEndian.Uint64(body)))
		r.mu.Unlock()
	}
	r.got.Add(1)
	select {
	case r.arrived <- struct{}{}:
	default:
	}
}

// take summarises the samples so far and starts afresh.
func (r *Recorder) take() Latency {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := Summarize(r.samples)
	r.samples = nil
	return l
}

// A LatencyRun is the latency workload of "fila bench latency": Count
// messages one at a time, each sent once the previous was delivered; then,
// if Rate > 0, messages offered at Rate per second for Duration, evenly
// spaced and timed from their scheduled send time.
type LatencyRun struct {
	Size     int // payload bytes, at least 8
	Count    int
	Rate     float64 // msgs/s
	Duration time.Duration
	// Send publishes body and returns once the broker acknowledged it
	// (the unloaded phase). body is reused after it returns.
	Send func(ctx context.Context, body []byte) error
	// Offer publishes body without waiting for the broker (the loaded
	// phase). body is not reused.
	Offer func(ctx context.Context, body []byte) error
}

// Measure runs the workload with rec recording the deliveries. It returns
// an error if a send fails, if a message of the unloaded phase is not
// delivered within a minute, or if the loaded phase's messages are not all
// delivered within a minute of the last one's sending.
func (lr LatencyRun) Measure(ctx context.Context, rec *Recorder) (LatencyResult, error) {
	var res LatencyResult
	if lr.Size < 8 {
		return res, fmt.Errorf("latency: size %d: want at least 8", lr.Size)
	}
	payload := make([]byte, lr.Size)
	for i := 0; i < lr.Count; i++ {
		binary.LittleEndian.PutUint64(payload, uint64(Now()))
		if err := lr.Send(ctx, payload); err != nil {
			return res, fmt.Errorf("latency: publish: %w", err)
		}
		select {
		case <-rec.arrived:
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(time.Minute):
			return res, fmt.Errorf("latency: message %d not delivered in a minute", i)
		}
	}
	res.Unloaded = rec.take()
	if lr.Rate <= 0 {
		return res, nil
	}
	base := rec.got.Load()
	total := int(lr.Rate * lr.Duration.Seconds())
	interval := time.Duration(float64(time.Second) / lr.Rate)
	start := Now()
	for i := 0; i < total; i++ {
		due := start + time.Duration(i)*interval
		if w := due - Now(); w > 0 {
			time.Sleep(w)
		}
		b := make([]byte, lr.Size)
		binary.LittleEndian.PutUint64(b, uint64(due))
		if err := lr.Offer(ctx, b); err != nil {
			return res, fmt.Errorf("latency: publish: %w", err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for rec.got.Load() < base+int64(total) {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("latency: %d of %d delivered after a minute", rec.got.Load()-base, total)
		}
		if err := ctx.Err(); err != nil {
			return res, err
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := Now() - start
	res.Loaded = rec.take()
	res.Achieved = float64(total) / elapsed.Seconds()
	return res, nil
}

// ProduceSpec describes producers: Producers connections, each keeping
// Outstanding messages of Size bytes unacknowledged, until Count messages
// in all or Duration, whichever comes first (0: no bound; not both).
type ProduceSpec struct {
	Producers   int
	Outstanding int
	Size        int
	Count       int64
	Duration    time.Duration
}

// A Publisher is one producer's connection to a broker.
type Publisher interface {
	// Publish sends payload, blocking while the producer's window of
	// unacknowledged messages is full; payload is reused after it
	// returns.
	Publish(ctx context.Context, payload []byte) error
	// Flush waits up to timeout for every message published to be
	// acknowledged and returns how many were; the error reports a
	// message the broker refused or acknowledgements still missing.
	Flush(timeout time.Duration) (acked int64, err error)
}

// Produce runs spec with one goroutine per publisher (len(pubs) is the
// number of producers) and returns the acknowledged messages over the
// time from the first publish until the last producer flushed: a run
// bounded by time stops publishing at the deadline and waits for what is
// in flight. The error is the first failure of any producer.
func Produce(ctx context.Context, spec ProduceSpec, pubs []Publisher) (Result, error) {
	var (
		claimed  atomic.Int64
		acked    atomic.Int64
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	fail := func(err error) { firstErr.CompareAndSwap(nil, &err) }
	payload := make([]byte, spec.Size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	start := time.Now()
	deadline := start.Add(spec.Duration)
	for _, p := range pubs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && (spec.Duration == 0 || time.Now().Before(deadline)) {
				if spec.Count > 0 && claimed.Add(1) > spec.Count {
					break
				}
				if err := p.Publish(ctx, payload); err != nil {
					fail(err)
					break
				}
			}
			n, err := p.Flush(time.Minute)
			if err != nil {
				fail(err)
			}
			acked.Add(n)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if p := firstErr.Load(); p != nil {
		return Result{}, fmt.Errorf("produce: %w", *p)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	return Result{Messages: acked.Load(), Elapsed: elapsed}, nil
}

// LifecycleResult is the outcome of a lifecycle workload: producers and
// a consumer at once.
type LifecycleResult struct {
	// Produce is the messages acknowledged to the producers over the
	// time they produced.
	Produce Result
	// Consume is the messages the consumer took over the time from its
	// start until it had taken every message produced.
	Consume Result
}

// stall is how long Lifecycle waits for a consumer that takes nothing
// more before it gives up.
var stall = time.Minute

// Lifecycle runs the producers pubs by spec (see Produce) while a
// consumer, started at start, takes the messages; taken returns how many
// it has taken so far, or why it stopped. Lifecycle returns once the
// consumer has taken as many messages as were acknowledged to the
// producers. The error is a producer's failure, the consumer's, or a
// minute in which the consumer took nothing while messages were left;
// the result then holds what was measured before it.
func Lifecycle(ctx context.Context, spec ProduceSpec, pubs []Publisher, start time.Time, taken func() (int64, error)) (LifecycleResult, error) {
	var res LifecycleResult
	p, err := Produce(ctx, spec, pubs)
	if err != nil {
		return res, fmt.Errorf("lifecycle: %w", err)
	}
	res.Produce = p
	last, lastAt := int64(-1), time.Now()
	for {
		n, err := taken()
		res.Consume = Result{Messages: n, Elapsed: time.Since(start)}
		switch {
		case err != nil:
			return res, fmt.Errorf("lifecycle: consume: %w", err)
		case n >= p.Messages:
			return res, nil
		case n != last:
			last, lastAt = n, time.Now()
		case time.Since(lastAt) > stall:
			return res, fmt.Errorf("lifecycle: consume: nothing taken for %v after %d of %d messages", stall, n, p.Messages)
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(time.Millisecond):
		}
	}
}
