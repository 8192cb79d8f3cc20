package bench

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

func (f *loadFlags) register(cmd *cobra.Command, producers, consumers bool) {
	fl := cmd.Flags()
	if producers {
		fl.IntVar(&f.producers, "producers", 1, "producer clients, one connection each")
		fl.IntVar(&f.outstanding, "outstanding", 256, "messages in flight per producer (in SendBatch calls of --batch; with --batch 1, concurrent single-message Send calls)")
	}
	if consumers {
		fl.IntVar(&f.consumers, "consumers", 1, "consumer clients, one connection and subscription each")
		fl.Uint32Var(&f.prefetch, "prefetch", 1024, "delivery credit per subscription (0: as much as the broker allows, its max_unsettled)")
	}
	fl.IntVar(&f.size, "size", 1024, "payload bytes per message")
	fl.IntVar(&f.batch, "batch", 64, "messages per SendBatch (1: single-message Send calls instead); deliveries per AckAll")
	fl.DurationVar(&f.duration, "duration", 0, "how long to produce (default 10s unless --count)")
	fl.Int64Var(&f.count, "count", 0, "how many messages (instead of --duration)")
}

// defaults fills in the duration when neither bound was given.
func (f *loadFlags) defaults() {
	if f.duration == 0 && f.count == 0 {
		f.duration = 10 * time.Second
	}
}

// ProduceResult is the outcome of "fila bench produce".
type ProduceResult struct {
	Workload    string     `json:"workload"`
	Queue       string     `json:"queue"`
	Producers   int        `json:"producers"`
	Outstanding int        `json:"outstanding"`
	Batch       int        `json:"batch"`
	Size        int        `json:"size"`
	Produce     Throughput `json:"produce"`
	// Request is the round trip of each SendBatch call (each Send call,
	// with --batch 1).
	Request Latency `json:"request_latency"`
	// Partial is set when the run failed: the figures count what was
	// acknowledged before the failure.
	Partial bool `json:"partial,omitempty"`
}

func (r *ProduceResult) writeTable(w io.Writer) error {
	defer partialNote(w, r.Partial)
	return table(w,
		[]string{"PRODUCERS", "OUTSTANDING", "BATCH", "SIZE", "MESSAGES", "SECONDS", "MSGS/S", "MIB/S", "REQ P50 MS", "REQ P99 MS"},
		[][]string{{
			fmt.Sprint(r.Producers), fmt.Sprint(r.Outstanding), fmt.Sprint(r.Batch), fmt.Sprint(r.Size),
			group(r.Produce.Messages), fmt.Sprintf("%.2f", r.Produce.Elapsed.Seconds()),
			rate(r.Produce.PerSecond()), fmt.Sprintf("%.1f", r.Produce.MiBPerSecond()),
			ms(r.Request.P50), ms(r.Request.P99),
		}})
}

func newProduceCmd(e *env) *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "produce",
		Short: "Enqueue from producers for --duration or --count; report msgs/s",
		Long: `Each producer is a client with its own connection that keeps --outstanding
messages in flight, in SendBatch calls of --batch messages. With --batch 1
it keeps --outstanding single-message Send calls in flight instead, which
the SDK coalesces into frames as it does any concurrent Sends. An enqueue
counts once it is durable (the broker fsyncs before it replies).`,
		Example: `  fila bench produce --producers 3 --size 1024 --duration 10s
  fila bench produce --producers 3 --batch 1 --outstanding 256`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.defaults()
			if err := f.check(true, false); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			q, drop, err := e.openQueue(ctx, c, "produce", nil)
			if err != nil {
				return err
			}
			defer drop()
			var sent atomic.Int64
			stop := e.trackRun("produce", f.duration, f.count, &sent)
			p, err := produce(ctx, e, produceSpec{
				queue: q, producers: f.producers, outstanding: f.outstanding, batch: f.batch,
				size: f.size, count: f.count, duration: f.duration,
			}, &sent)
			stop()
			res := &ProduceResult{
				Workload: "produce", Queue: q, Producers: f.producers, Outstanding: f.outstanding,
				Batch: f.batch, Size: f.size, Produce: p.Throughput, Request: p.Request,
			}
			if err != nil {
				res.Partial = true
				return e.emitFailed(res, p.Messages, err)
			}
			return e.emit(res)
		},
	}
	f.register(cmd, true, false)
	return cmd
}

// ConsumeResult is the outcome of "fila bench consume": the backlog's
// fill (not part of the measure) and its consumption.
type ConsumeResult struct {
	Workload  string     `json:"workload"`
	Queue     string     `json:"queue"`
	Consumers int        `json:"consumers"`
	Prefetch  uint32     `json:"prefetch"`
	AckBatch  int        `json:"ack_batch"`
	Size      int        `json:"size"`
	Fill      Throughput `json:"fill"`
	Consume   Throughput `json:"consume"`
	// Partial is set when the run failed: the figures count what was
	// acknowledged before the failure.
	Partial bool `json:"partial,omitempty"`
}

