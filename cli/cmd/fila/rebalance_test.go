package main

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
)

// TestClusterRebalanceSingleNode: a broker without a cluster has nothing
// to even out: fila cluster rebalance fails (exit 1) with the broker's
// NOT_SUPPORTED, dry run or not, with --wait, in words or in JSON; an
// argument is a usage error.
func TestClusterRebalanceSingleNode(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	const msg = "fila: cluster rebalance: a single node has nothing to even out: not supported"
	c.fails(1, msg, "cluster", "rebalance")
	c.fails(1, msg, "cluster", "rebalance", "--dry-run")
	c.fails(1, msg, "cluster", "rebalance", "--wait")
	r := c.fails(1, `"code":"NOT_SUPPORTED"`, "cluster", "rebalance", "--dry-run", "-o", "json")
	if r.stdout != "" {
		t.Errorf("cluster rebalance -o json printed %q on stdout; want nothing after a failure", r.stdout)
	}
	c.fails(2, "unknown command \"now\"", "cluster", "rebalance", "now")
	c.fails(2, "--dry-run and --wait", "cluster", "rebalance", "--dry-run", "--wait")
}

// rebalanceStatus is what TestClusterRebalance reads of `fila cluster
// status -o json`.
type rebalanceStatus struct {
	Nodes   []clusterNode    `json:"nodes"`
	Groups  []rebalanceGroup `json:"groups"`
	Pending []struct {
		Queue string `json:"queue"`
		From  uint64 `json:"from_node_id"`
		To    uint64 `json:"to_node_id"`
	} `json:"pending"`
}

type rebalanceGroup struct {
	Queue    string `json:"queue"`
	Leader   uint64 `json:"leader_node_id"`
	Replicas []struct {
		NodeID uint64 `json:"node_id"`
	} `json:"replicas"`
	Target    []uint64 `json:"target"`
	Preferred uint64   `json:"preferred_leader"`
}

