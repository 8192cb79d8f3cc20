package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/broker/internal/cluster/history"
	fila "github.com/fila-mq/fila/sdk/go"
)

// clusterEnv are the settings of the cluster tests' nodes: a 1 s election
// timeout, leases short enough that deliveries lost with a killed node
// come back within the test, and snapshots every 64 KB of a queue's log
// and every 8 entries of the meta group's, so that every fault also meets
// images, compacted logs and snapshots sent to followers.
var clusterEnv = []string{
	"FILA_CLUSTER_TICK_INTERVAL=100ms",
	"FILA_CLUSTER_ELECTION_TICKS=10",
	"FILA_CLUSTER_SNAPSHOT_LOG_SIZE=64KB",
	"FILA_CLUSTER_META_SNAPSHOT_ENTRIES=8",
	"FILA_QUEUE_VISIBILITY_TIMEOUT=3s",
	"FILA_QUEUE_MAX_ATTEMPTS=50",
}

// leaderOf returns the index in c.Nodes of the node leading queue.
func leaderOf(t *testing.T, ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, queue string) int {
	t.Helper()
	for {
		shards, err := admin.Topology(ctx, queue)
		if err == nil && len(shards) > 0 && shards[0].LeaderNodeID != "" {
			id, err := strconv.Atoi(shards[0].LeaderNodeID)
			if err == nil && id >= 1 && id <= len(c.Nodes) {
				return id - 1
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no leader for %s: %v", queue, err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// workload runs producers and a consumer against a cluster, recording a
// history, until stop is closed; then it drains what is left.
type workload struct {
	t     *testing.T
	queue string
	rec   *history.Recorder
	seq   atomic.Int64
	acked atomic.Int64
	sent  atomic.Int64
	// lastSent is when an enqueue was last acknowledged (Unix ns), and
	// maxPause the longest wait between two since resetPause.
	lastSent, maxPause atomic.Int64

	mu   sync.Mutex
	errs map[string]int // failed enqueues by error text
}

func (w *workload) produce(ctx context.Context, c *fila.Client, name string, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	p := c.Producer()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return
		default:
		}
		token := fmt.Sprintf("%s-%d", name, w.seq.Add(1))
		w.rec.EnqueueInvoked(name, token)
		sctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		m := fila.NewMessage(w.queue, []byte(token)).FairnessKey(fmt.Sprint("tenant-", i%3))
		id, err := p.Send(sctx, m)
		cancel()
		if err != nil {
			var se *fila.EnqueueError
			w.rec.EnqueueFailed(name, token, errors.As(err, &se))
			w.noteErr(err)
			continue
		}
		w.rec.EnqueueOK(name, token, [16]byte(id))
		w.sent.Add(1)
		now := time.Now().UnixNano()
		if prev := w.lastSent.Swap(now); prev != 0 {
			for {
				m := w.maxPause.Load()
				if now-prev <= m || w.maxPause.CompareAndSwap(m, now-prev) {
					break
				}
			}
		}
	}
}

func (w *workload) consume(ctx context.Context, c *fila.Client, name string, stop <-chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	cons := c.Consumer()
	var sub *fila.Subscription
	for sub == nil {
		s, err := cons.Subscribe(ctx, w.queue, fila.Prefetch(64))
		if err == nil {
			sub = s
			break
		}
		select {
		case <-stop:
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
	for {
		select {
		case <-stop:
			return
		case d, ok := <-sub.C():
			if !ok {
				w.t.Logf("%s: subscription ended: %v; subscribing again", name, sub.Err())
				sub = nil
				for sub == nil {
					s, err := cons.Subscribe(ctx, w.queue, fila.Prefetch(64))
					if err == nil {
						sub = s
						break
					}
					select {
					case <-stop:
						return
					case <-time.After(100 * time.Millisecond):
					}
				}
				continue
			}
			id := [16]byte(d.ID())
			w.rec.Delivered(name, string(d.Payload()), id, d.Attempt())
			w.rec.AckInvoked(name, id)
			actx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := d.Ack(actx)
			cancel()
			if err != nil {
				w.rec.AckFailed(name, id)
				continue
			}
			w.rec.AckOK(name, id)
			w.acked.Add(1)
		}
	}
}

// noteErr counts a failed enqueue's error text, for the test's log.
func (w *workload) noteErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.errs == nil {
		w.errs = map[string]int{}
	}
	w.errs[err.Error()]++
}

// keepHistory writes the history of a failing run next to the test's
// output, so that it can be checked again.
func keepHistory(t *testing.T, h history.History) {
	f, err := os.CreateTemp("", "fila-cluster-history-*.jsonl")
	if err != nil {
		t.Logf("keep history: %v", err)
		return
	}
	defer f.Close()
	if err := h.WriteJSON(f); err != nil {
		t.Logf("keep history: %v", err)
		return
	}
	t.Logf("history kept in %s", f.Name())
}

// runCluster starts three nodes, creates queue "jobs", runs two
// producers and a consumer of three fairness keys, calls faults while
// they run, then stops the producers, drains, and checks the history:
// every acknowledged enqueue delivered, nothing delivered that was not
// enqueued, no message enqueued twice (a resend across a failover keeps
// its ID), nothing delivered after its ack was confirmed, attempts
// within the queue's maximum. A failing run keeps its history and the
// nodes' data directories, and logs where.
func runCluster(t *testing.T, opts []filatest.Option, faults func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload)) {
	runClusterOf(t, 3, opts, faults)
}

// runClusterOf is runCluster on nodes nodes ("jobs" is placed on three of
// them).
func runClusterOf(t *testing.T, nodes int, opts []filatest.Option, faults func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload)) {
	runClusterJoining(t, nodes, 0, opts, faults)
}

// runClusterJoining is runClusterOf whose last joining nodes start with
// cluster.join, waiting to be added (filatest.StartClusterJoining).
func runClusterJoining(t *testing.T, nodes, joining int, opts []filatest.Option, faults func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload)) {
	if testing.Short() {
		t.Skip("a multi-process cluster test")
	}
	if filatest.RaceBuild() {
		t.Skip("a load test of three processes: under the race detector it would measure the detector (the cluster package's tests run with it)")
	}
	c := filatest.StartClusterJoining(t, nodes, joining, append([]filatest.Option{filatest.WithEnv(clusterEnv...)}, opts...)...)
	ctx := ctxT(t, 15*time.Minute)
	admin := connect(t, c.Addrs()).Admin()
	createQueue(t, ctx, admin, "jobs")

	w := &workload{t: t, queue: "jobs", rec: &history.Recorder{}}
	stop := make(chan struct{})
	cstop := make(chan struct{})
	var stopOnce, cstopOnce sync.Once
	// A failing fault step ends the test: stop the workload with it.
	t.Cleanup(func() {
		stopOnce.Do(func() { close(stop) })
		cstopOnce.Do(func() { close(cstop) })
	})
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go w.produce(ctx, connect(t, c.Addrs()), fmt.Sprint("producer-", i), stop, &wg)
	}
	var cwg sync.WaitGroup
	cwg.Add(1)
	go w.consume(ctx, connect(t, c.Addrs()), "consumer", cstop, &cwg)

	w.waitSent(ctx, 200)
	faults(ctx, c, admin, w)
	w.waitSent(ctx, w.sent.Load()+100)
	stopOnce.Do(func() { close(stop) })
	wg.Wait()

	// Drain: every acknowledged enqueue must come out.
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		lost := 0
		for _, v := range history.Check(w.rec.History(), 0).Violations {
			if v.Kind == history.KindLost {
				lost++
			}
		}
		if lost == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	cstopOnce.Do(func() { close(cstop) })
	cwg.Wait()
	h := w.rec.History()
	rep := history.Check(h, 50)
	t.Logf("%v", rep)
	w.mu.Lock()
	for e, n := range w.errs {
		t.Logf("%d enqueues failed with: %s", n, e)
	}
	w.mu.Unlock()
	if len(rep.Violations) > 0 {
		keepHistory(t, h)
		t.Fatalf("the history does not check:\n%v", rep)
	}
	if rep.Acknowledged == 0 {
		t.Fatal("nothing was acknowledged")
	}
}

