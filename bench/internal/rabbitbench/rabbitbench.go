// Package rabbitbench drives RabbitMQ quorum queues over AMQP 0-9-1 with
// the workloads of "fila bench", measured the same way as package
// natsbench measures NATS JetStream, so the brokers can be set side by
// side:
//
//   - Produce: producers, one connection and channel each in publisher
//     confirm mode, keep a window of messages unconfirmed, published one
//     at a time (the way "fila bench produce" keeps SendBatch calls, or
//     with --batch 1 single-message Sends, in flight); a message
//     counts once the server confirmed it (basic.ack), and a basic.nack
//     fails the run. A run bounded by time stops publishing at the
//     deadline and waits for the confirms in flight.
//   - Consume: one consumer on its own connection drains a backlog with
//     basic.qos prefetch and manual acks, one basic.ack with multiple set
//     for every batch of deliveries (like Fila's AckAll of a batch); the
//     server does not confirm acks.
//   - Lifecycle: producers as in Produce while one consumer takes and
//     acks the messages, as "fila bench lifecycle" does with one
//     consumer; both rates are reported.
//   - Latency: time from just before the publish to the delivery, one
//     message at a time and at an offered rate, with the send time in the
//     first 8 payload bytes, as "fila bench latency" does.
//
// Queues are durable quorum queues (x-queue-type: quorum): a quorum queue
// writes each message to its log and fsyncs it before it confirms the
// publish, the durability Fila gives every acknowledged enqueue. On a
// cluster a publish is confirmed once a majority of the queue's members
// have fsynced it. Messages are published persistent, to the default
// exchange.
package rabbitbench

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/fila-mq/fila/bench/internal/measure"
	amqp "github.com/rabbitmq/amqp091-go"
)

// Result is a count of messages over an elapsed time.
type Result = measure.Result

// Latency summarises samples by the nearest-rank method.
type Latency = measure.Latency

// Queue is a durable quorum queue on the server at an address, created
// by NewQueue.
type Queue struct {
	Name string
	addr string
}

// NewQueue declares a durable quorum queue named name on the server at
// addr (host:port), connecting as guest (admitted from loopback
// addresses only). On a cluster, members (if positive) is the number of
// nodes that hold the queue (x-quorum-initial-group-size), and its
// leader is the node at addr (x-queue-leader-locator client-local), to
// which all the queue's clients connect; members 0 declares the queue
// with neither argument (on a single node, the node holds it).
func NewQueue(ctx context.Context, addr, name string, members int) (*Queue, error) {
	conn, ch, err := connect(addr)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	args := amqp.Table{"x-queue-type": "quorum"}
	if members > 0 {
		args["x-quorum-initial-group-size"] = int32(members)
		args["x-queue-leader-locator"] = "client-local"
	}
	if _, err := ch.QueueDeclare(name, true, false, false, false, args); err != nil {
		return nil, fmt.Errorf("rabbitbench: declare queue %s: %w", name, err)
	}
	return &Queue{Name: name, addr: addr}, nil
}

// Delete deletes the queue and the messages in it.
func (q *Queue) Delete(ctx context.Context) error {
	conn, ch, err := connect(q.addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := ch.QueueDelete(q.Name, false, false, false); err != nil {
		return fmt.Errorf("rabbitbench: delete queue %s: %w", q.Name, err)
	}
	return nil
}

// Pending returns the messages ready for delivery in the queue (those
// delivered and not yet acked are not counted).
func (q *Queue) Pending(ctx context.Context) (int, error) {
	conn, ch, err := connect(q.addr)
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	st, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	if err != nil {
		return 0, fmt.Errorf("rabbitbench: queue %s: %w", q.Name, err)
	}
	return st.Messages, nil
}

func connect(addr string) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.DialConfig("amqp://guest:guest@"+addr+"/", amqp.Config{
		Properties: amqp.Table{"connection_name": "fila-bench-compare"},
	})
	if err != nil {
		return nil, nil, fmt.Errorf("rabbitbench: connect %s: %w", addr, err)
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, fmt.Errorf("rabbitbench: open channel: %w", err)
	}
	return conn, ch, nil
}

