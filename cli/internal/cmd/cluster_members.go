package cmd

import (
	"context"
	"fmt"
	"maps"
	"net"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

func newClusterRebalanceCmd(g *globals) *cobra.Command {
	var dry, wait bool
	cmd := &cobra.Command{
		Use:   "rebalance [--dry-run] [--wait]",
		Short: "Even out the queues' replicas and leaders over the nodes",
		Long: `Even out the queues' replicas and leaders over the members that are not
draining: the plan moves replicas from the most loaded node to the
least loaded until no move of one queue brings them closer, then sets
preferred leaders the same way. A queue weighs 1, plus its payload bytes
over the mean queue's, plus its deliveries of the last 30 to 60 s over
the mean queue's, as the node at --addr sees them; with queues of equal
weight (no traffic), every node ends within one replica, and one lead,
of every other. A queue with a move under way keeps it.

With --dry-run the command prints the plan, as the node at --addr sees
the cluster, and changes nothing. Otherwise the cluster records the plan
(replacing the moves of an earlier rebalance not yet started) and the
command prints it; the moves then start in order, in the background,
each once neither of its nodes takes part in another move: at most one
move per node at a time. A queue's leader hands the lead to its
preferred leader once that node is caught up. fila cluster status lists
the moves not yet started, each move under way as its group's TARGET,
and each group's PREFERRED leader.

With --wait the command then follows the rebalance, asking every node
for its status each second, until no node reports a move pending or
under way. --timeout bounds the whole command (30s by default); when it
runs out the rebalance goes on, and the command fails (exit 1) saying
so. With --output json the plan is one JSON object, and the progress
lines JSON objects, the last with "done": true.

Needs a broker in a cluster (a single node answers NOT_SUPPORTED) and,
with auth on, a key with admin on *.`,
		Example: `  fila cluster rebalance --dry-run
  fila cluster rebalance --wait --timeout 10m
  fila cluster rebalance -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dry && wait {
				return usagef("--dry-run and --wait: a dry run starts nothing to wait for")
			}
			return g.admin(cmd, "rebalance", func(ctx context.Context, a *fila.Administrator) error {
				plan, err := a.Rebalance(ctx, dry)
				if err != nil {
					return err
				}
				if err := g.printPlan(plan, dry); err != nil {
					return err
				}
				if !wait {
					return nil
				}
				return g.waitRebalance(ctx, a)
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&dry, "dry-run", false, "print the plan and change nothing")
	f.BoolVar(&wait, "wait", false, "follow the rebalance until no move is pending or under way; --timeout bounds the wait")
	return cmd
}

// planJSON is the -o json form of a rebalance's plan.
type planJSON struct {
	DryRun bool                `json:"dry_run"`
	Moves  []rebalanceMoveJSON `json:"moves"`
	Leads  []rebalanceLeadJSON `json:"leads"`
}

type rebalanceMoveJSON struct {
	Queue string `json:"queue"`
	From  uint64 `json:"from_node_id"`
	To    uint64 `json:"to_node_id"`
}

type rebalanceLeadJSON struct {
	Queue string `json:"queue"`
	Node  uint64 `json:"node_id"`
}

func movesJSON(ms []fila.RebalanceMove) []rebalanceMoveJSON {
	out := make([]rebalanceMoveJSON, len(ms))
	for i, m := range ms {
		out[i] = rebalanceMoveJSON{m.Queue, m.From, m.To}
	}
	return out
}

// printPlan writes a rebalance's plan: its moves, then its preferred
// leaders, as tables.
func (g *globals) printPlan(plan *fila.RebalancePlan, dry bool) error {
	if g.output == "json" {
		p := planJSON{DryRun: dry, Moves: movesJSON(plan.Moves), Leads: make([]rebalanceLeadJSON, len(plan.Leads))}
		for i, l := range plan.Leads {
			p.Leads[i] = rebalanceLeadJSON{l.Queue, l.Node}
		}
		return g.printJSON(p)
	}
	w := g.stdout
	if len(plan.Moves) == 0 && len(plan.Leads) == 0 {
		fmt.Fprintln(w, "the cluster is balanced: nothing to do")
		return nil
	}
	verb := "planned"
	if dry {
		verb = "would be planned (dry run: nothing changed)"
	}
	fmt.Fprintf(w, "%d replica moves and %d preferred leaders %s\n", len(plan.Moves), len(plan.Leads), verb)
	if len(plan.Moves) > 0 {
		fmt.Fprintln(w)
		rows := make([][]string, len(plan.Moves))
		for i, m := range plan.Moves {
			rows[i] = []string{u(uint64(i + 1)), m.Queue, u(m.From), u(m.To)}
		}
		if err := g.table([]string{"STEP", "QUEUE", "FROM", "TO"}, rows); err != nil {
			return err
		}
	}
	if len(plan.Leads) > 0 {
		fmt.Fprintln(w)
		rows := make([][]string, len(plan.Leads))
		for i, l := range plan.Leads {
			rows[i] = []string{l.Queue, u(l.Node)}
		}
		return g.table([]string{"QUEUE", "PREFERRED LEADER"}, rows)
	}
	return nil
}

// rebalanceJSON is one line of fila cluster rebalance --wait -o json.
type rebalanceJSON struct {
	// Pending is the most moves not yet started any node reports, and
	// Moving the queues whose group a node reports a target for.
	Pending     int      `json:"pending"`
	Moving      []string `json:"moving"`
	Unreachable []uint64 `json:"unreachable"`
	Done        bool     `json:"done"`
}

// waitRebalance follows a rebalance until no node that answers reports
// a move pending or under way.
func (g *globals) waitRebalance(ctx context.Context, a *fila.Administrator) error {
	w := newStatusWatch(g, a)
	defer w.close()
	return g.follow(ctx, &w, func(views map[uint64]*fila.ClusterStatus, unreachable []uint64) (string, any, bool, error) {
		st := rebalanceProgress(views, unreachable)
		return rebalanceLine(st), st, st.Done, nil
	}, func(ctx context.Context) error {
		return &renamedError{msg: fmt.Sprintf("fila: cluster rebalance: %s before the rebalance was done; it goes on in the background (fila cluster status shows it)", w.why(ctx)), err: ctx.Err()}
	})
}

// rebalanceProgress sums up the views of the nodes that answered, by
// node ID: the most moves not yet started any of them reports, and the
// queues, by name, whose group any of them reports a target for. The
// rebalance is done once some node answered and none reports either.
func rebalanceProgress(views map[uint64]*fila.ClusterStatus, unreachable []uint64) rebalanceJSON {
	st := rebalanceJSON{Moving: []string{}, Unreachable: append([]uint64{}, unreachable...)}
	moving := map[string]bool{}
	for _, v := range views {
		st.Pending = max(st.Pending, len(v.Pending))
		for _, gr := range v.Groups {
			if len(gr.Target) > 0 {
				moving[gr.Queue] = true
			}
		}
	}
	st.Moving = append(st.Moving, slices.Sorted(maps.Keys(moving))...)
	st.Done = len(views) > 0 && st.Pending == 0 && len(st.Moving) == 0
	return st
}

// rebalanceLine is the text form of a progress line of fila cluster
// rebalance --wait.
func rebalanceLine(st rebalanceJSON) string {
	var b strings.Builder
	if st.Done {
		b.WriteString("rebalance done: no move pending or under way")
	} else {
		fmt.Fprintf(&b, "%s pending, %d under way", plural(st.Pending, "move", "moves"), len(st.Moving))
		if len(st.Moving) > 0 {
			fmt.Fprintf(&b, " (%s)", strings.Join(firstN(st.Moving, maxQueuesShown), ", "))
		}
	}
	if len(st.Unreachable) > 0 {
		fmt.Fprintf(&b, "; not answering: nodes %s", nodeList(st.Unreachable))
	}
	return b.String()
}

// firstN returns s, cut to n items and "…" when longer.
func firstN(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(append([]string{}, s[:n]...), "…")
}

func newClusterAddNodeCmd(g *globals) *cobra.Command {
	var peerAddr string
	cmd := &cobra.Command{
		Use:   "add-node NODE --peer-addr HOST:PORT",
		Short: "Add a node to the cluster",
		Long: `Add the node NODE (its cluster.node_id, never used before in this
cluster) whose peer listener is at --peer-addr, as the other nodes reach
it. Start the node first with cluster.join = true (FILA_CLUSTER_JOIN=true)
and cluster.peers listing members it can reach and itself: it waits to
be added. Every node then connects to it, and the meta group takes it as
a learner until it holds the meta log, then as a voter. It holds no
queue until fila cluster move or fila cluster rebalance places some on
it; fila cluster status lists it.

Needs a broker in a cluster (a single node answers NOT_SUPPORTED) and,
with auth on, a key with admin on *. Exit 1 for a member already, a node
removed before (node IDs are never reused), or an address that is not
host:port.`,
		Example: `  fila cluster add-node 4 --peer-addr 10.0.0.4:5556
  fila cluster add-node 4 --peer-addr 10.0.0.4:5556 && fila cluster rebalance --wait`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			if _, _, err := net.SplitHostPort(peerAddr); err != nil || peerAddr == "" {
				return usagef("--peer-addr %q: want host:port, the new node's cluster.peer_listen_addr as the other nodes reach it", peerAddr)
			}
			return g.admin(cmd, "add node", func(ctx context.Context, a *fila.Administrator) error {
				if err := a.AddNode(ctx, id, peerAddr); err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]any{"node_id": id, "peer_addr": peerAddr, "added": true})
				}
				fmt.Fprintf(g.stdout, "node %d added at %s; it takes queues once moved or rebalanced onto it (fila cluster rebalance)\n", id, peerAddr)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&peerAddr, "peer-addr", "", "the new node's peer address, host:port, as the other nodes reach it (required)")
	return cmd
}

func newClusterRemoveNodeCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "remove-node NODE",
		Short: "Remove a drained node from the cluster for good",
		Long: `Remove the node NODE from the cluster for good. It must hold no replica
of any queue: drain it first (fila cluster drain NODE --wait). The meta
group takes it out of its members; every node forgets it and refuses its
connections, and the removed node stops taking part. Its ID is never
accepted again: add-node refuses it, and the node, restarted on its data
directory, refuses to start. A machine comes back under a new node ID,
with an empty data directory.

Needs a broker in a cluster (a single node answers NOT_SUPPORTED) and,
with auth on, a key with admin on *. Exit 1 for a node that is not a
member, the last member, or a node that still holds replicas.`,
		Example: `  fila cluster drain 3 --wait && fila cluster remove-node 3`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			return g.admin(cmd, "remove node", func(ctx context.Context, a *fila.Administrator) error {
				if err := a.RemoveNode(ctx, id); err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]any{"node_id": id, "removed": true})
				}
				fmt.Fprintf(g.stdout, "node %d removed from the cluster; its ID is never accepted again\n", id)
				return nil
			})
		},
	}
}
