package cmd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

func newClusterCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "cluster", Short: "Inspect the cluster, its nodes and Raft groups; move queues, drain, add and remove nodes, rebalance"}
	c.AddCommand(newClusterStatusCmd(g), newClusterMoveCmd(g), newClusterDrainCmd(g), newClusterRebalanceCmd(g),
		newClusterAddNodeCmd(g), newClusterRemoveNodeCmd(g))
	return c
}

func newClusterStatusCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Nodes, Raft groups, leaders and replica lag, as one node sees them",
		Long: `Show the cluster as one node sees it: the node at --addr (with several
addresses, the first that answers), marked * in the table.

Nodes: each member's ID, client address, peer address, whether the
answering node is connected to it, and its state: active, draining (fila
cluster drain is moving the replicas it still holds off it) or drained
(it holds no replica; it still votes in the meta group).

Groups: the Raft groups the answering node holds, the meta group first,
then one per queue: the leader's node ID, the term, the commit and applied
indexes on the answering node, and the lag of each replica, as node:entries
behind the leader's log. Only a group's leader knows the lag: for a group
the answering node does not lead, run the command against the leader.
A replica marked (learner) is catching up during a move and does not
vote yet; TARGET is the replica set a move under way (fila cluster move)
is taking the group to, - when none.

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

func newClusterMoveCmd(g *globals) *cobra.Command {
	var (
		to   string
		wait bool
	)
	cmd := &cobra.Command{
		Use:   "move QUEUE --to ID,ID,...",
		Short: "Move a queue's replicas to other nodes",
		Long: `Move a queue's replicas, with its dead-letter queue's, to the nodes --to
names by node ID (cluster.node_id; fila cluster status lists them): 1 to
64 distinct members, in any order.

The command returns once the cluster has recorded the plan; the move then
runs in the background: each new node joins the queue's Raft group as a
learner and catches up, then the listed nodes become its voters and the
nodes left out delete their copies. fila cluster status shows a move
under way as the group's TARGET, and the learners. Moving a queue to the
nodes it is on clears a plan under way.

With --wait the command then follows the move: every second it asks each
node (at its client address, as cluster status lists it) for its status,
prints a line whenever the queue's group changes (its leader, each
replica as node:entries behind the leader, the learners, the target),
and returns once no node reports a target for the group and its leader
lists exactly the nodes of --to, none a learner. --timeout bounds the
whole command, the wait included (30s by default: give a large queue
more); when it runs out the move goes on, and the command fails (exit 1)
saying so. With --output json the lines are JSON objects, one per line,
the last with "done": true; without --wait the one JSON object says
"planned": true.

Needs a broker in a cluster (a single node answers NOT_SUPPORTED) and,
with auth on, a key with admin on *. Exit 3 when no queue has that name.`,
		Example: `  fila cluster move orders --to 2,3,4
  fila cluster move orders --to 2,3,4 --wait --timeout 10m
  fila --addr 10.0.0.1:5555,10.0.0.2:5555 cluster move orders --to 1,2,3 --wait -o json`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: g.completeQueues(false),
		RunE: func(cmd *cobra.Command, args []string) error {
			queue := args[0]
			replicas, err := parseNodeIDs(to)
			if err != nil {
				return err
			}
			return g.admin(cmd, "move queue", func(ctx context.Context, a *fila.Administrator) error {
				if err := a.MoveQueue(ctx, queue, replicas...); err != nil {
					return err
				}
				if !wait {
					if g.output == "json" {
						return g.printJSON(map[string]any{"queue": queue, "to": replicas, "planned": true, "done": false})
					}
					fmt.Fprintf(g.stdout, "%s: moving to nodes %s: planned; the move runs in the background (fila cluster status shows it, --wait follows it)\n", queue, nodeList(replicas))
					return nil
				}
				return g.waitMove(ctx, a, queue, replicas)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&to, "to", "", "the node IDs to move the queue's replicas to, comma-separated, such as 2,3,4 (required)")
	f.BoolVar(&wait, "wait", false, "follow the move until it is done, printing its progress; --timeout bounds the wait")
	cmd.MarkFlagRequired("to")
	return cmd
}

func newClusterDrainCmd(g *globals) *cobra.Command {
	var undo, wait bool
	cmd := &cobra.Command{
		Use:   "drain NODE [--undo] [--wait]",
		Short: "Move every queue off a node, such as before taking it out of service",
		Long: `Drain the node NODE, by node ID (cluster.node_id; fila cluster status
lists them): it takes no new replica and leads no group, and each queue
it holds a replica of moves (as fila cluster move moves it) to its other
replicas plus the member that holds the fewest replicas and is not
draining, if there is one (otherwise the queue keeps one replica fewer).
The node answering the command may be the one drained.

