// Package cluster replicates the broker's queues with Raft (go.etcd.io/raft/v3;
// Ongaro & Ousterhout, "In Search of an Understandable Consensus
// Algorithm", USENIX ATC 2014), in the shape CockroachDB and TiKV use for
// many groups on one node:
//
//   - a meta group, on every node, holds the cluster's nodes, the queues
//     (their definitions, Raft group IDs and replica sets), and the
//     changes to API keys and the runtime config; every node applies it;
//   - one group per queue (with its DLQ), on the queue's replicas; the
//     queue's shard (package shard, in its replicated mode) proposes the
//     leader's batches and applies the committed entries.
//
// One driver goroutine per node runs every group's RawNode: it ticks them,
// steps the messages the peer transport (package peer) brings, proposes,
// and handles each Ready in the order Raft asks: it persists the entries
// and hard states of every group that has any in one storage group, made
// durable by one fsync (package raftlog keeps them in the node's store);
// then it sends the messages, one batch per peer; then it hands the
// committed entries to their state machines, and advances.
//
// Replies are sent after commit: a queue's shard answers an operation once
// the entry holding it is committed (a majority has fsynced it) and its
// effects are durable on the leader; a delivery goes out after its
// Deliver entry commits. So leases, attempts, the dedup window, ordering
// and the fairness state continue on a new leader where the old one left
// them.
package cluster

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/peer"
	"github.com/fila-mq/fila/broker/internal/raftlog"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// MetaGroup is the Raft group ID of the meta group. Queue groups get IDs
// from 2 up, assigned by the meta group in the order queues are created.
const MetaGroup = 1

// Storage is what the cluster needs of the node's store: what a shard
// needs, plus synchronous groups for the Raft log and the meta state.
type Storage interface {
	shard.Storage
	// Apply makes b durable and visible before it returns.
	Apply(b *store.Batch) error
	// ScanKeys is Scan without the values.
	ScanKeys(start, end []byte, fn func(key []byte) error) error
}

// Effects are what the meta group's entries do on this node beyond its
// own state, called on the driver goroutine in log order. Every function
// but Reload must be set.
type Effects struct {
	// QueueCreated registers a queue (its hooks) on this node, whether or
	// not it holds a replica.
	QueueCreated func(spec sched.QueueSpec)
	// QueueDeleted forgets a queue and its DLQ.
	QueueDeleted func(name string)
	// Auth applies an encoded auth.Change.
	Auth func(data []byte) error
	// Config applies an encoded rtconf.Change.
	Config func(data []byte) error
	// StatePrefixes are the store key prefixes under which Auth and
	// Config keep their state (each ending in a byte below 0xff): a
	// snapshot of the meta group carries the records under them.
	StatePrefixes []string
	// Reload, if set, makes what Auth and Config keep follow their
	// records under StatePrefixes, after a snapshot of the meta group
	// replaced them.
	Reload func() error
	// Leading is called, on its own goroutine, when this node becomes the
	// leader of a queue's group, so that the caller can propose what the
	// group's state must follow (the throttle rates).
	Leading func(queue string, sh *shard.Shard)
}

// Config configures a cluster node.
type Config struct {
	// NodeID is this node's Raft ID, > 0, never reused.
	NodeID uint64
	// ClusterID is shared by the nodes of one cluster.
	ClusterID string
	// PeerListenAddr is the peer transport's listen address, host:port.
	PeerListenAddr string
	// AdvertiseAddr is this node's client address, host:port, as the
	// NOT_LEADER hints of other nodes give it.
	AdvertiseAddr string
	// Peers are the initial members and their peer addresses, this node
	// included.
	Peers map[uint64]string
	// ReplicationFactor is the number of replicas of a queue, capped to
	// the number of nodes.
	ReplicationFactor int
	// TickInterval is the Raft tick; ElectionTicks and HeartbeatTicks are
	// in ticks.
	TickInterval                  time.Duration
	ElectionTicks, HeartbeatTicks int
	// TLS secures the peer transport; nil: plain TCP.
	TLS *tls.Config
	// Shard is the template of the queue shards' configuration; the
	// cluster sets its Replication.
	Shard shard.Config
	// Effects are the meta group's effects on this node.
	Effects Effects
	// Logger receives the node's lines, and those of its peer transport
	// with subsystem=peer added: the server gives it component=cluster,
	// which a second component would repeat.
	Logger *slog.Logger
	// SnapshotEvery is how many bytes of entries a queue's replica
	// applies between two images of its state, after which its group's
	// log is compacted (see shard.Replication.ImageEvery): 0 means 64 MiB,
	// < 0 never.
	SnapshotEvery int64
	// MetaSnapshotEvery is how many entries the meta group applies
	// between two snapshots of its state, after which its log is
	// compacted (metasnap.go): 0 means 4096.
	MetaSnapshotEvery uint64
	// SnapshotRate bounds the bytes per second of each snapshot streamed
	// to a follower; 0 means no bound.
	SnapshotRate int64
	// Join: this node joins a running cluster, which adds it (AddNode):
	// it does not bootstrap the meta group with Peers as its members.
	// Peers then lists members to reach, and this node.
	Join bool
	// Rebuild is set when this node's store lost durable data (a
	// repair dropped damaged records): its Raft logs may lack entries it
	// acknowledged to its peers. Open then deletes every group's log and
	// state on this node and rebuilds them from the peers; until each
	// group has caught up with its leader, this node neither votes nor
	// campaigns in it, so it never elects, or becomes, a leader that
	// lacks committed entries. A group whose stored log does not hold
	// together (raftlog.ErrCorrupt) makes Open do the same.
	Rebuild bool
}