// createQueue creates queue name, retrying while the cluster elects the
// meta group's leader.
func createQueue(t *testing.T, ctx context.Context, admin *fila.Administrator, name string) {
	t.Helper()
	for {
		err := admin.CreateQueue(ctx, fila.NewQueueSpec(name))
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// resetPause starts a window in which pause measures the longest wait
// between two acknowledged enqueues.
func (w *workload) resetPause() { w.maxPause.Store(0) }

// pause returns the longest wait between two acknowledged enqueues since
// resetPause.
func (w *workload) pause() time.Duration { return time.Duration(w.maxPause.Load()) }

// waitSent waits until n enqueues have been acknowledged.
func (w *workload) waitSent(ctx context.Context, n int64) {
	for w.sent.Load() < n && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
	}
}

// TestClusterLeaderKills kills the queue's leader with SIGKILL and
// restarts it, 3 times (FILA_TEST_CLUSTER_KILLS; `make cluster-soak` runs 20).
// It logs how long after each kill enqueues were acknowledged again.
func TestClusterLeaderKills(t *testing.T) {
	kills := 3
	if v := os.Getenv("FILA_TEST_CLUSTER_KILLS"); v != "" {
		kills, _ = strconv.Atoi(v)
	}
	runCluster(t, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		for k := range kills {
			lead := leaderOf(t, ctx, c, admin, "jobs")
			before := w.sent.Load()
			c.Nodes[lead].Kill()
			killed := time.Now()
			w.waitSent(ctx, before+1)
			resumed := time.Since(killed)
			w.waitSent(ctx, before+50)
			t.Logf("kill %d: node %d; enqueues acknowledged again %v after the kill", k+1, lead+1, resumed.Round(time.Millisecond))
			c.Nodes[lead].Restart(t)
			w.waitSent(ctx, w.sent.Load()+100)
		}
	})
}

