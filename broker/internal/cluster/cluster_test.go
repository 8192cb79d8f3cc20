package cluster

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/raftlog"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
	"google.golang.org/protobuf/proto"
)

// testCluster is n in-process nodes over the real peer transport, each
// with an in-memory store that outlives a node's restart.
type testCluster struct {
	t       *testing.T
	rebuild map[int]bool          // open these nodes with Config.Rebuild
	policy  map[int]string        // the nodes' [scheduler] policy, "" for the default
	lane    [2]int64              // node 1's [scheduler] latency_budget and latency_idle, zeros for the defaults
	snap    int64                 // Config.SnapshotEvery of every node
	meta    uint64                // Config.MetaSnapshotEvery of every node
	rate    int64                 // Config.SnapshotRate of every node
	skew    map[int]time.Duration // how far node i's wall clock is ahead
	ticks   int                   // Config.ElectionTicks of every node; 0: 10
	// members, if > 0, is how many of the nodes start the cluster: the
	// others are started with Config.Join, and wait to be added.
	members int
	peers   map[uint64]string
	stores  []*store.Mem
	nodes   []*Node
	// wrap, if set, gives node i the storage it opens with in place of
	// stores[i].
	wrap func(i int, st *store.Mem) Storage
	// effects, if set, gives node i its Effects in place of noEffects.
	effects func(i int, st *store.Mem) Effects
}

func newTestCluster(t *testing.T, n int, opts ...func(*testCluster)) *testCluster {
	t.Helper()
	c := &testCluster{t: t, peers: map[uint64]string{}, rebuild: map[int]bool{}, policy: map[int]string{}, skew: map[int]time.Duration{}}
	for _, o := range opts {
		o(c)
	}
	for i, addr := range filatest.FreePorts(t, n) {
		c.peers[uint64(i+1)] = addr
		c.stores = append(c.stores, store.NewMem())
	}
	c.nodes = make([]*Node, n)
	for i := range n {
		c.start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.stop(i)
		}
		for _, st := range c.stores {
			st.Close()
		}
	})
	return c
}

func noEffects() Effects {
	return Effects{
		QueueCreated: func(sched.QueueSpec) {},
		QueueDeleted: func(string) {},
		Auth:         func([]byte) error { return nil },
		Config:       func([]byte) error { return nil },
	}
}

func (c *testCluster) start(i int) {
	c.t.Helper()
	n, err := Open(c.config(i), c.storage(i))
	if err != nil {
		c.t.Fatalf("open node %d: %v", i+1, err)
	}
	c.nodes[i] = n
}

// config returns node i's configuration.
func (c *testCluster) config(i int) Config {
	id := uint64(i + 1)
	peers, join := c.peers, false
	if c.members > 0 {
		peers = map[uint64]string{}
		for j := range c.members {
			peers[uint64(j+1)] = c.peers[uint64(j+1)]
		}
		if i >= c.members {
			peers[id], join = c.peers[id], true
		}
	}
	return Config{
		NodeID:            id,
		ClusterID:         "test",
		PeerListenAddr:    c.peers[id],
		AdvertiseAddr:     fmt.Sprintf("client-%d:5555", id),
		Peers:             peers,
		Join:              join,
		TickInterval:      20 * time.Millisecond,
		ElectionTicks:     cmp.Or(c.ticks, 10),
		HeartbeatTicks:    1,
		Rebuild:           c.rebuild[i],
		SnapshotEvery:     c.snap,
		MetaSnapshotEvery: c.meta,
		SnapshotRate:      c.rate,
		Shard:             shard.Config{Sched: c.sched(i), Clock: c.clock(i)},
		Effects:           c.nodeEffects(i),
	}
}

// clock returns node i's wall clock: nil (time.Now) unless it is skewed.
func (c *testCluster) clock(i int) func() time.Time {
	d := c.skew[i]
	if d == 0 {
		return nil
	}
	return func() time.Time { return time.Now().Add(d) }
}

