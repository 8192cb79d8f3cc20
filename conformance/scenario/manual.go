package scenario

import (
	"context"
	"errors"
	"fmt"

	"github.com/fila-mq/fila/conformance"
	fila "github.com/fila-mq/fila/sdk/go"
)

// manual are the scenarios of the transcripts written by hand, for what a
// single live broker does not do (misbehave, redirect, run out of a
// resource). They drive the client in client mode; Record skips them.
var manual = []conformance.Scenario{
	{
		Name: "errors/unavailable_goaway", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			_, err = c.Producer().Enqueue(ctx, "er.shutdown", []byte("x"))
			c.Close()
			return want("send", err, fila.ErrUnavailable)
		},
	},
	{
		Name: "errors/internal", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			return oneCall(ctx, s, fila.ErrInternal, func(c *fila.Client) error {
				return c.Admin().CreateQueue(ctx, fila.NewQueueSpec("er.internal"))
			})
		},
	},
	{
		Name: "errors/not_supported", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			return oneCall(ctx, s, fila.ErrNotSupported, func(c *fila.Client) error {
				_, err := c.Admin().ListQueues(ctx)
				return err
			})
		},
	},
	{
		Name: "errors/resource_exhausted", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			return oneCall(ctx, s, fila.ErrResourceExhausted, func(c *fila.Client) error {
				_, err := c.Consumer().Subscribe(ctx, "er.busy", fila.Prefetch(1))
				return err
			})
		},
	},
	{
		Name: "errors/forbidden", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s, fila.WithAPIKey("fila_producer_orders"))
			if err != nil {
				return err
			}
			var st steps
			rs, err := c.Producer().SendBatch(ctx, []*fila.Message{fila.NewMessage("er.billing", []byte("invoice"))})
			st.want("send", err, nil)
			if len(rs) == 1 {
				st.want("send result", rs[0].Err, fila.ErrForbidden)
			}
			st.want("stats", second(c.Admin().QueueStats(ctx, "er.billing")), fila.ErrForbidden)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "robustness/server_ping", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			return oneCall(ctx, s, nil, func(c *fila.Client) error {
				_, err := c.Ping(ctx)
				return err
			})
		},
	},
	{
		Name: "robustness/unknown_push", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			return oneCall(ctx, s, nil, func(c *fila.Client) error {
				_, err := c.Ping(ctx)
				return err
			})
		},
	},
	{
		Name: "robustness/truncated_server_frame", Manual: true,
		Run: failedPing(fila.ErrMalformedFrame),
	},
	{
		Name: "robustness/oversized_server_frame", Manual: true,
		Run: failedPing(fila.ErrFrameTooLarge),
	},
	{
		Name: "robustness/delivery_beyond_credit", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			defer c.Close()
			sub, err := c.Consumer().Subscribe(ctx, "rb.credit", fila.Prefetch(1))
			if err != nil {
				return err
			}
			if err := ended(ctx, sub); err == nil {
				return errors.New("the subscription ended without an error")
			}
			return nil
		},
	},
	{
		Name: "robustness/server_version_mismatch", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err == nil {
				c.Close()
				return errors.New("connect succeeded with protocol version 9")
			}
			return nil
		},
	},
}

// oneCall connects, makes one call that must fail with target (or
// succeed, for nil), and closes.
func oneCall(ctx context.Context, s *conformance.Session, target error, call func(*fila.Client) error) error {
	c, err := connect(ctx, s)
	if err != nil {
		return err
	}
	var st steps
	st.want("call", call(c), target)
	st.want("close", c.Close(), nil)
	return st.err
}

// failedPing pings a broker that answers with a frame the client must
// reject: the ping fails and the connection with it.
func failedPing(target error) func(context.Context, *conformance.Session) error {
	return func(ctx context.Context, s *conformance.Session) error {
		c, err := connect(ctx, s)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Ping(ctx); err == nil {
			return fmt.Errorf("ping succeeded; want it to fail with %v", target)
		}
		return nil
	}
}