// A confirmer is a channel in confirm mode whose publishes take one of
// window slots, each given back when the server confirms the message.
// Runs its reader on a goroutine of its own until the channel closes.
type confirmer struct {
	ch      *amqp.Channel
	slots   chan struct{}
	acked   atomic.Int64
	nacked  atomic.Int64
	drained chan struct{} // closed when the confirm stream ends
}

func newConfirmer(ch *amqp.Channel, window int) (*confirmer, error) {
	if err := ch.Confirm(false); err != nil {
		return nil, fmt.Errorf("rabbitbench: confirm mode: %w", err)
	}
	c := &confirmer{ch: ch, slots: make(chan struct{}, window), drained: make(chan struct{})}
	confirms := ch.NotifyPublish(make(chan amqp.Confirmation, window))
	go func() {
		defer close(c.drained)
		for cf := range confirms {
			if cf.Ack {
				c.acked.Add(1)
			} else {
				c.nacked.Add(1)
			}
			<-c.slots
		}
	}()
	return c, nil
}

// publish waits for a slot (at most until stall passes) and publishes
// body to queue, persistent.
func (c *confirmer) publish(ctx context.Context, queue string, body []byte, stall time.Duration) error {
	select {
	case c.slots <- struct{}{}:
	case <-ctx.Done():
		return ctx.Err()
	case <-c.drained:
		return errors.New("channel closed")
	case <-time.After(stall):
		return fmt.Errorf("no confirm in %v", stall)
	}
	err := c.ch.PublishWithContext(ctx, "", queue, false, false, amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		Body:         body,
	})
	if err != nil {
		<-c.slots
	}
	return err
}

// wait returns once every message published has been confirmed, or
// after d.
func (c *confirmer) wait(d time.Duration) error {
	deadline := time.After(d)
	for range cap(c.slots) {
		select {
		case c.slots <- struct{}{}:
		case <-c.drained:
			return errors.New("channel closed with confirms pending")
		case <-deadline:
			return fmt.Errorf("confirms still pending %v after the last publish", d)
		}
	}
	for range cap(c.slots) {
		<-c.slots
	}
	return nil
}

// ProduceSpec describes producers: Producers connections, each keeping
// Outstanding messages of Size bytes unconfirmed, until Count messages in
// all or Duration, whichever comes first (0: no bound; not both).
type ProduceSpec = measure.ProduceSpec

// Produce publishes into q by spec and returns the confirmed messages.
// The error is non-nil if the server nacked a message, a connection
// failed, or confirms were still missing a minute after the last publish.
func Produce(ctx context.Context, q *Queue, spec ProduceSpec) (Result, error) {
	pubs, closeAll, err := publishers(q, spec)
	if err != nil {
		return Result{}, err
	}
	defer closeAll()
	r, err := measure.Produce(ctx, spec, pubs)
	if err != nil {
		return r, fmt.Errorf("rabbitbench: %w", err)
	}
	return r, nil
}

// publishers connects spec.Producers producers to q, each on a channel
// in confirm mode, and returns them with a function that closes their
// connections.
func publishers(q *Queue, spec ProduceSpec) ([]measure.Publisher, func(), error) {
	var conns []*amqp.Connection
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	pubs := make([]measure.Publisher, spec.Producers)
	for i := range pubs {
		conn, ch, err := connect(q.addr)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		conns = append(conns, conn)
		c, err := newConfirmer(ch, spec.Outstanding)
		if err != nil {
			closeAll()
			return nil, nil, err
		}
		pubs[i] = &publisher{c: c, queue: q.Name}
	}
	return pubs, closeAll, nil
}

// publisher is one producer of Produce.
type publisher struct {
	c     *confirmer
	queue string
}

func (p *publisher) Publish(ctx context.Context, payload []byte) error {
	return p.c.publish(ctx, p.queue, payload, time.Minute)
}

func (p *publisher) Flush(timeout time.Duration) (int64, error) {
	if err := p.c.wait(timeout); err != nil {
		return p.c.acked.Load(), err
	}
	if n := p.c.nacked.Load(); n > 0 {
		return p.c.acked.Load(), fmt.Errorf("%d messages nacked", n)
	}
	return p.c.acked.Load(), nil
}

