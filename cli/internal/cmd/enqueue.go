package cmd

import (
	"bufio"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

// stdinBatch is how many stdin lines go in one SendBatch.
const stdinBatch = 1000

func newEnqueueCmd(g *globals) *cobra.Command {
	var (
		headers, throttleKeys                    []string
		fairnessKey, idempotencyKey, orderingKey string
		weight                                   uint32
		delay, ttl                               time.Duration
		priority                                 int
	)
	cmd := &cobra.Command{
		Use:   "enqueue QUEUE PAYLOAD",
		Short: "Enqueue a message (or one per stdin line) and print its ID",
		Long: `Enqueue PAYLOAD to QUEUE and print the message ID once it is durable.
With - as PAYLOAD, every line of stdin is a message, sent in batches of
1000; the IDs are printed in order, and the exit code is 1 if any line
was rejected, 3 if the queue does not exist.`,
		Example: `  fila enqueue orders '{"id": 42}' --fairness-key acme --header tenant=acme
  fila enqueue emails hello --throttle-key provider:sendgrid --delay 30s
  fila enqueue alerts page-oncall --priority 9 --ttl 5m
  seq 1 100 | fila enqueue jobs - --fairness-key batch-7`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: g.completeQueues(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			queue, payload := args[0], args[1]
			var hs [][2]string
			for _, h := range headers {
				k, v, ok := strings.Cut(h, "=")
				if !ok || k == "" {
					return usagef("--header %q: want key=value", h)
				}
				hs = append(hs, [2]string{k, v})
			}
			if delay < 0 {
				return usagef("--delay %v: want 0 or more", delay)
			}
			if ttl < 0 {
				return usagef("--ttl %v: want 0 or more", ttl)
			}
			if priority < -1 || priority > 9 {
				return usagef("--priority %d: want 0 (lowest) to 9 (highest)", priority)
			}
			build := func(body []byte) *fila.Message {
				m := fila.NewMessage(queue, body).FairnessKey(fairnessKey).Weight(weight).Delay(delay).
					IdempotencyKey(idempotencyKey).OrderingKey(orderingKey).TTL(ttl)
				if priority >= 0 {
					m.Priority(priority)
				}
				for _, h := range hs {
					m.Header(h[0], h[1])
				}
				for _, k := range throttleKeys {
					m.ThrottleKey(k)
				}
				return m
			}
			if payload == "-" {
				if idempotencyKey != "" {
					return usagef("--idempotency-key with - would make every line after the first a duplicate")
				}
				return g.enqueueLines(cmd.Context(), build)
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			c, err := g.connect(ctx, false)
			if err != nil {
				return err
			}
			defer c.Close()
			res, err := c.Producer().SendBatch(ctx, []*fila.Message{build([]byte(payload))})
			if err != nil {
				return err
			}
			if res[0].Err != nil {
				return res[0].Err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"id": res[0].ID.String(), "duplicate": res[0].Duplicate})
			}
			if res[0].Duplicate {
				fmt.Fprintf(g.stdout, "%s (duplicate)\n", res[0].ID)
			} else {
				fmt.Fprintln(g.stdout, res[0].ID)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringArrayVar(&headers, "header", nil, "application header key=value (repeatable)")
	f.StringVar(&fairnessKey, "fairness-key", "", `fairness key (default "default")`)
	f.Uint32Var(&weight, "weight", 0, "DRR weight of the fairness key (default 1)")
	f.StringArrayVar(&throttleKeys, "throttle-key", nil, "token bucket to take a token from before delivery (repeatable)")
	f.DurationVar(&delay, "delay", 0, "deliver no earlier than this after enqueue, such as 30s")
	f.DurationVar(&ttl, "ttl", 0, "time to live from enqueue, such as 30s: dead-lettered (reason expired) or dropped if not delivered by then (default: the queue's message TTL)")
	f.IntVar(&priority, "priority", -1, "priority within the fairness key, 0 (lowest) to 9 (highest) (default 4)")
	f.StringVar(&idempotencyKey, "idempotency-key", "", "deduplicate within the queue's dedup window")
	f.StringVar(&orderingKey, "ordering-key", "", "deliver messages sharing this key one at a time, in order")
	return cmd
}

// enqueueLines sends every stdin line as a message.
func (g *globals) enqueueLines(ctx context.Context, build func([]byte) *fila.Message) error {
	c, err := g.connect(ctx, false)
	if err != nil {
		return err
	}
	defer c.Close()
	type line struct {
		ID        string `json:"id,omitempty"`
		Duplicate bool   `json:"duplicate,omitempty"`
		Error     string `json:"error,omitempty"`
	}
	var out []line
	var rejected rejectedError
	sent := 0 // lines sent so far: the next batch starts at line sent+1
	send := func(batch []*fila.Message) error {
		if len(batch) == 0 {
			return nil
		}
		rctx, cancel := context.WithTimeout(ctx, g.timeout)
		defer cancel()
		res, err := c.Producer().SendBatch(rctx, batch)
		if err != nil {
			return err
		}
		first := sent + 1
		sent += len(batch)
		for j, r := range res {
			l := line{ID: r.ID.String(), Duplicate: r.Duplicate}
			if r.Err != nil {
				l = line{Error: r.Err.Error()}
				rejected.add(r.Err)
			}
			if g.output == "json" {
				out = append(out, l)
				continue
			}
			switch {
			case l.Error != "":
				fmt.Fprintf(g.stderr, "fila: line %d: %s\n", first+j, strings.TrimPrefix(l.Error, "fila: "))
			case l.Duplicate:
				fmt.Fprintf(g.stdout, "%s (duplicate)\n", l.ID)
			default:
				fmt.Fprintln(g.stdout, l.ID)
			}
		}
		return nil
	}
	sc := bufio.NewScanner(g.stdin)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var batch []*fila.Message
	for sc.Scan() {
		batch = append(batch, build([]byte(sc.Text())))
		if len(batch) == stdinBatch {
			if err := send(batch); err != nil {
				return err
			}
			batch = nil
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read stdin: %w", err)
	}
	if err := send(batch); err != nil {
		return err
	}
	if g.output == "json" {
		if out == nil {
			out = []line{}
		}
		if err := g.printJSON(out); err != nil {
			return err
		}
	}
	if rejected.n > 0 {
		return &rejected
	}
	return nil
}

// rejectedError counts the lines of enqueue - that the broker rejected.
// When every rejection has the same code, as when the queue does not
// exist, it unwraps to the first, so that the exit code and the JSON
// error code are that code's; rejections for different reasons exit 1.
type rejectedError struct {
	n     int
	first error
	mixed bool
}

func (e *rejectedError) add(err error) {
	e.n++
	if e.first == nil {
		e.first = err
	} else if errorCode(err) != errorCode(e.first) {
		e.mixed = true
	}
}

func (e *rejectedError) Error() string {
	return plural(e.n, "message was", "messages were") + " rejected"
}

func (e *rejectedError) Unwrap() error {
	if e.mixed {
		return nil
	}
	return e.first
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