func (r *ConsumeResult) writeTable(w io.Writer) error {
	defer partialNote(w, r.Partial)
	return table(w,
		[]string{"PHASE", "CLIENTS", "PREFETCH", "BATCH", "SIZE", "MESSAGES", "SECONDS", "MSGS/S", "MIB/S"},
		[][]string{
			{"fill", "-", "-", "-", fmt.Sprint(r.Size), group(r.Fill.Messages), fmt.Sprintf("%.2f", r.Fill.Elapsed.Seconds()),
				rate(r.Fill.PerSecond()), fmt.Sprintf("%.1f", r.Fill.MiBPerSecond())},
			{"consume+ack", fmt.Sprint(r.Consumers), fmt.Sprint(r.Prefetch), fmt.Sprint(r.AckBatch), fmt.Sprint(r.Size),
				group(r.Consume.Messages), fmt.Sprintf("%.2f", r.Consume.Elapsed.Seconds()),
				rate(r.Consume.PerSecond()), fmt.Sprintf("%.1f", r.Consume.MiBPerSecond())},
		})
}

func newConsumeCmd(e *env) *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "consume",
		Short: "Fill a backlog, then consume and ack it; report msgs/s",
		Long: `First fills the queue with --count messages (or for --duration), with
4 producers of 256 outstanding in batches of 256; this fill is reported
but is not the measure. Then the consumers subscribe with --prefetch
credit each and consume the backlog, acknowledging in AckAll calls of up
to --batch deliveries (fewer when no more are waiting); the run ends when
the backlog is gone. An ack counts once it is durable.`,
		Example: `  fila bench consume --count 200000 --consumers 1 --prefetch 1024`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.defaults()
			f.producers, f.outstanding = 4, 256
			if err := f.check(false, true); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			q, drop, err := e.openQueue(ctx, c, "consume", nil)
			if err != nil {
				return err
			}
			defer drop()
			var n atomic.Int64
			stop := e.trackRun("fill", f.duration, f.count, &n)
			fillRes, err := produce(ctx, e, produceSpec{
				queue: q, producers: 4, outstanding: 256, batch: 256,
				size: f.size, count: f.count, duration: f.duration,
			}, &n)
			stop()
			res := &ConsumeResult{
				Workload: "consume", Queue: q, Consumers: f.consumers, Prefetch: f.prefetch, AckBatch: f.batch,
				Size: f.size, Fill: fillRes.Throughput,
			}
			if err != nil {
				res.Partial = true
				return e.emitFailed(res, fillRes.Messages, err)
			}
			var got atomic.Int64
			stop = e.track("consume", fillRes.Messages, got.Load)
			res.Consume, err = consume(ctx, e, consumeSpec{
				queue: q, consumers: f.consumers, prefetch: f.prefetch, ackBatch: f.batch, count: fillRes.Messages,
			}, &got)
			stop()
			if err != nil {
				res.Partial = true
				return e.emitFailed(res, fillRes.Messages+res.Consume.Messages, err)
			}
			return e.emit(res)
		},
	}
	f.register(cmd, false, true)
	return cmd
}

// LifecycleResult is the outcome of "fila bench lifecycle": producers
// and consumers at once, every message enqueued, delivered and acked.
type LifecycleResult struct {
	Workload    string     `json:"workload"`
	Queue       string     `json:"queue"`
	Producers   int        `json:"producers"`
	Outstanding int        `json:"outstanding"`
	Consumers   int        `json:"consumers"`
	Prefetch    uint32     `json:"prefetch"`
	Batch       int        `json:"batch"`
	Size        int        `json:"size"`
	Produce     Throughput `json:"produce"`
	Consume     Throughput `json:"consume"`
	// EndToEnd is the time from a message's SendBatch call (Send call,
	// with --batch 1) to its delivery (present when --size is at least 8).
	EndToEnd Latency `json:"end_to_end"`
	// Partial is set when the run failed: the figures count what was
	// acknowledged before the failure.
	Partial bool `json:"partial,omitempty"`
}

func (r *LifecycleResult) writeTable(w io.Writer) error {
	defer partialNote(w, r.Partial)
	err := table(w,
		[]string{"PHASE", "CLIENTS", "SIZE", "MESSAGES", "SECONDS", "MSGS/S", "MIB/S"},
		[][]string{
			{"produce", fmt.Sprint(r.Producers), fmt.Sprint(r.Size), group(r.Produce.Messages),
				fmt.Sprintf("%.2f", r.Produce.Elapsed.Seconds()), rate(r.Produce.PerSecond()), fmt.Sprintf("%.1f", r.Produce.MiBPerSecond())},
			{"consume+ack", fmt.Sprint(r.Consumers), fmt.Sprint(r.Size), group(r.Consume.Messages),
				fmt.Sprintf("%.2f", r.Consume.Elapsed.Seconds()), rate(r.Consume.PerSecond()), fmt.Sprintf("%.1f", r.Consume.MiBPerSecond())},
		})
	if err != nil || r.EndToEnd.Count == 0 {
		return err
	}
	fmt.Fprintln(w)
	return latencyTable(w, []string{"end to end"}, []Latency{r.EndToEnd})
}

