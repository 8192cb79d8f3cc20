package cmd

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	fila "github.com/fila-mq/fila/sdk/go"
)

func TestParseNodeIDs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []uint64
	}{
		{"1", []uint64{1}},
		{"3,1,2", []uint64{3, 1, 2}},
		{" 2, 3 ,4 ", []uint64{2, 3, 4}},
		{"18446744073709551615", []uint64{1<<64 - 1}},
	} {
		got, err := parseNodeIDs(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("parseNodeIDs(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	many := make([]string, maxMoveReplicas+1)
	for i := range many {
		many[i] = u(uint64(i + 1))
	}
	for _, tc := range []struct {
		in, want string
	}{
		{"", `"" is not a node ID`},
		{"1,,2", `"" is not a node ID`},
		{"1,x", `"x" is not a node ID`},
		{"0", `"0" is not a node ID`},
		{"-1", `"-1" is not a node ID`},
		{"1,2,1", "node 1 is named twice"},
		{strings.Join(many, ","), "65 node IDs; at most 64"},
	} {
		_, err := parseNodeIDs(tc.in)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseNodeIDs(%q) = %v; want a usage error containing %q", tc.in, err, tc.want)
		}
	}
}

// TestMoveProgress: a move is done only when no node that answered
// reports a target for the queue's group and the node that leads it
// lists exactly the nodes asked for, none a learner.
func TestMoveProgress(t *testing.T) {
	group := func(leader, term uint64, target []uint64, replicas ...fila.ClusterReplica) fila.ClusterGroup {
		return fila.ClusterGroup{ID: 7, Queue: "orders", Leader: leader, Term: term, Target: target, Replicas: replicas}
	}
	voter := func(id, lag uint64) fila.ClusterReplica {
		return fila.ClusterReplica{NodeID: id, Known: true, Lag: lag}
	}
	learner := func(id, lag uint64) fila.ClusterReplica {
		return fila.ClusterReplica{NodeID: id, Known: true, Lag: lag, Learner: true}
	}
	follower := func(ids ...uint64) []fila.ClusterReplica {
		var rs []fila.ClusterReplica
		for _, id := range ids {
			rs = append(rs, fila.ClusterReplica{NodeID: id})
		}
		return rs
	}
	view := func(id uint64, gs ...fila.ClusterGroup) *fila.ClusterStatus {
		meta := fila.ClusterGroup{ID: 1, Leader: 1, Replicas: follower(1, 2, 3, 4)}
		return &fila.ClusterStatus{NodeID: id, Groups: append([]fila.ClusterGroup{meta}, gs...)}
	}
	w := &moveWatch{queue: "orders", want: []uint64{2, 3, 4}}
	for _, tc := range []struct {
		name        string
		views       []*fila.ClusterStatus
		unreachable []uint64
		done        bool
		line        string
	}{
		{
			name: "learner catching up",
			views: []*fila.ClusterStatus{
				view(1, group(1, 2, []uint64{2, 3, 4}, voter(1, 0), voter(2, 0), voter(3, 0), learner(4, 1200))),
				view(2, group(1, 2, []uint64{2, 3, 4}, follower(1, 2, 3, 4)...)),
			},
			line: "orders: led by node 1, replicas 1:0 2:0 3:0 4:1200(learner), moving to nodes 2,3,4 (the plan of nodes 1,2)",
		},
		{
			name: "a node still reports the target",
			views: []*fila.ClusterStatus{
				view(2, group(2, 3, nil, voter(2, 0), voter(3, 0), voter(4, 0))),
				view(3, group(2, 3, []uint64{2, 3, 4}, follower(2, 3, 4)...)),
			},
			line: "orders: led by node 2, replicas 2:0 3:0 4:0, moving to nodes 2,3,4 (the plan of nodes 3)",
		},
		{
			name: "the leader did not answer",
			views: []*fila.ClusterStatus{
				view(3, group(2, 3, nil, follower(2, 3, 4)...)),
				view(4, group(2, 3, nil, follower(2, 3, 4)...)),
			},
			unreachable: []uint64{2},
			line:        "orders: no node that answered leads it, replicas 2:? 3:? 4:?, no node reports a target (moving to nodes 2,3,4); no answer from nodes 2",
		},
		{
			name: "a learner left",
			views: []*fila.ClusterStatus{
				view(2, group(2, 3, nil, voter(2, 0), voter(3, 0), learner(4, 0))),
			},
			line: "orders: led by node 2, replicas 2:0 3:0 4:0(learner), no node reports a target (moving to nodes 2,3,4)",
		},
		{
			name: "another replica set",
			views: []*fila.ClusterStatus{
				view(2, group(2, 3, nil, voter(1, 0), voter(2, 0), voter(3, 0))),
			},
			line: "orders: led by node 2, replicas 1:0 2:0 3:0, no node reports a target (moving to nodes 2,3,4)",
		},
		{
			name:  "no node holds the group",
			views: []*fila.ClusterStatus{view(1)},
			line:  "orders: no node that answered holds its group",
		},
		{
			name: "done, a stale leader of an older term aside",
			views: []*fila.ClusterStatus{
				view(1, group(1, 2, nil, voter(1, 0), voter(2, 0), voter(3, 0))),
				view(3, group(3, 4, nil, voter(4, 0), voter(3, 0), voter(2, 0))),
				view(4, group(3, 4, nil, follower(2, 3, 4)...)),
			},
			done: true,
			line: "orders: moved to nodes 2,3,4, led by node 3",
		},
	} {
		views := map[uint64]*fila.ClusterStatus{}
		for _, v := range tc.views {
			views[v.NodeID] = v
		}
		st := w.progress(views, tc.unreachable)
		if st.Done != tc.done {
			t.Errorf("%s: done = %v; want %v (%+v)", tc.name, st.Done, tc.done, st)
		}
		if got := w.line(st); got != tc.line {
			t.Errorf("%s: line\n %q\nwant\n %q", tc.name, got, tc.line)
		}
	}
}

func TestReplicaLag(t *testing.T) {
	gr := fila.ClusterGroup{Leader: 2, Replicas: []fila.ClusterReplica{{NodeID: 1}, {NodeID: 2}, {NodeID: 4, Learner: true}}}
	if got, want := replicaLag(1, gr), "unknown (led by node 2); learners 4"; got != want {
		t.Errorf("replicaLag on a follower = %q; want %q", got, want)
	}
	gr.Replicas = []fila.ClusterReplica{{NodeID: 1, Known: true, Lag: 3}, {NodeID: 2, Known: true}, {NodeID: 4, Learner: true}}
	if got, want := replicaLag(2, gr), "1:3 2:0 4:?(learner)"; got != want {
		t.Errorf("replicaLag on the leader = %q; want %q", got, want)
	}
	gr.Leader = 0
	if got, want := replicaLag(2, gr), "unknown (no leader); learners 4"; got != want {
		t.Errorf("replicaLag without a leader = %q; want %q", got, want)
	}
}

func TestParseNodeID(t *testing.T) {
	for in, want := range map[string]uint64{"1": 1, "3": 3, " 7 ": 7, "18446744073709551615": 1<<64 - 1} {
		if got, err := parseNodeID(in); err != nil || got != want {
			t.Errorf("parseNodeID(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "0", "-1", "x", "1,2", "18446744073709551616"} {
		_, err := parseNodeID(in)
		var ue usageError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), "is not a node ID") {
			t.Errorf("parseNodeID(%q) = %v; want a usage error", in, err)
		}
	}
}

func TestMovesPlanned(t *testing.T) {
	for n, want := range map[int]string{
		0: "no queue left to move off it",
		1: "the move of 1 queue off it planned",
		7: "the moves of 7 queues off it planned",
	} {
		if got := movesPlanned(n); got != want {
			t.Errorf("movesPlanned(%d) = %q; want %q", n, got, want)
		}
	}
}

// TestDrainProgress: a drain is done only when every node that answered
// reports the node drained; until then the line gives the least advanced
// state, the nodes that report another, and the queues whose group still
// has a replica or a target on the node, as any node that answered lists
// it.
func TestDrainProgress(t *testing.T) {
	nodes := func(state3 string) []fila.ClusterNode {
		return []fila.ClusterNode{{ID: 1, State: fila.NodeActive}, {ID: 2, State: fila.NodeActive}, {ID: 3, State: state3}, {ID: 4, State: fila.NodeActive}}
	}
	group := func(queue string, target []uint64, replicas ...uint64) fila.ClusterGroup {
		g := fila.ClusterGroup{ID: 9, Queue: queue, Leader: replicas[0], Target: target}
		for _, id := range replicas {
			g.Replicas = append(g.Replicas, fila.ClusterReplica{NodeID: id})
		}
		return g
	}
	meta := group("", nil, 1, 2, 3, 4) // the meta group: node 3 still votes, never counted
	view := func(id uint64, state3 string, gs ...fila.ClusterGroup) *fila.ClusterStatus {
		return &fila.ClusterStatus{NodeID: id, Nodes: nodes(state3), Groups: append([]fila.ClusterGroup{meta}, gs...)}
	}
	w := &drainWatch{node: 3, planned: 2}
	for _, tc := range []struct {
		name        string
		views       []*fila.ClusterStatus
		unreachable []uint64
		state       string
		queues      []string
		done        bool
		line        string
	}{
		{
			name: "moves under way",
			views: []*fila.ClusterStatus{
				view(1, fila.NodeDraining, group("billing", []uint64{1, 2, 4}, 1, 2, 3), group("orders", []uint64{1, 2, 4}, 1, 2, 3)),
				view(3, fila.NodeDraining, group("billing", nil, 1, 2, 3), group("orders", nil, 1, 2, 3)),
			},
			state:  fila.NodeDraining,
			queues: []string{"billing", "orders"},
			line:   "node 3: draining, 2 queues have a replica or a target on it: billing, orders",
		},
		{
			name: "a node that applied less",
			views: []*fila.ClusterStatus{
				view(1, fila.NodeDrained, group("billing", nil, 1, 2, 4)),
				view(2, fila.NodeDraining, group("billing", nil, 1, 2, 4)),
				view(4, fila.NodeDrained, group("billing", nil, 1, 2, 4)),
			},
			unreachable: []uint64{3},
			state:       fila.NodeDraining,
			queues:      []string{},
			line:        "node 3: draining (drained on nodes 1,4), no queue has a replica or a target on it; no answer from nodes 3",
		},
		{
			name: "a node that reports no state",
			views: []*fila.ClusterStatus{
				view(1, fila.NodeDrained),
				view(2, ""),
			},
			state:  "",
			queues: []string{},
			line:   "node 3: state unknown (drained on nodes 1), no queue has a replica or a target on it",
		},
		{
			name: "a learner on the node's way out, a target onto it",
			views: []*fila.ClusterStatus{
				view(1, fila.NodeDraining, group("a", nil, 1, 2, 3), group("b", []uint64{1, 3}, 1, 2), group("c", nil, 1, 2), group("d", nil, 1, 3), group("e", nil, 3, 4), group("f", nil, 2, 3), group("g", nil, 3)),
			},
			state:  fila.NodeDraining,
			queues: []string{"a", "b", "d", "e", "f", "g"},
			line:   "node 3: draining, 6 queues have a replica or a target on it: a, b, d, e, f and 1 more",
		},
		{
			name: "done",
			views: []*fila.ClusterStatus{
				view(1, fila.NodeDrained, group("orders", nil, 1, 2, 4)),
				view(2, fila.NodeDrained, group("orders", nil, 1, 2, 4)),
			},
			unreachable: []uint64{4},
			state:       fila.NodeDrained,
			queues:      []string{},
			done:        true,
			line:        "node 3: drained, no queue has a replica or a target on it; no answer from nodes 4",
		},
		{
			name: "drained, one queue still listed by a node that has yet to drop its copy",
			views: []*fila.ClusterStatus{
				view(3, fila.NodeDrained, group("orders", nil, 1, 2, 3)),
			},
			state:  fila.NodeDrained,
			queues: []string{"orders"},
			done:   true,
			line:   "node 3: drained, 1 queue has a replica or a target on it: orders",
		},
		{
			name:        "no node answered",
			unreachable: []uint64{1, 2, 3, 4},
			state:       "",
			queues:      []string{},
			line:        "node 3: state unknown, no queue has a replica or a target on it; no answer from nodes 1,2,3,4",
		},
	} {
		views := map[uint64]*fila.ClusterStatus{}
		for _, v := range tc.views {
			views[v.NodeID] = v
		}
		st := w.progress(views, tc.unreachable)
		if st.Done != tc.done || st.State != tc.state || !reflect.DeepEqual(st.Queues, tc.queues) || st.NodeID != 3 || st.MovesPlanned != 2 || len(st.States) != len(tc.views) {
			t.Errorf("%s: progress = %+v; want done %v, state %q, queues %v", tc.name, st, tc.done, tc.state, tc.queues)
		}
		if got := w.line(st); got != tc.line {
			t.Errorf("%s: line\n %q\nwant\n %q", tc.name, got, tc.line)
		}
	}
}

// TestDrainUndone: the wait fails only once every node that answered,
// the seed among them, reports the node active.
func TestDrainUndone(t *testing.T) {
	w := &drainWatch{node: 3}
	w.seedID = 1
	view := func(id uint64, state string) *fila.ClusterStatus {
		return &fila.ClusterStatus{NodeID: id, Nodes: []fila.ClusterNode{{ID: 3, State: state}}}
	}
	for _, tc := range []struct {
		name  string
		views []*fila.ClusterStatus
		want  bool
	}{
		{"undone", []*fila.ClusterStatus{view(1, fila.NodeActive), view(2, fila.NodeActive)}, true},
		{"one node still draining", []*fila.ClusterStatus{view(1, fila.NodeActive), view(2, fila.NodeDraining)}, false},
		{"the seed did not answer", []*fila.ClusterStatus{view(2, fila.NodeActive)}, false},
		{"draining", []*fila.ClusterStatus{view(1, fila.NodeDraining)}, false},
	} {
		views := map[uint64]*fila.ClusterStatus{}
		for _, v := range tc.views {
			views[v.NodeID] = v
		}
		if got := w.undone(views, w.progress(views, nil)); got != tc.want {
			t.Errorf("%s: undone = %v; want %v", tc.name, got, tc.want)
		}
	}
}

// TestPrintPlan: a rebalance's plan as tables (the moves with their
// step, then the preferred leaders), the balanced line when it is
// empty, and the -o json object, with [] for empty lists.
func TestPrintPlan(t *testing.T) {
	plan := &fila.RebalancePlan{
		Moves: []fila.RebalanceMove{{Queue: "orders", From: 1, To: 4}, {Queue: "billing", From: 2, To: 4}},
		Leads: []fila.RebalanceLead{{Queue: "orders", Node: 4}},
	}
	for _, tc := range []struct {
		name   string
		plan   *fila.RebalancePlan
		dry    bool
		output string
		want   string
	}{
		{
			name: "planned",
			plan: plan,
			want: "2 replica moves and 1 preferred leaders planned\n\n" +
				"STEP  QUEUE    FROM  TO\n" +
				"1     orders   1     4\n" +
				"2     billing  2     4\n\n" +
				"QUEUE   PREFERRED LEADER\n" +
				"orders  4\n",
		},
		{
			name: "dry run, leaders only",
			plan: &fila.RebalancePlan{Leads: plan.Leads},
			dry:  true,
			want: "0 replica moves and 1 preferred leaders would be planned (dry run: nothing changed)\n\n" +
				"QUEUE   PREFERRED LEADER\n" +
				"orders  4\n",
		},
		{name: "balanced", plan: &fila.RebalancePlan{}, want: "the cluster is balanced: nothing to do\n"},
		{name: "balanced, dry run", plan: &fila.RebalancePlan{}, dry: true, want: "the cluster is balanced: nothing to do\n"},
		{
			name: "json", plan: plan, dry: true, output: "json",
			want: `{"dry_run":true,"moves":[{"queue":"orders","from_node_id":1,"to_node_id":4},{"queue":"billing","from_node_id":2,"to_node_id":4}],"leads":[{"queue":"orders","node_id":4}]}`,
		},
		{name: "json, balanced", plan: &fila.RebalancePlan{}, output: "json", want: `{"dry_run":false,"moves":[],"leads":[]}`},
	} {
		var out strings.Builder
		g := &globals{stdout: &out, output: tc.output}
		if err := g.printPlan(tc.plan, tc.dry); err != nil {
			t.Fatalf("%s: printPlan: %v", tc.name, err)
		}
		got := out.String()
		if tc.output == "json" {
			var b bytes.Buffer
			if err := json.Compact(&b, []byte(got)); err != nil {
				t.Fatalf("%s: printPlan wrote %q: %v", tc.name, got, err)
			}
			got = b.String()
		}
		if got != tc.want {
			t.Errorf("%s: printPlan wrote\n%s\nwant\n%s", tc.name, got, tc.want)
		}
	}
}

// TestRebalanceProgress: a rebalance is done once some node answered and
// none reports a move pending nor a group with a target; until then the
// line gives the most pending moves any node reports and the queues
// moving, by name, whatever order the views come in.
func TestRebalanceProgress(t *testing.T) {
	moving := func(queue string) fila.ClusterGroup {
		return fila.ClusterGroup{ID: 5, Queue: queue, Target: []uint64{1, 4}}
	}
	settled := func(queue string) fila.ClusterGroup { return fila.ClusterGroup{ID: 6, Queue: queue} }
	meta := fila.ClusterGroup{ID: 1}
	pending := func(n int) []fila.RebalanceMove { return make([]fila.RebalanceMove, n) }
	view := func(id uint64, p []fila.RebalanceMove, gs ...fila.ClusterGroup) *fila.ClusterStatus {
		return &fila.ClusterStatus{NodeID: id, Pending: p, Groups: append([]fila.ClusterGroup{meta}, gs...)}
	}
	for _, tc := range []struct {
		name        string
		views       []*fila.ClusterStatus
		unreachable []uint64
		pending     int
		moving      []string
		done        bool
		line        string
	}{
		{
			name:    "moves pending and under way",
			views:   []*fila.ClusterStatus{view(1, pending(3), moving("orders"), settled("a")), view(2, pending(2), moving("billing"), moving("orders")), view(3, nil, moving("zeta"))},
			pending: 3,
			moving:  []string{"billing", "orders", "zeta"},
			line:    "3 moves pending, 3 under way (billing, orders, zeta)",
		},
		{
			name:        "one move pending",
			views:       []*fila.ClusterStatus{view(2, pending(1), settled("orders"))},
			unreachable: []uint64{1, 3},
			pending:     1,
			moving:      []string{},
			line:        "1 move pending, 0 under way; not answering: nodes 1,3",
		},
		{
			name:    "many moving",
			views:   []*fila.ClusterStatus{view(1, nil, moving("f"), moving("e"), moving("d"), moving("c"), moving("b"), moving("a"))},
			moving:  []string{"a", "b", "c", "d", "e", "f"},
			line:    "0 moves pending, 6 under way (a, b, c, d, e, …)",
			pending: 0,
		},
		{
			name:        "done",
			views:       []*fila.ClusterStatus{view(1, nil, settled("orders")), view(3, nil)},
			unreachable: []uint64{2},
			moving:      []string{},
			done:        true,
			line:        "rebalance done: no move pending or under way; not answering: nodes 2",
		},
		{
			name:        "no node answered",
			unreachable: []uint64{1, 2, 3},
			moving:      []string{},
			line:        "0 moves pending, 0 under way; not answering: nodes 1,2,3",
		},
	} {
		views := map[uint64]*fila.ClusterStatus{}
		for _, v := range tc.views {
			views[v.NodeID] = v
		}
		for range 5 { // map order must not show
			st := rebalanceProgress(views, tc.unreachable)
			if st.Done != tc.done || st.Pending != tc.pending || !reflect.DeepEqual(st.Moving, tc.moving) || len(st.Unreachable) != len(tc.unreachable) || st.Unreachable == nil {
				t.Fatalf("%s: progress = %+v; want done %v, %d pending, moving %v", tc.name, st, tc.done, tc.pending, tc.moving)
			}
			if got := rebalanceLine(st); got != tc.line {
				t.Fatalf("%s: line\n %q\nwant\n %q", tc.name, got, tc.line)
			}
		}
	}
}

// TestPrintClusterRebalance: cluster status shows each group's preferred
// leader (- for none) and, when a rebalance has moves not yet started,
// lists them after the groups; -o json carries both.
func TestPrintClusterRebalance(t *testing.T) {
	st := &fila.ClusterStatus{
		NodeID: 1,
		Nodes:  []fila.ClusterNode{{ID: 1, Addr: "a:1", PeerAddr: "a:2", Connected: true, State: fila.NodeActive}},
		Groups: []fila.ClusterGroup{
			{ID: 1, Leader: 1, Term: 2, Commit: 5, Applied: 5, LastIndex: 5, FirstIndex: 1, Replicas: []fila.ClusterReplica{{NodeID: 1, Known: true}}},
			{ID: 2, Queue: "orders", Leader: 1, Term: 2, Commit: 3, Applied: 3, LastIndex: 3, FirstIndex: 1, Replicas: []fila.ClusterReplica{{NodeID: 1, Known: true}}, PreferredLeader: 4},
		},
		Pending: []fila.RebalanceMove{{Queue: "billing", From: 1, To: 4}, {Queue: "orders", From: 2, To: 3}},
	}
	var out strings.Builder
	g := &globals{stdout: &out}
	if err := g.printCluster(st); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"QUIESCED  TARGET  PREFERRED\n",
		"  no        -       -\n", // the meta group: none
		"  no        -       4\n", // orders
		"\nrebalance: 2 moves not yet started\n\nSTEP  QUEUE    FROM  TO\n1     billing  1     4\n2     orders   2     3\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("printCluster wrote\n%s\nwant it to contain %q", text, want)
		}
	}
	out.Reset()
	st.Pending = nil
	if err := g.printCluster(st); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "rebalance") {
		t.Errorf("printCluster without pending moves wrote\n%s\nwant no rebalance lines", out.String())
	}
	js, err := json.Marshal(clusterJSON(st))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"pending":[]`, `"preferred_leader":0`, `"preferred_leader":4`} {
		if !strings.Contains(string(js), want) {
			t.Errorf("cluster status JSON %s; want %s", js, want)
		}
	}
	st.Pending = []fila.RebalanceMove{{Queue: "billing", From: 1, To: 4}}
	if js, _ := json.Marshal(clusterJSON(st)); !strings.Contains(string(js), `"pending":[{"queue":"billing","from_node_id":1,"to_node_id":4}]`) {
		t.Errorf("cluster status JSON %s; want the pending move", js)
	}
}