// Node is one node of a cluster: the driver of its Raft groups. Its
// methods are safe for concurrent use.
type Node struct {
	cfg Config
	st  Storage
	rb  store.Batch // the driver's storage group, reused (handleReadies)
	tr  *peer.Transport
	log *slog.Logger

	mu      sync.RWMutex
	groups  map[uint64]*group // by group ID
	byQueue map[string]*group // queue and DLQ names
	meta    metaState

	inbox chan []peer.Message
	propc chan proposal
	ctl   chan func()
	stop  chan struct{}
	done  chan struct{}
	// ctx ends with Close (cancel), for the snapshot streams; streams
	// counts the streams being sent (snapshot.go).
	ctx     context.Context
	cancel  context.CancelFunc
	streams sync.WaitGroup
	// stagedGroups are the groups whose streamed snapshot was stepped
	// into raft this round (driver goroutine).
	stagedGroups []*group

	waitMu  sync.Mutex
	seq     uint64
	waiters map[uint64]chan metaResult

	failed atomic.Pointer[error]
	// announcing: announceRebuild is running.
	announcing atomic.Bool
	// reload: Open changed records under Effects.StatePrefixes (it
	// installed a snapshot of the meta group that was durable in its log
	// but not yet in its state, or moved the identity record), so
	// Effects.Reload must follow.
	reload bool

	// ticks counts the driver's ticks; heard is the tick at which a
	// message from each peer last arrived (driver goroutine; see
	// quiesce.go).
	ticks uint64
	heard map[uint64]uint64
	// dropping holds, for each group whose replica is being deleted
	// (dropReplica), a channel closed once it is (driver goroutine).
	dropping map[uint64]chan struct{}
	// removedc is closed once this node stops for its removal (Removed).
	removedc chan struct{}
}

// group is one Raft group on this node.
type group struct {
	id    uint64
	queue string // "" for the meta group
	rn    *raft.RawNode
	log   *raftlog.Log
	sh    *shard.Shard // nil for the meta group
	// leader and term are the driver's view, for routing.
	leader atomic.Uint64
	term   atomic.Uint64
	// commit and applied are the driver's, for status.
	commit, applied atomic.Uint64
	// replicas are the group's voters (of both halves of a joint
	// configuration), incoming those of its incoming half, learners its
	// learners, and joint whether its configuration is joint; boot is
	// the configuration it was created with (driver goroutine; setConf).
	replicas, incoming, learners []uint64
	joint                        bool
	boot                         []uint64
	// moveTo is the replica set a move is taking a queue's group to, nil
	// when none is under way; moveAt is the tick of the move's last step
	// and moveConfs the count of configurations applied then, confs the
	// count now (driver goroutine; move.go).
	moveTo           []uint64
	moveAt           uint64
	confs, moveConfs uint64
	// lead is a queue group's preferred leader (a rebalance's), 0 for
	// none; rebalanceAt is the tick the meta group's leader last
	// proposed a rebalance step at (driver goroutine; rebalance.go).
	lead, rebalanceAt uint64
	// campaign: a new group's preferred leader campaigns once its
	// bootstrap configuration is applied (driver goroutine).
	campaign bool
	// hsTerm and hsVote are the term and vote of the last hard state
	// written (driver goroutine).
	hsTerm, hsVote uint64
	// rebuilding: the group's log on this node was rebuilt empty (see
	// Config.Rebuild); it neither votes nor campaigns until its commit
	// index reaches target, the leader's commit index when it first
	// heard from it (driver goroutine).
	rebuilding atomic.Bool
	target     uint64
	// streamed counts the snapshots a queue group's leader streamed to
	// followers (snapshot.go).
	streamed atomic.Uint64
	// receiving: a streamed snapshot's data is being received; staged:
	// it was, and its MsgSnap stepped into raft this round (driver
	// goroutine; snapshot.go).
	receiving bool
	staged    *staged
	// imaged is the index of the replica's previous image (driver
	// goroutine).
	imaged uint64
	// granted holds, for each follower sent a snapshot within
	// snapshotGrace, its index and the tick it went at: the leader keeps
	// the entries after it while the follower installs it (driver
	// goroutine; see compact and handOver).
	granted map[uint64]grant
	// quiesced: the group is idle and not ticked (quiesce.go); idle
	// counts the leader's ticks in a row that found it idle (driver
	// goroutine).
	quiesced atomic.Bool
	idle     int
	// snapTooBig: the meta group's state was found too large for a
	// snapshot, and said so; snapTried is the applied index of the last
	// attempt, so that such a state is read again only an interval later
	// (driver goroutine).
	snapTooBig bool
	snapTried  uint64
}

type proposal struct {
	group   uint64
	data    []byte
	dropped func()
}

// ErrStopped is returned by operations on a node that has stopped.
var ErrStopped = fmt.Errorf("node stopped: %w", fault.ErrUnavailable)

