package e2e

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// envInt returns the integer in environment variable name, or def.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// envDuration returns the duration in environment variable name, or def.
func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// faultRand returns the random source of a test's fault schedule, seeded
// by FILA_TEST_SEED or else by the clock, and logs the seed so that a
// failing schedule can be run again.
func faultRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("FILA_TEST_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("fault schedule seed %d (FILA_TEST_SEED=%d runs it again)", seed, seed)
	return rand.New(rand.NewPCG(seed, 0))
}

// TestClusterLeaderPaused stops the queue's leader with SIGSTOP for 5 s
// (FILA_TEST_PAUSE), long enough for the others to elect a new one, then
// lets it run again with SIGCONT. The resumed node still believes it
// leads, with its leases and its subscriptions' credit; the history
// check shows that it delivers nothing stale (nothing after its ack was
// confirmed, no message twice but by an expired lease) and loses nothing.
func TestClusterLeaderPaused(t *testing.T) {
	pause := envDuration("FILA_TEST_PAUSE", 5*time.Second)
	runCluster(t, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		lead := leaderOf(t, ctx, c, admin, "jobs")
		c.Nodes[lead].Pause(t)
		time.Sleep(pause)
		c.Nodes[lead].Resume(t)
		t.Logf("node %d paused for %v", lead+1, pause)
		w.waitSent(ctx, w.sent.Load()+300)
	})
}

// TestClusterFlappingPartitions cuts one node at a time off from both
// others (a minority of one against a majority of two), for 1 s to
// FILA_TEST_FLAP_MAX (default 2 s; `make cluster-soak`: 10 s), then heals
// it, FILA_TEST_FLAPS times (default 4; soak: 20), on a schedule drawn
// from the test's seed.
func TestClusterFlappingPartitions(t *testing.T) {
	flaps := envInt("FILA_TEST_FLAPS", 4)
	most := max(envDuration("FILA_TEST_FLAP_MAX", 2*time.Second), time.Second)
	rng := faultRand(t)
	runCluster(t, []filatest.Option{filatest.WithBinary(filatest.FaultBinary(t))}, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		for f := range flaps {
			i := rng.IntN(len(c.Nodes))
			d := time.Second + time.Duration(rng.Int64N(int64(most-time.Second)+1))
			before := w.sent.Load()
			c.Isolate(t, i)
			time.Sleep(d)
			c.Heal(t, i)
			t.Logf("flap %d: node %d cut off for %v; %d enqueues acknowledged meanwhile", f+1, i+1, d.Round(time.Millisecond), w.sent.Load()-before)
			if rng.IntN(2) == 0 {
				time.Sleep(time.Duration(rng.Int64N(int64(time.Second))))
			}
		}
		w.waitSent(ctx, w.sent.Load()+300)
	})
}

// TestClusterSlowFsync makes a follower's fsyncs 100 ms slower
// (FILA_TEST_SLOW_FSYNC) while the load runs, then the leader's: nothing
// acknowledged is lost, and enqueues go on being acknowledged, more
// slowly while the leader's disk is slow, without stalling.
func TestClusterSlowFsync(t *testing.T) {
	slow := envDuration("FILA_TEST_SLOW_FSYNC", 100*time.Millisecond)
	phase := 150
	runCluster(t, []filatest.Option{filatest.WithBinary(filatest.FaultBinary(t))}, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		lead := leaderOf(t, ctx, c, admin, "jobs")
		for _, who := range []struct {
			name string
			node int
		}{{"a follower", (lead + 1) % len(c.Nodes)}, {"the leader", lead}} {
			c.SlowFsync(t, who.node, slow)
			start, before := time.Now(), w.sent.Load()
			w.waitSent(ctx, before+int64(phase))
			el := time.Since(start)
			c.FastFsync(t, who.node)
			t.Logf("%s (node %d) fsyncing %v slower: %d enqueues acknowledged in %v", who.name, who.node+1, slow, phase, el.Round(time.Millisecond))
		}
		w.waitSent(ctx, w.sent.Load()+300)
	})
}

