package cmd

import (
	"context"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

func newQueuePurgeCmd(g *globals) *cobra.Command {
	var leased bool
	cmd := &cobra.Command{
		Use:   "purge NAME",
		Short: "Remove every ready and delayed message of a queue or dead-letter queue",
		Long: `Remove every ready and delayed message of the queue or dead-letter queue
NAME (delayed includes messages backing off after a failure). Leased
messages are left to finish; --include-leased removes them too, and their
consumers' acks then fail. The queue itself, its settings and its
idempotency keys stay. The broker deletes the messages by key range, in a
few storage records whatever the queue holds.`,
		Example: `  fila queue purge orders
  fila queue purge orders.dlq
  fila queue purge orders --include-leased`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeQueues(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "purge queue", func(ctx context.Context, a *fila.Administrator) error {
				var opts []fila.PurgeOption
				if leased {
					opts = append(opts, fila.IncludeLeased())
				}
				n, err := a.PurgeQueue(ctx, args[0], opts...)
				if err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]any{"queue": args[0], "purged": n})
				}
				fmt.Fprintf(g.stdout, "purged %d messages from %s\n", n, args[0])
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&leased, "include-leased", false, "remove leased messages too")
	return cmd
}

func newQueuePeekCmd(g *globals) *cobra.Command {
	var (
		count uint32
		key   string
		from  string
	)
	cmd := &cobra.Command{
		Use:   "peek NAME",
		Short: "List messages of a queue or dead-letter queue without leasing them",
		Long: `List up to --count messages of the queue or dead-letter queue NAME, in
enqueue order, without leasing them: each one's ID, state (ready,
delayed, deciding or leased), fairness key, failed attempts, the reason
of its last failure (in a dead-letter queue, its fila-error header), its
payload size and the start of its payload (the first 256 bytes, of which
the table shows up to 40 characters; -o json shows all, with headers).
Nothing changes: no attempt is counted and no lease taken.

--key lists only that fairness key's messages. When more follow, the
last line names the --from ID that lists the next page.`,
		Example: `  fila queue peek orders.dlq --count 20
  fila queue peek orders.dlq --key acme -o json
  fila queue peek orders --from 0190b6a4-7d1e-7c3a-9f00-2b1c4d5e6f70`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeQueues(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if count < 1 || count > 1000 {
				return usagef("--count %d: want 1 to 1000", count)
			}
			opts := []fila.PeekOption{fila.PeekCount(count), fila.PeekKey(key)}
			if from != "" {
				id, err := fila.ParseID(from)
				if err != nil {
					return usagef("--from %q: %v", from, err)
				}
				opts = append(opts, fila.PeekAfter(id))
			}
			return g.admin(cmd, "peek", func(ctx context.Context, a *fila.Administrator) error {
				page, err := a.Peek(ctx, args[0], opts...)
				if err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(peekJSON(page))
				}
				rows := make([][]string, len(page.Messages))
				for i, m := range page.Messages {
					rows[i] = []string{m.ID.String(), m.State, m.FairnessKey, strconv.FormatUint(uint64(m.Attempts), 10),
						clipText(m.Headers["fila-error"], 30), strconv.FormatUint(uint64(m.Size), 10), clipText(string(m.Preview), 40)}
				}
				if err := g.table([]string{"ID", "STATE", "FAIRNESS KEY", "ATTEMPTS", "LAST ERROR", "BYTES", "PAYLOAD"}, rows); err != nil {
					return err
				}
				if page.Next != (fila.ID{}) {
					fmt.Fprintf(g.stdout, "more: --from %s\n", page.Next)
				}
				return nil
			})
		},
	}
	cmd.Flags().Uint32Var(&count, "count", 20, "most messages to list (1 to 1000)")
	cmd.Flags().StringVar(&key, "key", "", "only this fairness key's messages")
	cmd.Flags().StringVar(&from, "from", "", "list the messages after this ID (the last one seen)")
	return cmd
}

func peekJSON(page *fila.PeekPage) any {
	type msg struct {
		ID          string            `json:"id"`
		State       string            `json:"state"`
		FairnessKey string            `json:"fairness_key"`
		Attempts    uint32            `json:"attempts"`
		Enqueued    string            `json:"enqueued_at"`
		Due         string            `json:"due_at,omitempty"`
		Headers     map[string]string `json:"headers,omitempty"`
		Size        uint32            `json:"payload_size"`
		Preview     string            `json:"payload_preview"`
	}
	out := struct {
		Messages []msg  `json:"messages"`
		Next     string `json:"next,omitempty"`
	}{Messages: make([]msg, len(page.Messages))}
	for i, m := range page.Messages {
		out.Messages[i] = msg{ID: m.ID.String(), State: m.State, FairnessKey: m.FairnessKey, Attempts: m.Attempts,
			Enqueued: m.Enqueued.UTC().Format(time.RFC3339Nano), Headers: m.Headers, Size: m.Size, Preview: string(m.Preview)}
		if !m.Due.IsZero() {
			out.Messages[i].Due = m.Due.UTC().Format(time.RFC3339Nano)
		}
	}
	if page.Next != (fila.ID{}) {
		out.Next = page.Next.String()
	}
	return out
}

// clipText cuts s to at most n characters for a table cell, marking a
// cut with "…", and shows bytes that are not UTF-8 or not printable as
// Go escapes.
func clipText(s string, n int) string {
	if !utf8.ValidString(s) {
		s = strconv.Quote(s)
		s = s[1 : len(s)-1]
	}
	r := []rune(s)
	for i, c := range r {
		if c < ' ' {
			r[i] = '·'
		}
	}
	if len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return string(r)
}
