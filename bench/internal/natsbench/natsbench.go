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
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fila-mq/fila/bench/internal/measure"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Result is a count of messages over an elapsed time.
type Result = measure.Result

// Latency summarises samples by the nearest-rank method.
type Latency = measure.Latency

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
type ProduceSpec = measure.ProduceSpec

// Produce publishes into s by spec (PublishAsync, with
// PublishAsyncMaxPending as the window) and returns the acknowledged
// messages.
func Produce(ctx context.Context, s *Stream, spec ProduceSpec) (Result, error) {
	pubs := make([]measure.Publisher, spec.Producers)
	for i := range pubs {
		p := &publisher{subject: s.Subject}
		nc, js, err := connect(s.addr,
			jetstream.WithPublishAsyncMaxPending(spec.Outstanding),
			jetstream.WithPublishAsyncErrHandler(func(_ jetstream.JetStream, _ *nats.Msg, err error) {
				p.failures.Add(1)
				p.firstErr.CompareAndSwap(nil, &err)
			}))
		if err != nil {
			return Result{}, err
		}
		defer nc.Close()
		p.js = js
		pubs[i] = p
	}
	r, err := measure.Produce(ctx, spec, pubs)
	if err != nil {
		return r, fmt.Errorf("natsbench: %w", err)
	}
	return r, nil
}

// publisher is one producer of Produce.
type publisher struct {
	js       jetstream.JetStream
	subject  string
	sent     int64
	failures atomic.Int64
	firstErr atomic.Pointer[error]
}

func (p *publisher) Publish(_ context.Context, payload []byte) error {
	if _, err := p.js.PublishAsync(p.subject, payload, jetstream.WithStallWait(time.Minute)); err != nil {
		return err
	}
	p.sent++
	return nil
}

func (p *publisher) Flush(timeout time.Duration) (int64, error) {
	select {
	case <-p.js.PublishAsyncComplete():
	case <-time.After(timeout):
		return 0, fmt.Errorf("acks still pending %v after the last publish", timeout)
	}
	if e := p.firstErr.Load(); e != nil {
		return p.sent - p.failures.Load(), fmt.Errorf("%d failed: %w", p.failures.Load(), *e)
	}
	return p.sent, nil
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
type LatencyResult = measure.LatencyResult

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
	rec := measure.NewRecorder()
	cc, err := ccons.Consume(func(m jetstream.Msg) {
		rec.Delivered(m.Data())
		m.Ack()
	}, jetstream.PullMaxMessages(1024))
	if err != nil {
		return res, err
	}
	defer cc.Stop()
	run := measure.LatencyRun{Size: size, Count: count, Rate: rate, Duration: d,
		Send: func(ctx context.Context, b []byte) error {
			_, err := js.Publish(ctx, s.Subject, b)
			return err
		},
		Offer: func(_ context.Context, b []byte) error {
			_, err := js.PublishAsync(s.Subject, b, jetstream.WithStallWait(time.Minute))
			return err
		},
	}
	res, err = run.Measure(ctx, rec)
	if err != nil {
		return res, fmt.Errorf("natsbench: %w", err)
	}
	return res, nil
}

// Name returns a stream name for workload number i.
func Name(i int) string { return "BENCH" + strconv.Itoa(i) }