// TestClusterMetaLeaderLoss kills the meta group's leader under load.
// Queues led by other nodes keep serving, and admin operations (queue
// creation) answer, until a new meta leader is elected, with a typed
// retryable error (UNAVAILABLE) or succeed; retried, each one succeeds.
func TestClusterMetaLeaderLoss(t *testing.T) {
	runCluster(t, nil, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		metaLead := -1
		for metaLead < 0 && ctx.Err() == nil {
			st, err := admin.ClusterStatus(ctx)
			if err == nil && len(st.Groups) > 0 && st.Groups[0].Leader != 0 {
				metaLead = int(st.Groups[0].Leader) - 1
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		other := (metaLead + 1) % len(c.Nodes)
		oc := connect(t, c.Nodes[other].Addr)
		before := w.sent.Load()
		c.Nodes[metaLead].Kill()
		killed := time.Now()
		retryable := 0
		for i := range 5 {
			name := fmt.Sprintf("during-%d", i)
			for {
				rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				err := oc.Admin().CreateQueue(rctx, fila.NewQueueSpec(name))
				cancel()
				if err == nil || errors.Is(err, fila.ErrQueueExists) {
					break // a retry may find the first attempt applied
				}
				if !errors.Is(err, fila.ErrUnavailable) && !errors.Is(err, fila.ErrNotLeader) {
					t.Fatalf("create queue %s with the meta leader gone: %v; want success or a retryable error", name, err)
				}
				retryable++
				time.Sleep(100 * time.Millisecond)
			}
		}
		t.Logf("node %d (meta leader) killed; 5 queues created in %v, after %d retryable errors; %d enqueues acknowledged meanwhile",
			metaLead+1, time.Since(killed).Round(time.Millisecond), retryable, w.sent.Load()-before)
		c.Nodes[metaLead].Restart(t)
		w.waitSent(ctx, w.sent.Load()+300)
	})
}

// TestClusterSnapshotInstallInterrupted: a follower down until the
// queue's log was compacted past it gets a snapshot when it comes back.
// It is killed once the snapshot is durable in its log and before its
// replica installs it (FILA_TEST_SNAPSHOT_PAUSE holds it there), and
// started again: it installs the snapshot at start, catches up, and can
// lead.
func TestClusterSnapshotInstallInterrupted(t *testing.T) {
	opts := []filatest.Option{filatest.WithBinary(filatest.FaultBinary(t)), filatest.WithEnv("FILA_TEST_SNAPSHOT_PAUSE=3s")}
	runCluster(t, opts, func(ctx context.Context, c *filatest.Cluster, admin *fila.Administrator, w *workload) {
		lead := leaderOf(t, ctx, c, admin, "jobs")
		f := (lead + 1) % len(c.Nodes)
		c.Nodes[f].Kill()
		la := connect(t, c.Nodes[lead].Addr).Admin()
		// Until the leader's log starts after what the follower holds.
		for {
			w.waitSent(ctx, w.sent.Load()+200)
			st, err := la.ClusterStatus(ctx)
			if err != nil {
				t.Fatal(err)
			}
			past := false
			for _, g := range st.Groups {
				for _, r := range g.Replicas {
					if g.Queue == "jobs" && r.NodeID == uint64(f+1) && r.Known && g.FirstIndex > r.Match+1 {
						past = true
					}
				}
			}
			if past {
				break
			}
			if ctx.Err() != nil {
				t.Fatal("the leader never compacted its log past the stopped follower")
			}
		}
		// The message of the snapshot durable in the log, not the earlier
		// "received a snapshot's data" of its stream.
		const durable = `msg="received a snapshot"`
		before := strings.Count(c.Nodes[f].Log(), durable)
		c.Nodes[f].Restart(t)
		for strings.Count(c.Nodes[f].Log(), durable) == before {
			if ctx.Err() != nil {
				t.Fatal("the follower never received a snapshot")
			}
			time.Sleep(10 * time.Millisecond)
		}
		c.Nodes[f].Kill()
		c.Nodes[f].Restart(t)
		w.waitSent(ctx, w.sent.Load()+300)
		if !strings.Contains(c.Nodes[f].Log(), "received before the node stopped") {
			t.Errorf("node %d did not install at start the snapshot it was killed installing", f+1)
		}
		// Caught up, it can lead.
		if lead = leaderOf(t, ctx, c, admin, "jobs"); lead != f {
			c.Nodes[lead].Kill()
			w.waitSent(ctx, w.sent.Load()+100)
			c.Nodes[lead].Restart(t)
		}
	})
}

// TestClusterClockAheadFailover: the two followers of a queue run with
// wall clocks an hour ahead of the leader's (FILA_TEST_CLOCK_OFFSET).
// A message is leased for 30 minutes; the leader is killed, and a node an
// hour ahead leads. The lease is still held: the consumer's ack of it
// succeeds. A new leader that took its own clock for the queue's time
// would expire every lease at once.
func TestClusterClockAheadFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("a multi-process cluster test")
	}
	bin := filatest.FaultBinary
	if filatest.RaceBuild() {
		bin = filatest.RaceFaultBinary
	}
	c := filatest.StartCluster(t, 3, filatest.WithBinary(bin(t)), filatest.WithEnv(clusterEnv...))
	ctx := ctxT(t, 3*time.Minute)
	cl := connect(t, c.Addrs())
	admin := cl.Admin()
	for {
		err := admin.CreateQueue(ctx, fila.NewQueueSpec("held").VisibilityTimeout(30*time.Minute))
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	lead := leaderOf(t, ctx, c, admin, "held")
	for i, n := range c.Nodes {
		if i == lead {
			continue
		}
		n.Kill()
		n.Env = append(n.Env, "FILA_TEST_CLOCK_OFFSET=1h")
		n.Restart(t)
	}
	// The scenario needs the node with the right clock to lead: if the
	// lead moved while the others restarted, kill whoever leads until it
	// comes back (the message is not sent yet).
	for now := leaderOf(t, ctx, c, admin, "held"); now != lead; now = leaderOf(t, ctx, c, admin, "held") {
		c.Nodes[now].Kill()
		for leaderOf(t, ctx, c, admin, "held") == now {
			time.Sleep(50 * time.Millisecond)
		}
		c.Nodes[now].Restart(t)
	}
	send := func(body string) {
		t.Helper()
		for {
			sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := cl.Producer().Send(sctx, fila.NewMessage("held", []byte(body)))
			cancel()
			if err == nil {
				return
			}
			if ctx.Err() != nil {
				t.Fatal(err)
			}
		}
	}
	send("held")
	sub, err := cl.Consumer().Subscribe(ctx, "held", fila.Prefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	var d *fila.Delivery
	select {
	case d = <-sub.C():
	case <-ctx.Done():
		t.Fatal("no delivery")
	}
	c.Nodes[lead].Kill()
	for leaderOf(t, ctx, c, admin, "held") == lead {
		time.Sleep(50 * time.Millisecond)
	}
	// Entries of the new leader, each with a tick of its time.
	send("after-1")
	time.Sleep(200 * time.Millisecond)
	send("after-2")
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := d.Ack(actx)
		cancel()
		if err == nil {
			break
		}
		if errors.Is(err, fila.ErrLeaseExpired) {
			t.Fatalf("the lease of a 30-minute visibility timeout expired at the failover to a node an hour ahead: %v", err)
		}
		if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.Nodes[lead].Restart(t)
}
