package e2e

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// nodeStatus returns the cluster status node i answers, or nil when it
// does not answer (it is down).
func nodeStatus(ctx context.Context, c *filatest.Cluster, i int) *fila.ClusterStatus {
	cl, err := fila.Connect(ctx, c.Nodes[i].Addr)
	if err != nil {
		return nil
	}
	defer cl.Close()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	st, err := cl.Admin().ClusterStatus(sctx)
	if err != nil {
		return nil
	}
	return st
}

// placement returns queue's voters as its leader reports them, and
// whether any answering node still reports a move under way, a learner,
// or no leader.
func placement(ctx context.Context, c *filatest.Cluster, queue string) (voters []uint64, moving bool) {
	led := false
	for i := range c.Nodes {
		st := nodeStatus(ctx, c, i)
		if st == nil {
			continue
		}
		for _, g := range st.Groups {
			if g.Queue != queue {
				continue
			}
			if len(g.Target) > 0 {
				moving = true
			}
			if g.Leader != st.NodeID {
				continue
			}
			led = true
			for _, r := range g.Replicas {
				if r.Learner {
					moving = true
				} else {
					voters = append(voters, r.NodeID)
				}
			}
		}
	}
	slices.Sort(voters)
	return voters, moving || !led
}

// awaitPlaced waits until queue's leader reports exactly replicas as its
// voters and no node reports a move under way.
func awaitPlaced(t *testing.T, ctx context.Context, c *filatest.Cluster, queue string, replicas []uint64) {
	t.Helper()
	for {
		voters, moving := placement(ctx, c, queue)
		if !moving && slices.Equal(voters, replicas) {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s not placed on %v: voters %v, moving %v", queue, replicas, voters, moving)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterMoveUnderLoad: with producers and a consumer running, the
// queue moves from its three nodes to the fourth and two of them,
// leaving out its leader. The history checks (runClusterOf), and the
// test logs the longest pause of acknowledged enqueues during the move.
func TestClusterMoveUnderLoad(t *testing.T) {
	runClusterOf(t, 4, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		lead := uint64(leaderOf(t, ctx, c, admin, "jobs") + 1)
		cur, _ := placement(ctx, c, "jobs")
		var to []uint64
		for id := uint64(1); id <= 4; id++ {
			if id != lead {
				to = append(to, id)
			}
		}
		w.resetPause()
		start := time.Now()
		if err := admin.MoveQueue(ctx, "jobs", to...); err != nil {
			t.Fatal(err)
		}
		awaitPlaced(t, ctx, c, "jobs", to)
		t.Logf("jobs moved from %v (led by %d) to %v in %v; longest wait between acknowledged enqueues: %v",
			cur, lead, to, time.Since(start).Round(time.Millisecond), w.pause().Round(time.Millisecond))
		// The node left out holds nothing of it, even after a restart.
		c.Nodes[lead-1].Kill()
		c.Nodes[lead-1].Restart(t)
		w.waitSent(ctx, w.sent.Load()+100)
		if st := nodeStatus(ctx, c, int(lead-1)); st != nil {
			for _, g := range st.Groups {
				if g.Queue == "jobs" {
					t.Fatalf("node %d, moved away from, holds jobs after a restart", lead)
				}
			}
		}
	})
}

// TestClusterDrainUnderLoad: four nodes, "jobs" under load and more
// queues beside it (FILA_TEST_DRAIN_QUEUES, 8 by default; `make
// cluster-soak` makes it 400, so that the drained node leads about 100).
// The node leading "jobs" is drained:
// every queue it held moves to the other three, the history checks, and
// the test logs how long the drain took and the longest wait between
// acknowledged enqueues. The drained node, restarted, holds nothing,
// stays drained, and a queue created after the drain avoids it.
func TestClusterDrainUnderLoad(t *testing.T) {
	extra := envInt("FILA_TEST_DRAIN_QUEUES", 8)
	runClusterOf(t, 4, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		for i := range extra {
			createQueue(t, ctx, admin, fmt.Sprintf("extra-%03d", i))
		}
		node := uint64(leaderOf(t, ctx, c, admin, "jobs") + 1)
		led := 0
		if st := nodeStatus(ctx, c, int(node-1)); st != nil {
			for _, g := range st.Groups {
				if g.Queue != "" && g.Leader == node {
					led++
				}
			}
		}
		w.resetPause()
		start := time.Now()
		planned, err := admin.DrainNode(ctx, node)
		if err != nil {
			t.Fatal(err)
		}
		awaitDrained(t, ctx, c, node)
		t.Logf("node %d, leading %d queues, drained of %d queues in %v; longest wait between acknowledged enqueues on jobs: %v",
			node, led, planned, time.Since(start).Round(time.Millisecond), w.pause().Round(time.Millisecond))
		var others []uint64
		for id := uint64(1); id <= 4; id++ {
			if id != node {
				others = append(others, id)
			}
		}
		awaitPlaced(t, ctx, c, "jobs", others)
		c.Nodes[node-1].Kill()
		c.Nodes[node-1].Restart(t)
		createQueue(t, ctx, admin, "after-drain")
		awaitPlaced(t, ctx, c, "after-drain", others)
		st := nodeStatus(ctx, c, int(node-1))
		for st == nil && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond)
			st = nodeStatus(ctx, c, int(node-1))
		}
		for _, g := range st.Groups {
			if g.Queue != "" {
				t.Errorf("node %d, drained, holds %s after a restart", node, g.Queue)
			}
		}
		for _, n := range st.Nodes {
			if n.ID == node && n.State != fila.NodeDrained {
				t.Errorf("node %d after a restart: %s; want drained", node, n.State)
			}
		}
		w.waitSent(ctx, w.sent.Load()+100)
	})
}