// Open starts a cluster node over st: it reads the meta state, opens the
// groups of the queues this node holds, starts the peer transport and
// the driver. Close stops it.
func Open(cfg Config, st Storage) (*Node, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.NodeID == 0 {
		return nil, errors.New("node ID 0: want 1 or more")
	}
	if _, ok := cfg.Peers[cfg.NodeID]; !ok {
		return nil, fmt.Errorf("node %d is not among the peers", cfg.NodeID)
	}
	if cfg.TickInterval <= 0 {
		cfg.TickInterval = 100 * time.Millisecond
	}
	if cfg.ElectionTicks <= 0 {
		cfg.ElectionTicks = 10
	}
	if cfg.HeartbeatTicks <= 0 {
		cfg.HeartbeatTicks = 1
	}
	if cfg.ReplicationFactor <= 0 {
		cfg.ReplicationFactor = 3
	}
	if cfg.MetaSnapshotEvery == 0 {
		cfg.MetaSnapshotEvery = 4096
	}
	n := &Node{
		cfg:      cfg,
		st:       st,
		log:      cfg.Logger,
		groups:   map[uint64]*group{},
		byQueue:  map[string]*group{},
		inbox:    make(chan []peer.Message, 1024),
		propc:    make(chan proposal, 4096),
		ctl:      make(chan func(), 64),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		waiters:  map[uint64]chan metaResult{},
		heard:    map[uint64]uint64{},
		dropping: map[uint64]chan struct{}{},
		removedc: make(chan struct{}),
	}
	n.ctx, n.cancel = context.WithCancel(context.Background())
	moved, err := checkIdentity(st, cfg.ClusterID, cfg.NodeID)
	if err != nil {
		return nil, err
	}
	// The runtime config no longer holds the identity record it held.
	n.reload = moved
	if cfg.Rebuild {
		if err := n.wipe(); err != nil {
			return nil, err
		}
	}
	if err := n.meta.load(st); err != nil {
		return nil, err
	}
	if n.meta.removed[cfg.NodeID] {
		return nil, ErrRemoved
	}
	if err := n.openGroups(); err != nil {
		n.closeGroups()
		if errors.Is(err, raftlog.ErrCorrupt) && !cfg.Rebuild {
			cfg.Logger.Error("a Raft log on this node does not hold together; rebuilding from the peers", "err", err)
			cfg.Rebuild = true
			return Open(cfg, st)
		}
		return nil, err
	}
	if f := cfg.Effects.Reload; n.reload && f != nil {
		if err := f(); err != nil {
			n.closeGroups()
			return nil, err
		}
	}
	// The members as the meta group knows them, and those of the
	// configuration it may not know yet (a node that joins).
	peers := map[uint64]string{}
	for _, m := range []map[uint64]string{cfg.Peers, n.meta.members} {
		for id, addr := range m {
			if id != cfg.NodeID && !n.meta.removed[id] {
				peers[id] = addr
			}
		}
	}
	tr, err := peer.New(peer.Config{
		NodeID:     cfg.NodeID,
		ClusterID:  cfg.ClusterID,
		ListenAddr: cfg.PeerListenAddr,
		Peers:      peers,
		TLS:        cfg.TLS,
		Handler: func(_ uint64, msgs []peer.Message) {
			select {
			case n.inbox <- msgs:
			case <-n.stop:
			}
		},
		Unreachable: func(to uint64) {
			n.post(func() {
				for _, g := range n.groups {
					g.rn.ReportUnreachable(to)
				}
			})
		},
		Stream: n.receiveSnapshot,
		SnapshotStatus: func(to, gid uint64, failed bool) {
			n.post(func() {
				if g := n.groups[gid]; g != nil {
					st := raft.SnapshotFinish
					if failed {
						st = raft.SnapshotFailure
					}
					g.rn.ReportSnapshot(to, st)
				}
			})
		},
		Down: func(id uint64) {
			n.post(func() { n.peerDown(id) })
		},
		Logger: cfg.Logger.With("subsystem", "peer"),
	})
	if err != nil {
		n.closeGroups()
		return nil, err
	}
	n.tr = tr
	go n.run()
	go n.register()
	if cfg.Rebuild {
		n.announcing.Store(true)
		go n.announceRebuild()
	}
	return n, nil
}

// lostLog handles a leader's heartbeat announcing a commit index past the
// end of this replica's log: the replica acknowledged entries it no
// longer holds (its data directory was emptied or replaced, as when a
// machine's disk is swapped). The group rebuilds from its peers as after
// a repair (Config.Rebuild): it neither votes nor campaigns until caught
// up, and the leader, told through the meta group, hands over. Driver
// goroutine.
func (n *Node) lostLog(g *group, last, commit uint64) {
	n.log.Warn("a leader's commit index is past the end of this replica's log: it lost entries it acknowledged (an emptied data directory?); rebuilding it from its peers",
		"group", g.id, "queue", g.queue, "last", last, "commit", commit)
	g.target = 0
	n.mu.Lock() // against announceRebuild ending as it finds no group rebuilding
	g.rebuilding.Store(true)
	start := n.announcing.CompareAndSwap(false, true)
	n.mu.Unlock()
	if start {
		go n.announceRebuild()
	}
}

