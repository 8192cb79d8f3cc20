package cmd

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

func newExplainCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "explain QUEUE MESSAGE-ID",
		Short: "Say why a message is not delivered yet",
		Long: `Ask the broker why a message is not delivered yet. The answer is one of:
delayed until T; failed and waiting for the on_failure hook; leased to a
consumer until T; waiting for the message before it with the same
ordering key; behind N messages of its own fairness key; waiting for a
token of a throttle key (next at T); next of its fairness key, which
waits in a lane behind N keys; or ready, with no subscription holding
credit. Behind messages or keys, it adds when the broker expects to
deliver it at the pace of the last 30 to 60 s. A dead-lettered message is in QUEUE.dlq. Needs the admin
permission on the queue, as queue inspect does.`,
		Example: `  fila explain orders 01933b5e-6f9c-7a4e-9d1f-2b8c4a0e5d71
  fila explain orders.dlq 01933b5e-6f9c-7a4e-9d1f-2b8c4a0e5d71 -o json`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: g.completeQueues(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := fila.ParseID(args[1])
			if err != nil {
				// The SDK's error names the ID again: keep only its cause.
				if cause := errors.Unwrap(err); cause != nil {
					err = cause
				}
				return usagef("message ID %q: %v", args[1], err)
			}
			return g.admin(cmd, "explain", func(ctx context.Context, a *fila.Administrator) error {
				e, err := a.Explain(ctx, args[0], id)
				if err != nil {
					return err
				}
				if g.output == "json" {
					out := map[string]any{
						"queue": e.Queue, "id": e.ID.String(), "reason": e.Reason, "fairness_key": e.FairnessKey,
						"attempts": e.Attempts, "ahead": e.Ahead, "throttle_keys": e.ThrottleKeys, "lane": e.Lane,
						"explanation": e.String(),
					}
					if !e.Until.IsZero() {
						out["until_ms"] = e.Until.UnixMilli()
					}
					if !e.ETA.IsZero() {
						out["eta_ms"] = e.ETA.UnixMilli()
					}
					return g.printJSON(out)
				}
				_, err = fmt.Fprintf(g.stdout, "%s %s: %s\n", e.Queue, e.ID, e.String())
				return err
			})
		},
	}
}