The command returns once the cluster has recorded the drain, saying how
many queue moves it planned; the moves then run in the background. fila
cluster status shows the node's STATE: draining while it still holds a
replica, then drained (it still votes in the meta group), and each
queue's move as its group's TARGET. Draining a node again plans the
moves of what it still holds; the drain survives any node's restart.

With --undo the node is active again: it takes new replicas and leads.
The moves already planned go on (fila cluster move moves a queue back).

With --wait the command then follows the drain: every second it asks
each node (at its client address, as cluster status lists it) for its
status, prints a line whenever what it sees changes (the node's state as
the nodes that answered report it, and the queues whose group still has
a replica or a target on the node, as their replicas and targets show),
and returns once every node that answers reports the node drained.
--timeout bounds the whole command, the wait included (30s by default:
give large queues more); when it runs out the drain goes on, and the
command fails (exit 1) saying so. With --output json the lines are JSON
objects, one per line, the last with "done": true.

Needs a broker in a cluster (a single node answers NOT_SUPPORTED) and,
with auth on, a key with admin on *. Exit 1 for a node that is not a
member, or when every other member is draining.`,
		Example: `  fila cluster drain 3
  fila cluster drain 3 --wait --timeout 30m
  fila cluster drain 3 --undo
  fila --addr 10.0.0.1:5555,10.0.0.2:5555 cluster drain 3 --wait -o json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			id, err := parseNodeID(args[0])
			if err != nil {
				return err
			}
			if undo && wait {
				return usagef("--undo and --wait: an undone drain has nothing to wait for")
			}
			return g.admin(cmd, "drain node", func(ctx context.Context, a *fila.Administrator) error {
				if undo {
					if err := a.UndrainNode(ctx, id); err != nil {
						return err
					}
					if g.output == "json" {
						return g.printJSON(map[string]any{"node_id": id, "undo": true})
					}
					fmt.Fprintf(g.stdout, "node %d: no longer draining; it takes new replicas again (the moves already planned go on)\n", id)
					return nil
				}
				planned, err := a.DrainNode(ctx, id)
				if err != nil {
					return err
				}
				if !wait {
					if g.output == "json" {
						return g.printJSON(map[string]any{"node_id": id, "undo": false, "moves_planned": planned, "done": false})
					}
					fmt.Fprintf(g.stdout, "node %d: draining: %s; the moves run in the background (fila cluster status shows the node's state, --wait follows the drain)\n", id, movesPlanned(planned))
					return nil
				}
				if g.output != "json" {
					fmt.Fprintf(g.stdout, "node %d: draining: %s\n", id, movesPlanned(planned))
				}
				return g.waitDrain(ctx, a, id, planned)
			})
		},
	}
	f := cmd.Flags()
	f.BoolVar(&undo, "undo", false, "undo a drain: the node is active again and takes new replicas")
	f.BoolVar(&wait, "wait", false, "follow the drain until the node is drained, printing its progress; --timeout bounds the wait")
	return cmd
}

// parseNodeID parses a node ID argument: a positive integer. Its error
// is a usage error.
func parseNodeID(s string) (uint64, error) {
	id, err := strconv.ParseUint(strings.TrimSpace(s), 10, 64)
	if err != nil || id == 0 {
		return 0, usagef("%q is not a node ID (a positive integer, as fila cluster status lists them)", s)
	}
	return id, nil
}

// movesPlanned says how many queue moves a drain planned.
func movesPlanned(n int) string {
	switch n {
	case 0:
		return "no queue left to move off it"
	case 1:
		return "the move of 1 queue off it planned"
	}
	return fmt.Sprintf("the moves of %d queues off it planned", n)
}