func newLifecycleCmd(e *env) *cobra.Command {
	var f loadFlags
	cmd := &cobra.Command{
		Use:   "lifecycle",
		Short: "Produce and consume at once: enqueue, deliver, ack; report both rates",
		Long: `Consumers subscribe first; then producers enqueue for --duration or
--count while the consumers consume and ack. The run ends when every
message enqueued has been delivered and acked. End-to-end latency is
from each message's SendBatch call (Send, with --batch 1) to its
delivery, so it includes the enqueue's fsync and any backlog.`,
		Example: `  fila bench lifecycle --producers 2 --consumers 2 --duration 10s`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			f.defaults()
			if err := f.check(true, true); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			q, drop, err := e.openQueue(ctx, c, "lifecycle", nil)
			if err != nil {
				return err
			}
			defer drop()
			res, err := lifecycle(ctx, e, q, f)
			if err != nil {
				res.Partial = true
				return e.emitFailed(res, res.Produce.Messages+res.Consume.Messages, err)
			}
			return e.emit(res)
		},
	}
	f.register(cmd, true, true)
	return cmd
}

// lifecycle runs producers and consumers at once on queue q. On a
// failure it returns the error with the result so far: what was enqueued
// and what was acknowledged before it.
func lifecycle(ctx context.Context, e *env, q string, f loadFlags) (*LifecycleResult, error) {
	var (
		mu  sync.Mutex
		smp = newSampler(1 << 20)
	)
	onDelivery := func(d *fila.Delivery, at time.Duration) {
		if t, ok := stamped(d.Payload()); ok && f.size >= 8 {
			mu.Lock()
			smp.add(at - t)
			mu.Unlock()
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan struct{})
	var got, sent atomic.Int64
	type consumed struct {
		t   Throughput
		err error
	}
	done := make(chan consumed, 1)
	go func() {
		t, err := consume(cctx, e, consumeSpec{
			queue: q, consumers: f.consumers, prefetch: f.prefetch, ackBatch: f.batch,
			onDelivery: onDelivery, ready: ready,
		}, &got)
		done <- consumed{t, err}
	}()
	var p produced
	result := func(c Throughput) *LifecycleResult {
		mu.Lock()
		lat := summarize(smp.samples)
		mu.Unlock()
		return &LifecycleResult{
			Workload: "lifecycle", Queue: q, Producers: f.producers, Outstanding: f.outstanding,
			Consumers: f.consumers, Prefetch: f.prefetch, Batch: f.batch, Size: f.size,
			Produce: p.Throughput, Consume: c, EndToEnd: lat,
		}
	}
	// stopConsumers ends the consumers after a failure of err and
	// returns the result so far with it.
	stopConsumers := func(err error) (*LifecycleResult, error) {
		cancel()
		r := <-done
		return result(r.t), err
	}
	select {
	case <-ready:
	case r := <-done:
		return result(r.t), r.err
	}
	stop := e.trackRun("lifecycle", f.duration, f.count, &sent)
	var err error
	p, err = produce(ctx, e, produceSpec{
		queue: q, producers: f.producers, outstanding: f.outstanding, batch: f.batch,
		size: f.size, count: f.count, duration: f.duration, stamp: true,
	}, &sent)
	stop()
	if err != nil {
		return stopConsumers(err)
	}
	// Wait for the consumers to take every message, or to stop making
	// progress for a minute.
	last, lastAt := got.Load(), time.Now()
	for got.Load() < p.Messages {
		select {
		case r := <-done:
			if r.err == nil {
				r.err = fmt.Errorf("bench: lifecycle: consumers stopped after %d of %d messages", r.t.Messages, p.Messages)
			}
			return result(r.t), r.err
		case <-time.After(5 * time.Millisecond):
		}
		if n := got.Load(); n != last {
			last, lastAt = n, time.Now()
		} else if time.Since(lastAt) > time.Minute {
			return stopConsumers(fmt.Errorf("bench: lifecycle: no delivery for a minute after %d of %d messages", n, p.Messages))
		}
	}
	cancel()
	r := <-done
	return result(r.t), r.err
}

// latencyTable writes one row per summary.
func latencyTable(w io.Writer, names []string, ls []Latency) error {
	rows := make([][]string, len(ls))
	for i, l := range ls {
		rows[i] = []string{names[i], group(int64(l.Count)), ms(l.P50), ms(l.P95), ms(l.P99), ms(l.Max)}
	}
	return table(w, []string{"LATENCY", "SAMPLES", "P50 MS", "P95 MS", "P99 MS", "MAX MS"}, rows)
}
