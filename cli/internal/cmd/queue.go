package cmd

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

func newQueueCmd(g *globals) *cobra.Command {
	q := &cobra.Command{Use: "queue", Short: "Create, inspect, list and delete queues"}
	q.AddCommand(newQueueCreateCmd(g), newQueueDeleteCmd(g), newQueueListCmd(g), newQueueInspectCmd(g),
		newQueuePurgeCmd(g), newQueuePeekCmd(g))
	return q
}

func newQueueCreateCmd(g *globals) *cobra.Command {
	var (
		vt, backoffBase, backoffMax, dedup time.Duration
		latencyIdle                        time.Duration
		maxAttempts, latencyBudget, shards uint32
		onEnqueue, onFailure, policy       string
		tenantSep, expiredAction           string
		costByTime                         bool
		messageTTL                         time.Duration
	)
	cmd := &cobra.Command{
		Use:   "create NAME",
		Short: "Create a queue and its dead-letter queue NAME.dlq",
		Long: `Create a queue and its dead-letter queue NAME.dlq. Flags left unset, or
set to 0, take the broker's defaults ([queue] in fila.toml); durations
are rounded up to a whole millisecond, and the broker refuses values out
of the ranges of those keys. --on-enqueue and --on-failure name
files of Lua source defining on_enqueue(msg) and on_failure(msg).`,
		Example: `  fila queue create orders
  fila queue create webhooks --visibility-timeout 2m --max-attempts 5 --on-enqueue hooks/tenant.lua
  fila queue create jobs --policy stfq
  fila queue create reports --tenant-separator /
  fila queue create quotes --message-ttl 30s --expired-action drop
  fila queue create events --shards 4`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			for _, d := range []struct {
				flag string
				v    time.Duration
			}{{"visibility-timeout", vt}, {"backoff-base", backoffBase}, {"backoff-max", backoffMax}, {"dedup-window", dedup}, {"latency-idle", latencyIdle}} {
				if err := checkQueueDuration(d.flag, d.v); err != nil {
					return err
				}
			}
			if messageTTL < 0 {
				return usagef("--message-ttl %v: want 0 or more", messageTTL)
			}
			if backoffBase > 0 && backoffMax > 0 && backoffBase > backoffMax {
				return usagef("--backoff-base %v: want at most --backoff-max %v", backoffBase, backoffMax)
			}
			spec := fila.NewQueueSpec(args[0]).VisibilityTimeout(vt).MaxAttempts(maxAttempts).
				Backoff(backoffBase, backoffMax).DedupWindow(dedup).Policy(policy).
				LatencyLane(latencyBudget, latencyIdle).TenantSeparator(tenantSep).Shards(shards).
				MessageTTL(messageTTL).ExpiredAction(expiredAction)
			if costByTime {
				spec.CostByTime()
			}
			for _, h := range []struct {
				file string
				set  func(string) *fila.QueueSpec
			}{{onEnqueue, spec.OnEnqueue}, {onFailure, spec.OnFailure}} {
				if h.file == "" {
					continue
				}
				src, err := os.ReadFile(h.file)
				if err != nil {
					return err
				}
				h.set(string(src))
			}
			return g.admin(cmd, "create queue", func(ctx context.Context, a *fila.Administrator) error {
				if err := a.CreateQueue(ctx, spec); err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]string{"name": args[0], "dead_letter_queue": args[0] + ".dlq"})
				}
				if shards > 1 {
					fmt.Fprintf(g.stdout, "created queue %s of %d shards, %s~0 to %s~%d (dead-letter queue %s.dlq)\n", args[0], shards, args[0], args[0], shards-1, args[0])
					return nil
				}
				fmt.Fprintf(g.stdout, "created queue %s (dead-letter queue %s.dlq)\n", args[0], args[0])
				return nil
			})
		},
	}
	f := cmd.Flags()
	f.DurationVar(&vt, "visibility-timeout", 0, "lease length of deliveries, such as 30s (0: the broker's default, 30s)")
	f.Uint32Var(&maxAttempts, "max-attempts", 0, "deliveries before a message is dead-lettered (0: the broker's default, 3)")
	f.DurationVar(&backoffBase, "backoff-base", 0, "retry delay after the first failure, doubling after each further one (0: the broker's default, 1s)")
	f.DurationVar(&backoffMax, "backoff-max", 0, "cap on the retry delay, at least --backoff-base (0: the broker's default, 60s)")
	f.DurationVar(&dedup, "dedup-window", 0, "how long idempotency keys are remembered (0: the broker's default, 5m)")
	f.StringVar(&policy, "policy", "", `fair scheduling across fairness keys: "drr" (deficit round robin, shares over whole rounds, in bytes) or "stfq" (start-time fair queueing, shares at every time scale, in messages); unset: the broker's [scheduler] policy`)
	f.Uint32Var(&latencyBudget, "latency-budget", 0, "stfq: deliveries a fairness key gets ahead of the backlog when it comes back after --latency-idle with nothing pending, or when it has not been served more than its share (0: the broker's default, 10)")
	f.DurationVar(&latencyIdle, "latency-idle", 0, "stfq: how long a fairness key must have had nothing pending to enter the latency lane even if it was served more than its share (0: the broker's default, 100ms)")
	f.StringVar(&tenantSep, "tenant-separator", "", `stfq: schedule tenants, then each tenant's keys; a key's tenant is the key up to the first separator ("acme" of "acme/job-7" with "/"), so a tenant's keys share one tenant's share (unset: no hierarchy)`)
	f.BoolVar(&costByTime, "cost-by-time", false, "stfq: share consumer time rather than deliveries: charge each delivery the lease time it held (to ack, nack, release or expiry), so keys with slow jobs get fewer deliveries")
	f.DurationVar(&messageTTL, "message-ttl", 0, "time to live of messages enqueued without --ttl, from enqueue, such as 10m, at most 720h (0: none)")
	f.StringVar(&expiredAction, "expired-action", "", `what happens to a message whose TTL passes before it is delivered: "dead-letter" (to the DLQ, reason expired) or "drop" (unset: dead-letter)`)
	f.Uint32Var(&shards, "shards", 0, "cluster: split the queue into this many shards (2 to 256), each its own Raft group, spread by the hash of the fairness key (0 or 1: not sharded)")
	f.StringVar(&onEnqueue, "on-enqueue", "", "file of Lua source defining on_enqueue(msg)")
	f.StringVar(&onFailure, "on-failure", "", "file of Lua source defining on_failure(msg)")
	return cmd
}