// openGroups opens the meta group and the groups of the queues this node
// holds, as the meta state stored here lists them.
func (n *Node) openGroups() error {
	// A node that joins a running cluster waits to be added to the meta
	// group (AddNode) rather than start one of its own.
	var metaPeers []uint64
	if !n.cfg.Join {
		metaPeers = slices.Sorted(mapKeys(n.cfg.Peers))
	}
	if err := n.openGroup(&group{id: MetaGroup, replicas: metaPeers, boot: metaPeers}); err != nil {
		return err
	}
	for _, name := range slices.Sorted(mapKeys(n.meta.queues)) {
		q := n.meta.queues[name]
		n.cfg.Effects.QueueCreated(q.spec)
		if q.hosts(n.cfg.NodeID) {
			if _, err := n.openQueueGroup(q); err != nil {
				return err
			}
		} else if err := n.dropStale(q); err != nil {
			return err
		}
	}
	return nil
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// post runs fn on the driver goroutine, without blocking the caller.
func (n *Node) post(fn func()) {
	select {
	case n.ctl <- fn:
	default:
		go func() {
			select {
			case n.ctl <- fn:
			case <-n.stop:
			}
		}()
	}
}

// PeerAddr returns the peer transport's listen address.
func (n *Node) PeerAddr() string { return n.tr.Addr().String() }

// Transport returns the peer transport (tests inject faults through it).
func (n *Node) Transport() *peer.Transport { return n.tr }

// Close stops the driver, the transport and every queue shard.
func (n *Node) Close() error {
	select {
	case <-n.stop:
		return nil
	default:
	}
	close(n.stop)
	n.cancel()
	<-n.done
	err := n.tr.Close()
	n.streams.Wait()
	n.closeGroups()
	return err
}

func (n *Node) closeGroups() {
	n.mu.Lock()
	gs := make([]*group, 0, len(n.groups))
	for _, g := range n.groups {
		gs = append(gs, g)
	}
	n.mu.Unlock()
	for _, g := range gs {
		if g.sh != nil {
			g.sh.Close()
		}
	}
}

// raftLogger adapts slog to raft's logger: raft's info is debug here.
type raftLogger struct{ l *slog.Logger }

func (r raftLogger) Debug(v ...any)              {}
func (r raftLogger) Debugf(string, ...any)       {}
func (r raftLogger) Info(v ...any)               { r.l.Debug(fmt.Sprint(v...)) }
func (r raftLogger) Infof(f string, v ...any)    { r.l.Debug(fmt.Sprintf(f, v...)) }
func (r raftLogger) Warning(v ...any)            { r.l.Warn(fmt.Sprint(v...)) }
func (r raftLogger) Warningf(f string, v ...any) { r.l.Warn(fmt.Sprintf(f, v...)) }
func (r raftLogger) Error(v ...any)              { r.l.Error(fmt.Sprint(v...)) }
func (r raftLogger) Errorf(f string, v ...any)   { r.l.Error(fmt.Sprintf(f, v...)) }
func (r raftLogger) Fatal(v ...any)              { panic(fmt.Sprint(v...)) }
func (r raftLogger) Fatalf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }
func (r raftLogger) Panic(v ...any)              { panic(fmt.Sprint(v...)) }
func (r raftLogger) Panicf(f string, v ...any)   { panic(fmt.Sprintf(f, v...)) }

// appliedKey is where a group's applied index is stored.
func appliedKey(gid uint64) []byte {
	k := []byte("r/")
	k = binary.BigEndian.AppendUint64(k, gid)
	return append(k, "/applied"...)
}

// imageKey is where a queue group's replica stores its image
// (shard.Replication.ImageKey).
func imageKey(gid uint64) []byte {
	k := []byte("r/")
	k = binary.BigEndian.AppendUint64(k, gid)
	return append(k, "/image"...)
}

// openGroup opens group g's log and RawNode and registers it; a group
// with an empty log is bootstrapped with g.replicas as its members. Before
// the driver runs or on the driver goroutine.
func (n *Node) openGroup(g *group) error {
	gid := g.id
	l, err := raftlog.Open(n.st, gid)
	if err != nil {
		return fmt.Errorf("group %d: %w", gid, err)
	}
	// The meta group's state is all in the store, and its entries are
	// applied once; a queue's replica starts empty and replays its log
	// (see shard.Open).
	var applied uint64
	if g.sh == nil {
		if applied, err = shard.Applied(n.st, appliedKey(gid)); err != nil {
			return err
		}
		snap := l.Stored()
		if applied, err = n.recoverMeta(snap.GetMetadata().GetIndex(), snap.GetData(), applied); err != nil {
			return fmt.Errorf("group %d: %w", gid, err)
		}
	}
	l.CommitAtLeast(applied)
	rn, err := raft.NewRawNode(&raft.Config{
		ID:                        n.cfg.NodeID,
		ElectionTick:              n.cfg.ElectionTicks,
		HeartbeatTick:             n.cfg.HeartbeatTicks,
		Storage:                   l,
		Applied:                   applied,
		MaxSizePerMsg:             1 << 20,
		MaxCommittedSizePerReady:  64 << 20,
		MaxUncommittedEntriesSize: 256 << 20,
		MaxInflightMsgs:           256,
		CheckQuorum:               true,
		PreVote:                   true,
		Logger:                    raftLogger{n.log.With("group", gid)},
	})
	if err != nil {
		return fmt.Errorf("group %d: %w", gid, err)
	}
	if _, cs, err := l.InitialState(); err == nil && len(cs.GetVoters()) > 0 {
		n.setConf(g, cs)
	} else if last, _ := l.LastIndex(); last == 0 && slices.Contains(g.boot, n.cfg.NodeID) && slices.Contains(g.replicas, n.cfg.NodeID) {
		// A replica of the group's first configuration writes the same
		// first entries as every other one; a node that a move adds
		// starts empty, and its leader sends it the log as to a
		// learner, which a replica that does not yet know it belongs
		// is.
		peers := make([]raft.Peer, len(g.boot))
		for i, id := range g.boot {
			peers[i] = raft.Peer{ID: id}
		}
		if err := rn.Bootstrap(peers); err != nil {
			return fmt.Errorf("group %d: bootstrap: %w", gid, err)
		}
		g.replicas = g.boot
		// A new queue group's preferred leader, which spreads the
		// groups' leaders over the nodes, campaigns at once rather than
		// after an election timeout.
		g.campaign = gid != MetaGroup && g.moveTo == nil && g.boot[int(gid)%len(g.boot)] == n.cfg.NodeID
	} else if !slices.Contains(g.replicas, n.cfg.NodeID) {
		g.replicas = nil // joining: not a voter until the log says so
	}
	g.rn, g.log = rn, l
	if g.sh != nil {
		if err := n.recoverReplica(g); err != nil {
			return fmt.Errorf("group %d: %w", gid, err)
		}
		l.SetSource(n.snapshotSource(g))
	}
	g.rebuilding.Store(n.cfg.Rebuild)
	g.applied.Store(applied)
	n.mu.Lock()
	n.groups[gid] = g
	if g.queue != "" {
		n.byQueue[g.queue] = g
		n.byQueue[g.queue+sched.DLQSuffix] = g
	}
	n.mu.Unlock()
	return nil
}