// TestClusterRebalanceUnderLoad: four nodes; "jobs" and seven more
// queues are created while node 4 is drained, so that all are on nodes
// 1–3; node 4 is undrained and a rebalance runs under load. It ends with
// the plan carried out (its moves done, its preferred leaders leading),
// and the history checks.
func TestClusterRebalanceUnderLoad(t *testing.T) {
	runClusterOf(t, 4, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		if _, err := admin.DrainNode(ctx, 4); err != nil {
			t.Fatal(err)
		}
		awaitDrained(t, ctx, c, 4)
		for i := range 7 {
			createQueue(t, ctx, admin, fmt.Sprintf("extra-%d", i))
		}
		if err := admin.UndrainNode(ctx, 4); err != nil {
			t.Fatal(err)
		}
		w.resetPause()
		start := time.Now()
		var plan *fila.RebalancePlan
		for {
			var err error
			if plan, err = admin.Rebalance(ctx, false); err != nil {
				t.Fatal(err)
			}
			if len(plan.Moves) > 0 {
				break // the node that took it knows node 4 is back
			}
			time.Sleep(100 * time.Millisecond)
		}
		// Done when nothing is under way and the plan holds: each moved
		// queue's replicas left From for To, each preferred leader
		// leads. (The plan's evenness, weighing the busy "jobs" against
		// the idle queues, is TestPlanRebalance's and
		// TestPlanRebalanceWeighted's.)
		for {
			busy := false
			replicas := map[string][]uint64{}
			leader := map[string]uint64{}
			for i := range c.Nodes {
				st := nodeStatus(ctx, c, i)
				if st == nil {
					busy = true
					continue
				}
				busy = busy || len(st.Pending) > 0
				for _, g := range st.Groups {
					if g.Queue == "" {
						continue
					}
					busy = busy || len(g.Target) > 0
					if g.Leader == st.NodeID {
						leader[g.Queue] = g.Leader
						for _, r := range g.Replicas {
							replicas[g.Queue] = append(replicas[g.Queue], r.NodeID)
						}
					}
				}
			}
			done := !busy
			for _, m := range plan.Moves {
				done = done && slices.Contains(replicas[m.Queue], m.To) && !slices.Contains(replicas[m.Queue], m.From)
			}
			for _, l := range plan.Leads {
				done = done && leader[l.Queue] == l.Node
			}
			if done {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("plan %+v not carried out: replicas %v, leaders %v", plan, replicas, leader)
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Logf("rebalanced in %v: %d moves, %d preferred leaders; longest wait between acknowledged enqueues on jobs: %v",
			time.Since(start).Round(time.Millisecond), len(plan.Moves), len(plan.Leads), w.pause().Round(time.Millisecond))
	})
}

// awaitDrained waits until every answering node reports node drained.
func awaitDrained(t *testing.T, ctx context.Context, c *filatest.Cluster, node uint64) {
	t.Helper()
	for {
		done := true
		for i := range c.Nodes {
			st := nodeStatus(ctx, c, i)
			if st == nil {
				continue
			}
			for _, n := range st.Nodes {
				if n.ID == node && n.State != fila.NodeDrained {
					done = false
				}
			}
		}
		if done {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("node %d not drained", node)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestClusterReplaceNode: under load, node 4 (started with cluster.join)
// is added, "jobs" moves onto it, and node 1 is drained and removed. The
// history checks; node 1 shuts down, and restarted on its data directory
// refuses to start, saying it was removed; its ID is refused back.
func TestClusterReplaceNode(t *testing.T) {
	runClusterJoining(t, 4, 1, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		if err := admin.AddNode(ctx, 4, c.PeerAddrs[3]); err != nil {
			t.Fatal(err)
		}
		w.resetPause()
		start := time.Now()
		if err := admin.MoveQueue(ctx, "jobs", 2, 3, 4); err != nil {
			t.Fatal(err)
		}
		awaitPlaced(t, ctx, c, "jobs", []uint64{2, 3, 4})
		if _, err := admin.DrainNode(ctx, 1); err != nil {
			t.Fatal(err)
		}
		awaitDrained(t, ctx, c, 1)
		for {
			err := admin.RemoveNode(ctx, 1)
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("node 4 added, jobs moved onto it, node 1 drained and removed in %v; longest wait between acknowledged enqueues: %v",
			time.Since(start).Round(time.Millisecond), w.pause().Round(time.Millisecond))
		if err := admin.AddNode(ctx, 1, c.PeerAddrs[0]); !errors.Is(err, fila.ErrInvalidArgument) {
			t.Errorf("add node 1 back: %v; want INVALID_ARGUMENT", err)
		}
		w.waitSent(ctx, w.sent.Load()+100)
		// Node 1 shuts down once it has applied its removal; restarted on
		// its data, it refuses to start.
		old := c.Nodes[0]
		code, err := old.Wait(time.Minute)
		if err != nil || code == 0 || !strings.Contains(old.Log(), "this node was removed from the cluster") {
			t.Errorf("node 1 after its removal: exit %d, %v; want it to exit non-zero, saying why:\n%s", code, err, old.Log())
			old.Kill()
		}
		log := filatest.NewLog(1000)
		p, err := filatest.StartProc(filatest.ProcConfig{Bin: filatest.Binary(t), DataDir: old.DataDir, Listen: old.Addr, Env: old.Env, Log: log, Wait: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if p.Addr != "" {
			p.Kill()
			t.Fatalf("node 1, removed, started again on its data:\n%s", log)
		}
		if !strings.Contains(log.String(), "was removed from the cluster") {
			t.Errorf("node 1's refusal does not say why:\n%s", log)
		}
	})
}