// TestClusterRebalance: in four nodes keeping three replicas of each
// queue, four queues are created while node 4 is drained, so each lands
// on nodes 1-3. Once the drain is undone, rebalance --dry-run plans a
// move onto node 4 from each of the others and changes nothing;
// rebalance --wait carries the plan out, and every node ends holding
// three of the four queues, each node the preferred leader of one. A
// second rebalance finds the cluster balanced.
func TestClusterRebalance(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four fila-server processes")
	}
	cl := filatest.StartCluster(t, 4, filatest.WithEnv("FILA_CLUSTER_TICK_INTERVAL=100ms", "FILA_CLUSTER_ELECTION_TICKS=10"))
	all := &cli{t: t, addr: cl.Addrs()}
	all.retry("cluster", "drain", "4")
	queues := []string{"a", "b", "c", "d"}
	for _, q := range queues {
		all.retry("queue", "create", q)
	}
	all.ok("cluster", "drain", "4", "--undo")

	// holders returns each queue's replicas as st lists them.
	holders := func(st rebalanceStatus) map[string][]uint64 {
		out := map[string][]uint64{}
		for _, g := range st.Groups {
			if g.Queue == "" {
				continue
			}
			for _, r := range g.Replicas {
				out[g.Queue] = append(out[g.Queue], r.NodeID)
			}
			slices.Sort(out[g.Queue])
		}
		return out
	}
	// Node 1 holds every queue, on nodes 1-3, and has applied the undo,
	// before the dry run (which plans from the answering node's view).
	node1 := &cli{t: t, addr: cl.Nodes[0].Addr}
	var st rebalanceStatus
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		node1.json(&st, "cluster", "status")
		h := holders(st)
		ok := len(h) == 4 && len(st.Nodes) == 4 && st.Nodes[3].State == "active"
		for _, q := range queues {
			ok = ok && slices.Equal(h[q], []uint64{1, 2, 3})
		}
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 1's status %+v; want queues a-d on nodes 1-3, node 4 active", st)
		}
	}

	var plan struct {
		DryRun bool `json:"dry_run"`
		Moves  []struct {
			Queue string `json:"queue"`
			From  uint64 `json:"from_node_id"`
			To    uint64 `json:"to_node_id"`
		} `json:"moves"`
		Leads []struct {
			Queue string `json:"queue"`
			Node  uint64 `json:"node_id"`
		} `json:"leads"`
	}
	node1.json(&plan, "cluster", "rebalance", "--dry-run")
	var from []uint64
	for _, m := range plan.Moves {
		if m.To != 4 {
			t.Errorf("dry run moves %s from node %d to node %d; want to node 4", m.Queue, m.From, m.To)
		}
		from = append(from, m.From)
	}
	slices.Sort(from)
	if !plan.DryRun || !slices.Equal(from, []uint64{1, 2, 3}) || len(plan.Leads) != 4 {
		t.Fatalf("rebalance --dry-run = %+v; want a move from each of nodes 1-3 to node 4 and 4 preferred leaders", plan)
	}
	out := node1.ok("cluster", "rebalance", "--dry-run")
	if !strings.HasPrefix(out, "3 replica moves and 4 preferred leaders would be planned (dry run: nothing changed)\n") ||
		!regexp.MustCompile(`(?m)^STEP +QUEUE +FROM +TO$`).MatchString(out) || !regexp.MustCompile(`(?m)^1 +[a-d] +[1-3] +4$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^QUEUE +PREFERRED LEADER$`).MatchString(out) {
		t.Errorf("rebalance --dry-run =\n%s\nwant the plan's tables", out)
	}
	node1.json(&st, "cluster", "status")
	if len(st.Pending) != 0 || slices.ContainsFunc(st.Groups, func(g rebalanceGroup) bool { return g.Preferred != 0 || len(g.Target) != 0 }) {
		t.Errorf("status after the dry run %+v; want nothing pending, no target, no preferred leader", st)
	}

	r := all.run("cluster", "rebalance", "--wait", "--timeout", "90s")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "3 replica moves and 4 preferred leaders planned\n") || !strings.HasSuffix(r.stdout, "rebalance done: no move pending or under way\n") {
		t.Fatalf("rebalance --wait: exit %d\nstdout: %s\nstderr: %s\nwant the plan, then done", r.code, r.stdout, r.stderr)
	}
	t.Logf("rebalance --wait:\n%s", r.stdout)

	// Every node ends holding three queues (as each queue's leader lists
	// its replicas, and once the nodes left out dropped their copies),
	// and each is the preferred leader of one.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		count := map[uint64]int{}
		preferred := map[uint64]int{}
		done := true
		for i, n := range cl.Nodes {
			(&cli{t: t, addr: n.Addr}).json(&st, "cluster", "status")
			held := 0
			for _, g := range st.Groups {
				if g.Queue == "" {
					continue
				}
				held++
				if g.Leader == uint64(i+1) {
					for _, rp := range g.Replicas {
						count[rp.NodeID]++
					}
					preferred[g.Preferred]++
				}
				done = done && len(g.Target) == 0
			}
			done = done && held == 3 && len(st.Pending) == 0
		}
		if done && count[1] == 3 && count[2] == 3 && count[3] == 3 && count[4] == 3 &&
			preferred[1] == 1 && preferred[2] == 1 && preferred[3] == 1 && preferred[4] == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the rebalance: replicas per node %v, preferred leaders per node %v, last status %+v; want 3 and 1 each", count, preferred, st)
		}
	}
	out = all.ok("cluster", "status")
	if !regexp.MustCompile(`(?m)  TARGET  PREFERRED$`).MatchString(out) || !regexp.MustCompile(`(?m)^\d+ +[a-d] .*  -  +[1-4]$`).MatchString(out) || strings.Contains(out, "rebalance:") {
		t.Errorf("cluster status =\n%s\nwant each queue's PREFERRED leader, and no move pending", out)
	}
	if out := all.ok("cluster", "rebalance"); out != "the cluster is balanced: nothing to do\n" {
		t.Errorf("second rebalance = %q; want balanced", out)
	}
	if out := all.ok("cluster", "rebalance", "--wait"); out != "the cluster is balanced: nothing to do\nrebalance done: no move pending or under way\n" {
		t.Errorf("second rebalance --wait = %q; want balanced, done at once", out)
	}
}