// drainJSON is one line of fila cluster drain --wait -o json: where the
// drain of a node stands, as the nodes that answered see it.
type drainJSON struct {
	NodeID uint64 `json:"node_id"`
	// MovesPlanned is the number of queues whose move the drain planned.
	MovesPlanned int `json:"moves_planned"`
	// State is the least advanced state a node that answered reports for
	// the node (active, draining, drained, or "" when one reports none),
	// and States each answering node's report, by its node ID.
	State  string            `json:"state"`
	States map[string]string `json:"states"`
	// Queues are the queues whose group, as a node that answered lists
	// it, still has a replica or a target on the node, by name.
	Queues []string `json:"queues"`
	// Unreachable are the members that did not answer.
	Unreachable []uint64 `json:"unreachable"`
	// Done is true once every node that answered reports the node
	// drained.
	Done bool `json:"done"`
}

// drainWatch follows the drain of a node.
type drainWatch struct {
	statusWatch
	node    uint64
	planned int
}

// waitDrain follows the drain of node id until every node that answers
// reports it drained, printing a line each time what it sees changes.
// It fails when every node that answers reports the node active (its
// drain was undone), and when ctx ends, saying then that the drain goes
// on.
func (g *globals) waitDrain(ctx context.Context, a *fila.Administrator, id uint64, planned int) error {
	w := &drainWatch{statusWatch: newStatusWatch(g, a), node: id, planned: planned}
	defer w.close()
	return g.follow(ctx, &w.statusWatch, func(views map[uint64]*fila.ClusterStatus, unreachable []uint64) (string, any, bool, error) {
		st := w.progress(views, unreachable)
		if w.undone(views, st) {
			return "", nil, false, fmt.Errorf("fila: cluster drain %d: every node that answered reports the node active: its drain was undone", w.node)
		}
		return w.line(st), st, st.Done, nil
	}, w.gaveUp)
}

// undone reports whether the drain was undone: every node that
// answered reports the node active, the seed among them (it applied the
// drain before it answered, so it reports the node active only after an
// undo; another node may not have applied the drain yet).
func (w *drainWatch) undone(views map[uint64]*fila.ClusterStatus, st drainJSON) bool {
	if _, ok := views[w.seedID]; !ok {
		return false
	}
	for _, s := range st.States {
		if s != fila.NodeActive {
			return false
		}
	}
	return true
}

// gaveUp is the error of a wait that ctx ended.
func (w *drainWatch) gaveUp(ctx context.Context) error {
	return &renamedError{msg: fmt.Sprintf("fila: cluster drain %d: %s before the node was drained; the drain goes on in the background (fila cluster status shows it)", w.node, w.why(ctx)), err: ctx.Err()}
}

// stateRank orders a node's states from the least advanced in a drain:
// unknown (""), active, draining, drained.
func stateRank(s string) int {
	switch s {
	case fila.NodeActive:
		return 1
	case fila.NodeDraining:
		return 2
	case fila.NodeDrained:
		return 3
	}
	return 0
}

// progress sums up the views of the nodes that answered, by node ID.
func (w *drainWatch) progress(views map[uint64]*fila.ClusterStatus, unreachable []uint64) drainJSON {
	out := drainJSON{NodeID: w.node, MovesPlanned: w.planned, States: map[string]string{}, Queues: []string{}, Unreachable: unreachable}
	if out.Unreachable == nil {
		out.Unreachable = []uint64{}
	}
	on := map[string]bool{}
	first := true
	for _, id := range slices.Sorted(maps.Keys(views)) {
		state := ""
		for _, n := range views[id].Nodes {
			if n.ID == w.node {
				state = n.State
			}
		}
		out.States[u(id)] = state
		if first || stateRank(state) < stateRank(out.State) {
			out.State, first = state, false
		}
		for _, gr := range views[id].Groups {
			if gr.Queue == "" {
				continue
			}
			if slices.Contains(gr.Target, w.node) || slices.ContainsFunc(gr.Replicas, func(r fila.ClusterReplica) bool { return r.NodeID == w.node }) {
				on[gr.Queue] = true
			}
		}
	}
	out.Queues = append(out.Queues, slices.Sorted(maps.Keys(on))...)
	out.Done = !first && out.State == fila.NodeDrained
	return out
}

// maxQueuesShown is the most queue names a line of fila cluster drain
// --wait names; -o json lists them all.
const maxQueuesShown = 5

