package bench

import (
	"context"
	"fmt"
	"io"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

// ThrottleResult is the outcome of "fila bench throttle": deliveries of
// messages that all need a token from one bucket, over time, against the
// bucket's allowance burst + rate × t.
type ThrottleResult struct {
	Workload    string  `json:"workload"`
	Queue       string  `json:"queue"`
	ThrottleKey string  `json:"throttle_key"`
	Rate        float64 `json:"rate"`
	Burst       float64 `json:"burst"`
	// Seconds is the measured span, from the subscription.
	Seconds   float64 `json:"seconds"`
	Enqueued  int64   `json:"enqueued"`
	Delivered int64   `json:"delivered"`
	// Allowed is burst + rate × Seconds: the most the bucket admits.
	Allowed float64 `json:"allowed"`
	// SteadyRate is the delivered rate after the first interval (which
	// holds the burst), msgs/s.
	SteadyRate float64            `json:"steady_rate"`
	Intervals  []ThrottleInterval `json:"intervals"`
}

// ThrottleInterval is one slice of a ThrottleResult's timeline.
type ThrottleInterval struct {
	// End is the end of the interval, seconds since the subscription.
	End       float64 `json:"end_s"`
	Delivered int64   `json:"delivered"`
	// Cumulative counts deliveries up to End; Allowed is burst + rate ×
	// End.
	Cumulative int64   `json:"cumulative"`
	Allowed    float64 `json:"allowed"`
}

func (r *ThrottleResult) writeTable(w io.Writer) error {
	rows := make([][]string, len(r.Intervals))
	for i, iv := range r.Intervals {
		start := 0.0
		if i > 0 {
			start = r.Intervals[i-1].End
		}
		rows[i] = []string{fmt.Sprintf("%.1f–%.1f", start, iv.End), group(iv.Delivered),
			fmt.Sprintf("%.1f", float64(iv.Delivered)/(iv.End-start)), group(iv.Cumulative), rate(iv.Allowed)}
	}
	if err := table(w, []string{"SECONDS", "DELIVERED", "PER SECOND", "CUMULATIVE", "BURST+RATE×T"}, rows); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "\nthrottle.%s = %g,%g: %s delivered in %.1fs (allowed %s); steady rate %.1f msgs/s against %g configured\n",
		r.ThrottleKey, r.Rate, r.Burst, group(r.Delivered), r.Seconds, rate(r.Allowed), r.SteadyRate, r.Rate)
	return err
}

// timeline buckets delivery times (since the start) into intervals of
// length step up to span, against the allowance of a bucket of rate and
// burst. It also returns the delivered rate after the first interval.
func timeline(times []time.Duration, step, span time.Duration, rate, burst float64) ([]ThrottleInterval, float64) {
	n := int(math.Ceil(float64(span) / float64(step)))
	ivs := make([]ThrottleInterval, n)
	for i := range ivs {
		end := min(time.Duration(i+1)*step, span)
		ivs[i].End = end.Seconds()
		ivs[i].Allowed = burst + rate*end.Seconds()
	}
	for _, t := range times {
		if t < 0 || t >= span {
			continue
		}
		ivs[int(t/step)].Delivered++
	}
	var cum int64
	for i := range ivs {
		cum += ivs[i].Delivered
		ivs[i].Cumulative = cum
	}
	var steady float64
	if n > 1 {
		first := ivs[0]
		steady = float64(cum-first.Delivered) / (span.Seconds() - first.End)
	}
	return ivs, steady
}

// maxThrottleRows bounds the rows of the throttle workload's timeline.
const maxThrottleRows = 100_000

