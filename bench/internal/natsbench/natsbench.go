// Package natsbench drives NATS JetStream with the workloads of
// "fila bench", measured the same way, so the two brokers can be set side
// by side:
//
//   - Produce: producers, one connection each, keep a window of messages
//     outstanding, published one at a time (PublishAsync with
//     PublishAsyncMaxPending, the way "fila bench produce" keeps SendBatch
//     calls, or with --batch 1 single-message Sends, in flight); a message
//     counts once the server acknowledged it. A run bounded by time
//     stops publishing at the deadline and waits for the acks in flight.
//   - Consume: a durable pull consumer (explicit acks) drains a backlog
//     with the given prefetch (PullMaxMessages); each message is acked
//     with Msg.Ack, which the server does not confirm.
//   - Lifecycle: producers as in Produce while one durable pull consumer
//     takes and acks the messages, as "fila bench lifecycle" does with one
//     consumer; both rates are reported.
//   - Latency: time from just before the publish to the delivery, one
//     message at a time and at an offered rate, with the send time in the
//     first 8 payload bytes, as "fila bench latency" does.
//
// Streams are work-queue streams (WorkQueuePolicy) on file storage, on
// one server or replicated on a cluster; a work-queue stream takes one
// consumer, so each workload needs a stream of its own.
package natsbench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	// addr is the server every client of the stream connects to: on a
	// cluster, the one leading the stream.
	addr string
}

// NewStream creates a work-queue stream named name, with replicas
// replicas (at least 1), on the server at addr (host:port) or on the
// cluster of the servers at addr (several host:port, comma-separated).
// On a cluster it retries for up to a minute while JetStream cannot
// place the stream yet (its meta group still electing its leader, or the
// servers not yet all routed to each other), then waits up to 30s for
// the stream's leader: the stream's clients (Produce, Consume,
// Lifecycle, MeasureLatency) all connect to the server that leads it.
func NewStream(ctx context.Context, addr, name string, replicas int) (*Stream, error) {
	nc, js, err := connect(addr)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	s := &Stream{Name: name, Subject: "bench." + name, addr: addr}
	cfg := jetstream.StreamConfig{
		Name:      name,
		Subjects:  []string{s.Subject},
		Storage:   jetstream.FileStorage,
		Retention: jetstream.WorkQueuePolicy,
		Replicas:  replicas,
	}
	seeds := strings.Split(addr, ",")
	for end := time.Now().Add(time.Minute); ; {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err = js.CreateStream(actx, cfg)
		cancel()
		if err == nil || len(seeds) == 1 || !unavailable(err) || time.Now().After(end) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if err != nil {
		return nil, fmt.Errorf("natsbench: create stream %s: %w", name, err)
	}
	if len(seeds) > 1 {
		if s.addr, err = leaderAddr(ctx, js, name, seeds); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// unavailable reports whether err, from a stream's creation on a
// cluster, says that JetStream cannot serve or place it yet.
func unavailable(err error) bool {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) {
		// 10008: JetStream temporarily unavailable (no meta leader);
		// 10023: insufficient resources (peers not yet known).
		return apiErr.ErrorCode == 10008 || apiErr.ErrorCode == 10023 || apiErr.Code == 503
	}
	return errors.Is(err, nats.ErrNoResponders) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) ||
		errors.Is(err, jetstream.ErrJetStreamNotEnabled)
}

// leaderAddr waits up to 30s for stream name to have a leader and
// returns the address, among seeds, of the server leading it.
func leaderAddr(ctx context.Context, js jetstream.JetStream, name string, seeds []string) (string, error) {
	var leader string
	for end := time.Now().Add(30 * time.Second); leader == ""; {
		actx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := js.Stream(actx, name)
		if err == nil {
			var info *jetstream.StreamInfo
			if info, err = st.Info(actx); err == nil && info.Cluster != nil {
				leader = info.Cluster.Leader
			}
		}
		cancel()
		if leader != "" {
			break
		}
		if time.Now().After(end) {
			return "", fmt.Errorf("natsbench: stream %s: no leader after 30s (%v)", name, err)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, a := range seeds {
		nc, err := nats.Connect("nats://"+a, nats.Name("fila-bench-compare"), nats.DontRandomize(), nats.NoReconnect())
		if err != nil {
			return "", fmt.Errorf("natsbench: connect %s: %w", a, err)
		}
		srv := nc.ConnectedServerName()
		nc.Close()
		if srv == leader {
			return a, nil
		}
	}
	return "", fmt.Errorf("natsbench: stream %s: its leader %s is none of %s", name, leader, strings.Join(seeds, ", "))
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

// connect connects to the server at addr, or to one of the servers at
// addr (several host:port, comma-separated).
func connect(addr string, opts ...jetstream.JetStreamOpt) (*nats.Conn, jetstream.JetStream, error) {
	urls := strings.Split(addr, ",")
	for i, u := range urls {
		urls[i] = "nats://" + u
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Name("fila-bench-compare"))
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
	pubs, closeAll, err := publishers(s, spec)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
	r, err := measure.Produce(ctx, spec, pubs)
	if err != nil {
		return r, fmt.Errorf("natsbench: %w", err)
	}
	return r, nil
}

// publishers connects spec.Producers producers to s and returns them
// with a function that closes their connections.
func publishers(s *Stream, spec ProduceSpec) ([]measure.Publisher, func(), error) {
	var conns []*nats.Conn
	closeAll := func() {
		for _, nc := range conns {
			nc.Close()
		}
	}
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
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, nc)
		p.js = js
		pubs[i] = p
	}
	return pubs, closeAll, nil
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

// LifecycleResult is the outcome of Lifecycle.
type LifecycleResult = measure.LifecycleResult

// Lifecycle produces into s by spec (as Produce does) while one consumer
// takes the messages (a durable pull consumer, explicit acks, on its own
// connection, pulling up to prefetch messages ahead) and acks each one
// with Msg.Ack, which the server does not confirm. The consumer starts
// first; the run ends once it has taken every message acknowledged to
// the producers (see measure.Lifecycle).
func Lifecycle(ctx context.Context, s *Stream, spec ProduceSpec, prefetch int) (LifecycleResult, error) {
	var res LifecycleResult
	nc, js, err := connect(s.addr)
	if err != nil {
		return res, err
	}
	defer nc.Close()
	if _, err := js.CreateOrUpdateConsumer(ctx, s.Name, jetstream.ConsumerConfig{
		Durable:       "lifecycle",
		AckPolicy:     jetstream.AckExplicitPolicy,
		MaxAckPending: prefetch * 4,
	}); err != nil {
		return res, fmt.Errorf("natsbench: create consumer: %w", err)
	}
	cnc, cjs, err := connect(s.addr)
	if err != nil {
		return res, err
	}
	defer cnc.Close()
	cons, err := cjs.Consumer(ctx, s.Name, "lifecycle")
	if err != nil {
		return res, err
	}
	var got atomic.Int64
	start := time.Now()
	cc, err := cons.Consume(func(m jetstream.Msg) {
		m.Ack()
		got.Add(1)
	}, jetstream.PullMaxMessages(prefetch))
	if err != nil {
		return res, err
	}
	pubs, closeAll, err := publishers(s, spec)
	if err != nil {
		cc.Stop()
		return res, err
	}
	defer closeAll()
	res, err = measure.Lifecycle(ctx, spec, pubs, start, func() (int64, error) { return got.Load(), nil })
	cc.Stop()
	cnc.Flush() // the acks have reached the server
	if err != nil {
		return res, fmt.Errorf("natsbench: %w", err)
	}
	return res, nil
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
