package scenario

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
		Name: "cluster/move_queue", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			var st steps
			st.want("move queue", c.Admin().MoveQueue(ctx, "cl.orders", 2, 3, 4), nil)
			cs, err := c.Admin().ClusterStatus(ctx)
			st.want("cluster status", err, nil)
			if err == nil {
				moving := len(cs.Groups) == 2 && slices.Equal(cs.Groups[1].Target, []uint64{2, 3, 4}) &&
					len(cs.Groups[1].Replicas) == 4 && cs.Groups[1].Replicas[3].Learner && !cs.Groups[1].Replicas[0].Learner
				st.check("cluster status", moving && len(cs.Groups[0].Target) == 0, "got %+v", cs)
			}
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "cluster/drain_node", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			var st steps
			queues, err := c.Admin().DrainNode(ctx, 3)
			st.want("drain node", err, nil)
			st.check("drain node", err != nil || queues == 2, "planned %d queues; want 2", queues)
			cs, err := c.Admin().ClusterStatus(ctx)
			st.want("cluster status", err, nil)
			if err == nil {
				var states []string
				for _, n := range cs.Nodes {
					states = append(states, n.State)
				}
				moving := len(cs.Groups) == 3 && len(cs.Groups[0].Target) == 0 &&
					slices.Equal(cs.Groups[1].Target, []uint64{1, 2, 4}) && slices.Equal(cs.Groups[2].Target, []uint64{1, 2, 4})
				st.check("cluster status", moving && slices.Equal(states, []string{fila.NodeActive, fila.NodeActive, fila.NodeDraining, fila.NodeActive}), "got %+v", cs)
			}
			st.want("undrain node", c.Admin().UndrainNode(ctx, 3), nil)
			st.want("close", c.Close(), nil)
			return st.err
		},
	},
	{
		Name: "cluster/membership", Manual: true,
		Run: func(ctx context.Context, s *conformance.Session) error {
			c, err := connect(ctx, s)
			if err != nil {
				return err
			}
			var st steps
			a := c.Admin()
			st.want("add node", a.AddNode(ctx, 4, "10.0.0.4:5556"), nil)
			plan, err := a.Rebalance(ctx, true)
			st.want("rebalance dry run", err, nil)
			st.check("rebalance dry run", err != nil || len(plan.Moves) == 1 && plan.Moves[0] == fila.RebalanceMove{Queue: "orders", From: 1, To: 4} &&
				len(plan.Leads) == 1 && plan.Leads[0] == fila.RebalanceLead{Queue: "orders", Node: 4}, "got %+v", plan)
			_, err = a.Rebalance(ctx, false)
			st.want("rebalance", err, nil)
			cs, err := a.ClusterStatus(ctx)
			st.want("cluster status", err, nil)
			if err == nil {
				pending := len(cs.Pending) == 1 && cs.Pending[0] == fila.RebalanceMove{Queue: "billing", From: 2, To: 4}
				st.check("cluster status", pending && len(cs.Groups) == 2 && cs.Groups[1].PreferredLeader == 4, "got %+v", cs)
			}
			st.want("remove node", a.RemoveNode(ctx, 3), fila.ErrInvalidArgument)
			st.want("remove drained node", a.RemoveNode(ctx, 5), nil)
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