// line is the text form of a progress line.
func (w *drainWatch) line(st drainJSON) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node %d: ", st.NodeID)
	if st.Done {
		b.WriteString("drained")
	} else {
		b.WriteString(orUnknown(st.State))
		// The nodes whose report differs from the least advanced one.
		byState := map[string][]uint64{}
		for id, s := range st.States {
			if s != st.State {
				n, _ := strconv.ParseUint(id, 10, 64)
				byState[s] = append(byState[s], n)
			}
		}
		for _, s := range slices.SortedFunc(maps.Keys(byState), func(a, b string) int { return stateRank(a) - stateRank(b) }) {
			ids := byState[s]
			slices.Sort(ids)
			fmt.Fprintf(&b, " (%s on nodes %s)", orUnknown(s), nodeList(ids))
		}
	}
	switch n := len(st.Queues); n {
	case 0:
		b.WriteString(", no queue has a replica or a target on it")
	default:
		shown := st.Queues[:min(n, maxQueuesShown)]
		more := ""
		if n > len(shown) {
			more = fmt.Sprintf(" and %d more", n-len(shown))
		}
		noun := "queues have"
		if n == 1 {
			noun = "queue has"
		}
		fmt.Fprintf(&b, ", %d %s a replica or a target on it: %s%s", n, noun, strings.Join(shown, ", "), more)
	}
	if len(st.Unreachable) > 0 {
		fmt.Fprintf(&b, "; no answer from nodes %s", nodeList(st.Unreachable))
	}
	return b.String()
}

func orUnknown(state string) string {
	if state == "" {
		return "state unknown"
	}
	return state
}

// maxMoveReplicas is the most node IDs a move takes (the protocol's
// MoveQueue.replicas maximum).
const maxMoveReplicas = 64

// parseNodeIDs parses --to: node IDs (positive integers), comma
// separated, at most maxMoveReplicas, none twice. Its errors are usage
// errors.
func parseNodeIDs(s string) ([]uint64, error) {
	var ids []uint64
	seen := map[uint64]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		id, err := strconv.ParseUint(f, 10, 64)
		if err != nil || id == 0 {
			return nil, usagef("--to %q: %q is not a node ID (a positive integer); want IDs such as 2,3,4", s, f)
		}
		if seen[id] {
			return nil, usagef("--to %q: node %d is named twice", s, id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	if len(ids) > maxMoveReplicas {
		return nil, usagef("--to: %d node IDs; at most %d", len(ids), maxMoveReplicas)
	}
	return ids, nil
}

// moveJSON is one line of fila cluster move -o json: where the queue's
// group stands, as the nodes that answered see it.
type moveJSON struct {
	Queue string `json:"queue"`
	// To is the replica set asked for.
	To []uint64 `json:"to"`
	// Leader is the node that answered as the group's leader; 0 when
	// none did. Replicas are the group's members as it lists them (or,
	// without it, as the answering node with the lowest ID does).
	Leader   uint64               `json:"leader_node_id"`
	Replicas []clusterReplicaJSON `json:"replicas"`
	// Target is the replica set a node reports the group moving to, and
	// TargetOn the nodes that report one; both empty once none does.
	Target   []uint64 `json:"target"`
	TargetOn []uint64 `json:"target_on"`
	// Unreachable are the members that did not answer.
	Unreachable []uint64 `json:"unreachable"`
	// Done is true once the move is done: no node reports a target, and
	// the leader lists exactly To, none a learner.
	Done bool `json:"done"`
}

// watchPoll is how often fila cluster move --wait and fila cluster
// drain --wait ask the nodes.
const watchPoll = time.Second

// waitMove follows the move of queue to the nodes want until it is done
// (see moveJSON.Done), printing a line each time what it sees changes.
// It returns when ctx ends, failing then with an error that says the
// move goes on.
func (g *globals) waitMove(ctx context.Context, a *fila.Administrator, queue string, want []uint64) error {
	w := &moveWatch{statusWatch: newStatusWatch(g, a), queue: queue, want: want}
	defer w.close()
	return g.follow(ctx, &w.statusWatch, func(views map[uint64]*fila.ClusterStatus, unreachable []uint64) (string, any, bool, error) {
		st := w.progress(views, unreachable)
		return w.line(st), st, st.Done, nil
	}, w.gaveUp)
}

// follow polls every node's status through w each watchPoll and hands
// the views to step, which sums them up as a line of text and a value
// for -o json, says whether the wait is done, or fails it. follow prints
// the line (or the value's JSON) each time it changes, and returns nil
// once step says done, or gaveUp's error once ctx ends.
func (g *globals) follow(ctx context.Context, w *statusWatch, step func(views map[uint64]*fila.ClusterStatus, unreachable []uint64) (text string, v any, done bool, err error), gaveUp func(context.Context) error) error {
	var last string
	for {
		views, unreachable, err := w.poll(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return gaveUp(ctx)
			}
			return err
		}
		line, v, done, err := step(views, unreachable)
		if err != nil {
			return err
		}
		if g.output == "json" {
			b, err := json.Marshal(v)
			if err != nil {
				return err
			}
			line = string(b)
		}
		if line != last {
			fmt.Fprintln(g.stdout, line)
			last = line
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return gaveUp(ctx)
		case <-time.After(watchPoll):
		}
	}
}

// moveWatch follows a move: the queue's group as every node sees it.
type moveWatch struct {
	statusWatch
	queue string
	want  []uint64
}

// statusWatch asks every node of the cluster for its status, over one
// connection each, kept from one poll to the next.
type statusWatch struct {
	g    *globals
	seed *fila.Administrator
	// seedID is the node the seed connection reaches; members the
	// cluster's members as last seen.
	seedID  uint64
	members []fila.ClusterNode
	peers   map[string]*fila.Client // by client address
}

func newStatusWatch(g *globals, seed *fila.Administrator) statusWatch {
	return statusWatch{g: g, seed: seed, peers: map[string]*fila.Client{}}
}

func (w *statusWatch) close() {
	for _, c := range w.peers {
		c.Close()
	}
}

// gaveUp is the error of a wait that ctx ended.
func (w *moveWatch) gaveUp(ctx context.Context) error {
	return &renamedError{msg: fmt.Sprintf("fila: cluster move %s: %s before the move was done; it goes on in the background (fila cluster status shows it)", w.queue, w.why(ctx)), err: ctx.Err()}
}

// why says why ctx ended a wait: the --timeout, or an interrupt.
func (w *statusWatch) why(ctx context.Context) string {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return fmt.Sprintf("--timeout %v ran out", w.g.timeout)
	}
	return "interrupted"
}

