package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	pb "go.etcd.io/raft/v3/raftpb"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/proto"

	"github.com/fila-mq/fila/broker/internal/peer"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// firstIndex returns the first entry held in node i's log of queue's
// group: above 1 once the log was compacted.
func (c *testCluster) firstIndex(i int, queue string) uint64 {
	c.t.Helper()
	n := c.nodes[i]
	n.mu.RLock()
	g := n.byQueue[queue]
	n.mu.RUnlock()
	if g == nil {
		c.t.Fatalf("node %d holds no replica of %s", i+1, queue)
	}
	first, _ := g.log.FirstIndex()
	return first
}

// create creates queue, retrying until the meta group has a leader.
func (c *testCluster) create(queue string) {
	c.t.Helper()
	eventually(c.t, "create "+queue, func() error {
		_, err := c.nodes[0].CreateQueue(context.Background(), sched.QueueSpec{Name: queue})
		return err
	})
}

// compacted loads queue until its leader's log is compacted past its
// first entries, and returns the leader.
func (c *testCluster) compacted(queue string) int {
	c.t.Helper()
	lead := c.leader(queue)
	eventually(c.t, "the leader's log of "+queue+" compacted", func() error {
		c.load(queue, 1) // an entry after the image, for the compaction to follow
		if f := c.firstIndex(lead, queue); f <= 10 {
			return fmt.Errorf("first index %d", f)
		}
		return nil
	})
	return lead
}

// load enqueues batches of 1 KiB messages to queue, several fairness
// keys, and acks some of what a subscription on the leader receives, so
// that the queue's state holds ready, leased and acked messages.
func (c *testCluster) load(queue string, batches int) {
	c.t.Helper()
	body := strings.Repeat("x", 1024)
	for b := range batches {
		cmd := func() shard.Command {
			items := make([]sched.EnqueueItem, 3)
			for i := range items {
				items[i] = sched.EnqueueItem{Queue: queue, Msg: sched.Message{
					Body: []byte(body), PayloadSize: 1024, FairnessKey: fmt.Sprintf("tenant-%d", (b+i)%5),
				}}
			}
			return &shard.Enqueue{Items: items}
		}
		if r := c.submit(queue, cmd); r.Err != nil {
			c.t.Fatal(r.Err)
		}
	}
}

// TestSnapshots: replicas image their state and compact their logs; a
// follower that was down while the log moved past its position catches up
// from a snapshot, a node with an empty store is rebuilt from one, and a
// restarted node starts from its image. Every replica ends with the same
// state, for both scheduling policies.
func TestSnapshots(t *testing.T) {
	c := newTestCluster(t, 3, func(c *testCluster) { c.snap = 8 << 10 })
	ctx := context.Background()
	queues := []sched.QueueSpec{{Name: "drr"}, {Name: "fair", Policy: sched.PolicySTFQ}}
	for _, q := range queues {
		eventually(t, "create "+q.Name, func() error {
			_, err := c.nodes[0].CreateQueue(ctx, q)
			return err
		})
	}
	// A subscription holds leases on each leader, acking every other
	// delivery.
	for _, q := range queues {
		lead := c.leader(q.Name)
		sh, err := c.nodes[lead].Route(q.Name)
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan shard.Result, 1)
		if err := sh.Subscribe(ctx, &shard.Subscribe{Sub: 1, Queue: q.Name, Credit: 40}, &sink{}, func(r shard.Result) { done <- r }); err != nil {
			t.Fatal(err)
		}
		if r := <-done; r.Err != nil {
			t.Fatal(r.Err)
		}
	}

	// Node 3 goes; the others move on well past several images.
	c.stop(2)
	for _, q := range queues {
		c.load(q.Name, 60)
	}
	for _, q := range queues {
		c.compacted(q.Name)
	}

	// Node 3 comes back with its store, behind the compacted logs: it
	// installs snapshots and agrees with the others.
	c.start(2)
	for _, q := range queues {
		c.load(q.Name, 2)
		c.converged(q.Name)
	}

	// Node 2 loses its whole store: it is rebuilt from snapshots.
	c.stop(1)
	for _, q := range queues {
		c.load(q.Name, 30)
	}
	c.stores[1].Close()
	c.stores[1] = store.NewMem()
	c.start(1)
	for _, q := range queues {
		c.load(q.Name, 1)
		c.converged(q.Name)
	}

	// Every node restarts: each starts from its image, replays what
	// follows, and they agree.
	for i := range c.nodes {
		c.stop(i)
	}
	for i := range c.nodes {
		c.start(i)
	}
	for _, q := range queues {
		c.load(q.Name, 1)
		c.converged(q.Name)
		for i, n := range c.nodes {
			sh, err := n.Local(q.Name)
			if err != nil {
				t.Fatal(err)
			}
			if sh.OpenedAt() == 0 {
				t.Errorf("node %d opened %s without an image", i+1, q.Name)
			}
		}
	}
}