// openQueueGroup opens the group and the shard of queue q, and gives a
// fresh replica the queue's definition.
func (n *Node) openQueueGroup(q *queueInfo) (*group, error) {
	name := q.spec.Name
	g := &group{id: q.group, queue: name, replicas: q.replicas, boot: q.boot, moveTo: q.target, lead: q.lead}
	scfg := n.cfg.Shard
	scfg.Logger = n.log.With("queue", name)
	scfg.Replication = &shard.Replication{
		Queue:      name,
		NodeID:     n.cfg.NodeID,
		AppliedKey: appliedKey(q.group),
		Propose: func(data []byte, dropped func()) {
			select {
			case n.propc <- proposal{group: q.group, data: data, dropped: dropped}:
			case <-n.stop:
				dropped()
			}
		},
		ImageKey:   imageKey(q.group),
		ImageEvery: n.cfg.SnapshotEvery,
		Imaged: func(index uint64) {
			n.post(func() { n.compact(g, index) })
		},
		NotLeader: func() error { return n.notLeader(g, "queue "+name) },
		Leading: func() {
			if f := n.cfg.Effects.Leading; f != nil {
				f(name, g.sh)
			}
		},
	}
	sh, err := shard.Open(scfg, n.st)
	if err != nil {
		return nil, err
	}
	if sh.OpenedAt() == 0 {
		done := make(chan shard.Result, 1)
		if err := sh.Init(&shard.CreateQueue{Spec: q.spec}, func(r shard.Result) { done <- r }); err != nil {
			sh.Close()
			return nil, err
		}
		if r := <-done; r.Err != nil {
			sh.Close()
			return nil, fmt.Errorf("create queue %s: %w", name, r.Err)
		}
	}
	g.sh = sh
	if err := n.openGroup(g); err != nil {
		sh.Close()
		return nil, err
	}
	return g, nil
}

// notLeader returns the NOT_LEADER error of group g, with its leader's
// client address when known.
func (n *Node) notLeader(g *group, what string) error {
	lead := g.leader.Load()
	n.mu.RLock()
	addr := n.meta.nodes[lead]
	n.mu.RUnlock()
	if lead == n.cfg.NodeID {
		addr = "" // a leader that cannot serve yet: retry
	}
	return &fault.NotLeader{Leader: addr, What: what}
}

// run is the driver loop.
func (n *Node) run() {
	defer close(n.done)
	ticker := time.NewTicker(n.cfg.TickInterval)
	defer ticker.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-ticker.C:
			if n.failed.Load() != nil {
				return // removed from the cluster (members.go)
			}
			n.ticks++
			n.keepalive()
			for _, g := range n.groups {
				if g.rebuilding.Load() {
					continue
				}
				if g.id == MetaGroup && n.meta.removed[n.cfg.NodeID] {
					n.followMembers() // stops this node once it no longer leads
				}
				switch {
				case g.moveTo != nil:
					n.moveStep(g)
				case g.id == MetaGroup:
					n.shedLead(g)
					n.rebalanceStep(g)
				case g.lead != 0 && g.lead != n.cfg.NodeID && g.leader.Load() == n.cfg.NodeID:
					n.followLead(g)
				}
				if g.quiesced.Load() {
					if !n.wakeNeeded(g) {
						continue
					}
					n.wake(g)
				}
				if !n.maybeQuiesce(g) {
					g.rn.Tick()
				}
			}
		case msgs := <-n.inbox:
			n.step(msgs)
		case p := <-n.propc:
			n.propose(p)
		case fn := <-n.ctl:
			fn()
		}
		// Take what else is waiting, so that one fsync covers it.
	more:
		for i := 0; i < 256; i++ {
			select {
			case msgs := <-n.inbox:
				n.step(msgs)
			case p := <-n.propc:
				n.propose(p)
			case fn := <-n.ctl:
				fn()
			default:
				break more
			}
		}
		if err := n.handleReadies(); err != nil {
			n.fail(err)
			return
		}
	}
}

// fail records a storage failure: the node can no longer persist its
// Raft state, so it stops driving its groups (its peers go on without
// it).
func (n *Node) fail(err error) {
	if n.failed.CompareAndSwap(nil, &err) {
		n.log.Error("cluster: storage failed; this node stops taking part", "err", err)
	}
}

