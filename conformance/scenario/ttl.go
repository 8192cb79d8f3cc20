package scenario

import (
	"context"
	"time"

	"github.com/fila-mq/fila/conformance"
	fila "github.com/fila-mq/fila/sdk/go"
)

func init() { recorded = append(recorded, ttlScenarios()...) }

// ttlScenarios are the scenarios of message TTLs and priorities.
func ttlScenarios() []conformance.Scenario {
	return []conformance.Scenario{
		{
			Name: "hotpath/ttl_priority",
			Doc: `A queue with a one-hour message_ttl_ms gets three messages in one
Enqueue: one with its own 100ms ttl_ms at priority 9 (priority=10 on the
wire), one at priority 0 (1) and one at priority 7 (8). The first
expires undelivered and a subscriber of the DLQ receives it with
fila-error "expired"; a subscriber of the queue then receives the others
highest priority first.`,
			Run: func(ctx context.Context, s *conformance.Session) error {
				c, err := connect(ctx, s)
				if err != nil {
					return err
				}
				q := "hp.ttl"
				var st steps
				st.want("create", c.Admin().CreateQueue(ctx, fila.NewQueueSpec(q).MessageTTL(time.Hour)), nil)
				st.want("send", second(c.Producer().SendBatch(ctx, []*fila.Message{
					fila.NewMessage(q, []byte("expires")).TTL(100 * time.Millisecond).Priority(9),
					fila.NewMessage(q, []byte("low")).Priority(0),
					fila.NewMessage(q, []byte("high")).Priority(7),
				})), nil)
				dlq, err := c.Consumer().Subscribe(ctx, q+".dlq", fila.Prefetch(1))
				if err != nil {
					return err
				}
				d, err := next(ctx, dlq)
				if err != nil {
					return err
				}
				st.check("expired", string(d.Payload()) == "expires" && d.Header("fila-error") == "expired", "%q, headers %v", d.Payload(), d.Headers())
				st.want("ack expired", d.Ack(ctx), nil)
				sub, err := c.Consumer().Subscribe(ctx, q, fila.Prefetch(1))
				if err != nil {
					return err
				}
				for _, want := range []string{"high", "low"} {
					d, err := next(ctx, sub)
					if err != nil {
						return err
					}
					st.check("priority order", string(d.Payload()) == want, "%q, want %q", d.Payload(), want)
					st.want("ack "+want, d.Ack(ctx), nil)
				}
				st.want("close", c.Close(), nil)
				return st.err
			},
		},
	}
}