// TestClusterFollowerRestart kills a follower of the queue with SIGKILL,
// goes on without it, and restarts it with its data.
func TestClusterFollowerRestart(t *testing.T) {
	runCluster(t, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		lead := leaderOf(t, ctx, c, admin, "jobs")
		f := (lead + 1) % 3
		c.Nodes[f].Kill()
		w.waitSent(ctx, w.sent.Load()+300)
		c.Nodes[f].Restart(t)
		w.waitSent(ctx, w.sent.Load()+300)
		// The restarted follower can lead: kill the leader.
		lead = leaderOf(t, ctx, c, admin, "jobs")
		c.Nodes[lead].Kill()
		w.waitSent(ctx, w.sent.Load()+100)
		c.Nodes[lead].Restart(t)
	})
}

// TestClusterFollowerReplaced kills a follower, deletes its data
// directory, as if its disk were replaced, and starts it again: it gets
// the meta log from its peers and a snapshot of the queue, the leader's
// log having been compacted past everything it held. It can then lead.
func TestClusterFollowerReplaced(t *testing.T) {
	runCluster(t, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		lead := leaderOf(t, ctx, c, admin, "jobs")
		f := (lead + 1) % 3
		w.waitSent(ctx, w.sent.Load()+300)
		c.Nodes[f].Kill()
		ents, err := os.ReadDir(c.Nodes[f].DataDir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if err := os.RemoveAll(filepath.Join(c.Nodes[f].DataDir, e.Name())); err != nil {
				t.Fatal(err)
			}
		}
		w.waitSent(ctx, w.sent.Load()+1000)
		c.Nodes[f].Restart(t)
		for !strings.Contains(c.Nodes[f].Log(), `installed a snapshot`) {
			if ctx.Err() != nil {
				t.Fatalf("node %d, started empty, installed no snapshot", f+1)
			}
			time.Sleep(50 * time.Millisecond)
		}
		w.waitSent(ctx, w.sent.Load()+300)
		leadAfter(t, ctx, c, admin, w, f)
	})
}