// TestSnapshotInstalledAtRestart: a node that stopped after its log
// stored a received snapshot, but before its replica's image of it was
// written, installs the snapshot from its log when it starts again.
func TestSnapshotInstalledAtRestart(t *testing.T) {
	c := newTestCluster(t, 3, func(c *testCluster) { c.snap = 8 << 10 })
	c.create("jobs")
	c.stop(2)
	c.load("jobs", 60)
	c.compacted("jobs")
	c.start(2)
	c.converged("jobs")
	n := c.nodes[2]
	n.mu.RLock()
	g := n.byQueue["jobs"]
	n.mu.RUnlock()
	if snap := g.log.Stored(); !g.log.HasData() {
		t.Fatalf("node 3's log holds no received snapshot (index %d)", snap.GetMetadata().GetIndex())
	}
	gid := g.id
	c.stop(2)
	// As if the node had stopped before the replica wrote its image.
	var b store.Batch
	b.Delete(imageKey(gid))
	if err := c.stores[2].Apply(&b); err != nil {
		t.Fatal(err)
	}
	c.start(2)
	c.load("jobs", 1)
	c.converged("jobs")
}

// TestFollowerCatchesUpUnderLoad: a node that lost its store is rebuilt
// from a snapshot while producers keep the leader busy, though images
// and compactions come faster than a snapshot is made and installed. The
// leader kept no entries for a follower being sent a snapshot or
// installing one, so by then its log had moved past the snapshot and the
// follower needed another, and another (made and sent for nothing, each
// larger than the last): it caught up only once the load stopped, or by
// luck.
func TestFollowerCatchesUpUnderLoad(t *testing.T) {
	slowSnapshots = 500 * time.Millisecond
	t.Cleanup(func() { slowSnapshots = 0 })
	c := newTestCluster(t, 3, func(c *testCluster) { c.snap = 4 << 10 })
	ctx := context.Background()
	c.create("jobs")
	c.load("jobs", 20)
	replaced := (c.leader("jobs") + 1) % 3
	c.stop(replaced)
	c.load("jobs", 20)

	// A producer keeps the leader busy: an enqueue every 2 ms, an image
	// every few hundred milliseconds.
	stop := make(chan struct{})
	loaded := make(chan struct{})
	t.Cleanup(func() {
		close(stop)
		<-loaded
	})
	body := []byte(strings.Repeat("x", 1024))
	var others []*Node
	for i, n := range c.nodes {
		if i != replaced {
			others = append(others, n)
		}
	}
	go func() {
		defer close(loaded)
		for {
			select {
			case <-stop:
				return
			default:
			}
			var sh *shard.Shard
			for _, n := range others {
				if s, err := n.Route("jobs"); err == nil {
					sh = s
					break
				}
			}
			if sh == nil {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			done := make(chan shard.Result, 1)
			cmd := &shard.Enqueue{Items: []sched.EnqueueItem{{Queue: "jobs", Msg: sched.Message{Body: body, PayloadSize: 1024}}}}
			if sh.Submit(ctx, cmd, func(r shard.Result) { done <- r }) == nil {
				<-done
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()

	// The node comes back with an empty store, and catches up with the
	// leader while the load goes on.
	c.stores[replaced].Close()
	c.stores[replaced] = store.NewMem()
	c.rebuild[replaced] = true
	c.start(replaced)
	group := func(i int) *group {
		n := c.nodes[i]
		n.mu.RLock()
		defer n.mu.RUnlock()
		return n.byQueue["jobs"]
	}
	target, _ := group(c.leader("jobs")).log.LastIndex()
	eventually(t, "the rebuilt follower passes the leader's last index at its start", func() error {
		g := group(replaced)
		if g == nil {
			return fmt.Errorf("node %d holds no replica yet", replaced+1)
		}
		if a := g.applied.Load(); a < target {
			return fmt.Errorf("applied %d of %d", a, target)
		}
		return nil
	})
	// One snapshot for the rebuilt node; perhaps one more tried while it
	// was down, which could not be sent, and one more from a new leader
	// when leadership moved while the first was in flight (on a loaded
	// machine an election can come between them). More would be a
	// snapshot sent again and again.
	made := uint64(0)
	for i := range c.nodes {
		if g := group(i); g != nil {
			made += g.streamed.Load()
		}
	}
	if made == 0 || made > 3 {
		t.Errorf("%d snapshots streamed for one rebuilt follower; want 1 to 3", made)
	}
}

// TestStaleRebuiltAnnouncement: a rebuilt node announces how far its
// replicas got, and a leader that believes a replica holds more hands the
// leadership over (its match would never let the replica catch up). An
// announcement applied after the replica caught up, from before it did,
// must not: the leader replicates to it, and a new leader would have to
// send it another snapshot.
func TestStaleRebuiltAnnouncement(t *testing.T) {
	c := newTestCluster(t, 3, func(c *testCluster) { c.snap = 4 << 10 })
	ctx := context.Background()
	c.create("jobs")
	c.load("jobs", 30)
	lead := c.leader("jobs")
	rebuilt := (lead + 1) % 3
	c.stop(rebuilt)
	c.stores[rebuilt].Close()
	c.stores[rebuilt] = store.NewMem()
	c.rebuild[rebuilt] = true
	c.start(rebuilt)
	c.load("jobs", 1)
	c.converged("jobs")
	lead = c.leader("jobs")
	before, err := c.groupStatus(lead, "jobs")
	if err != nil {
		t.Fatal(err)
	}

	// The replica announces the empty log it started from, late.
	n := c.nodes[rebuilt]
	n.mu.RLock()
	gid := n.byQueue["jobs"].id
	n.mu.RUnlock()
	if _, err := n.proposeMeta(ctx, metaRebuilt, appendRebuilt(nil, uint64(rebuilt+1), map[uint64]uint64{gid: 0})); err != nil {
		t.Fatal(err)
	}
	// A hand-over would start a new term within an election timeout.
	time.Sleep(time.Second)
	c.load("jobs", 1)
	after, err := c.groupStatus(lead, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if after.Leader != before.Leader || after.Term != before.Term {
		t.Fatalf("leader %d term %d after a stale announcement; want %d, term %d, unchanged", after.Leader, after.Term, before.Leader, before.Term)
	}
}

// chunkRecords counts the snapshot chunk records of group gid in st.
func chunkRecords(t *testing.T, st *store.Mem, gid uint64) int {
	t.Helper()
	p := binary.BigEndian.AppendUint64([]byte("r/"), gid)
	n := 0
	if err := st.ScanKeys(append(p, "/sd/"...), append(p, "/sd0"...), func([]byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestStreamedSnapshot: a follower behind the compacted log gets its
// snapshot in a stream, stored in chunks as it arrives, and installs it;
// a stream whose data does not decode, or that raft does not take, leaves
// nothing behind; and a snapshot message that comes without its stream
// is not taken. The leader streams at a bounded rate.
func TestStreamedSnapshot(t *testing.T) {
	defer func(n int) { stageChunk = n }(stageChunk)
	stageChunk = 4 << 10
	c := newTestCluster(t, 3, func(c *testCluster) { c.snap, c.rate = 8<<10, 4<<20 })
	c.create("jobs")
	c.load("jobs", 5)
	follower := (c.leader("jobs") + 1) % 3
	c.stop(follower)
	c.load("jobs", 60)
	lead := c.compacted("jobs")
	c.start(follower)
	c.converged("jobs")

	n := c.nodes[follower]
	n.mu.RLock()
	g := n.byQueue["jobs"]
	n.mu.RUnlock()
	// The leader (the one that compacted, or a later one) counts a
	// stream once it reads the follower's reply, which may come after
	// the follower has caught up.
	eventually(t, "the leader's count of the stream", func() error {
		var sent, received uint64
		for i, node := range c.nodes {
			if i != follower {
				for _, s := range node.Transport().Stats() {
					sent += s.StreamsSent
				}
			}
		}
		for _, s := range n.Transport().Stats() {
			received += s.StreamBytesReceived
		}
		if sent == 0 || received < 10*uint64(stageChunk) {
			return fmt.Errorf("the leader streamed %d snapshots, the follower received %d bytes; want a snapshot staged in 10 chunks of %d bytes or more", sent, received, stageChunk)
		}
		return nil
	})
	chunks := chunkRecords(t, c.stores[follower], g.id)

	// A snapshot at an index the follower has applied, after the one its
	// log holds, with the leader's latest image.
	_, image, _, err := shard.LoadImage(c.stores[lead], imageKey(g.id))
	if err != nil {
		t.Fatal(err)
	}
	c.load("jobs", 1)
	c.converged("jobs")
	index := g.log.Stored().GetMetadata().GetIndex() + 1
	if a := g.applied.Load(); a < index {
		t.Fatalf("the follower applied %d, not past its log's snapshot at %d", a, index-1)
	}
	var data bytes.Buffer
	if err := shard.WriteSnapshot(&data, c.stores[lead], "jobs", index, image); err != nil {
		t.Fatal(err)
	}
	msg := func(index uint64) peer.Message {
		return peer.Message{Group: g.id, Msg: &pb.Message{
			Type: pb.MessageType_MsgSnap.Enum(), From: proto.Uint64(uint64(lead + 1)), To: proto.Uint64(uint64(follower + 1)),
			Term: proto.Uint64(g.term.Load()),
			Snapshot: &pb.Snapshot{Metadata: &pb.SnapshotMetadata{
				Index: proto.Uint64(index), Term: proto.Uint64(g.term.Load()), ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}},
			}},
		}}
	}
	before := g.applied.Load()

	// Data cut short, or of another queue, is refused.
	cut := data.Bytes()[:data.Len()/2]
	if err := n.receiveSnapshot(uint64(lead+1), msg(index), bytes.NewReader(cut)); !errors.Is(err, shard.ErrBadSnapshot) {
		t.Errorf("a snapshot cut short: %v; want ErrBadSnapshot", err)
	}
	var other bytes.Buffer
	if err := shard.WriteSnapshot(&other, c.stores[lead], "other", index, image); err != nil {
		t.Fatal(err)
	}
	if err := n.receiveSnapshot(uint64(lead+1), msg(index), io.MultiReader(&other, bytes.NewReader([]byte{3, 'a', 'b', 'c', 1, 'x'}))); !errors.Is(err, shard.ErrBadSnapshot) {
		t.Errorf("a record outside the queue: %v; want ErrBadSnapshot", err)
	}
	// A whole one raft does not take: the follower is past it.
	if err := n.receiveSnapshot(uint64(lead+1), msg(index), bytes.NewReader(data.Bytes())); err != nil {
		t.Errorf("a snapshot the follower is past: %v", err)
	}
	eventually(t, "the chunks of the snapshots not taken deleted", func() error {
		if got := chunkRecords(t, c.stores[follower], g.id); got != chunks {
			return fmt.Errorf("%d chunk records; want the stored snapshot's %d", got, chunks)
		}
		return nil
	})
	// A snapshot message without its stream is dropped before raft.
	far := msg(index + 1000)
	far.Msg.Snapshot.Data = nil
	n.inbox <- []peer.Message{far}
	c.load("jobs", 1)
	c.converged("jobs")
	if a := g.applied.Load(); a < before || a >= index+1000 {
		t.Fatalf("the follower applied %d; want it past %d and not at the bare snapshot's %d", a, before, index+1000)
	}
}

// TestRateWriter: a rate-limited writer passes every byte on, in order,
// and stops with its context's error once it is done.
func TestRateWriter(t *testing.T) {
	var out bytes.Buffer
	w := &rateWriter{ctx: context.Background(), w: &out, l: rate.NewLimiter(rate.Inf, rateBurst)}
	data := make([]byte, 3*rateBurst+17)
	for i := range data {
		data[i] = byte(i * 31)
	}
	if n, err := w.Write(data); n != len(data) || err != nil || !bytes.Equal(out.Bytes(), data) {
		t.Fatalf("Write = %d, %v; wrote %d bytes, want all %d in order", n, err, out.Len(), len(data))
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	w = &rateWriter{ctx: ctx, w: &out, l: rate.NewLimiter(1, rateBurst)}
	if _, err := w.Write(data); !errors.Is(err, context.Canceled) {
		t.Fatalf("Write after the context ended: %v; want context.Canceled", err)
	}
}

// TestRebuiltTwiceWhileIdle: a node rebuilt from a snapshot, whose store
// is lost again once the queue has gone idle, is rebuilt again. The
// leader took the snapshot it had sent the first time for proof that the
// replica held its entries, for as long as no new image made it look
// again: it neither sent another nor handed over, and the replica stayed
// empty.
func TestRebuiltTwiceWhileIdle(t *testing.T) {
	defer func(d time.Duration) { snapshotGrace = d }(snapshotGrace)
	snapshotGrace = 300 * time.Millisecond
	c := newTestCluster(t, 3, func(c *testCluster) { c.snap = 8 << 10 })
	c.create("jobs")
	c.load("jobs", 5)
	lost := (c.leader("jobs") + 1) % 3
	rebuild := func() {
		t.Helper()
		c.stop(lost)
		c.stores[lost].Close()
		c.stores[lost] = store.NewMem()
		c.rebuild[lost] = true
		c.start(lost)
		c.converged("jobs")
	}
	c.stop(lost)
	c.load("jobs", 60)
	c.compacted("jobs")
	rebuild()
	// Idle, past the grace, the node loses its store again.
	time.Sleep(3 * snapshotGrace)
	rebuild()
	if s := c.stats(lost, "jobs"); s.Ready == 0 {
		t.Fatalf("the twice rebuilt replica holds %+v; want the queue's messages", s)
	}
	// Every node restarts, and the node loses its store once more: the
	// new leader, which has made no image since it started, sends the
	// one its replica opened from.
	for i := range c.nodes {
		c.stop(i)
	}
	c.rebuild[lost] = false
	for i := range c.nodes {
		c.start(i)
	}
	c.converged("jobs")
	rebuild()
	if s := c.stats(lost, "jobs"); s.Ready == 0 {
		t.Fatalf("the replica rebuilt after a restart holds %+v; want the queue's messages", s)
	}
}
