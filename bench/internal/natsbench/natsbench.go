// Package natsbench drives NATS JetStream with the workloads of
// "fila bench", measured the same way, so the two brokers can be set side
// by side:
//
//   - Produce: producers, one connection each, keep a window of messages
//     outstanding (PublishAsync with PublishAsyncMaxPending, the way
//     "fila bench produce" keeps SendBatch calls in flight); a message
//     counts once the server acknowledged it. A run bounded by time
//     stops publishing at the deadline and waits for the acks in flight.
//   - Consume: a durable pull consumer (explicit acks) drains a backlog
//     with the given prefetch (PullMaxMessages); each message is acked
//     with Msg.Ack, which the server does not confirm.
//   - Latency: time from just before the publish to the delivery, one
//     message at a time and at an offered rate, with the send time in the
//     first 8 payload bytes, as "fila bench latency" does.
//
// Streams are work-queue streams (WorkQueuePolicy) on file storage.
package natsbench

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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

func summarize(s []time.Duration) Latency {
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

func now() time.Duration { return time.Since(epoch) }

// Stream is a work-queue stream on file storage, created by NewStream,
// whose subject is its name in lower case.
type Stream struct {
	Name    string
	Subject string
	addr    string
}

// NewStream creates a work-queue stream named name on the server at addr.
func NewStream(ctx context.Context, addr, name string) (*Stream, error) {
	nc, js, err := connect(addr)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	s := &Stream{Name: name, Subject: "bench." + name, addr: addr}
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{
		Name:      name,
		Subjects:  []string{s.Subject},
		Storage:   jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy,
		Replicas:  1,
	})
	if err != nil {
		return nil, fmt.Errorf("natsbench: create stream %s: %w", name, err)
	}
	return s, nil
}

// Delete deletes the stream.
func (s *Stream) Delete(ctx context.Context) error {
	nc, js, err := connect(s.addr)
	if err != nil {
		return err
	}
	defer nc.Close()
	return js.DeleteStream(ctx, s.Name)
}

// Pending returns the messages stored in the stream.
func (s *Stream) Pending(ctx context.Context) (uint64, error) {
	nc, js, err := connect(s.addr)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	st, err := js.Stream(ctx, s.Name)
	if err != nil {
		return 0, err
	}
	info, err := st.Info(ctx)
	if err != nil {
		return 0, err
	}
	return info.State.Msgs, nil
}

func connect(addr string, opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := nats.Connect("nats://"+addr, nats.Name("fila-bench-compare"))
	if err != nil {
		return nil, nil, fmt.Errorf("natsbench: connect %s: %w", addr, err)
	}
	js, err := jetstream.New(nc, opts...)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
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

// Produce publishes into s by spec and returns the acknowledged messages.
func Produce(ctx context.Context, s *Stream, spec ProduceSpec) (Result, error) {
	var (
		claimed  atomic.Int64
		acked    atomic.Int64
		failures atomic.Int64
		firstErr atomic.Pointer[error]
		wg       sync.WaitGroup
	)
	type producer struct {
		nc *nats.Conn
		js jetstream.JetStream
	}
	ps := make([]producer, spec.Producers)
	for i := range ps {
		nc, js, err := connect(s.addr,
			jetstream.WithPublishAsyncMaxPending(spec.Outstanding),
			jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
				failures.Add(1)
				firstErr.CompareAndSwap(nil, &err)
			}))
		if err != nil {
			return Result{}, err
		}
		defer nc.Close()
		ps[i] = producer{nc, js}
	}
	payload := make([]byte, spec.Size)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	start := time.Now()
	deadline := start.Add(spec.Duration)
	for _, p := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var sent int64
			for ctx.Err() == nil && (spec.Duration == 0 || time.Now().Before(deadline)) {
				if spec.Count > 0 && claimed.Add(1) > spec.Count {
					break
				}
				if _, err := p.js.PublishAsync(s.Subject, payload, jetstream.WithStallWait(time.Minute)); err != nil {
					firstErr.CompareAndSwap(nil, &err)
					failures.Add(1)
					break
				}
				sent++
			}
			select {
			case <-p.js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				err := errors.New("acks still pending a minute after the last publish")
				firstErr.CompareAndSwap(nil, &err)
			}
			acked.Add(sent)
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if p := firstErr.Load(); p != nil {
		return Result{}, fmt.Errorf("natsbench: produce: %d failed: %w", failures.Load(), *p)
	}
	return Result{Messages: acked.Load(), Elapsed: elapsed}, nil
}