// Err returns the failure that stopped the driver (a storage failure, or
// ErrRemoved), or nil.
func (n *Node) Err() error {
	if p := n.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (n *Node) step(msgs []peer.Message) {
	for _, m := range msgs {
		n.heard[m.Msg.GetFrom()] = n.ticks
		g := n.groups[m.Group]
		if g == nil {
			continue // not created here yet, or a liveness message
		}
		if n.stepQuiesce(g, m.Msg) {
			continue
		}
		if m.Msg.GetType() == pb.MessageType_MsgSnap && g.sh != nil && len(m.Msg.GetSnapshot().GetData()) == 0 {
			// A queue group's snapshot comes with its data in a stream
			// (receiveSnapshot), which stages the data first.
			if s := g.staged; s == nil || s.index != m.Msg.GetSnapshot().GetMetadata().GetIndex() {
				n.log.Debug("dropping a snapshot whose data was not received", "group", g.id, "from", m.Msg.GetFrom())
				continue
			}
		}
		n.wake(g)
		if m.Msg.GetType() == pb.MessageType_MsgHeartbeat && !g.rebuilding.Load() {
			if last, _ := g.log.LastIndex(); m.Msg.GetCommit() > last {
				n.lostLog(g, last, m.Msg.GetCommit())
			}
		}
		if g.rebuilding.Load() {
			switch m.Msg.GetType() {
			case pb.MessageType_MsgVote, pb.MessageType_MsgPreVote:
				continue // abstain: this log may lack what it acknowledged
			case pb.MessageType_MsgApp, pb.MessageType_MsgSnap:
				if g.target == 0 {
					g.target = max(m.Msg.GetCommit(), m.Msg.GetSnapshot().GetMetadata().GetIndex(), 1)
				}
			case pb.MessageType_MsgHeartbeat:
				// A leader that knew this replica before it lost its log
				// announces a commit index it no longer holds; raft
				// would take that for a corrupt log. The leader hands
				// over (handOver), and the next one knows better.
				if last, _ := g.log.LastIndex(); m.Msg.GetCommit() > last {
					m.Msg.Commit = proto.Uint64(last)
				}
			}
		}
		if err := g.rn.Step(m.Msg); err != nil && !errors.Is(err, raft.ErrStepPeerNotFound) {
			n.log.Debug("step", "group", m.Group, "err", err)
		}
	}
}

func (n *Node) propose(p proposal) {
	g := n.groups[p.group]
	if g == nil {
		if p.dropped != nil {
			p.dropped()
		}
		return
	}
	n.wake(g)
	// A queue group's proposals are its leader's: a follower does not
	// forward them (their callbacks would wait for an entry that may
	// never come).
	if g.sh != nil && g.rn.BasicStatus().RaftState != raft.StateLeader {
		if p.dropped != nil {
			p.dropped()
		}
		return
	}
	if err := g.rn.Propose(p.data); err != nil && p.dropped != nil {
		p.dropped()
	}
}

// maxKeptBatch bounds the buffer of the driver's storage group kept
// between rounds.
const maxKeptBatch = 8 << 20

type readyOf struct {
	g    *group
	rd   raft.Ready
	sent bool // its messages went out before the fsync
}

// handleReadies persists, sends and applies every group's Ready.
func (n *Node) handleReadies() error {
	// One group's worth of log writes per round: the batch's buffer is
	// kept for the next round (up to maxKeptBatch), as its size is about
	// the same from round to round.
	b := &n.rb
	b.Reset()
	defer n.dropUntaken()
	defer func() {
		if b.Cap() > maxKeptBatch {
			n.rb = store.Batch{}
		}
	}()
	var rds []readyOf
	// sync: some group's Ready has entries, a new term or vote, or a
	// snapshot to make durable before its messages go out. A Ready whose
	// only change is the commit index needs no fsync (Raft recovers the
	// commit index from its leader; CommitAtLeast covers the applied
	// index at restart), which saves the leader an fsync per commit.
	sync := false
	for _, g := range n.groups {
		if !g.rn.HasReady() {
			continue
		}
		rd := g.rn.Ready()
		sync = sync || rd.MustSync || !raft.IsEmptySnap(rd.Snapshot)
		if snap := rd.Snapshot; !raft.IsEmptySnap(snap) {
			var pre []*store.Batch
			var err error
			if s := g.staged; s != nil && s.index == snap.GetMetadata().GetIndex() {
				// Streamed: its data is stored already.
				g.staged = nil
				err = g.log.ApplyStaged(b, snap, s.chunks, s.size)
			} else {
				pre, err = g.log.ApplySnapshot(b, snap)
			}
			if err != nil && !errors.Is(err, raft.ErrSnapOutOfDate) {
				return fmt.Errorf("group %d: snapshot: %w", g.id, err)
			}
			// A large snapshot's data goes first, in chunks.
			for _, p := range pre {
				if err := n.st.Apply(p); err != nil {
					return fmt.Errorf("group %d: snapshot: %w", g.id, err)
				}
			}
		}
		if err := g.log.Append(b, rd.Entries); err != nil {
			return fmt.Errorf("group %d: %w", g.id, err)
		}
		early := false
		if !raft.IsEmptyHardState(rd.HardState) {
			// A leader may replicate while it writes its own log
			// (Ongaro's thesis, 10.2.1), as long as its term and vote
			// are already durable: only the commit index may change.
			hs := rd.HardState
			early = g.rn.BasicStatus().RaftState == raft.StateLeader && hs.GetTerm() == g.hsTerm && hs.GetVote() == g.hsVote
			g.hsTerm, g.hsVote = hs.GetTerm(), hs.GetVote()
			g.log.SetHardState(b, rd.HardState)
		} else {
			early = g.rn.BasicStatus().RaftState == raft.StateLeader
		}
		if early {
			n.send(g, rd.Messages)
		}
		rds = append(rds, readyOf{g, rd, early})
	}
	if len(rds) == 0 {
		return nil
	}
	if b.Len() > 0 {
		if !sync {
			b.NoSync()
		}
		if err := n.st.Apply(b); err != nil {
			return err
		}
	}
	out := map[uint64][]peer.Message{}
	for _, r := range rds {
		if r.sent {
			continue
		}
		n.route(r.g, r.rd.Messages, out)
	}
	for to, msgs := range out {
		n.tr.Send(to, msgs)
	}
	for _, r := range rds {
		g, rd := r.g, r.rd
		if rd.SoftState != nil || rd.HardState != nil {
			n.noteLeader(g)
		}
		if hs := rd.HardState; hs != nil {
			g.commit.Store(hs.GetCommit())
		}
		if g.rebuilding.Load() && g.target > 0 && g.commit.Load() >= g.target {
			g.rebuilding.Store(false)
			n.log.Info("group rebuilt from its peers; it votes again", "group", g.id, "queue", g.queue, "commit", g.commit.Load())
		}
		if snap := rd.Snapshot; !raft.IsEmptySnap(snap) {
			// Durable in the log now; the replica installs it before
			// the entries after it.
			n.log.Info("received a snapshot", "group", g.id, "queue", g.queue, "index", snap.GetMetadata().GetIndex())
			if f := snapshotStored; f != nil {
				f()
			}
			if g.sh == nil {
				if err := n.installMeta(g, snap.GetMetadata().GetIndex(), snap.GetData()); err != nil {
					return fmt.Errorf("group %d: snapshot: %w", g.id, err)
				}
				n.setConf(g, snap.GetMetadata().GetConfState())
			} else {
				g.sh.Install(snap.GetMetadata().GetIndex(), g.log.OpenData())
				g.applied.Store(snap.GetMetadata().GetIndex())
				n.setConf(g, snap.GetMetadata().GetConfState())
			}
		}
		if err := n.apply(g, rd.CommittedEntries); err != nil {
			return err
		}
		// Entries stay in memory until applied: raft hands them back
		// as committed entries, which would otherwise be read back from
		// the store.
		if k := len(rd.CommittedEntries); k > 0 {
			g.log.Settled(rd.CommittedEntries[k-1].GetIndex())
		}
		g.rn.Advance(rd)
		if g.campaign && g.applied.Load() >= uint64(len(g.replicas)) {
			g.campaign = false
			if err := g.rn.Campaign(); err != nil {
				n.log.Debug("campaign", "group", g.id, "err", err)
			}
		}
	}
	return nil
}

// send sends a group's messages, one batch per peer.
func (n *Node) send(g *group, msgs []*pb.Message) {
	if len(msgs) == 0 {
		return
	}
	out := map[uint64][]peer.Message{}
	n.route(g, msgs, out)
	for to, ms := range out {
		n.tr.Send(to, ms)
	}
}

// noteLeader records a group's leader and term, and tells its shard when
// this node starts or stops leading it.
func (n *Node) noteLeader(g *group) {
	bs := g.rn.BasicStatus()
	old := g.leader.Load()
	g.term.Store(bs.GetTerm())
	if bs.Lead == old {
		return
	}
	g.leader.Store(bs.Lead)
	me := n.cfg.NodeID
	n.log.Info("leader changed", "group", g.id, "queue", g.queue, "leader", bs.Lead, "term", bs.GetTerm())
	if g.sh != nil && (old == me) != (bs.Lead == me) {
		g.sh.SetLeader(bs.Lead == me)
	}
}

// apply hands committed entries to the group's state machine.
func (n *Node) apply(g *group, ents []*pb.Entry) error {
	if len(ents) == 0 {
		return nil
	}
	var out []shard.Entry
	for _, e := range ents {
		switch e.GetType() {
		case pb.EntryConfChange, pb.EntryConfChangeV2:
			var cc pb.ConfChangeI
			if e.GetType() == pb.EntryConfChange {
				cc = &pb.ConfChange{}
			} else {
				cc = &pb.ConfChangeV2{}
			}
			if err := proto.Unmarshal(e.GetData(), cc.(proto.Message)); err != nil {
				return fmt.Errorf("group %d: conf change %d: %w", g.id, e.GetIndex(), err)
			}
			// The configuration is stored as it is applied: a group
			// restarts from it when its applied index is past it.
			cs := g.rn.ApplyConfChange(cc)
			n.setConf(g, cs)
			var b store.Batch
			if err := g.log.SetConfState(&b, cs); err != nil {
				return err
			}
			if err := n.st.Apply(&b); err != nil {
				return err
			}
		}
		if g.sh != nil {
			var data []byte
			if e.GetType() == pb.EntryNormal {
				data = e.GetData()
			}
			out = append(out, shard.Entry{Index: e.GetIndex(), Data: data})
			continue
		}
		if err := n.applyMeta(e); err != nil {
			return err
		}
	}
	if g.sh != nil {
		g.sh.Commit(out)
	}
	g.applied.Store(ents[len(ents)-1].GetIndex())
	if g.sh == nil {
		n.compactMeta(g)
	}
	return nil
}

// Route returns the shard of queue (or of the DLQ named queue) when this
// node leads its group. Otherwise the error is a *fault.NotLeader
// (another node leads it, or an election is running) or wraps
// fault.ErrQueueNotFound.
func (n *Node) Route(queue string) (*shard.Shard, error) {
	n.mu.RLock()
	g := n.byQueue[queue]
	q := n.meta.queueOf(queue)
	n.mu.RUnlock()
	if g == nil {
		if q == nil {
			return nil, n.missing(queue)
		}
		// Held by other nodes: send the client to one of them, which
		// redirects it to the leader if it does not lead.
		n.mu.RLock()
		addr := n.meta.nodes[q.replicas[0]]
		n.mu.RUnlock()
		return nil, &fault.NotLeader{Leader: addr, What: "queue " + queue}
	}
	if g.leader.Load() != n.cfg.NodeID {
		return nil, n.notLeader(g, "queue "+queue)
	}
	return g.sh, nil
}

// missing returns the error of an operation naming queue, which no group
// serves: one wrapping fault.ErrQueueSharded for a sharded queue (or its
// DLQ), else fault.ErrQueueNotFound itself: the operation, which the
// client names with the queue, says the rest.
func (n *Node) missing(queue string) error {
	n.mu.RLock()
	base, cnt, ok := n.meta.shardedOf(queue)
	n.mu.RUnlock()
	if ok {
		return errSharded(base, cnt)
	}
	return fault.ErrQueueNotFound
}

// Shards returns the shards of the queue replicas on this node, sorted
// by queue name; ListQueues reads them.
func (n *Node) Shards() []*shard.Shard {
	n.mu.RLock()
	defer n.mu.RUnlock()
	names := make([]string, 0, len(n.groups))
	for _, g := range n.groups {
		if g.sh != nil {
			names = append(names, g.queue)
		}
	}
	sort.Strings(names)
	out := make([]*shard.Shard, len(names))
	for i, name := range names {
		out[i] = n.byQueue[name].sh
	}
	return out
}

// LeaderShards returns the shards of the queue groups this node leads
// now, sorted by queue name: metrics report each queue from its leader
// only, so that a sum over the nodes counts each once.
func (n *Node) LeaderShards() []*shard.Shard {
	n.mu.RLock()
	defer n.mu.RUnlock()
	var names []string
	for _, g := range n.groups {
		if g.sh != nil && g.leader.Load() == n.cfg.NodeID {
			names = append(names, g.queue)
		}
	}
	sort.Strings(names)
	out := make([]*shard.Shard, len(names))
	for i, name := range names {
		out[i] = n.byQueue[name].sh
	}
	return out
}

// Leader returns the leader of queue's group: its node ID, client
// address and term. nodeID is 0 while no leader is known. The error wraps
// fault.ErrQueueNotFound.
func (n *Node) Leader(queue string) (nodeID uint64, addr string, term uint64, err error) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	q := n.meta.queueOf(queue)
	if q == nil {
		if base, cnt, ok := n.meta.shardedOf(queue); ok {
			return 0, "", 0, errSharded(base, cnt)
		}
		return 0, "", 0, fault.ErrQueueNotFound
	}
	g := n.byQueue[q.spec.Name]
	if g == nil {
		return 0, n.meta.nodes[q.replicas[0]], 0, nil
	}
	lead := g.leader.Load()
	return lead, n.meta.nodes[lead], g.term.Load(), nil
}

