package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
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
		lease    time.Duration
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
it takes, so on an empty queue it does not return until interrupted.

A lost connection is not an empty queue: consume reconnects and
subscribes again, and --wait only ends it while connected. If the
connection is not back within --timeout, consume fails (exit 1),
naming why the connection was lost.`,
		Example: `  fila consume orders --count 10 --wait 5s
  fila consume orders.dlq --release --count 5 -o json   # look at dead letters
  fila consume jobs --nack "bad input" --count 1        # fail one on purpose
  fila consume reports --lease-timeout 10m              # slow jobs: a longer lease`,
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
			queue := args[0]
			watch := newConnWatch(g.timeout)
			defer watch.stop()
			cctx, cancel := context.WithTimeout(ctx, g.timeout)
			c, err := g.connectTo(cctx, g.addr, true, fila.WithStatusHandler(watch.handle))
			if err != nil {
				cancel()
				return err
			}
			defer c.Close()
			sub, err := c.Consumer().Subscribe(cctx, queue, fila.Prefetch(prefetch), fila.LeaseTimeout(lease))
			cancel()
			if err != nil {
				return renameOp(err, "subscribe", cmd)
			}
			defer func() {
				// With the connection down, the broker has already ended
				// the subscription and taken its leases back; unsubscribing
				// would wait for a reconnect that may never come.
				if c.Status() != fila.StatusConnected {
					return
				}
				sctx, scancel := context.WithTimeout(context.Background(), closeBound(ctx, g.timeout))
				defer scancel()
				sub.Close(sctx)
			}()
			var held []*fila.Delivery // deliveries to release at the end
			if release {
				defer func() {
					if c.Status() != fila.StatusConnected {
						return // the broker released them with the connection
					}
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
			live, stopLive := watch.ctx(ctx) // ends when the connection is given up
			defer stopLive()
			for n := 0; count == 0 || n < count; {
				wctx, wcancel := live, context.CancelFunc(func() {})
				if wait > 0 {
					wctx, wcancel = context.WithTimeout(live, wait)
				}
				d, err := sub.Next(wctx)
				wcancel()
				switch {
				case err == nil:
				case ctx.Err() != nil:
					return nil // interrupted
				case watch.lost() != nil:
					return fmt.Errorf("consume %s: %w", queue, watch.lost())
				case errors.Is(err, context.DeadlineExceeded):
					// --wait without a delivery: the queue has nothing for
					// us, unless the connection is down.
					if watch.await(ctx, c) {
						continue // reconnected: wait again
					}
					if err := watch.lost(); err != nil {
						return fmt.Errorf("consume %s: %w", queue, err)
					}
					return nil
				default:
					return err
				}
				n++
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
				sctx, scancel := context.WithTimeout(live, g.timeout)
				verb := "ack"
				switch {
				case noAck, release:
				case nack != "":
					verb = "nack"
					err = d.Nack(sctx, nack)
				default:
					err = d.Ack(sctx)
				}
				scancel()
				if err != nil {
					if lost := watch.cause(c); lost != nil && ctx.Err() == nil {
						return fmt.Errorf("consume %s: %s %s: %w", queue, verb, d.ID(), lost)
					}
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
	f.DurationVar(&wait, "wait", 0, "stop when no delivery arrives for this long while connected (0: wait forever)")
	f.DurationVar(&lease, "lease-timeout", 0, "lease deliveries for this long instead of the queue's visibility timeout (0: the queue's; at most the broker's max_lease_extension)")
	return cmd
}

// connWatch follows the connection of consume's client through its
// status events: once the connection has been down for timeout in a row,
// lost returns why, and the contexts from ctx are cancelled.
type connWatch struct {
	timeout time.Duration
	down    context.Context // cancelled, with the reason, when the connection is given up
	give    context.CancelCauseFunc

	mu    sync.Mutex
	timer *time.Timer   // running while the connection is down
	first error         // why the connection was lost
	last  error         // why the last attempt to make it again failed
	up    chan struct{} // signalled when the connection is back
}

// newConnWatch returns a watch that gives the connection up once it has
// been down for timeout.
func newConnWatch(timeout time.Duration) *connWatch {
	down, give := context.WithCancelCause(context.Background())
	return &connWatch{timeout: timeout, down: down, give: give, up: make(chan struct{}, 1)}
}

// handle is the client's status handler.
func (w *connWatch) handle(ev fila.StatusEvent) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch ev.Status {
	case fila.StatusDisconnected:
		if w.timer == nil {
			w.first, w.last = ev.Err, nil
			w.timer = time.AfterFunc(w.timeout, w.giveUp)
		} else {
			w.last = ev.Err
		}
	case fila.StatusConnected:
		if w.timer != nil {
			w.timer.Stop()
			w.timer = nil
		}
		select {
		case w.up <- struct{}{}:
		default:
		}
	case fila.StatusClosed:
		if ev.Err != nil {
			w.give(ev.Err)
		}
	}
}

// giveUp ends the wait for the connection, timeout after it was lost.
func (w *connWatch) giveUp() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer == nil {
		return // back meanwhile
	}
	err := fmt.Errorf("%w; not back within %v", w.outage(), w.timeout)
	if w.last != nil {
		err = fmt.Errorf("%w (last attempt: %v)", err, withoutFilaPrefix(w.last))
	}
	w.give(err)
}

// outage returns why the connection was lost, wrapping
// fila.ErrConnectionLost. w.mu is held.
func (w *connWatch) outage() error {
	err := withoutFilaPrefix(w.first)
	if err == nil {
		return fila.ErrConnectionLost
	}
	if !errors.Is(err, fila.ErrConnectionLost) {
		err = fmt.Errorf("%w: %w", fila.ErrConnectionLost, err)
	}
	return err
}

// lost returns why the connection was given up, or nil.
func (w *connWatch) lost() error { return context.Cause(w.down) }

// cause returns why c's requests fail, if the connection is the reason:
// why it was given up, or why it is down now; nil while c is connected.
func (w *connWatch) cause(c *fila.Client) error {
	if err := w.lost(); err != nil {
		return err
	}
	if c.Status() == fila.StatusConnected {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.outage()
}

// ctx returns a context that ends with parent or when the connection is
// given up, and the function that releases it.
func (w *connWatch) ctx(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	stop := context.AfterFunc(w.down, cancel)
	return ctx, func() { stop(); cancel() }
}

// await waits, while c is not connected, for the connection to come back
// (true) or to be given up, or for ctx (false). It returns false at once
// when c is connected.
func (w *connWatch) await(ctx context.Context, c *fila.Client) bool {
	select {
	case <-w.up: // a reconnection already reported
	default:
	}
	if c.Status() == fila.StatusConnected {
		return false
	}
	select {
	case <-w.up:
		return true
	case <-w.down.Done():
	case <-ctx.Done():
	}
	return false
}

// stop ends the watch: its timer stops, and lost stays as it is.
func (w *connWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.timer != nil {
		w.timer.Stop()
		w.timer = nil
	}
}

// withoutFilaPrefix drops the "fila: " an SDK error starts with, for an
// error nested in a message that has its own; errors.Is and errors.As
// still see err.
func withoutFilaPrefix(err error) error {
	if err == nil {
		return nil
	}
	if rest, ok := strings.CutPrefix(err.Error(), "fila: "); ok {
		return &unprefixedError{msg: rest, err: err}
	}
	return err
}

// unprefixedError is err with the message msg.
type unprefixedError struct {
	msg string
	err error
}

func (e *unprefixedError) Error() string { return e.msg }
func (e *unprefixedError) Unwrap() error { return e.err }

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