// TestClusterLeaderIsolated cuts the queue's leader off from both peers
// (its clients still reach it), then heals the partition.
func TestClusterLeaderIsolated(t *testing.T) {
	runCluster(t, []filatest.Option{filatest.WithBinary(filatest.FaultBinary(t))}, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		lead := leaderOf(t, ctx, c, admin, "jobs")
		c.Isolate(t, lead)
		w.waitSent(ctx, w.sent.Load()+300)
		if now := leaderOf(t, ctx, c, admin, "jobs"); now == lead {
			t.Errorf("node %d, cut off from its peers, still leads", lead+1)
		}
		c.Heal(t, lead)
		w.waitSent(ctx, w.sent.Load()+300)
	})
}

// TestClusterRestartAll kills every node at once and starts them again.
func TestClusterRestartAll(t *testing.T) {
	runCluster(t, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		for _, n := range c.Nodes {
			n.Kill()
		}
		for _, n := range c.Nodes {
			n.Restart(t)
		}
		w.waitSent(ctx, w.sent.Load()+300)
	})
}

// corruptNewestSegment flips bytes in the middle of the newest log
// segment of a stopped node's data directory.
func corruptNewestSegment(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	newest := ""
	for _, e := range ents {
		if fi, err := e.Info(); err != nil || fi.Size() < 4096 {
			continue // the new, empty tail segment
		}
		if len(e.Name()) == 20 && e.Name()[0] == '0' && e.Name() > newest {
			newest = e.Name()
		}
	}
	if newest == "" {
		t.Fatalf("no segment in %s", dir)
	}
	p := filepath.Join(dir, newest)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 4096 {
		t.Fatalf("segment %s has only %d bytes", p, len(b))
	}
	for i := len(b) / 2; i < len(b)/2+64; i++ {
		b[i] ^= 0xff
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestClusterCorruptFollower damages a follower's log on disk while it is
// down: at restart it drops what fails its checksums, and since that may
// be what it acknowledged, rebuilds its replicas from its peers (voting
// again only once caught up). The history still checks, and the rebuilt
// node can then lead.
func TestClusterCorruptFollower(t *testing.T) {
	runCluster(t, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		lead := leaderOf(t, ctx, c, admin, "jobs")
		f := (lead + 1) % 3
		w.waitSent(ctx, w.sent.Load()+500)
		c.Nodes[f].Kill()
		corruptNewestSegment(t, c.Nodes[f].DataDir)
		c.Nodes[f].Restart(t)
		w.waitSent(ctx, w.sent.Load()+300)
		if !strings.Contains(c.Nodes[f].Log(), "rebuilding this node's replicas") {
			t.Fatalf("node %d did not rebuild after its log was damaged", f+1)
		}
		// Until its replica of the queue has caught up it does not vote:
		// losing another node then would stop the queue (safely).
		for !strings.Contains(c.Nodes[f].Log(), `rebuilt from its peers; it votes again" component=cluster group=2 queue=jobs`) {
			if ctx.Err() != nil {
				t.Fatalf("node %d did not finish rebuilding the queue's replica", f+1)
			}
			time.Sleep(50 * time.Millisecond)
		}
		// Once rebuilt it can lead: the others lose their leader.
		leadAfter(t, ctx, c, admin, w, f)
	})
}

// leadAfter kills the queue's leader, unless node f leads it, so that f
// (rebuilt or replaced) may be elected, and restarts it once enqueues go
// on.
func leadAfter(t *testing.T, ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload, f int) {
	t.Helper()
	if lead := leaderOf(t, ctx, c, admin, "jobs"); lead != f {
		c.Nodes[lead].Kill()
		w.waitSent(ctx, w.sent.Load()+100)
		c.Nodes[lead].Restart(t)
	}
}
