package main

import (
	"encoding/json"
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
			NodeID  uint64 `json:"node_id"`
			Known   bool   `json:"known"`
			Lag     uint64 `json:"lag"`
			Learner bool   `json:"learner"`
		} `json:"replicas"`
		Quiesced   bool     `json:"quiesced"`
		FirstIndex uint64   `json:"first_index"`
		Target     []uint64 `json:"target"`
	} `json:"groups"`
}

type clusterNode struct {
	NodeID    uint64 `json:"node_id"`
	Addr      string `json:"addr"`
	PeerAddr  string `json:"peer_addr"`
	Connected bool   `json:"connected"`
	State     string `json:"state"`
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
	all.retry("queue", "create", "orders")

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
			if n.NodeID != uint64(j+1) || n.Addr != cl.Nodes[j].Addr || n.PeerAddr == "" || n.State != "active" {
				t.Errorf("node %d: nodes[%d] = %+v; want node %d at %s, active", self, j, n, j+1, cl.Nodes[j].Addr)
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
				if r.Learner {
					t.Errorf("node %d: group %d: replica %+v is a learner; want none without a move", self, gr.GroupID, r)
				}
			}
			if gr.Target == nil || len(gr.Target) != 0 {
				t.Errorf("node %d: group %d: target %#v; want [] without a move", self, gr.GroupID, gr.Target)
			}
		}

		out := c.ok("cluster", "status")
		if !strings.Contains(out, "NODE") || !strings.Contains(out, "GROUP") || !strings.Contains(out, "(meta)") || !strings.Contains(out, "orders") {
			t.Errorf("node %d: cluster status =\n%s\nwant the nodes and groups tables", self, out)
		}
		if !slices.ContainsFunc(strings.Split(out, "\n"), func(l string) bool { return strings.HasPrefix(l, fmt.Sprint(self)+" *") }) {
			t.Errorf("node %d: cluster status =\n%s\nwant its own row marked *", self, out)
		}
		if !regexp.MustCompile(`(?m)^NODE +ADDR +PEER ADDR +CONNECTED +STATE$`).MatchString(out) {
			t.Errorf("node %d: cluster status =\n%s\nwant the nodes table's STATE column", self, out)
		}
		for j := range st.Nodes {
			if !regexp.MustCompile(`(?m)^` + fmt.Sprint(j+1) + `( \*)? .*  (yes|no)  +active$`).MatchString(out) {
				t.Errorf("node %d: cluster status =\n%s\nwant node %d active", self, out, j+1)
			}
		}
		for _, gr := range st.Groups {
			want := regexp.QuoteMeta(fmt.Sprintf("unknown (led by node %d)", gr.Leader))
			if gr.Leader == self {
				want = `1:\d+ 2:\d+ 3:\d+`
			}
			if !regexp.MustCompile(`(?m)^` + fmt.Sprint(gr.GroupID) + ` .*  1-\d+  .*  ` + want + `  +(yes|no)  +-  +-$`).MatchString(out) {
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

// TestClusterMoveSingleNode: a broker without a cluster has no replicas
// to move: fila cluster move fails (exit 1) with the broker's
// NOT_SUPPORTED, with or without --wait, in words or in JSON, and
// whether the queue exists or not.
func TestClusterMoveSingleNode(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	c.ok("queue", "create", "orders")
	c.fails(1, "fila: cluster move orders: a single node has no replicas to move: not supported", "cluster", "move", "orders", "--to", "1,2,3")
	c.fails(1, "not supported", "cluster", "move", "orders", "--to", "2", "--wait")
	c.fails(1, "fila: cluster move nosuch: a single node has no replicas to move: not supported", "cluster", "move", "nosuch", "--to", "1")
	r := c.fails(1, `"code":"NOT_SUPPORTED"`, "cluster", "move", "orders", "--to", "1,2,3", "-o", "json")
	if r.stdout != "" {
		t.Errorf("cluster move -o json printed %q on stdout; want nothing after a failure", r.stdout)
	}
}

// TestClusterDrainSingleNode: a broker without a cluster has no other
// node to move its queues to: fila cluster drain fails (exit 1) with the
// broker's NOT_SUPPORTED, with --wait or --undo, in words or in JSON.
func TestClusterDrainSingleNode(t *testing.T) {
	srv := filatest.Start(t)
	c := newCLI(t, srv)
	c.fails(1, "fila: cluster drain 1: a single node has no other node to move its queues to: not supported", "cluster", "drain", "1")
	c.fails(1, "fila: cluster drain 2: a single node has no other node to move its queues to: not supported", "cluster", "drain", "2", "--wait")
	c.fails(1, "fila: cluster drain 1: a single node has no other node to move its queues to: not supported", "cluster", "drain", "1", "--undo")
	r := c.fails(1, `"code":"NOT_SUPPORTED"`, "cluster", "drain", "1", "-o", "json")
	if r.stdout != "" {
		t.Errorf("cluster drain -o json printed %q on stdout; want nothing after a failure", r.stdout)
	}
}

// drainLine is a line of `fila cluster drain --wait -o json`.
type drainLine struct {
	NodeID       uint64            `json:"node_id"`
	MovesPlanned int               `json:"moves_planned"`
	State        string            `json:"state"`
	States       map[string]string `json:"states"`
	Queues       []string          `json:"queues"`
	Unreachable  []uint64          `json:"unreachable"`
	Done         bool              `json:"done"`
}

// TestClusterDrain drains, in a three-node cluster that keeps two
// replicas of each queue, a node holding a queue: fila cluster drain
// --wait follows the move of the queue to the third node until every
// node reports the node drained; the status then shows it drained and
// the queue on the two others. Draining it again plans nothing; --undo
// makes it active again; a node that is not a member fails.
func TestClusterDrain(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three fila-server processes")
	}
	cl := filatest.StartCluster(t, 3, filatest.WithEnv("FILA_CLUSTER_TICK_INTERVAL=100ms", "FILA_CLUSTER_ELECTION_TICKS=10", "FILA_CLUSTER_REPLICATION_FACTOR=2"))
	all := &cli{t: t, addr: cl.Addrs()}
	all.retry("queue", "create", "orders")
	// The queue's replicas, once its group has a leader and every node
	// has registered its client address (the wait asks each node there).
	var st clusterStatus
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		all.json(&st, "cluster", "status")
		registered := len(st.Nodes) == 3 && !slices.ContainsFunc(st.Nodes, func(n clusterNode) bool { return n.Addr == "" })
		if registered && len(st.Groups) == 2 && st.Groups[1].Leader != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster status = %+v; want the queue's group led, every node registered", st)
		}
	}
	var holders []uint64
	for _, r := range st.Groups[1].Replicas {
		holders = append(holders, r.NodeID)
	}
	if len(holders) != 2 {
		t.Fatalf("orders on nodes %v; want 2", holders)
	}
	drained := holders[1]
	rest := []uint64{1, 2, 3}
	rest = slices.DeleteFunc(rest, func(id uint64) bool { return id == drained })

	r := all.run("cluster", "drain", fmt.Sprint(drained), "--wait", "--timeout", "90s", "-o", "json")
	if r.code != 0 {
		t.Fatalf("cluster drain %d --wait: exit %d\nstdout: %s\nstderr: %s", drained, r.code, r.stdout, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	var first, last drainLine
	if err := json.Unmarshal([]byte(lines[0]), &first); err != nil {
		t.Fatalf("first line %q: %v", lines[0], err)
	}
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil {
		t.Fatalf("last line %q: %v", lines[len(lines)-1], err)
	}
	if first.NodeID != drained || first.MovesPlanned != 1 || first.Done {
		t.Errorf("first line %+v; want node %d, 1 move planned, not done", first, drained)
	}
	if !last.Done || last.State != "drained" || len(last.States) != 3 {
		t.Errorf("last line %+v; want done, drained as 3 nodes report it", last)
	}

	// Each node shows it drained, and the queue's group (as its leader
	// lists it, once the node left out dropped its copy) on the others.
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		all.json(&st, "cluster", "status")
		var on []uint64
		for _, g := range st.Groups {
			if g.Queue == "orders" {
				for _, rp := range g.Replicas {
					on = append(on, rp.NodeID)
				}
			}
		}
		slices.Sort(on)
		if st.Nodes[drained-1].State == "drained" && slices.Equal(on, rest) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster status = %+v; want node %d drained and orders on %v", st, drained, rest)
		}
	}
	out := all.ok("cluster", "status")
	if !regexp.MustCompile(`(?m)^` + fmt.Sprint(drained) + `( \*)? .*  drained$`).MatchString(out) {
		t.Errorf("cluster status =\n%s\nwant node %d drained in the STATE column", out, drained)
	}

	t.Logf("cluster drain %d --wait -o json:\n%s", drained, r.stdout)
	if out := all.ok("cluster", "drain", fmt.Sprint(drained)); !strings.Contains(out, fmt.Sprintf("node %d: draining: no queue left to move off it", drained)) {
		t.Errorf("cluster drain %d again = %q; want nothing left to move", drained, out)
	}
	// Waiting on a drained node: done at once.
	want := fmt.Sprintf("node %d: draining: no queue left to move off it\nnode %d: drained, no queue has a replica or a target on it\n", drained, drained)
	if out := all.ok("cluster", "drain", fmt.Sprint(drained), "--wait"); out != want {
		t.Errorf("cluster drain %d --wait again = %q; want %q", drained, out, want)
	}
	var plan map[string]any
	all.json(&plan, "cluster", "drain", fmt.Sprint(drained))
	if plan["moves_planned"] != 0.0 || plan["node_id"] != float64(drained) || plan["undo"] != false {
		t.Errorf("cluster drain %d -o json = %v; want 0 moves planned", drained, plan)
	}
	if out := all.ok("cluster", "drain", fmt.Sprint(drained), "--undo"); !strings.Contains(out, fmt.Sprintf("node %d: no longer draining", drained)) {
		t.Errorf("cluster drain %d --undo = %q", drained, out)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		all.json(&st, "cluster", "status")
		if st.Nodes[drained-1].State == "active" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster status = %+v; want node %d active after the undo", st, drained)
		}
	}
	all.fails(1, "fila: cluster drain 9: not a member of the cluster: invalid argument", "cluster", "drain", "9")
}