// MetaLeader returns the meta group's leader as this node knows it: its
// node ID, 0 while none is known (an election is under way, or this
// node is cut off from a majority).
func (n *Node) MetaLeader() uint64 {
	n.mu.RLock()
	g := n.groups[MetaGroup]
	n.mu.RUnlock()
	if g == nil {
		return 0
	}
	return g.leader.Load()
}

// NodeID returns this node's Raft ID.
func (n *Node) NodeID() uint64 { return n.cfg.NodeID }

// Local returns the shard holding queue (or the DLQ named queue) on this
// node, whether or not it leads the group: reads of its state may come
// from a follower. The error is a *fault.NotLeader naming a node that
// holds it, or wraps fault.ErrQueueNotFound.
func (n *Node) Local(queue string) (*shard.Shard, error) {
	n.mu.RLock()
	g := n.byQueue[queue]
	n.mu.RUnlock()
	if g != nil {
		return g.sh, nil
	}
	_, err := n.Route(queue)
	return nil, err
}

// wipe deletes every group's log, hard state and applied index, the meta
// state and the queues' state from this node's store (Config.Rebuild).
// identityKey holds the node ID (uvarint) and the cluster ID a data
// directory belongs to. A rebuild keeps it.
var identityKey = []byte("i/cluster")

// oldIdentityKey is where versions before this one kept the identity:
// under the runtime config's prefix, where it showed as a config key
// that SetConfig could change. checkIdentity moves it.
var oldIdentityKey = []byte("c/identity")