// Consume drains count messages from s with consumers connections bound
// to one durable pull consumer, each pulling up to prefetch messages
// ahead, and acks each one.
func Consume(ctx context.Context, s *Stream, consumers, prefetch int, count int64) (Result, error) {
	nc, js, err := connect(s.addr)
	if err != nil {
		return Result{}, err
	}
	defer nc.Close()
	if _, err := js.CreateOrUpdateConsumer(ctx, s.Name, jetstream.ConsumerConfig{
		Durable:       "bench",
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxAckPending: consumers * prefetch * 4,
	}); err != nil {
		return Result{}, fmt.Errorf("natsbench: create consumer: %w", err)
	}
	var (
		got  atomic.Int64
		done = make(chan struct{})
		once sync.Once
	)
	conns := make([]*nats.Conn, consumers)
	ccs := make([]jetstream.ConsumeContext, consumers)
	start := time.Now()
	for i := range conns {
		cnc, cjs, err := connect(s.addr)
		if err != nil {
			return Result{}, err
		}
		defer cnc.Close()
		conns[i] = cnc
		cons, err := cjs.Consumer(ctx, s.Name, "bench")
		if err != nil {
			return Result{}, err
		}
		cc, err := cons.Consume(func(m jetstream.Msg) {
			m.Ack()
			if got.Add(1) == count {
				once.Do(func() { close(done) })
			}
		}, jetstream.PullMaxMessages(prefetch))
		if err != nil {
			return Result{}, err
		}
		ccs[i] = cc
	}
	select {
	case <-done:
	case <-ctx.Done():
		return Result{}, ctx.Err()
	case <-time.After(10 * time.Minute):
		return Result{}, fmt.Errorf("natsbench: consume: %d of %d after 10 minutes", got.Load(), count)
	}
	for i := range conns {
		ccs[i].Stop()
		conns[i].Flush() // the acks have reached the server
	}
	return Result{Messages: got.Load(), Elapsed: time.Since(start)}, nil
}

// LatencyResult is the outcome of MeasureLatency.
type LatencyResult struct {
	Unloaded Latency
	Loaded   Latency
	// Achieved is the loaded phase's delivered rate, msgs/s.
	Achieved float64
}

// MeasureLatency times publish-to-delivery on s: count messages one at a
// time (each published with a synchronous Publish, the next once the
// previous was delivered), then, if rate > 0, messages offered at rate per
// second for d, evenly spaced, published with PublishAsync and timed from
// their scheduled send time. The consumer is a pull consumer with
// prefetch 1024 that acks each delivery.
func MeasureLatency(ctx context.Context, s *Stream, size, count int, rate float64, d time.Duration) (LatencyResult, error) {
	var res LatencyResult
	if size < 8 {
		return res, fmt.Errorf("natsbench: latency: size %d: want at least 8", size)
	}
	nc, js, err := connect(s.addr, jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		return res, err
	}
	defer nc.Close()
	cons, err := js.CreateOrUpdateConsumer(ctx, s.Name, jetstream.ConsumerConfig{
		Durable: "latency", AckPolicy: jetstream.AckExplicitPolicy, MaxAckPending: 20000,
	})
	if err != nil {
		return res, fmt.Errorf("natsbench: create consumer: %w", err)
	}
	cnc, cjs, err := connect(s.addr)
	if err != nil {
		return res, err
	}
	defer cnc.Close()
	ccons, err := cjs.Consumer(ctx, s.Name, cons.CachedInfo().Name)
	if err != nil {
		return res, err
	}
	var (
		mu      sync.Mutex
		samples []time.Duration
		got     atomic.Int64
		arrived = make(chan struct{}, 1)
	)
	cc, err := ccons.Consume(func(m jetstream.Msg) {
		at := now()
		if b := m.Data(); len(b) >= 8 {
			mu.Lock()
			samples = append(samples, at-time.Duration(binary.LittleEndian.Uint64(b)))
			mu.Unlock()
		}
		m.Ack()
		got.Add(1)
		select {
		case arrived <- struct{}{}:
		default:
		}
	}, jetstream.PullMaxMessages(1024))
	if err != nil {
		return res, err
	}
	defer cc.Stop()

	payload := make([]byte, size)
	for i := 0; i < count; i++ {
		binary.LittleEndian.PutUint64(payload, uint64(now()))
		if _, err := js.Publish(ctx, s.Subject, payload); err != nil {
			return res, fmt.Errorf("natsbench: latency: publish: %w", err)
		}
		select {
		case <-arrived:
		case <-time.After(time.Minute):
			return res, fmt.Errorf("natsbench: latency: message %d not delivered in a minute", i)
		}
	}
	mu.Lock()
	res.Unloaded = summarize(samples)
	samples = nil
	mu.Unlock()
	if rate <= 0 {
		return res, nil
	}
	base := got.Load()
	total := int(rate * d.Seconds())
	interval := time.Duration(float64(time.Second) / rate)
	start := now()
	for i := 0; i < total; i++ {
		due := start + time.Duration(i)*interval
		if w := due - now(); w > 0 {
			time.Sleep(w)
		}
		b := make([]byte, size)
		binary.LittleEndian.PutUint64(b, uint64(due))
		if _, err := js.PublishAsync(s.Subject, b, jetstream.WithStallWait(time.Minute)); err != nil {
			return res, fmt.Errorf("natsbench: latency: publish: %w", err)
		}
	}
	deadline := time.Now().Add(time.Minute)
	for got.Load() < base+int64(total) {
		if time.Now().After(deadline) {
			return res, fmt.Errorf("natsbench: latency: %d of %d delivered after a minute", got.Load()-base, total)
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := now() - start
	mu.Lock()
	res.Loaded = summarize(samples)
	mu.Unlock()
	res.Achieved = float64(total) / elapsed.Seconds()
	return res, nil
}

// Name returns a stream name for workload number i.
func Name(i int) string { return "BENCH" + strconv.Itoa(i) }