// Consume drains count messages from q with one consumer on its own
// connection: basic.qos prefetch prefetch, manual acks, one basic.ack
// with multiple set every ackBatch deliveries and after the last. The
// elapsed time runs from basic.consume until the last ack has been
// processed by the channel (a synchronous method on the same channel
// returned after it).
func Consume(ctx context.Context, q *Queue, prefetch, ackBatch int, count int64) (Result, error) {
	conn, ch, err := connect(q.addr)
	if err != nil {
		return Result{}, err
	}
	defer conn.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return Result{}, fmt.Errorf("rabbitbench: qos: %w", err)
	}
	ackBatch = max(ackBatch, 1)
	start := time.Now()
	deliveries, err := ch.ConsumeWithContext(ctx, q.Name, "bench", false, false, false, false, nil)
	if err != nil {
		return Result{}, fmt.Errorf("rabbitbench: consume: %w", err)
	}
	var got int64
	timeout := time.After(10 * time.Minute)
	for got < count {
		select {
		case d, ok := <-deliveries:
			if !ok {
				return Result{}, fmt.Errorf("rabbitbench: consume: channel closed after %d of %d", got, count)
			}
			got++
			if got%int64(ackBatch) == 0 || got == count {
				if err := d.Ack(true); err != nil {
					return Result{}, fmt.Errorf("rabbitbench: ack: %w", err)
				}
			}
		case <-ctx.Done():
			return Result{}, ctx.Err()
		case <-timeout:
			return Result{}, fmt.Errorf("rabbitbench: consume: %d of %d after 10 minutes", got, count)
		}
	}
	if _, err := ch.QueueDeclarePassive(q.Name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return Result{}, fmt.Errorf("rabbitbench: consume: %w", err)
	}
	return Result{Messages: got, Elapsed: time.Since(start)}, nil
}

// LifecycleResult is the outcome of Lifecycle.
type LifecycleResult = measure.LifecycleResult

// Lifecycle produces into q by spec (as Produce does) while one consumer
// on its own connection takes the messages, with basic.qos prefetch
// prefetch and manual acks: one basic.ack with multiple set for every
// ackBatch deliveries, or for those received so far once a millisecond
// passes without a delivery (as "fila bench lifecycle" flushes a partial
// AckAll). The consumer starts first; the run ends once it has taken
// every message confirmed to the producers (see measure.Lifecycle) and a
// synchronous method on its channel returned after its last ack.
func Lifecycle(ctx context.Context, q *Queue, spec ProduceSpec, prefetch, ackBatch int) (LifecycleResult, error) {
	var res LifecycleResult
	conn, ch, err := connect(q.addr)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	if err := ch.Qos(prefetch, 0, false); err != nil {
		return res, fmt.Errorf("rabbitbench: qos: %w", err)
	}
	ackBatch = max(ackBatch, 1)
	start := time.Now()
	// Not ConsumeWithContext: the basic.cancel it sends when its context
	// ends would race with the synchronous method after the last ack
	// (the client matches replies to a channel's calls in order).
	deliveries, err := ch.Consume(q.Name, "lifecycle", false, false, false, false, nil)
	if err != nil {
		return res, fmt.Errorf("rabbitbench: consume: %w", err)
	}
	var (
		got     atomic.Int64
		failure atomic.Pointer[error]
		stop    = make(chan struct{})
		done    = make(chan struct{})
	)
	fail := func(err error) { failure.CompareAndSwap(nil, &err) }
	go func() {
		defer close(done)
		var tag uint64 // of the last delivery not yet acked; 0 for none
		ack := func() {
			if tag != 0 {
				if err := ch.Ack(tag, true); err != nil {
					fail(fmt.Errorf("ack: %w", err))
				}
				tag = 0
			}
		}
		defer ack()
		flush := time.NewTimer(time.Hour)
		flush.Stop()
		defer flush.Stop()
		pending := 0
		for {
			select {
			case d, ok := <-deliveries:
				if !ok {
					fail(errors.New("channel closed"))
					return
				}
				got.Add(1)
				tag = d.DeliveryTag
				pending++
				switch {
				case pending >= ackBatch:
					flush.Stop()
					ack()
					pending = 0
				case pending == 1:
					flush.Reset(time.Millisecond)
				}
			case <-flush.C:
				ack()
				pending = 0
			case <-stop:
				return
			}
		}
	}()
	pubs, closeAll, err := publishers(q, spec)
	if err != nil {
		close(stop)
		<-done
		return res, err
	}
	defer closeAll()
	res, err = measure.Lifecycle(ctx, spec, pubs, start, func() (int64, error) {
		if e := failure.Load(); e != nil {
			return got.Load(), *e
		}
		return got.Load(), nil
	})
	close(stop)
	<-done
	if err == nil {
		if e := failure.Load(); e != nil {
			err = *e
		} else if _, err = ch.QueueDeclarePassive(q.Name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
			err = fmt.Errorf("consume: %w", err)
		}
	}
	if err != nil {
		return res, fmt.Errorf("rabbitbench: lifecycle: %w", err)
	}
	return res, nil
}