// checkIdentity records, at a data directory's first start in a cluster,
// which node of which cluster it belongs to, and refuses, with an error
// naming both, one recorded for another node or cluster: a node started
// on another node's data would claim votes and log entries it never had.
// moved reports that it moved the record from oldIdentityKey.
func checkIdentity(st Storage, clusterID string, node uint64) (moved bool, err error) {
	want := append(binary.AppendUvarint(nil, node), clusterID...)
	v, err := st.Get(identityKey)
	if errors.Is(err, store.ErrNotFound) {
		if v, err = st.Get(oldIdentityKey); err == nil {
			var b store.Batch
			b.Put(identityKey, v)
			b.Delete(oldIdentityKey)
			if err := st.Apply(&b); err != nil {
				return false, err
			}
			moved = true
		}
	}
	switch {
	case errors.Is(err, store.ErrNotFound):
		var b store.Batch
		b.Put(identityKey, want)
		return false, st.Apply(&b)
	case err != nil:
		return false, err
	}
	id, k := binary.Uvarint(v)
	if k <= 0 {
		return moved, fmt.Errorf("the data directory's identity record (%d bytes) does not decode", len(v))
	}
	if id != node || string(v[k:]) != clusterID {
		return moved, fmt.Errorf("this data directory belongs to node %d of cluster %q, not node %d of cluster %q: "+
			"start each node on its own data directory, or on an empty one to replace a node", id, v[k:], node, clusterID)
	}
	return moved, nil
}

func (n *Node) wipe() error {
	var b store.Batch
	for _, prefix := range []string{"r/", "m/", sched.Prefix} {
		end := []byte(prefix)
		end[len(end)-1]++
		err := n.st.Scan([]byte(prefix), end, func(k, _ []byte) error {
			b.Delete(append([]byte(nil), k...))
			return nil
		})
		if err != nil {
			return err
		}
	}
	n.log.Warn("rebuilding this node's replicas from its peers: its log lost durable data", "records", b.Len())
	if b.Len() == 0 {
		return nil
	}
	return n.st.Apply(&b)
}
