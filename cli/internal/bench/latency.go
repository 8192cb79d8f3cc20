package bench

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

// LatencyResult is the outcome of "fila bench latency": enqueue-to-
// delivery latency with one message at a time, and at an offered rate.
type LatencyResult struct {
	Workload string `json:"workload"`
	Queue    string `json:"queue"`
	Size     int    `json:"size"`
	// Unloaded sends the next message only once the previous one was
	// delivered.
	Unloaded Latency `json:"unloaded"`
	// Rate is the offered rate of the loaded phase, msgs/s (0: skipped).
	Rate float64 `json:"rate"`
	// Loaded is measured from each message's scheduled send time, so a
	// producer that falls behind adds its lag (no coordinated omission).
	Loaded Latency `json:"loaded"`
	// Achieved is the loaded phase's delivered rate, msgs/s.
	Achieved float64 `json:"achieved_rate"`
}

func (r *LatencyResult) writeTable(w io.Writer) error {
	names := []string{"unloaded"}
	ls := []Latency{r.Unloaded}
	if r.Rate > 0 {
		names = append(names, fmt.Sprintf("at %s msgs/s (achieved %s)", rate(r.Rate), rate(r.Achieved)))
		ls = append(ls, r.Loaded)
	}
	return latencyTable(w, names, ls)
}

func newLatencyCmd(e *env) *cobra.Command {
	var (
		size     int
		count    int
		duration time.Duration
		offered  float64
	)
	cmd := &cobra.Command{
		Use:   "latency",
		Short: "Enqueue-to-delivery latency: p50/p95/p99/max, unloaded and at --rate",
		Long: `One producer and one consumer (prefetch 1024, acking each delivery in
the background) on separate connections. Latency runs from just before
the Send call to the delivery's arrival at the consumer, so it includes
the enqueue's fsync, the scheduling and both network hops.

Unloaded: one message at a time, the next sent once the previous one was
delivered, --count messages. Loaded: messages offered at --rate per
second, evenly spaced, for --duration; each is timed from its scheduled
send time. --rate 0 skips the loaded phase.`,
		Example: `  fila bench latency --count 2000 --rate 5000 --duration 10s`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if size < 8 {
				return usagef("bench: --size %d: want at least 8 (the payload carries the send time)", size)
			}
			if err := checkSize(size, 8); err != nil {
				return err
			}
			if count < 1 || !(offered >= 0) || math.IsInf(offered, 1) || duration < 0 || (offered > 0 && duration == 0) {
				return usagef("bench: want --count ≥ 1, a finite --rate ≥ 0, and --duration ≥ 0 (> 0 with a rate)")
			}
			if total := offered * duration.Seconds(); total > maxTracked {
				return usagef("bench: --rate × --duration is %.0f messages: want at most %d", total, maxTracked)
			}
			ctx := cmd.Context()
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			q, drop, err := e.openQueue(ctx, c, "latency", nil)
			if err != nil {
				return err
			}
			defer drop()
			res, err := measureLatency(ctx, e, q, size, count, offered, duration)
			if err != nil {
				return err
			}
			return e.emit(res)
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&size, "size", 1024, "payload bytes per message (at least 8)")
	fl.IntVar(&count, "count", 1000, "messages of the unloaded phase")
	fl.Float64Var(&offered, "rate", 1000, "offered rate of the loaded phase, msgs/s (0: skip it)")
	fl.DurationVar(&duration, "duration", 10*time.Second, "length of the loaded phase")
	return cmd
}

// measureLatency runs both phases on queue q.
func measureLatency(ctx context.Context, e *env, q string, size, count int, offered float64, duration time.Duration) (*LatencyResult, error) {
	pc, err := e.dial(ctx)
	if err != nil {
		return nil, err
	}
	defer pc.Close()
	var (
		mu      sync.Mutex
		samples []time.Duration
		arrived = make(chan struct{}, 1)
		got     atomic.Int64
	)
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := consume(cctx, e, consumeSpec{
			queue: q, consumers: 1, prefetch: 1024, ackBatch: 256, ready: ready,
			onDelivery: func(d *fila.Delivery, at time.Duration) {
				if t, ok := stamped(d.Payload()); ok {
					mu.Lock()
					samples = append(samples, at-t)
					mu.Unlock()
				}
				select {
				case arrived <- struct{}{}:
				default:
				}
			},
		}, &got)
		done <- err
	}()
	select {
	case <-ready:
	case err := <-done:
		return nil, err
	}
	consumerFailed := func() error {
		select {
		case err := <-done:
			if err == nil {
				err = fmt.Errorf("bench: latency: consumer stopped")
			}
			return err
		default:
			return nil
		}
	}
	p := pc.Producer()
	res := &LatencyResult{Workload: "latency", Queue: q, Size: size, Rate: offered}

	// Unloaded: one message in flight end to end.
	payload := make([]byte, size)
	fill(payload)
	stop := e.track("unloaded", int64(count), got.Load)
	for i := 0; i < count; i++ {
		binary.LittleEndian.PutUint64(payload, uint64(now()))
		if _, err := p.Send(ctx, fila.NewMessage(q, payload)); err != nil {
			stop()
			return nil, during("bench: latency", err)
		}
		select {
		case <-arrived:
		case err := <-done:
			stop()
			if err == nil {
				err = fmt.Errorf("bench: latency: consumer stopped")
			}
			return nil, err
		case <-time.After(time.Minute):
			stop()
			return nil, fmt.Errorf("bench: latency: message %d not delivered in a minute", i)
		}
	}
	stop()
	mu.Lock()
	res.Unloaded = summarize(samples)
	samples = nil
	mu.Unlock()
	if offered == 0 {
		return res, nil
	}

	// Loaded: open loop at the offered rate. Sends run concurrently (the
	// client coalesces them); at most 4,096 are in flight (fewer of large
	// messages: each has its own payload, stamped with its time), beyond
	// which the producer falls behind its schedule and the lag is
	// measured.
	base := got.Load()
	total := int(offered * duration.Seconds())
	interval := time.Duration(float64(time.Second) / offered)
	sem := make(chan struct{}, min(4096, max(1, maxPayloadMemory/size)))
	var (
		wg      sync.WaitGroup
		failure atomic.Pointer[error] // the first Send that failed
	)
	start := now()
	stop = e.track("loaded", int64(total), func() int64 { return got.Load() - base })
	for i := 0; i < total && failure.Load() == nil; i++ {
		due := start + time.Duration(i)*interval
		if d := due - now(); d > 0 {
			time.Sleep(d)
		}
		if err := consumerFailed(); err != nil {
			stop()
			return nil, err
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			b := make([]byte, size)
			fill(b)
			binary.LittleEndian.PutUint64(b, uint64(due))
			if _, err := p.Send(ctx, fila.NewMessage(q, b)); err != nil {
				failure.CompareAndSwap(nil, &err)
			}
		}()
	}
	wg.Wait()
	if err := failure.Load(); err != nil {
		stop()
		return nil, during("bench: latency", *err)
	}
	want := base + int64(total)
	deadline := time.Now().Add(time.Minute)
	for got.Load() < want {
		if err := consumerFailed(); err != nil {
			stop()
			return nil, err
		}
		if time.Now().After(deadline) {
			stop()
			return nil, fmt.Errorf("bench: latency: %d of %d messages delivered after a minute", got.Load()-base, total)
		}
		time.Sleep(5 * time.Millisecond)
	}
	elapsed := now() - start
	stop()
	mu.Lock()
	res.Loaded = summarize(samples)
	mu.Unlock()
	res.Achieved = float64(total) / elapsed.Seconds()
	return res, nil
}