// LatencyResult is the outcome of MeasureLatency.
type LatencyResult = measure.LatencyResult

// MeasureLatency times publish-to-delivery on q: count messages one at a
// time (each published and its confirm awaited, the next once the
// previous was delivered), then, if rate > 0, messages offered at rate
// per second for d, evenly spaced, published without waiting for their
// confirms (at most 4096 unconfirmed) and timed from their scheduled
// send time. The consumer, on its own connection, has prefetch 1024 and
// acks each delivery. size is the payload in bytes, at least 8.
func MeasureLatency(ctx context.Context, q *Queue, size, count int, rate float64, d time.Duration) (LatencyResult, error) {
	var res LatencyResult
	if size < 8 {
		return res, fmt.Errorf("rabbitbench: latency: size %d: want at least 8", size)
	}
	conn, ch, err := connect(q.addr)
	if err != nil {
		return res, err
	}
	defer conn.Close()
	// One channel for each phase, both on the producer's connection.
	if err := ch.Confirm(false); err != nil {
		return res, fmt.Errorf("rabbitbench: confirm mode: %w", err)
	}
	ach, err := conn.Channel()
	if err != nil {
		return res, fmt.Errorf("rabbitbench: open channel: %w", err)
	}
	pub, err := newConfirmer(ach, 4096)
	if err != nil {
		return res, err
	}
	cconn, cch, err := connect(q.addr)
	if err != nil {
		return res, err
	}
	defer cconn.Close()
	if err := cch.Qos(1024, 0, false); err != nil {
		return res, fmt.Errorf("rabbitbench: qos: %w", err)
	}
	deliveries, err := cch.ConsumeWithContext(ctx, q.Name, "latency", false, false, false, false, nil)
	if err != nil {
		return res, fmt.Errorf("rabbitbench: consume: %w", err)
	}
	rec := measure.NewRecorder()
	go func() {
		for m := range deliveries {
			rec.Delivered(m.Body)
			m.Ack(false)
		}
	}()
	run := measure.LatencyRun{Size: size, Count: count, Rate: rate, Duration: d,
		Send: func(ctx context.Context, b []byte) error {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", q.Name, false, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent,
				Body:         b,
			})
			if err != nil {
				return err
			}
			wctx, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			ok, err := dc.WaitContext(wctx)
			if err != nil {
				return fmt.Errorf("confirm: %w", err)
			}
			if !ok {
				return errors.New("nacked")
			}
			return nil
		},
		Offer: func(ctx context.Context, b []byte) error {
			return pub.publish(ctx, q.Name, b, time.Minute)
		},
	}
	res, err = run.Measure(ctx, rec)
	if err != nil {
		return res, fmt.Errorf("rabbitbench: %w", err)
	}
	if err := pub.wait(time.Minute); err != nil {
		return res, fmt.Errorf("rabbitbench: latency: %w", err)
	}
	if n := pub.nacked.Load(); n > 0 {
		return res, fmt.Errorf("rabbitbench: latency: %d messages nacked", n)
	}
	return res, nil
}

// Name returns a queue name for workload number i.
func Name(i int) string { return "bench-" + strconv.Itoa(i) }
