package cmd

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/spf13/cobra"

	"github.com/fila-mq/fila/cli/internal/dashboard"
	fila "github.com/fila-mq/fila/sdk/go"
)

func newDashboardCmd(g *globals) *cobra.Command {
	var (
		listen               string
		interval             time.Duration
		history, top, queues int
		hosts                []string
	)
	cmd := &cobra.Command{
		Use:   "dashboard",
		Short: "Serve a live web dashboard: queues, fairness, token buckets, dead letters",
		Long: `Serve a live web dashboard of the broker on --listen, as seen with this
command's API key (--api-key, --api-key-file or FILA_API_KEY), which needs
no more than the pages use:

  Queues            depths (ready, delayed, leased, dead letters) of every
                    queue the key may list, and rates from successive
                    QueueStats samples (admin on each queue)
  Queue             per fairness key: pending, weight, DRR deficit or STFQ
                    lag, entitled against delivered share, lane, dwell;
                    Jain's index and each key's share over time; the token
                    buckets (tokens, burst, rate, waiting messages) of its
                    throttle keys (admin on the queue)
  Dead letters      browse a dead-letter queue's messages with their
                    fila-attempts and fila-error headers (consume on
                    Q.dlq), and redrive a chosen count back to the queue
                    (admin on Q.dlq and Q)
  Runtime config    every runtime config key (admin on *)

A page whose request the broker refuses (FORBIDDEN) says so and shows the
rest. The protocol has no peek: browsing subscribes to the dead-letter
queue with a credit of the number asked, and releases what it delivers at
once, so those messages are leased for that moment; a release counts no
attempt. Redrive asks for confirmation.

The dashboard samples the broker every --interval (ListQueues, and
QueueStats of up to --max-queues queues plus any queue whose page is open)
and keeps --history samples of each queue in memory. It serves plain HTTP:
keep --listen on a loopback address, or put it behind a proxy that
authenticates, since anyone who reaches it acts with its key. Requests must
name an IP address, localhost or an --allow-host name as their host, and
forms refuse cross-site posts.

It prints the URL it serves, and runs until interrupted.`,
		Example: `  fila dashboard --listen 127.0.0.1:8080
  FILA_API_KEY=... fila dashboard --addr broker-1:5555 --listen 127.0.0.1:8080 --interval 5s
  fila dashboard --listen 0.0.0.0:8080 --allow-host fila-dash.internal`,
		Args: cobra.ExactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case interval < 100*time.Millisecond:
				return usagef("--interval %v: want at least 100ms", interval)
			case history < 2 || history > 100000:
				return usagef("--history %d: want 2 to 100000 samples", history)
			case top < 1 || top > fila.MaxTopKeys:
				return usagef("--top %d: want 1 to %d", top, fila.MaxTopKeys)
			case queues < 1:
				return usagef("--max-queues %d: want 1 or more", queues)
			}
			ctx := cmd.Context()
			cctx, cancel := context.WithTimeout(ctx, g.timeout)
			c, err := g.connect(cctx, true)
			cancel()
			if err != nil {
				return err
			}
			defer c.Close()
			srv, err := dashboard.New(dashboard.Config{
				Client: c, Broker: g.addr, Interval: interval, History: history, TopKeys: top,
				MaxQueues: queues, Timeout: g.timeout, AllowedHosts: hosts,
			})
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return err
			}
			url := "http://" + ln.Addr().String() + "/"
			if g.output == "json" {
				err = g.printJSON(map[string]string{"url": url, "broker": g.addr})
			} else {
				_, err = fmt.Fprintf(g.stdout, "dashboard of %s on %s\n", g.addr, url)
			}
			if err != nil {
				ln.Close()
				return err
			}
			return srv.Serve(ctx, ln)
		},
	}
	f := cmd.Flags()
	f.StringVar(&listen, "listen", "127.0.0.1:8080", "host:port to serve the dashboard on (port 0: any free port)")
	f.DurationVar(&interval, "interval", dashboard.DefaultInterval, "how often to sample the broker; the pages refresh at this pace")
	f.IntVar(&history, "history", dashboard.DefaultHistory, "samples kept per queue for the rates and charts")
	f.IntVar(&top, "top", dashboard.DefaultTopKeys, fmt.Sprintf("fairness keys listed per queue, most pending first (1 to %d)", fila.MaxTopKeys))
	f.IntVar(&queues, "max-queues", dashboard.DefaultMaxQueues, "queues inspected with QueueStats each round, the first by name; a queue whose page is open is inspected too")
	f.StringSliceVar(&hosts, "allow-host", nil, "host name a request may name besides IP addresses and localhost, such as a proxy's (repeatable)")
	return cmd
}