// TestClusterMembership: three nodes and a fourth started with
// cluster.join. add-node makes it a member; rebalance --dry-run shows
// moves onto it, rebalance --wait carries them out, and every node ends
// holding three of the four queues; node 1, drained, is removed, and its
// ID refused back. Bad arguments are usage errors.
func TestClusterMembership(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four fila-server processes")
	}
	cl := filatest.StartClusterJoining(t, 4, 1, filatest.WithEnv("FILA_CLUSTER_TICK_INTERVAL=100ms", "FILA_CLUSTER_ELECTION_TICKS=10"))
	seeds := strings.Join(strings.Split(cl.Addrs(), ",")[1:], ",") // nodes 2-4: node 1 goes
	all := &cli{t: t, addr: seeds}
	for _, q := range []string{"a", "b", "c", "d"} {
		all.retry("queue", "create", q)
	}
	all.fails(2, "--peer-addr", "cluster", "add-node", "4", "--peer-addr", "no-port")
	all.fails(2, "node ID", "cluster", "remove-node", "zero")
	all.fails(2, "--dry-run and --wait", "cluster", "rebalance", "--dry-run", "--wait")
	all.ok("cluster", "add-node", "4", "--peer-addr", cl.PeerAddrs[3])
	all.fails(1, "already a member", "cluster", "add-node", "4", "--peer-addr", cl.PeerAddrs[3])

	var plan struct {
		Moves []struct {
			Queue string `json:"queue"`
			To    uint64 `json:"to_node_id"`
		} `json:"moves"`
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		all.json(&plan, "cluster", "rebalance", "--dry-run")
		if len(plan.Moves) == 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("rebalance --dry-run: %+v; want 3 moves onto node 4", plan)
		}
	}
	for _, m := range plan.Moves {
		if m.To != 4 {
			t.Errorf("dry run moves %s to node %d; want node 4", m.Queue, m.To)
		}
	}
	if out := all.ok("cluster", "rebalance", "--wait", "--timeout", "90s"); !strings.Contains(out, "rebalance done") {
		t.Errorf("rebalance --wait =\n%s\nwant it done", out)
	}
	var st clusterStatus
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		(&cli{t: t, addr: cl.Nodes[3].Addr}).json(&st, "cluster", "status")
		if len(st.Groups) == 4 { // the meta group and three queues
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node 4 holds %d groups after the rebalance; want the meta group and 3 queues", len(st.Groups))
		}
	}

	if r := all.run("cluster", "remove-node", "1"); r.code != 1 || !strings.Contains(r.stderr, "drain it first") {
		t.Errorf("remove-node of a node holding replicas: exit %d, %s", r.code, r.stderr)
	}
	all.ok("cluster", "drain", "1", "--wait", "--timeout", "90s")
	if out := all.ok("cluster", "remove-node", "1"); !strings.Contains(out, "node 1 removed") {
		t.Errorf("remove-node 1 = %s", out)
	}
	all.fails(1, "never reused", "cluster", "add-node", "1", "--peer-addr", cl.PeerAddrs[0])
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		all.json(&st, "cluster", "status")
		if len(st.Nodes) == 3 && !slices.ContainsFunc(st.Nodes, func(n clusterNode) bool { return n.NodeID == 1 }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members after removing node 1: %+v", st.Nodes)
		}
	}
}

