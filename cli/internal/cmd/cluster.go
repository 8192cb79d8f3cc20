package cmd

import (
	"context"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

func newClusterCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "cluster", Short: "Inspect the cluster: its nodes and Raft groups"}
	c.AddCommand(newClusterStatusCmd(g))
	return c
}

func newClusterStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Nodes, Raft groups, leaders and replica lag, as one node sees them",
		Long: `Show the cluster as one node sees it: the node at --addr (with several
addresses, the first that answers), marked * in the table.

Nodes: each member's ID, client address, peer address, and whether the
answering node is connected to it.

Groups: the Raft groups the answering node holds, the meta group first,
then one per queue: the leader's node ID, the term, the commit and applied
indexes on the answering node, and the lag of each replica, as node:entries
behind the leader's log. Only a group's leader knows the lag: for a group
the answering node does not lead, run the command against the leader.

A broker that runs as a single node has no cluster; the command says so.
With auth on, it needs a key with admin on *.`,
		Example: `  fila cluster status
  fila --addr 10.0.0.2:5555 cluster status -o json`,
		Args: cobra.ExactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "cluster status", func(ctx context.Context, a *fila.Administrator) error {
				st, err := a.ClusterStatus(ctx)
				if err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(clusterJSON(st))
				}
				return g.printCluster(st)
			})
		},
	}
}

type clusterNodeJSON struct {
	NodeID    uint64 `json:"node_id"`
	Addr      string `json:"addr"`
	PeerAddr  string `json:"peer_addr"`
	Connected bool   `json:"connected"`
}

type clusterReplicaJSON struct {
	NodeID uint64 `json:"node_id"`
	Known  bool   `json:"known"`
	Match  uint64 `json:"match"`
	Lag    uint64 `json:"lag"`
}

type clusterGroupJSON struct {
	GroupID   uint64               `json:"group_id"`
	Queue     string               `json:"queue"`
	Leader    uint64               `json:"leader_node_id"`
	Term      uint64               `json:"term"`
	Commit    uint64               `json:"commit"`
	Applied   uint64               `json:"applied"`
	LastIndex uint64               `json:"last_index"`
	Replicas  []clusterReplicaJSON `json:"replicas"`
	Quiesced  bool                 `json:"quiesced"`
	// FirstIndex is the first index the log holds (1 until compacted).
	FirstIndex uint64 `json:"first_index"`
}

// clusterStatusJSON is the -o json form of a cluster status: the
// protocol's fields, and clustered (false for a single node, with node_id
// 0 and no nodes or groups).
type clusterStatusJSON struct {
	Clustered bool               `json:"clustered"`
	NodeID    uint64             `json:"node_id"`
	Nodes     []clusterNodeJSON  `json:"nodes"`
	Groups    []clusterGroupJSON `json:"groups"`
}

func clusterJSON(st *fila.ClusterStatus) clusterStatusJSON {
	out := clusterStatusJSON{Clustered: st.Clustered(), NodeID: st.NodeID, Nodes: make([]clusterNodeJSON, len(st.Nodes)), Groups: make([]clusterGroupJSON, len(st.Groups))}
	for i, n := range st.Nodes {
		out.Nodes[i] = clusterNodeJSON{n.ID, n.Addr, n.PeerAddr, n.Connected}
	}
	for i, gr := range st.Groups {
		rs := make([]clusterReplicaJSON, len(gr.Replicas))
		for j, r := range gr.Replicas {
			rs[j] = clusterReplicaJSON{r.NodeID, r.Known, r.Match, r.Lag}
		}
		out.Groups[i] = clusterGroupJSON{gr.ID, gr.Queue, gr.Leader, gr.Term, gr.Commit, gr.Applied, gr.LastIndex, rs, gr.Quiesced, gr.FirstIndex}
	}
	return out
}

// printCluster writes a cluster status as two tables, nodes then groups.
func (g *globals) printCluster(st *fila.ClusterStatus) error {
	w := g.stdout
	if !st.Clustered() {
		fmt.Fprintln(w, "the broker runs as a single node, not in a cluster")
		return nil
	}
	fmt.Fprintf(w, "node %d answered (marked *); replica lag is known only on a group's leader\n\n", st.NodeID)
	rows := make([][]string, len(st.Nodes))
	for i, n := range st.Nodes {
		id := u(n.ID)
		if n.ID == st.NodeID {
			id += " *"
		}
		rows[i] = []string{id, orDash(n.Addr), orDash(n.PeerAddr), yesNo(n.Connected)}
	}
	if err := g.table([]string{"NODE", "ADDR", "PEER ADDR", "CONNECTED"}, rows); err != nil {
		return err
	}
	fmt.Fprintln(w)
	rows = make([][]string, len(st.Groups))
	for i, gr := range st.Groups {
		queue := gr.Queue
		if queue == "" {
			queue = "(meta)"
		}
		leader := "-"
		if gr.Leader != 0 {
			leader = u(gr.Leader)
		}
		rows[i] = []string{u(gr.ID), queue, leader, u(gr.Term), orDash(logRange(gr)), u(gr.Commit), u(gr.Applied), replicaLag(st.NodeID, gr), yesNo(gr.Quiesced)}
	}
	return g.table([]string{"GROUP", "QUEUE", "LEADER", "TERM", "LOG", "COMMIT", "APPLIED", "LAG", "QUIESCED"}, rows)
}

// logRange is the LOG cell of group gr: the indexes its log holds,
// first-last; "" when it holds none (every entry is in the snapshot) or
// the node does not report its first index.
func logRange(gr fila.ClusterGroup) string {
	if gr.FirstIndex == 0 || gr.FirstIndex > gr.LastIndex {
		return ""
	}
	return u(gr.FirstIndex) + "-" + u(gr.LastIndex)
}

// replicaLag is the LAG cell of group gr as node self sees it:
// "node:entries" per replica when self leads it, else why it is unknown.
func replicaLag(self uint64, gr fila.ClusterGroup) string {
	switch gr.Leader {
	case 0:
		return "unknown (no leader)"
	case self:
	default:
		return fmt.Sprintf("unknown (led by node %d)", gr.Leader)
	}
	parts := make([]string, len(gr.Replicas))
	for i, r := range gr.Replicas {
		lag := "?"
		if r.Known {
			lag = u(r.Lag)
		}
		parts[i] = u(r.NodeID) + ":" + lag
	}
	return strings.Join(parts, " ")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