// checkQueueDuration checks a duration flag of "queue create": 0 (the
// broker's default) or at least a millisecond, the unit the protocol
// carries. A shorter positive one is most likely a typo (500us for
// 500ms), which the SDK would round up to 1ms.
func checkQueueDuration(flag string, d time.Duration) error {
	if d == 0 || d >= time.Millisecond {
		return nil
	}
	return usagef("--%s %v: want 0 (the broker's default) or at least 1ms", flag, d)
}

func newQueueDeleteCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:               "delete NAME",
		Short:             "Delete a queue, its messages and its dead-letter queue",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeQueues(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "delete queue", func(ctx context.Context, a *fila.Administrator) error {
				if err := a.DeleteQueue(ctx, args[0]); err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]string{"deleted": args[0]})
				}
				fmt.Fprintf(g.stdout, "deleted queue %s\n", args[0])
				return nil
			})
		},
	}
}

func newQueueListCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List queues with their depths",
		Args:  cobra.ExactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "list queues", func(ctx context.Context, a *fila.Administrator) error {
				qs, err := a.ListQueues(ctx)
				if err != nil {
					return err
				}
				if g.output == "json" {
					type row struct {
						Name    string `json:"name"`
						Ready   uint64 `json:"ready"`
						Delayed uint64 `json:"delayed"`
						Leased  uint64 `json:"leased"`
						DLQ     string `json:"dead_letter_queue,omitempty"`
						Parent  string `json:"parent,omitempty"`
						Shards  uint32 `json:"shards,omitempty"`
					}
					rows := make([]row, len(qs))
					for i, q := range qs {
						rows[i] = row{q.Name, q.Ready, q.Delayed, q.Leased, q.DeadLetterQueue, q.Parent, q.Shards}
					}
					return g.printJSON(rows)
				}
				// A SHARDS column only when a queue is sharded.
				sharded := slices.ContainsFunc(qs, func(q fila.QueueInfo) bool { return q.Shards > 0 })
				rows := make([][]string, len(qs))
				for i, q := range qs {
					rows[i] = []string{q.Name, u(q.Ready), u(q.Delayed), u(q.Leased), q.DeadLetterQueue}
					if sharded {
						rows[i] = append(rows[i], u(uint64(q.Shards)))
					}
				}
				header := []string{"NAME", "READY", "DELAYED", "LEASED", "DLQ"}
				if sharded {
					header = append(header, "SHARDS")
				}
				return g.table(header, rows)
			})
		},
	}
}