// TestClusterShardedQueue: fila queue create --shards makes a queue of
// shards; enqueue and consume use its name, and each key's messages come
// out of one shard, in order; queue list shows it once, with its shards,
// inspect joins them, and delete takes them all. A single node refuses
// shards.
func TestClusterShardedQueue(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three fila-server processes")
	}
	one := newCLI(t, filatest.Start(t))
	one.fails(1, "needs cluster mode", "queue", "create", "events", "--shards", "2")

	cl := filatest.StartCluster(t, 3, filatest.WithEnv("FILA_CLUSTER_TICK_INTERVAL=100ms", "FILA_CLUSTER_ELECTION_TICKS=10"))
	all := &cli{t: t, addr: cl.Addrs()}
	if out := all.retry("queue", "create", "events", "--shards", "3"); !strings.Contains(out, "created queue events of 3 shards, events~0 to events~2") {
		t.Fatalf("create: %q", out)
	}
	for i := range 4 {
		for _, k := range []string{"acme", "globex", "initech"} {
			all.retry("enqueue", "events", fmt.Sprint(k, "-", i), "--fairness-key", k)
		}
	}
	var list []struct {
		Name   string `json:"name"`
		Ready  uint64 `json:"ready"`
		Shards uint32 `json:"shards"`
	}
	all.json(&list, "queue", "list")
	if len(list) != 2 || list[0].Name != "events" || list[0].Shards != 3 || list[0].Ready != 12 || list[1].Name != "events.dlq" {
		t.Fatalf("queue list: %+v", list)
	}
	if out := all.ok("queue", "list"); !strings.Contains(out, "SHARDS") {
		t.Fatalf("queue list: no SHARDS column:\n%s", out)
	}
	if out := all.ok("queue", "inspect", "events"); !strings.Contains(out, "3 shards") || !strings.Contains(out, "ready 12,") {
		t.Fatalf("queue inspect:\n%s", out)
	}
	out := all.ok("consume", "events", "--count", "12", "-o", "json")
	next := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var d struct {
			Queue       string `json:"queue"`
			FairnessKey string `json:"fairness_key"`
			Payload     string `json:"payload"`
		}
		if err := json.Unmarshal([]byte(line), &d); err != nil {
			t.Fatalf("consume line %q: %v", line, err)
		}
		if want := fmt.Sprint(d.FairnessKey, "-", next[d.FairnessKey]); d.Payload != want || !strings.HasPrefix(d.Queue, "events~") {
			t.Fatalf("delivery %+v; want payload %s from a shard", d, want)
		}
		next[d.FairnessKey]++
	}
	all.json(&list, "queue", "list")
	if list[0].Ready != 0 {
		t.Fatalf("after consuming everything: %+v", list)
	}
	all.ok("queue", "delete", "events")
	all.json(&list, "queue", "list")
	if len(list) != 0 {
		t.Fatalf("after delete: %+v", list)
	}
}