// nodeWait bounds asking one node for its status, connecting included,
// so that a node that is down does not hold up the others.
const nodeWait = 5 * time.Second

// poll asks each member for its status and returns the views of those
// that answered, by node ID, and the members that did not. Only the
// first poll fails when the seed does not answer; later a member that
// does not answer is listed as unreachable.
func (w *statusWatch) poll(ctx context.Context) (map[uint64]*fila.ClusterStatus, []uint64, error) {
	views := map[uint64]*fila.ClusterStatus{}
	var unreachable []uint64
	qctx, cancel := context.WithTimeout(ctx, nodeWait)
	st, err := w.seed.ClusterStatus(qctx)
	cancel()
	switch {
	case err == nil:
		views[st.NodeID] = st
		w.seedID, w.members = st.NodeID, st.Nodes
	case w.members == nil:
		return nil, nil, err
	default:
		unreachable = append(unreachable, w.seedID)
	}
	for _, n := range w.members {
		if n.ID == w.seedID {
			continue
		}
		st, err := w.ask(ctx, n.Addr)
		if err != nil {
			unreachable = append(unreachable, n.ID)
			continue
		}
		views[st.NodeID] = st
	}
	slices.Sort(unreachable)
	return views, unreachable, nil
}

// ask returns the status of the node at addr ("" when it has not
// registered one yet: an error).
func (w *statusWatch) ask(ctx context.Context, addr string) (*fila.ClusterStatus, error) {
	if addr == "" {
		return nil, errors.New("no client address yet")
	}
	ctx, cancel := context.WithTimeout(ctx, nodeWait)
	defer cancel()
	c, ok := w.peers[addr]
	if !ok {
		var err error
		if c, err = w.g.connectTo(ctx, addr, false); err != nil {
			return nil, err
		}
		w.peers[addr] = c
	}
	st, err := c.Admin().ClusterStatus(ctx)
	if err != nil {
		c.Close()
		delete(w.peers, addr)
		return nil, err
	}
	return st, nil
}