func u(n uint64) string { return strconv.FormatUint(n, 10) }

func newQueueInspectCmd(g *globals) *cobra.Command {
	var top int
	cmd := &cobra.Command{
		Use:   "inspect NAME",
		Short: "Depths, per-key fairness and throttle state, hook counters of a queue",
		Long: `Depths, per-key fairness and throttle state, hook counters of a queue.

For each of the --top most pending fairness keys: its pending messages and
weight; its entitled share (its weight over the backlogged keys' weights)
against the share of deliveries it got over the stats window (the last 30
to 60 s); its lane (latency, fair, or blocked on throttle tokens or its
ordering key); in an stfq queue its lag behind the virtual time, in
messages; and the median and 99th percentile time from enqueue to
delivery over the window. For the queue: Jain's fairness index over the
backlogged keys (1: each got its entitled share; 1/n: one got everything).`,
		Example:           "  fila queue inspect orders\n  fila queue inspect orders --top 20 --output json",
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeQueues(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			if top < 1 || top > fila.MaxTopKeys {
				return usageError{fmt.Errorf("--top %d: want 1 to %d", top, fila.MaxTopKeys)}
			}
			return g.admin(cmd, "queue stats", func(ctx context.Context, a *fila.Administrator) error {
				st, err := a.QueueStats(ctx, args[0], fila.WithTopKeys(top))
				if err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(statsJSON(st))
				}
				return g.printStats(st)
			})
		},
	}
	cmd.Flags().IntVar(&top, "top", 20, fmt.Sprintf("how many fairness keys to show, most pending first (1 to %d)", fila.MaxTopKeys))
	return cmd
}

type fairnessJSON struct {
	Key             string  `json:"key"`
	Pending         uint64  `json:"pending"`
	Weight          uint32  `json:"weight"`
	Deficit         int64   `json:"deficit"`
	Delivered       uint64  `json:"delivered"`
	EntitledShare   float64 `json:"entitled_share"`
	WindowShare     float64 `json:"window_share"`
	WindowDelivered uint64  `json:"window_delivered"`
	Lane            string  `json:"lane"`
	Lag             float64 `json:"lag"`
	DwellP50MS      int64   `json:"dwell_p50_ms"`
	DwellP99MS      int64   `json:"dwell_p99_ms"`
}

type throttleJSON struct {
	Key     string  `json:"key"`
	Rate    float64 `json:"rate"`
	Burst   float64 `json:"burst"`
	Tokens  float64 `json:"tokens"`
	Waiting uint64  `json:"waiting"`
}

func statsJSON(st *fila.QueueStats) any {
	fk := make([]fairnessJSON, len(st.FairnessKeys))
	for i, k := range st.FairnessKeys {
		fk[i] = fairnessJSON{k.Key, k.Pending, k.Weight, k.Deficit, k.Delivered, k.EntitledShare, k.WindowShare,
			k.WindowDelivered, k.Lane, k.Lag, k.DwellP50.Milliseconds(), k.DwellP99.Milliseconds()}
	}
	tk := make([]throttleJSON, len(st.ThrottleKeys))
	for i, k := range st.ThrottleKeys {
		tk[i] = throttleJSON{k.Key, k.Rate, k.Burst, k.Tokens, k.Waiting}
	}
	return map[string]any{
		"name":                  st.Name,
		"ready":                 st.Ready,
		"delayed":               st.Delayed,
		"leased":                st.Leased,
		"dead_lettered":         st.DeadLettered,
		"bytes":                 st.Bytes,
		"subscriptions":         st.Subscriptions,
		"visibility_timeout_ms": st.VisibilityTimeout.Milliseconds(),
		"max_attempts":          st.MaxAttempts,
		"policy":                st.Policy,
		"latency_budget":        st.LatencyBudget,
		"latency_idle_ms":       st.LatencyIdle.Milliseconds(),
		"tenant_separator":      st.TenantSeparator,
		"cost_by_time":          st.CostByTime,
		"message_ttl_ms":        st.MessageTTL.Milliseconds(),
		"expired_action":        st.ExpiredAction,
		"messages_expired":      st.MessagesExpired,
		"shards":                st.Shards,
		"fairness_keys":         fk,
		"backlogged_keys":       st.BackloggedKeys,
		"window_ms":             st.Window.Milliseconds(),
		"window_delivered":      st.WindowDelivered,
		"jain_index":            st.JainIndex,
		"throttle_keys":         tk,
		"redrive":               redriveJSON(st.Redrive),
		"purged":                st.Purged,
		"hooks": map[string]any{
			"on_enqueue_calls":    st.OnEnqueueCalls,
			"on_enqueue_failures": st.OnEnqueueErr,
			"on_failure_calls":    st.OnFailureCalls,
			"on_failure_failures": st.OnFailureErr,
			"circuit_open":        st.CircuitOpen,
			"circuit_trips":       st.CircuitTrips,
		},
	}
}