func newThrottleCmd(e *env) *cobra.Command {
	var (
		tokens   float64
		burst    float64
		duration time.Duration
		step     time.Duration
		size     int
	)
	cmd := &cobra.Command{
		Use:   "throttle",
		Short: "A token bucket's configured rate and burst against the delivered rate over time",
		Long: `Sets throttle.<key> = "--rate,--burst" for a new throttle key, enqueues
more messages needing it than the bucket can admit in --duration, then
consumes them for --duration and reports the deliveries in each
--interval against burst + rate × t. The config key is deleted
afterwards unless --keep is given.`,
		Example: `  fila bench throttle --rate 1000 --burst 100 --duration 10s`,
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if !positive(tokens) || !(burst >= 1) || math.IsInf(burst, 1) || duration <= 0 || step <= 0 {
				return usagef("bench: want --rate > 0, --burst ≥ 1, --duration > 0 and --interval > 0, all finite")
			}
			if allowed := burst + tokens*duration.Seconds(); allowed > maxTracked/2 {
				return usagef("bench: --burst + --rate × --duration is %.0f messages: want at most %d (the run enqueues a tenth more)", allowed, maxTracked/2)
			}
			if rows := math.Ceil(float64(duration) / float64(step)); rows > maxThrottleRows {
				return usagef("bench: --duration %v / --interval %v is %.0f rows: want at most %d", duration, step, rows, maxThrottleRows)
			}
			if err := checkSize(size, 0); err != nil {
				return err
			}
			ctx := cmd.Context()
			c, err := e.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			q, drop, err := e.openQueue(ctx, c, "throttle", nil)
			if err != nil {
				return err
			}
			defer drop()
			res, err := throttle(ctx, e, c, q, tokens, burst, duration, step, size)
			if err != nil {
				return err
			}
			return e.emit(res)
		},
	}
	fl := cmd.Flags()
	fl.Float64Var(&tokens, "rate", 1000, "the bucket's rate, tokens per second")
	fl.Float64Var(&burst, "burst", 100, "the bucket's size, tokens")
	fl.DurationVar(&duration, "duration", 10*time.Second, "how long to consume")
	fl.DurationVar(&step, "interval", time.Second, "width of each row of the timeline")
	fl.IntVar(&size, "size", 64, "payload bytes per message")
	return cmd
}

func throttle(ctx context.Context, e *env, c *fila.Client, q string, tokens, burst float64, duration, step time.Duration, size int) (*ThrottleResult, error) {
	key := q
	cfg := "throttle." + key
	if err := c.Admin().SetConfig(ctx, cfg, strconv.FormatFloat(tokens, 'g', -1, 64)+","+strconv.FormatFloat(burst, 'g', -1, 64)); err != nil {
		return nil, err
	}
	if !e.keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			c.Admin().DeleteConfig(dctx, cfg)
		}()
	}
	// A tenth more than the bucket can admit in the run, and a hundred.
	allowed := burst + tokens*duration.Seconds()
	count := int64(math.Ceil(allowed+allowed/10)) + 100
	var sent atomic.Int64
	stop := e.track("enqueue", count, sent.Load)
	_, err := produce(ctx, e, produceSpec{
		queue: q, producers: 1, outstanding: 512, batch: 256, size: size, count: count, throttleKeys: []string{key},
	}, &sent)
	stop()
	if err != nil {
		return nil, err
	}
	var (
		mu     sync.Mutex
		times  = make([]time.Duration, 0, count)
		origin time.Duration
	)
	stop = e.trackTime("consume", duration)
	_, err = consume(ctx, e, consumeSpec{
		queue: q, consumers: 1, prefetch: 1024, ackBatch: 64, duration: duration,
		onStart: func(at time.Duration) { origin = at },
		onDelivery: func(_ *fila.Delivery, at time.Duration) {
			mu.Lock()
			times = append(times, at)
			mu.Unlock()
		},
	}, nil)
	stop()
	if err != nil {
		return nil, err
	}
	for i := range times {
		times[i] -= origin
	}
	ivs, steady := timeline(times, step, duration, tokens, burst)
	var delivered int64
	if len(ivs) > 0 {
		delivered = ivs[len(ivs)-1].Cumulative
	}
	return &ThrottleResult{
		Workload: "throttle", Queue: q, ThrottleKey: key, Rate: tokens, Burst: burst,
		Seconds: duration.Seconds(), Enqueued: count, Delivered: delivered,
		Allowed: burst + tokens*duration.Seconds(), SteadyRate: steady, Intervals: ivs,
	}, nil
}