// progress sums up the views of the nodes that answered, by node ID.
func (w *moveWatch) progress(views map[uint64]*fila.ClusterStatus, unreachable []uint64) moveJSON {
	out := moveJSON{Queue: w.queue, To: w.want, Replicas: []clusterReplicaJSON{}, Target: []uint64{}, TargetOn: []uint64{}, Unreachable: unreachable}
	if out.Unreachable == nil {
		out.Unreachable = []uint64{}
	}
	var ref *fila.ClusterGroup // the leader's view of the group, else the lowest node's
	var refTerm uint64
	for _, id := range slices.Sorted(maps.Keys(views)) {
		for _, gr := range views[id].Groups {
			if gr.Queue != w.queue {
				continue
			}
			if len(gr.Target) > 0 {
				out.TargetOn = append(out.TargetOn, id)
				if len(out.Target) == 0 {
					out.Target = gr.Target
				}
			}
			switch {
			case gr.Leader == id && (out.Leader == 0 || gr.Term > refTerm):
				// Two nodes that each think they lead: the later term's.
				out.Leader, ref, refTerm = id, &gr, gr.Term
			case ref == nil:
				ref = &gr
			}
		}
	}
	if ref == nil {
		return out
	}
	out.Replicas = replicasJSON(ref.Replicas)
	if out.Leader == 0 || len(out.TargetOn) > 0 || len(ref.Replicas) != len(w.want) {
		return out
	}
	for _, r := range ref.Replicas {
		if r.Learner || !slices.Contains(w.want, r.NodeID) {
			return out
		}
	}
	out.Done = true
	return out
}

// line is the text form of a progress line.
func (w *moveWatch) line(st moveJSON) string {
	var b strings.Builder
	b.WriteString(st.Queue + ": ")
	switch {
	case st.Done:
		fmt.Fprintf(&b, "moved to nodes %s, led by node %d", nodeList(st.To), st.Leader)
	case len(st.Replicas) == 0:
		b.WriteString("no node that answered holds its group")
	default:
		if st.Leader != 0 {
			fmt.Fprintf(&b, "led by node %d", st.Leader)
		} else {
			b.WriteString("no node that answered leads it")
		}
		rs := make([]fila.ClusterReplica, len(st.Replicas))
		for i, r := range st.Replicas {
			rs[i] = fila.ClusterReplica{NodeID: r.NodeID, Known: r.Known, Match: r.Match, Lag: r.Lag, Learner: r.Learner}
		}
		b.WriteString(", replicas " + replicaCells(rs))
		if len(st.TargetOn) > 0 {
			fmt.Fprintf(&b, ", moving to nodes %s (the plan of nodes %s)", nodeList(st.Target), nodeList(st.TargetOn))
		} else {
			fmt.Fprintf(&b, ", no node reports a target (moving to nodes %s)", nodeList(st.To))
		}
	}
	if len(st.Unreachable) > 0 {
		fmt.Fprintf(&b, "; no answer from nodes %s", nodeList(st.Unreachable))
	}
	return b.String()
}

type clusterNodeJSON struct {
	NodeID    uint64 `json:"node_id"`
	Addr      string `json:"addr"`
	PeerAddr  string `json:"peer_addr"`
	Connected bool   `json:"connected"`
	// State is active, draining or drained; "" from a broker that
	// predates drains.
	State string `json:"state"`
}

type clusterReplicaJSON struct {
	NodeID  uint64 `json:"node_id"`
	Known   bool   `json:"known"`
	Match   uint64 `json:"match"`
	Lag     uint64 `json:"lag"`
	Learner bool   `json:"learner"`
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
	// Target is the replica set a move under way is taking the group to;
	// [] when none.
	Target []uint64 `json:"target"`
	// PreferredLeader is the node a rebalance prefers to lead the group;
	// 0 for none.
	PreferredLeader uint64 `json:"preferred_leader"`
}

// clusterStatusJSON is the -o json form of a cluster status: the
// protocol's fields, and clustered (false for a single node, with node_id
// 0 and no nodes or groups).
type clusterStatusJSON struct {
	Clustered bool               `json:"clustered"`
	NodeID    uint64             `json:"node_id"`
	Nodes     []clusterNodeJSON  `json:"nodes"`
	Groups    []clusterGroupJSON `json:"groups"`
	// Pending are the moves of the last rebalance not yet started; []
	// when none.
	Pending []rebalanceMoveJSON `json:"pending"`
}