func (g *globals) printStats(st *fila.QueueStats) error {
	w := g.stdout
	fmt.Fprintf(w, "queue %s\n", st.Name)
	if st.Shards > 0 {
		fmt.Fprintf(w, "  %d shards: counts, keys and hooks of all of them\n", st.Shards)
	}
	fmt.Fprintf(w, "  ready %d, delayed %d, leased %d, dead-lettered %d (%d payload bytes)\n", st.Ready, st.Delayed, st.Leased, st.DeadLettered, st.Bytes)
	fmt.Fprintf(w, "  subscriptions %d, visibility timeout %v, max attempts %d, policy %s\n", st.Subscriptions, st.VisibilityTimeout, st.MaxAttempts, st.Policy)
	if st.LatencyBudget > 0 {
		per := "key"
		if st.TenantSeparator != "" {
			per = "tenant"
		}
		fmt.Fprintf(w, "  latency lane: %d deliveries per %s after %v idle\n", st.LatencyBudget, per, st.LatencyIdle)
	}
	if st.CostByTime {
		fmt.Fprintf(w, "  cost by time: shares are of consumer time (lease time held); lag in ms\n")
	}
	if st.MessageTTL > 0 || st.MessagesExpired > 0 {
		ttl := "none"
		if st.MessageTTL > 0 {
			ttl = st.MessageTTL.String()
		}
		fmt.Fprintf(w, "  message ttl %s (expired: %s), %d expired\n", ttl, st.ExpiredAction, st.MessagesExpired)
	}
	if st.TenantSeparator != "" {
		fmt.Fprintf(w, "  tenants: a key's tenant is the key up to the first %q; tenants share by weight, a tenant's keys evenly\n", st.TenantSeparator)
	}
	if r := st.Redrive; r != nil {
		key := "all keys"
		if r.FairnessKey != "" {
			key = "key " + strconv.Quote(r.FairnessKey)
		}
		fmt.Fprintf(w, "  redrive: %d moved, %d remaining, %d/s, %s\n", r.Moved, r.Remaining, r.Rate, key)
	}
	fmt.Fprintf(w, "  hooks: on_enqueue %d calls (%d failed), on_failure %d calls (%d failed), circuit %s (%d trips)\n",
		st.OnEnqueueCalls, st.OnEnqueueErr, st.OnFailureCalls, st.OnFailureErr, map[bool]string{true: "open", false: "closed"}[st.CircuitOpen], st.CircuitTrips)
	if len(st.FairnessKeys) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintf(w, "fairness: %d backlogged keys (%d shown); over the last %v, %d deliveries", st.BackloggedKeys, len(st.FairnessKeys), st.Window.Round(time.Second), st.WindowDelivered)
		if st.JainIndex > 0 {
			fmt.Fprintf(w, ", Jain's index %.3f", st.JainIndex)
		}
		fmt.Fprintln(w)
		// A deficit is DRR's, a lag STFQ's.
		drr := st.Policy == fila.PolicyDRR
		rows := make([][]string, len(st.FairnessKeys))
		for i, k := range st.FairnessKeys {
			rows[i] = []string{k.Key, u(k.Pending), strconv.FormatUint(uint64(k.Weight), 10)}
			if drr {
				rows[i] = append(rows[i], strconv.FormatInt(k.Deficit, 10))
			} else {
				rows[i] = append(rows[i], strconv.FormatFloat(k.Lag, 'f', 1, 64))
			}
			rows[i] = append(rows[i], pct(k.EntitledShare), pct(k.WindowShare), cmp.Or(k.Lane, "-"), ms(k.DwellP50), ms(k.DwellP99))
		}
		head := []string{"FAIRNESS KEY", "PENDING", "WEIGHT", "LAG", "ENTITLED", "SHARE", "LANE", "DWELL P50", "DWELL P99"}
		if drr {
			head[3] = "DEFICIT"
		}
		if err := g.table(head, rows); err != nil {
			return err
		}
	}
	if len(st.ThrottleKeys) > 0 {
		fmt.Fprintln(w)
		rows := make([][]string, len(st.ThrottleKeys))
		for i, k := range st.ThrottleKeys {
			rows[i] = []string{k.Key, fmtF(k.Rate), fmtF(k.Burst), strconv.FormatFloat(k.Tokens, 'f', 2, 64), u(k.Waiting)}
		}
		return g.table([]string{"THROTTLE KEY", "RATE/S", "BURST", "TOKENS", "WAITING"}, rows)
	}
	return nil
}

