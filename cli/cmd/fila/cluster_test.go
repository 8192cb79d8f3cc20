package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
)

// clusterStatus is the -o json output of `fila cluster status`.
type clusterStatus struct {
	Clustered bool          `json:"clustered"`
	NodeID    uint64        `json:"node_id"`
	Nodes     []clusterNode `json:"nodes"`
	Groups    []struct {
		GroupID   uint64 `json:"group_id"`
		Queue     string `json:"queue"`
		Leader    uint64 `json:"leader_node_id"`
		Term      uint64 `json:"term"`
		Commit    uint64 `json:"commit"`
		Applied   uint64 `json:"applied"`
		LastIndex uint64 `json:"last_index"`
		Replicas  []struct {
			NodeID uint64 `json:"node_id"`
			Known  bool   `json:"known"`
			Lag    uint64 `json:"lag"`
		} `json:"replicas"`
		Quiesced   bool   `json:"quiesced"`
		FirstIndex uint64 `json:"first_index"`
	} `json:"groups"`
}

type clusterNode struct {
	NodeID    uint64 `json:"node_id"`
	Addr      string `json:"addr"`
	PeerAddr  string `json:"peer_addr"`
	Connected bool   `json:"connected"`
}

// TestClusterStatus runs `fila cluster status` against each node of a
// three-node cluster holding one queue: each answers for itself, with the
// three nodes, the meta group and the queue's group, each led; only a
// group's leader knows its replicas' lag.
func TestClusterStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three fila-server processes")
	}
	cl := filatest.StartCluster(t, 3, filatest.WithEnv("FILA_CLUSTER_TICK_INTERVAL=100ms", "FILA_CLUSTER_ELECTION_TICKS=10"))
	all := &cli{t: t, addr: cl.Addrs()}
	// The meta group elects its leader first.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		r := all.run("queue", "create", "orders")
		if r.code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("queue create orders: exit %d: %s", r.code, r.stderr)
		}
	}

	for i, node := range cl.Nodes {
		c := &cli{t: t, addr: node.Addr}
		self := uint64(i + 1)
		var st clusterStatus
		// Until the queue's group, created with the queue, has a leader
		// this node knows of, and every node has registered its client
		// address (each does so with a meta proposal once it runs).
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			c.json(&st, "cluster", "status")
			registered := len(st.Nodes) == 3 && !slices.ContainsFunc(st.Nodes, func(n clusterNode) bool { return n.Addr == "" })
			if len(st.Groups) == 2 && st.Groups[0].Leader != 0 && st.Groups[1].Leader != 0 && registered {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %d: cluster status = %+v; want two groups, each led", self, st)
			}
		}
		if !st.Clustered || st.NodeID != self || len(st.Nodes) != 3 {
			t.Fatalf("node %d: cluster status = %+v; want clustered, node %d, 3 nodes", self, st, self)
		}
		for j, n := range st.Nodes {
			if n.NodeID != uint64(j+1) || n.Addr != cl.Nodes[j].Addr || n.PeerAddr == "" {
				t.Errorf("node %d: nodes[%d] = %+v; want node %d at %s", self, j, n, j+1, cl.Nodes[j].Addr)
			}
		}
		if !st.Nodes[i].Connected {
			t.Errorf("node %d: not connected to itself", self)
		}
		meta, q := st.Groups[0], st.Groups[1]
		if meta.GroupID != 1 || meta.Queue != "" || q.Queue != "orders" || q.GroupID <= 1 {
			t.Errorf("node %d: groups %+v, %+v; want the meta group (1), then orders'", self, meta, q)
		}
		for _, gr := range st.Groups {
			if gr.Leader < 1 || gr.Leader > 3 || gr.Term == 0 || gr.Commit == 0 || gr.Applied > gr.Commit || gr.Commit > gr.LastIndex || len(gr.Replicas) != 3 || gr.FirstIndex != 1 {
				t.Errorf("node %d: group %+v; want a leader, a term, applied ≤ commit ≤ last index, 3 replicas, a log from index 1", self, gr)
			}
			for _, r := range gr.Replicas {
				if r.Known != (gr.Leader == self) {
					t.Errorf("node %d: group %d (led by %d): replica %+v; want its lag known only on the leader", self, gr.GroupID, gr.Leader, r)
				}
			}
		}

		out := c.ok("cluster", "status")
		if !strings.Contains(out, "NODE") || !strings.Contains(out, "GROUP") || !strings.Contains(out, "(meta)") || !strings.Contains(out, "orders") {
			t.Errorf("node %d: cluster status =\n%s\nwant the nodes and groups tables", self, out)
		}
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return strings.HasPrefix(l, fmt.Sprint(self)+" *") }) {
			t.Errorf("node %d: cluster status =\n%s\nwant its own row marked *", self, out)
		}
		for _, gr := range st.Groups {
			want := regexp.QuoteMeta(fmt.Sprintf("unknown (led by node %d)", gr.Leader))
			if gr.Leader == self {
				want = `1:\d+ 2:\d+ 3:\d+`
			}
			if !regexp.MustCompile(`(?m)^` + fmt.Sprint(gr.GroupID) + ` .*  1-\d+  .*  ` + want + `  +(yes|no)$`).MatchString(out) {
				t.Errorf("node %d: cluster status =\n%s\nwant %s in group %d's row", self, out, want, gr.GroupID)
			}
		}
	}
}

// TestClusterStatusSingleNode: a broker without a cluster answers, and
// the command says it runs as a single node.
func TestClusterStatusSingleNode(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	var st clusterStatus
	c.json(&st, "cluster", "status")
	if st.Clustered || st.NodeID != 0 || len(st.Nodes) != 0 || len(st.Groups) != 0 {
		t.Errorf("cluster status -o json = %+v; want not clustered, node 0, nothing else", st)
	}
	if out := c.ok("cluster", "status"); out != "the broker runs as a single node, not in a cluster\n" {
		t.Errorf("cluster status = %q; want the single-node line", out)
	}
}