// nodeEffects returns node i's Effects.
func (c *testCluster) nodeEffects(i int) Effects {
	if c.effects != nil {
		return c.effects(i, c.stores[i])
	}
	return noEffects()
}

// storage returns what node i opens with.
func (c *testCluster) storage(i int) Storage {
	if c.wrap != nil {
		return c.wrap(i, c.stores[i])
	}
	return c.stores[i]
}

// sched returns node i's scheduler configuration.
func (c *testCluster) sched(i int) sched.Config {
	cfg := sched.Config{VisibilityTimeout: time.Hour, Policy: c.policy[i]}
	if i == 0 {
		cfg.LatencyBudget, cfg.LatencyIdle = int(c.lane[0]), time.Duration(c.lane[1])
	}
	return cfg
}

func (c *testCluster) stop(i int) {
	if c.nodes[i] != nil {
		c.nodes[i].Close()
		c.nodes[i] = nil
	}
}

// eventually polls f until it returns nil, for up to 30 s.
func eventually(t *testing.T, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leader returns the index of the node leading queue, once one does.
func (c *testCluster) leader(queue string) int {
	c.t.Helper()
	idx := -1
	eventually(c.t, "a leader for "+queue, func() error {
		for i, n := range c.nodes {
			if n == nil {
				continue
			}
			if _, err := n.Route(queue); err == nil {
				idx = i
				return nil
			}
		}
		return errors.New("none")
	})
	return idx
}

// submit submits cmd on the node leading queue and waits for its result,
// retrying while leadership moves.
func (c *testCluster) submit(queue string, cmd func() shard.Command) shard.Result {
	c.t.Helper()
	var res shard.Result
	eventually(c.t, "submit to "+queue, func() error {
		sh, err := c.nodes[c.leader(queue)].Route(queue)
		if err != nil {
			return err
		}
		ch := make(chan shard.Result, 1)
		if err := sh.Submit(context.Background(), cmd(), func(r shard.Result) { ch <- r }); err != nil {
			return err
		}
		select {
		case res = <-ch:
		case <-time.After(10 * time.Second):
			return errors.New("no result")
		}
		if errors.Is(res.Err, fault.ErrNotLeader) {
			return res.Err
		}
		return nil
	})
	return res
}

func enqueueCmd(queue string, payloads ...string) func() shard.Command {
	return func() shard.Command {
		items := make([]sched.EnqueueItem, len(payloads))
		for i, p := range payloads {
			items[i] = sched.EnqueueItem{Queue: queue, Msg: sched.Message{Body: []byte(p), PayloadSize: uint32(len(p))}}
		}
		return &shard.Enqueue{Items: items}
	}
}

// converged waits until every running node's replica of queue has the
// same digest at the same applied index.
func (c *testCluster) converged(queue string) {
	c.t.Helper()
	eventually(c.t, "replicas of "+queue+" converge", func() error {
		var first [32]byte
		var firstApplied uint64
		seen := 0
		for i, n := range c.nodes {
			if n == nil {
				continue
			}
			sh, err := n.Local(queue)
			if err != nil {
				return fmt.Errorf("node %d: %w", i+1, err)
			}
			d, applied, err := sh.QueueDigest(queue)
			if err != nil {
				return err
			}
			if seen == 0 {
				first, firstApplied = d, applied
			} else if d != first || applied != firstApplied {
				return fmt.Errorf("node %d at %d differs from the first at %d", i+1, applied, firstApplied)
			}
			seen++
		}
		return nil
	})
}

// stats returns node i's statistics of queue, from its local replica,
// retrying while the replica opens.
func (c *testCluster) stats(i int, queue string) sched.QueueStats {
	c.t.Helper()
	var st sched.QueueStats
	eventually(c.t, "stats of "+queue, func() error {
		sh, err := c.nodes[i].Local(queue)
		if err != nil {
			return err
		}
		ch := make(chan shard.Result, 1)
		if err := sh.QueueStats(context.Background(), queue, 0, func(r shard.Result) { ch <- r }); err != nil {
			return err
		}
		r := <-ch
		st = r.Stats
		return r.Err
	})
	return st
}

// subscribe subscribes (as subscription 1) to queue on node i, which
// must lead it, with credit, and returns the sink of its deliveries.
func (c *testCluster) subscribe(i int, queue string, credit uint32) *sink {
	c.t.Helper()
	sh, err := c.nodes[i].Route(queue)
	if err != nil {
		c.t.Fatal(err)
	}
	s := &sink{}
	done := make(chan shard.Result, 1)
	if err := sh.Subscribe(context.Background(), &shard.Subscribe{Sub: 1, Queue: queue, Credit: credit}, s, func(r shard.Result) { done <- r }); err != nil {
		c.t.Fatal(err)
	}
	if r := <-done; r.Err != nil {
		c.t.Fatal(r.Err)
	}
	return s
}

// sink collects a subscription's deliveries.
type sink struct {
	mu    sync.Mutex
	got   []sched.Delivered
	ended error
}

func (s *sink) Expired(sched.SubID, []sched.ExpiredLease) {}
func (s *sink) Deliver(_ sched.SubID, msgs []sched.Delivered) {
	s.mu.Lock()
	s.got = append(s.got, msgs...)
	s.mu.Unlock()
}
func (s *sink) Ended(_ sched.SubID, err error) {
	s.mu.Lock()
	s.ended = err
	s.mu.Unlock()
}

func TestReplicatedQueue(t *testing.T) {
	c := newTestCluster(t, 3)
	ctx := context.Background()
	var created sched.QueueCreated
	eventually(t, "create queue", func() error {
		var err error
		created, err = c.nodes[1].CreateQueue(ctx, sched.QueueSpec{Name: "orders"})
		return err
	})
	if created.DLQ != "orders.dlq" {
		t.Fatalf("created %+v", created)
	}
	if _, err := c.nodes[0].CreateQueue(ctx, sched.QueueSpec{Name: "orders"}); !errors.Is(err, fault.ErrQueueExists) {
		t.Fatalf("second create: %v, want QUEUE_EXISTS", err)
	}

	// A follower answers NOT_LEADER with the leader's client address.
	lead := c.leader("orders")
	follower := (lead + 1) % 3
	eventually(t, "the follower's NOT_LEADER names the leader", func() error {
		var nl *fault.NotLeader
		if _, err := c.nodes[follower].Route("orders"); !errors.As(err, &nl) || nl.Leader != fmt.Sprintf("client-%d:5555", lead+1) {
			return fmt.Errorf("follower's route: %v, want NOT_LEADER naming client-%d", err, lead+1)
		}
		return nil
	})
	if _, err := c.nodes[follower].Route("nope"); !errors.Is(err, fault.ErrQueueNotFound) {
		t.Fatalf("route to an unknown queue: %v", err)
	}

	r := c.submit("orders", enqueueCmd("orders", "a", "b", "c"))
	if r.Err != nil || len(r.Enqueued) != 3 {
		t.Fatalf("enqueue: %+v", r)
	}
	c.converged("orders")

	// Deliveries come from the leader once their Deliver entry commits;
	// an ack on it applies on every replica.
	s := c.subscribe(lead, "orders", 10)
	var got []sched.Delivered
	eventually(t, "three deliveries", func() error {
		s.mu.Lock()
		defer s.mu.Unlock()
		if len(s.got) < 3 {
			return fmt.Errorf("%d delivered", len(s.got))
		}
		got = append([]sched.Delivered(nil), s.got...)
		return nil
	})
	refs := []sched.LeaseRef{{Queue: "orders", ID: got[0].ID, Lease: got[0].Lease}}
	if r := c.submit("orders", func() shard.Command { return &shard.Ack{Items: refs} }); r.Err != nil || r.Items[0] != nil {
		t.Fatalf("ack: %+v", r)
	}
	c.converged("orders")

	// The leader goes: the others elect a new one, which keeps the
	// leases (an ack of a delivery made by the old leader succeeds) and
	// ends nothing acknowledged.
	c.stop(lead)
	newLead := c.leader("orders")
	if newLead == lead {
		t.Fatal("the stopped node still leads")
	}
	refs = []sched.LeaseRef{{Queue: "orders", ID: got[1].ID, Lease: got[1].Lease}}
	if r := c.submit("orders", func() shard.Command { return &shard.Ack{Items: refs} }); r.Err != nil || r.Items[0] != nil {
		t.Fatalf("ack on the new leader: %+v", r)
	}
	if r := c.submit("orders", enqueueCmd("orders", "d")); r.Err != nil || r.Enqueued[0].Err != nil {
		t.Fatalf("enqueue on the new leader: %+v", r)
	}

	// The old leader comes back with its store: it replays, catches up
	// and agrees with the others.
	c.start(lead)
	c.converged("orders")
	st := c.stats(lead, "orders")
	// a and b acked; c leased to the old leader's subscription (kept
	// until it expires); d ready.
	if st.Ready != 1 || st.Leased != 1 {
		t.Fatalf("stats on the restarted node: ready %d leased %d, want 1 and 1", st.Ready, st.Leased)
	}

	// Deleting the queue removes it from every node.
	if err := c.nodes[newLead].DeleteQueue(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	eventually(t, "queue deleted everywhere", func() error {
		for i, n := range c.nodes {
			if _, err := n.Local("orders"); !errors.Is(err, fault.ErrQueueNotFound) {
				return fmt.Errorf("node %d: %v", i+1, err)
			}
		}
		return nil
	})
}

func TestStatus(t *testing.T) {
	c := newTestCluster(t, 3)
	eventually(t, "create queue", func() error {
		_, err := c.nodes[0].CreateQueue(context.Background(), sched.QueueSpec{Name: "jobs"})
		return err
	})
	lead := c.leader("jobs")
	if r := c.submit("jobs", enqueueCmd("jobs", "x")); r.Err != nil {
		t.Fatal(r.Err)
	}
	eventually(t, "status", func() error {
		st, err := c.nodes[lead].Status()
		if err != nil {
			return err
		}
		if len(st.Nodes) != 3 || len(st.Groups) != 2 {
			return fmt.Errorf("%d nodes, %d groups", len(st.Nodes), len(st.Groups))
		}
		for _, ns := range st.Nodes {
			if !ns.Connected || ns.Addr != fmt.Sprintf("client-%d:5555", ns.ID) {
				return fmt.Errorf("node %+v", ns)
			}
		}
		if st.Groups[0].ID != MetaGroup || st.Groups[1].Queue != "jobs" {
			return fmt.Errorf("groups %+v", st.Groups)
		}
		g := st.Groups[1]
		if g.Leader != uint64(lead+1) || g.Commit == 0 || len(g.Replicas) != 3 {
			return fmt.Errorf("group %+v", g)
		}
		for _, r := range g.Replicas {
			if !r.Known || r.Lag != 0 {
				return fmt.Errorf("replica %+v", r)
			}
		}
		return nil
	})
}

// failingStore is an in-memory store whose Apply fails once fail is set.
type failingStore struct {
	*store.Mem
	fail atomic.Bool
}

var errDiskGone = errors.New("disk gone")

func (s *failingStore) Apply(b *store.Batch) error {
	if s.fail.Load() {
		return errDiskGone
	}
	return s.Mem.Apply(b)
}

// TestStatusAfterStorageFailure: once a storage failure has stopped the
// driver, Status fails at once with ErrStopped (naming the failure)
// rather than waiting for a driver that will never run it.
func TestStatusAfterStorageFailure(t *testing.T) {
	addr := filatest.FreePorts(t, 1)[0]
	st := &failingStore{Mem: store.NewMem()}
	defer st.Close()
	n, err := Open(Config{
		NodeID: 1, ClusterID: "test", PeerListenAddr: addr, AdvertiseAddr: "client-1:5555",
		Peers: map[uint64]string{1: addr}, TickInterval: 10 * time.Millisecond, ElectionTicks: 10, HeartbeatTicks: 1,
		Effects: noEffects(),
	}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	eventually(t, "a meta leader", func() error {
		s, err := n.Status()
		if err != nil {
			return err
		}
		if s.Groups[0].Leader != 1 {
			return fmt.Errorf("meta group %+v", s.Groups[0])
		}
		return nil
	})
	st.fail.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	n.CreateQueue(ctx, sched.QueueSpec{Name: "jobs"}) // its entry's write fails
	eventually(t, "the driver to stop", func() error {
		if n.Err() == nil {
			return errors.New("still running")
		}
		return nil
	})
	done := make(chan error, 1)
	go func() {
		_, err := n.Status()
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrStopped) || !errors.Is(err, fault.ErrUnavailable) || !strings.Contains(err.Error(), errDiskGone.Error()) {
			t.Errorf("Status after a storage failure = %v; want ErrStopped naming %v", err, errDiskGone)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Status after a storage failure: no answer in 10s")
	}
}

// TestRebuiltReplicaNeverLeads opens a node as if its store had lost
// durable data (Config.Rebuild): it wipes its groups and, until it has
// caught up with a leader, neither campaigns nor votes. Alone with one
// healthy node, no leader can be elected; with both healthy nodes back,
// it rebuilds from them and ends with their state.
func TestRebuiltReplicaNeverLeads(t *testing.T) {
	c := newTestCluster(t, 3)
	eventually(t, "create queue", func() error {
		_, err := c.nodes[0].CreateQueue(context.Background(), sched.QueueSpec{Name: "jobs"})
		return err
	})
	if r := c.submit("jobs", enqueueCmd("jobs", "a", "b")); r.Err != nil {
		t.Fatal(r.Err)
	}
	c.converged("jobs")
	for i := range c.nodes {
		c.stop(i)
	}
	c.rebuild[2] = true
	c.start(2)
	c.start(0)
	// Node 1 campaigns; node 3 abstains: no majority. Several election
	// timeouts pass without a leader in either group.
	time.Sleep(1500 * time.Millisecond)
	for i, n := range []*Node{c.nodes[0], c.nodes[2]} {
		st, err := n.Status()
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range st.Groups {
			if g.Leader != 0 {
				t.Fatalf("node %d sees leader %d of group %d with a rebuilding voter and one healthy one", []int{1, 3}[i], g.Leader, g.ID)
			}
		}
	}
	c.start(1)
	c.converged("jobs")
	if r := c.submit("jobs", enqueueCmd("jobs", "c")); r.Err != nil {
		t.Fatal(r.Err)
	}
	c.converged("jobs")
	// Rebuilt, node 3 votes again: with node 1 gone, 2 and 3 elect.
	c.stop(0)
	c.leader("jobs")
}

// TestQueuePolicyFixedAtCreation: replicas decide deliveries themselves,
// so they must share a queue's policy whatever their own [scheduler]
// policy: a queue created without one takes the proposing node's default,
// and every node records that; a queue that names one keeps it; a queue
// with a tenant separator is stfq, whatever the proposer's default, with
// its separator on every node.
func TestQueuePolicyFixedAtCreation(t *testing.T) {
	c := newTestCluster(t, 3, func(c *testCluster) {
		c.policy[0], c.policy[1] = sched.PolicySTFQ, sched.PolicyDRR
		c.lane = [2]int64{7, int64(time.Second)}
	})
	ctx := context.Background()
	eventually(t, "create queue", func() error {
		_, err := c.nodes[0].CreateQueue(ctx, sched.QueueSpec{Name: "plain"})
		return err
	})
	eventually(t, "create queue", func() error {
		_, err := c.nodes[1].CreateQueue(ctx, sched.QueueSpec{Name: "named", Policy: sched.PolicyDRR})
		return err
	})
	eventually(t, "create queue", func() error {
		_, err := c.nodes[1].CreateQueue(ctx, sched.QueueSpec{Name: "tenants", TenantSeparator: "/", CostByTime: true})
		return err
	})
	if _, err := c.nodes[1].CreateQueue(ctx, sched.QueueSpec{Name: "odd", Policy: "fifo"}); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Fatalf("policy fifo: %v; want INVALID_ARGUMENT", err)
	}
	if _, err := c.nodes[1].CreateQueue(ctx, sched.QueueSpec{Name: "odd", Policy: sched.PolicyDRR, TenantSeparator: "/"}); !errors.Is(err, fault.ErrInvalidArgument) {
		t.Fatalf("a tenant separator on a drr queue: %v; want INVALID_ARGUMENT", err)
	}
	for i, n := range c.nodes {
		eventually(t, "every node records the policies", func() error {
			n.mu.RLock()
			defer n.mu.RUnlock()
			for name, want := range map[string]string{"plain": sched.PolicySTFQ, "named": sched.PolicyDRR, "tenants": sched.PolicySTFQ} {
				q := n.meta.queueOf(name)
				if q == nil || q.spec.Policy != want {
					return fmt.Errorf("node %d: queue %s: %+v; want policy %s", i+1, name, q, want)
				}
			}
			if q := n.meta.queueOf("plain"); q.spec.LatencyBudget != 7 || q.spec.LatencyIdle != time.Second {
				return fmt.Errorf("node %d: queue plain: latency lane %d, %v; want the proposer's 7, 1s", i+1, q.spec.LatencyBudget, q.spec.LatencyIdle)
			}
			if q := n.meta.queueOf("tenants"); q.spec.TenantSeparator != "/" || !q.spec.CostByTime {
				return fmt.Errorf("node %d: queue tenants: separator %q, cost by time %v", i+1, q.spec.TenantSeparator, q.spec.CostByTime)
			}
			return nil
		})
	}
}

// TestDataDirectoryIdentity: a data directory belongs to the node, and
// the cluster, that first started on it; another node or cluster is
// refused with an error naming both, even to rebuild.
func TestDataDirectoryIdentity(t *testing.T) {
	c := newTestCluster(t, 3)
	c.stop(1)
	open := func(node uint64, cluster string, rebuild bool) error {
		n, err := Open(Config{
			NodeID: node, ClusterID: cluster, PeerListenAddr: c.peers[node], AdvertiseAddr: "client:5555",
			Peers: c.peers, Rebuild: rebuild, Shard: shard.Config{Sched: c.sched(1)}, Effects: noEffects(),
		}, c.stores[1])
		if err == nil {
			n.Close()
		}
		return err
	}
	for _, tc := range []struct {
		node    uint64
		cluster string
		rebuild bool
		want    string
	}{
		{3, "test", false, `belongs to node 2 of cluster "test", not node 3 of cluster "test"`},
		{2, "other", false, `belongs to node 2 of cluster "test", not node 2 of cluster "other"`},
		{3, "test", true, "belongs to node 2"},
	} {
		if err := open(tc.node, tc.cluster, tc.rebuild); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("node %d of %q (rebuild %v) on node 2's data: %v; want %q", tc.node, tc.cluster, tc.rebuild, err, tc.want)
		}
	}
	// Its own node starts on it again, as does a rebuild of it.
	if err := open(2, "test", true); err != nil {
		t.Fatalf("node 2 on its own data, rebuilding: %v", err)
	}
	c.start(1)
}

// syncCounter counts the driver's storage groups of one mutation (an
// entry alone, or a hard state alone) by whether they wait for an fsync.
type syncCounter struct {
	*store.Mem
	synced, unsynced atomic.Int64
}

func (s *syncCounter) Apply(b *store.Batch) error {
	if b.Len() == 1 {
		if b.Synced() {
			s.synced.Add(1)
		} else {
			s.unsynced.Add(1)
		}
	}
	return s.Mem.Apply(b)
}

// TestCommitIndexWithoutFsync: a Ready whose only change is the commit
// index (a single node's commit of what it just wrote, a leader's commit
// once followers answer) is written without an fsync; and a node whose
// stored commit index lags behind what it applied, as after a crash that
// lost such a write, opens and goes on serving.
func TestCommitIndexWithoutFsync(t *testing.T) {
	counter := &syncCounter{}
	c := newTestCluster(t, 1, func(c *testCluster) {
		c.wrap = func(_ int, st *store.Mem) Storage {
			counter.Mem = st
			return counter
		}
	})
	ctx := context.Background()
	eventually(t, "create queue", func() error {
		_, err := c.nodes[0].CreateQueue(ctx, sched.QueueSpec{Name: "jobs"})
		return err
	})
	c.submit("jobs", enqueueCmd("jobs", "warm-up"))
	counter.synced.Store(0)
	counter.unsynced.Store(0)
	for i := range 20 {
		if res := c.submit("jobs", enqueueCmd("jobs", fmt.Sprint("m", i))); res.Err != nil {
			t.Fatalf("enqueue %d: %v", i, res.Err)
		}
	}
	// Each enqueue is one group holding its entry (fsynced) and one
	// holding the new commit index alone (not fsynced).
	if s, u := counter.synced.Load(), counter.unsynced.Load(); s > 20 || u < 20 {
		t.Errorf("single-mutation groups: %d with an fsync, %d without; want at most 20 with (the entries), at least 20 without (the commits)", s, u)
	}

	// Lose the commit index of every group: restart from hard states
	// with commit 0, below the meta group's applied index.
	c.stop(0)
	for _, g := range []uint64{MetaGroup, 2} {
		l, err := raftlog.Open(c.stores[0], g)
		if err != nil {
			t.Fatal(err)
		}
		hs, _, err := l.InitialState()
		if err != nil {
			t.Fatal(err)
		}
		if hs.GetCommit() == 0 {
			t.Fatalf("group %d: no commit index stored", g)
		}
		hs.Commit = proto.Uint64(0)
		var b store.Batch
		l.SetHardState(&b, hs)
		if err := c.stores[0].Apply(&b); err != nil {
			t.Fatal(err)
		}
	}
	c.start(0)
	if res := c.submit("jobs", enqueueCmd("jobs", "after")); res.Err != nil {
		t.Fatalf("enqueue after the restart: %v", res.Err)
	}
	sh, err := c.nodes[0].Local("jobs")
	if err != nil {
		t.Fatal(err)
	}
	reply := make(chan shard.Result, 1)
	if err := sh.QueueStats(ctx, "jobs", 0, func(r shard.Result) { reply <- r }); err != nil {
		t.Fatal(err)
	}
	res := <-reply
	if res.Err != nil || res.Stats.Ready != 22 {
		t.Fatalf("stats after the restart: %+v, want 22 ready (21 before, 1 after)", res)
	}
}

// TestLeaderDownTakeOver: when a queue group's leader stops, its
// connections fail and the follower next in line takes over at once,
// long before any election timeout (here 6 to 12 s) could have elected
// one; the queue keeps its messages.
func TestLeaderDownTakeOver(t *testing.T) {
	c := newTestCluster(t, 3, func(c *testCluster) { c.ticks = 300 })
	ctx := context.Background()
	eventually(t, "create queue", func() error {
		_, err := c.nodes[0].CreateQueue(ctx, sched.QueueSpec{Name: "jobs"})
		return err
	})
	c.submit("jobs", enqueueCmd("jobs", "a", "b"))
	c.converged("jobs")
	old := c.leader("jobs")
	want := uint64(1)
	if old == 0 {
		want = 2
	}
	c.stop(old)
	deadline := time.Now().Add(4 * time.Second)
	for {
		if _, err := c.nodes[want-1].Route("jobs"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %d did not take over from node %d within 4s of its stop", want, old+1)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if res := c.submit("jobs", enqueueCmd("jobs", "c")); res.Err != nil {
		t.Fatalf("enqueue after the take-over: %v", res.Err)
	}
}