func fmtF(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// pct formats a share (0 to 1) as a percentage.
func pct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

// ms formats a dwell in milliseconds, "-" for none.
func ms(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	return d.Round(time.Millisecond).String()
}

func newRedriveCmd(g *globals) *cobra.Command {
	var (
		count  uint64
		rate   uint32
		key    string
		cancel bool
	)
	cmd := &cobra.Command{
		Use:   "redrive DLQ",
		Short: "Move messages from a dead-letter queue back to its queue",
		Long: `Move up to --count messages (0: all) from the dead-letter queue DLQ back
to its parent queue, oldest first, with their attempts reset. Each keeps
its fairness key, so the queue's fair scheduling shares a large redrive
with live traffic instead of letting it arrive as one burst.

--key moves only that fairness key's dead letters. --rate R moves R
messages a second in the background: the command returns at once, the
progress (moved, remaining, rate) shows in "fila queue inspect", and
--cancel stops it, leaving the rest in the DLQ. A broker restart stops
a throttled redrive too; run it again to move the rest.`,
		Example: `  fila redrive orders.dlq --count 100
  fila redrive orders.dlq --rate 50 --key acme
  fila redrive orders.dlq --cancel`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeQueues(true),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cancel && (count != 0 || rate != 0 || key != "") {
				return usagef("--cancel takes no --count, --rate or --key")
			}
			return g.admin(cmd, "redrive", func(ctx context.Context, a *fila.Administrator) error {
				var (
					st  *fila.RedriveStatus
					err error
				)
				if cancel {
					st, err = a.CancelRedrive(ctx, args[0])
				} else {
					st, err = a.RedriveWith(ctx, args[0], fila.RedriveCount(count), fila.RedriveRate(rate), fila.RedriveKey(key))
				}
				if err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]any{"dead_letter_queue": args[0], "moved": st.Moved, "pending": st.Pending})
				}
				switch {
				case cancel:
					fmt.Fprintf(g.stdout, "cancelled the redrive of %s: %d moved, %d left\n", args[0], st.Moved, st.Pending)
				case rate > 0 && st.Pending > 0:
					fmt.Fprintf(g.stdout, "redriving %d more messages from %s at %d/s (%d moved so far)\n", st.Pending, args[0], rate, st.Moved)
				default:
					fmt.Fprintf(g.stdout, "moved %d messages from %s\n", st.Moved, args[0])
				}
				return nil
			})
		},
	}
	cmd.Flags().Uint64Var(&count, "count", 0, "most messages to move (0: all)")
	cmd.Flags().Uint32Var(&rate, "rate", 0, "messages per second, moved in the background (0: all at once)")
	cmd.Flags().StringVar(&key, "key", "", "only this fairness key's dead letters")
	cmd.Flags().BoolVar(&cancel, "cancel", false, "stop the DLQ's throttled redrive")
	return cmd
}

func redriveJSON(r *fila.RedriveProgress) any {
	if r == nil {
		return nil
	}
	return map[string]any{"rate": r.Rate, "fairness_key": r.FairnessKey, "moved": r.Moved, "remaining": r.Remaining}
}
