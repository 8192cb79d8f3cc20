package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

func newConsumeCmd(g *globals) *cobra.Command {
	var (
		count    int
		prefetch uint32
		noAck    bool
		release  bool
		nack     string
		wait     time.Duration
	)
	cmd := &cobra.Command{
		Use:   "consume QUEUE",
		Short: "Print deliveries and settle each one",
		Long: `Subscribe to QUEUE and print each delivery: its ID, attempt, fairness key
and payload (with --output json, one JSON object per line, with headers
and times). Each delivery is acked once printed, or nacked with --nack.
With --release they are given back when the command ends, unsettled:
the messages are ready again at once, with the same attempt number and
headers, so nothing changes (a peek). With --no-ack they stay leased
until the queue's visibility timeout, and the expiry counts as a failed
attempt: the message is retried or dead-lettered, and in a dead-letter
queue its fila-attempts header goes up and its fila-error header becomes
"lease expired".

Stops after --count deliveries, after --wait without one, or on
interrupt. Without --wait it waits for the next delivery however long
it takes, so on an empty queue it does not return until interrupted.`,
		Example: `  fila consume orders --count 10 --wait 5s
  fila consume orders.dlq --release --count 5 -o json   # look at dead letters
  fila consume jobs --nack "bad input" --count 1        # fail one on purpose`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeQueues(false),
		RunE: func(cmd *cobra.Command, args []string) (err error) {
			settle := 0
			for _, on := range []bool{noAck, release, nack != ""} {
				if on {
					settle++
				}
			}
			switch {
			case settle > 1:
				return usagef("--no-ack, --release and --nack exclude each other")
			case count < 0:
				return usagef("--count %d: want 0 or more", count)
			case wait < 0:
				return usagef("--wait %v: want 0 (no limit) or more", wait)
			}
			if (noAck || release) && prefetch == 0 && count > 0 {
				// Unsettled deliveries keep their credit: without a limit
				// the broker would lease the whole queue to this consumer.
				prefetch = uint32(min(count, 1<<20))
			}
			ctx := cmd.Context()
			cctx, cancel := context.WithTimeout(ctx, g.timeout)
			c, err := g.connect(cctx, true)
			if err != nil {
				cancel()
				return err
			}
			defer c.Close()
			sub, err := c.Consumer().Subscribe(cctx, args[0], fila.Prefetch(prefetch))
			cancel()
			if err != nil {
				return renameOp(err, "subscribe", cmd)
			}
			defer func() {
				// Bounded: with the broker gone, unsubscribing would wait
				// for a reconnect that may never come.
				sctx, scancel := context.WithTimeout(context.Background(), closeBound(ctx, g.timeout))
				defer scancel()
				sub.Close(sctx)
			}()
			var held []*fila.Delivery // deliveries to release at the end
			if release {
				defer func() {
					rctx, rcancel := context.WithTimeout(context.Background(), closeBound(ctx, g.timeout))
					defer rcancel()
					for _, d := range held {
						if rerr := d.Release(rctx); rerr != nil && err == nil {
							err = rerr
						}
					}
				}()
			}
			enc := json.NewEncoder(g.stdout)
			for n := 0; count == 0 || n < count; n++ {
				wctx, wcancel := ctx, context.CancelFunc(func() {})
				if wait > 0 {
					wctx, wcancel = context.WithTimeout(ctx, wait)
				}
				d, err := sub.Next(wctx)
				wcancel()
				switch {
				case err == nil:
				case ctx.Err() != nil:
					return nil // interrupted
				case errors.Is(err, context.DeadlineExceeded):
					return nil // --wait without a delivery
				default:
					return err
				}
				if release {
					held = append(held, d)
				}
				if g.output == "json" {
					err = enc.Encode(deliveryJSON(d))
				} else {
					_, err = fmt.Fprintf(g.stdout, "%s  attempt=%d  key=%s  %s\n", d.ID(), d.Attempt(), d.FairnessKey(), d.Payload())
				}
				if err != nil {
					return err
				}
				sctx, scancel := context.WithTimeout(ctx, g.timeout)
				switch {
				case noAck, release:
				case nack != "":
					err = d.Nack(sctx, nack)
				default:
					err = d.Ack(sctx)
				}
				scancel()
				if err != nil {
					return err
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&count, "count", 0, "stop after this many deliveries (0: until interrupted)")
	f.Uint32Var(&prefetch, "prefetch", 0, "most deliveries leased at a time (0: as many as the broker allows, its max_unsettled; with --no-ack or --release, 0 means --count)")
	f.BoolVar(&noAck, "no-ack", false, "do not settle deliveries: leave their leases to expire, which counts as a failed attempt")
	f.BoolVar(&release, "release", false, "give deliveries back unsettled when done, attempt and headers unchanged: a peek")
	f.StringVar(&nack, "nack", "", "nack each delivery with this reason instead of acking it")
	f.DurationVar(&wait, "wait", 0, "stop when no delivery arrives for this long (0: wait forever)")
	return cmd
}

type deliveryOut struct {
	ID            string            `json:"id"`
	Queue         string            `json:"queue"`
	Attempt       uint32            `json:"attempt"`
	FairnessKey   string            `json:"fairness_key"`
	Weight        uint32            `json:"weight"`
	ThrottleKeys  []string          `json:"throttle_keys,omitempty"`
	OrderingKey   string            `json:"ordering_key,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	Payload       string            `json:"payload"`
	EnqueuedAt    string            `json:"enqueued_at"`
	LeaseDeadline string            `json:"lease_deadline"`
}

func deliveryJSON(d *fila.Delivery) deliveryOut {
	out := deliveryOut{
		ID: d.ID().String(), Queue: d.Queue(), Attempt: d.Attempt(), FairnessKey: d.FairnessKey(), Weight: d.Weight(),
		ThrottleKeys: d.ThrottleKeys(), OrderingKey: d.OrderingKey(), Payload: string(d.Payload()),
		EnqueuedAt:    d.EnqueuedAt().UTC().Format(time.RFC3339Nano),
		LeaseDeadline: d.LeaseDeadline().UTC().Format(time.RFC3339Nano),
	}
	if h := d.Headers(); len(h) > 0 {
		out.Headers = h
	}
	return out
}

// interruptedCloseBound bounds the goodbyes of a command that was
// interrupted: the user asked to stop, so it does not wait out --timeout
// for a broker that is gone.
const interruptedCloseBound = 2 * time.Second

// closeBound returns how long a command may take to close what it opened:
// timeout, or at most interruptedCloseBound once ctx (the command's,
// cancelled by an interrupt) is done.
func closeBound(ctx context.Context, timeout time.Duration) time.Duration {
	if ctx.Err() != nil {
		return min(timeout, interruptedCloseBound)
	}
	return timeout
}