func clusterJSON(st *fila.ClusterStatus) clusterStatusJSON {
	out := clusterStatusJSON{Clustered: st.Clustered(), NodeID: st.NodeID, Nodes: make([]clusterNodeJSON, len(st.Nodes)), Groups: make([]clusterGroupJSON, len(st.Groups)), Pending: movesJSON(st.Pending)}
	for i, n := range st.Nodes {
		out.Nodes[i] = clusterNodeJSON{n.ID, n.Addr, n.PeerAddr, n.Connected, n.State}
	}
	for i, gr := range st.Groups {
		out.Groups[i] = clusterGroupJSON{gr.ID, gr.Queue, gr.Leader, gr.Term, gr.Commit, gr.Applied, gr.LastIndex,
			replicasJSON(gr.Replicas), gr.Quiesced, gr.FirstIndex, append(make([]uint64, 0, len(gr.Target)), gr.Target...), gr.PreferredLeader}
	}
	return out
}

func replicasJSON(rs []fila.ClusterReplica) []clusterReplicaJSON {
	out := make([]clusterReplicaJSON, len(rs))
	for i, r := range rs {
		out[i] = clusterReplicaJSON{r.NodeID, r.Known, r.Match, r.Lag, r.Learner}
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
		rows[i] = []string{id, orDash(n.Addr), orDash(n.PeerAddr), yesNo(n.Connected), orDash(n.State)}
	}
	if err := g.table([]string{"NODE", "ADDR", "PEER ADDR", "CONNECTED", "STATE"}, rows); err != nil {
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
		preferred := "-"
		if gr.PreferredLeader != 0 {
			preferred = u(gr.PreferredLeader)
		}
		rows[i] = []string{u(gr.ID), queue, leader, u(gr.Term), orDash(logRange(gr)), u(gr.Commit), u(gr.Applied), replicaLag(st.NodeID, gr), yesNo(gr.Quiesced), orDash(nodeList(gr.Target)), preferred}
	}
	if err := g.table([]string{"GROUP", "QUEUE", "LEADER", "TERM", "LOG", "COMMIT", "APPLIED", "LAG", "QUIESCED", "TARGET", "PREFERRED"}, rows); err != nil {
		return err
	}
	if len(st.Pending) > 0 {
		fmt.Fprintf(w, "\nrebalance: %d moves not yet started\n\n", len(st.Pending))
		rows = make([][]string, len(st.Pending))
		for i, m := range st.Pending {
			rows[i] = []string{u(uint64(i + 1)), m.Queue, u(m.From), u(m.To)}
		}
		return g.table([]string{"STEP", "QUEUE", "FROM", "TO"}, rows)
	}
	return nil
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
// "node:entries" per replica when self leads it, a learner marked
// "(learner)"; else why the lag is unknown, and the learners if any.
func replicaLag(self uint64, gr fila.ClusterGroup) string {
	var why string
	switch gr.Leader {
	case 0:
		why = "unknown (no leader)"
	case self:
		return replicaCells(gr.Replicas)
	default:
		why = fmt.Sprintf("unknown (led by node %d)", gr.Leader)
	}
	var learners []uint64
	for _, r := range gr.Replicas {
		if r.Learner {
			learners = append(learners, r.NodeID)
		}
	}
	if len(learners) > 0 {
		why += "; learners " + nodeList(learners)
	}
	return why
}

// replicaCells writes replicas as "node:entries" each (entries behind
// the leader, "?" when the answering node does not know it), a learner
// marked "(learner)": "1:0 2:0 4:1200(learner)".
func replicaCells(rs []fila.ClusterReplica) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		lag := "?"
		if r.Known {
			lag = u(r.Lag)
		}
		parts[i] = u(r.NodeID) + ":" + lag
		if r.Learner {
			parts[i] += "(learner)"
		}
	}
	return strings.Join(parts, " ")
}

// nodeList writes node IDs comma-separated, as --to takes them: "2,3,4";
// "" for none.
func nodeList(ids []uint64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = u(id)
	}
	return strings.Join(parts, ",")
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
