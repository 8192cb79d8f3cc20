package cluster

import (
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"go.etcd.io/raft/v3/tracker"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// The meta group's state, as every node applies it. Stored under m/:
//
//	m/n/<id:8>    a node's client address
//	m/q/<name>    a queue: group uvarint, replica count uvarint, replica IDs uvarint…, CreateQueue command
//	m/p/<name>    a queue's placement plan, when it was ever moved (move.go)
//	m/d/<id:8>    a node being drained, empty (drain.go)
//	m/b           the moves of the last rebalance not yet started (rebalance.go)
//	m/m/, m/x/    the members and the removed nodes, once they changed (members.go)
//	m/s/<name>    a sharded queue: its shard count, uvarint (sharded.go)
//	m/next        the next queue group's ID, 8 bytes
//
// and the meta group's applied index under r/<1>/applied, written in the
// same storage group as the state each entry changes.
type metaState struct {
	nodes     map[uint64]string
	queues    map[string]*queueInfo
	nextGroup uint64
	// draining holds the nodes being drained (drain.go).
	draining map[uint64]bool
	// pending are the moves of the last rebalance not yet started
	// (rebalance.go).
	pending []PlannedMove
	// members are the cluster's members and their peer addresses, once
	// recorded (empty until the first change: the members are then the
	// meta group's voters, voters, with Config.Peers's addresses); removed
	// the nodes removed from it (members.go).
	members map[uint64]string
	voters  []uint64
	removed map[uint64]bool
	// sharded holds the sharded queues and their shard counts; each
	// shard is a queue of its own in queues (sharded.go).
	sharded map[string]int
}

// queueInfo is one queue's placement.
type queueInfo struct {
	spec     sched.QueueSpec
	group    uint64
	replicas []uint64
	// boot is the replica set the group was created with; target the
	// one a move is taking it to, nil when none is under way (move.go).
	boot, target []uint64
	// lead is the preferred leader a rebalance set, 0 for none
	// (rebalance.go).
	lead uint64
}

// queueOf returns the queue named name or whose DLQ it names, or nil.
func (m *metaState) queueOf(name string) *queueInfo {
	if q := m.queues[name]; q != nil {
		return q
	}
	if base, ok := cutSuffix(name, sched.DLQSuffix); ok {
		return m.queues[base]
	}
	return nil
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

func (m *metaState) load(st Storage) error {
	m.nodes = map[uint64]string{}
	m.queues = map[string]*queueInfo{}
	m.draining = map[uint64]bool{}
	m.members = map[uint64]string{}
	m.removed = map[uint64]bool{}
	m.sharded = map[string]int{}
	for _, s := range []struct {
		prefix string
		fn     func(id uint64, v []byte)
	}{
		{"m/m/", func(id uint64, v []byte) { m.members[id] = string(v) }},
		{"m/x/", func(id uint64, _ []byte) { m.removed[id] = true }},
	} {
		err := st.Scan([]byte(s.prefix), prefixEnd(s.prefix), func(k, v []byte) error {
			if len(k) != len(s.prefix)+8 {
				return fmt.Errorf("meta state: %s key of %d bytes", s.prefix, len(k))
			}
			s.fn(binary.BigEndian.Uint64(k[len(s.prefix):]), v)
			return nil
		})
		if err != nil {
			return err
		}
	}
	m.nextGroup = MetaGroup + 1
	err := st.Scan([]byte("m/n/"), []byte("m/n0"), func(k, v []byte) error {
		if len(k) != 4+8 {
			return fmt.Errorf("meta state: node key of %d bytes", len(k))
		}
		m.nodes[binary.BigEndian.Uint64(k[4:])] = string(v)
		return nil
	})
	if err != nil {
		return err
	}
	err = st.Scan([]byte("m/q/"), []byte("m/q0"), func(k, v []byte) error {
		q, err := decodeQueueInfo(v)
		if err != nil {
			return fmt.Errorf("meta state: queue %s: %w", k[4:], err)
		}
		m.queues[q.spec.Name] = q
		return nil
	})
	if err != nil {
		return err
	}
	err = st.Scan([]byte("m/p/"), []byte("m/p0"), func(k, v []byte) error {
		q := m.queues[string(k[4:])]
		if q == nil {
			return nil // deleted with its queue; a stale record is harmless
		}
		if err := decodePlacement(v, q); err != nil {
			return fmt.Errorf("meta state: placement of queue %s: %w", k[4:], err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	err = st.Scan([]byte("m/d/"), []byte("m/d0"), func(k, v []byte) error {
		if len(k) != 4+8 {
			return fmt.Errorf("meta state: drain key of %d bytes", len(k))
		}
		m.draining[binary.BigEndian.Uint64(k[4:])] = true
		return nil
	})
	if err != nil {
		return err
	}
	if err := m.loadSharded(st); err != nil {
		return err
	}
	m.pending = nil
	if v, err := st.Get(rebalanceKey); err == nil {
		if m.pending, err = decodeMoves(v); err != nil {
			return fmt.Errorf("meta state: rebalance moves: %w", err)
		}
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if v, err := st.Get([]byte("m/next")); err == nil && len(v) == 8 {
		m.nextGroup = binary.BigEndian.Uint64(v)
	} else if err != nil && !errors.Is(err, store.ErrNotFound) {
		return err
	}
	return nil
}

func appendQueueInfo(b []byte, q *queueInfo) []byte {
	b = binary.AppendUvarint(b, q.group)
	b = binary.AppendUvarint(b, uint64(len(q.replicas)))
	for _, id := range q.replicas {
		b = binary.AppendUvarint(b, id)
	}
	return shard.AppendCommand(b, &shard.CreateQueue{Spec: q.spec})
}

func decodeQueueInfo(b []byte) (*queueInfo, error) {
	q := &queueInfo{}
	next := func() (uint64, error) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, errors.New("truncated")
		}
		b = b[k:]
		return v, nil
	}
	var err error
	if q.group, err = next(); err != nil {
		return nil, err
	}
	cnt, err := next()
	if err != nil || cnt > 64 {
		return nil, fmt.Errorf("replica count: %v", err)
	}
	for i := uint64(0); i < cnt; i++ {
		id, err := next()
		if err != nil {
			return nil, err
		}
		q.replicas = append(q.replicas, id)
	}
	c, err := shard.DecodeCommand(b)
	if err != nil {
		return nil, err
	}
	cq, ok := c.(*shard.CreateQueue)
	if !ok {
		return nil, fmt.Errorf("%s, not CreateQueue", c.Kind())
	}
	q.spec = cq.Spec
	q.boot = q.replicas
	return q, nil
}

// The meta commands. An entry is: kind 1B, proposer uvarint, seq uvarint,
// then the command's body.
const (
	metaNodeAddr    = 1 // body: node ID uvarint, client address
	metaCreateQueue = 2 // body: a shard CreateQueue command
	metaDeleteQueue = 3 // body: the queue's name
	metaAuth        = 4 // body: an encoded auth.Change
	metaConfig      = 5 // body: an encoded rtconf.Change
	metaRebuilt     = 6 // body: node ID uvarint, count uvarint, count × (group uvarint, last index uvarint)
	metaMoveQueue   = 7 // body: name length uvarint, name, count uvarint, count × node ID uvarint
	metaPlaced      = 8 // body: group uvarint, then as metaMoveQueue's
	metaDrain       = 9 // body: node ID uvarint, undo 1B
	// metaRebalance plans a rebalance; metaRebalanceStep starts one of
	// its moves (body: the move, as rebalanceKey holds each).
	metaRebalance     = 10
	metaRebalanceStep = 11
	metaAddNode       = 12 // body: node ID uvarint, peer address
	metaRemoveNode    = 13 // body: node ID uvarint
	metaCreateSharded = 14 // body: shard count uvarint, then a shard CreateQueue command (sharded.go)
)

// metaResult is a meta entry's outcome on the node that proposed it.
type metaResult struct {
	err     error
	created sched.QueueCreated
	moved   int           // queues whose move a drain planned
	plan    RebalancePlan // a rebalance's
}

// proposeMeta proposes a meta command and waits for this node to apply
// it. Any node may propose: Raft forwards a follower's proposal to the
// leader. The error wraps fault.ErrUnavailable when no leader takes the
// entry before ctx ends.
func (n *Node) proposeMeta(ctx context.Context, kind byte, body []byte) (metaResult, error) {
	n.waitMu.Lock()
	n.seq++
	seq := n.seq
	ch := make(chan metaResult, 1)
	n.waiters[seq] = ch
	n.waitMu.Unlock()
	defer func() {
		n.waitMu.Lock()
		delete(n.waiters, seq)
		n.waitMu.Unlock()
	}()
	data := []byte{kind}
	data = binary.AppendUvarint(data, n.cfg.NodeID)
	data = binary.AppendUvarint(data, seq)
	data = append(data, body...)
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
	}
	// A proposal made while no leader is known is dropped: retry until
	// one takes it. A forwarded one may be lost with its leader; the
	// retry then proposes it again, and applying a meta command twice
	// changes nothing the second time (the second answer is ignored).
	for {
		dropped := make(chan struct{}, 1)
		select {
		case n.propc <- proposal{group: MetaGroup, data: data, dropped: func() { dropped <- struct{}{} }}:
		case <-ctx.Done():
			return metaResult{}, fmt.Errorf("no leader of the meta group: %w", fault.ErrUnavailable)
		case <-n.stop:
			return metaResult{}, ErrStopped
		}
		wait := time.NewTimer(2 * time.Second)
		select {
		case r := <-ch:
			wait.Stop()
			return r, nil
		case <-dropped:
			wait.Stop()
			select {
			case <-time.After(100 * time.Millisecond):
			case <-ctx.Done():
			}
		case <-wait.C:
		case <-ctx.Done():
			wait.Stop()
			return metaResult{}, fmt.Errorf("meta group proposal not applied: %w", fault.ErrUnavailable)
		case <-n.stop:
			wait.Stop()
			return metaResult{}, ErrStopped
		}
	}
}

// applyMeta applies one committed meta entry on the driver goroutine.
func (n *Node) applyMeta(e *pb.Entry) error {
	idx := e.GetIndex()
	data := e.GetData()
	var b store.Batch
	var res metaResult
	var proposer, seq uint64
	if e.GetType() == pb.EntryNormal && len(data) > 0 {
		kind := data[0]
		rest := data[1:]
		var k1, k2 int
		proposer, k1 = binary.Uvarint(rest)
		if k1 > 0 {
			seq, k2 = binary.Uvarint(rest[k1:])
		}
		if k1 <= 0 || k2 <= 0 {
			return fmt.Errorf("meta group entry %d: bad header", idx)
		}
		body := rest[k1+k2:]
		var err error
		res, err = n.applyMetaCommand(&b, kind, body)
		if err != nil {
			return fmt.Errorf("meta group entry %d: %w", idx, err)
		}
	}
	var v [8]byte
	binary.BigEndian.PutUint64(v[:], idx)
	b.Put(appliedKey(MetaGroup), v[:])
	if err := n.st.Apply(&b); err != nil {
		return err
	}
	if proposer == n.cfg.NodeID {
		n.waitMu.Lock()
		ch := n.waiters[seq]
		n.waitMu.Unlock()
		if ch != nil {
			select {
			case ch <- res:
			default:
			}
		}
	}
	return nil
}

// applyMetaCommand applies one command: its effects on this node first,
// then its state into b. Its error is a failure of the node (the entry
// cannot be applied); an error of the operation goes in the result.
func (n *Node) applyMetaCommand(b *store.Batch, kind byte, body []byte) (metaResult, error) {
	switch kind {
	case metaNodeAddr:
		id, k := binary.Uvarint(body)
		if k <= 0 {
			return metaResult{}, errors.New("node address: bad body")
		}
		addr := string(body[k:])
		n.mu.Lock()
		n.meta.nodes[id] = addr
		n.mu.Unlock()
		key := binary.BigEndian.AppendUint64([]byte("m/n/"), id)
		b.Put(key, []byte(addr))
		return metaResult{}, nil
	case metaCreateQueue:
		c, err := shard.DecodeCommand(body)
		if err != nil {
			return metaResult{}, err
		}
		cq, ok := c.(*shard.CreateQueue)
		if !ok {
			return metaResult{}, fmt.Errorf("create queue: %s command", c.Kind())
		}
		return n.applyCreateQueue(b, cq.Spec)
	case metaDeleteQueue:
		return n.applyDeleteQueue(b, string(body))
	case metaAuth:
		return metaResult{err: n.cfg.Effects.Auth(body)}, nil
	case metaConfig:
		return metaResult{err: n.cfg.Effects.Config(body)}, nil
	case metaRebuilt:
		id, groups, err := decodeRebuilt(body)
		if err != nil {
			return metaResult{}, err
		}
		n.handOver(id, groups)
		return metaResult{}, nil
	case metaMoveQueue:
		return n.applyMove(b, body)
	case metaPlaced:
		return n.applyPlaced(b, body)
	case metaDrain:
		return n.applyDrain(b, body)
	case metaRebalance:
		return n.applyRebalance(b, body)
	case metaRebalanceStep:
		return n.applyRebalanceStep(b, body)
	case metaAddNode:
		return n.applyAddNode(b, body)
	case metaRemoveNode:
		return n.applyRemoveNode(b, body)
	case metaCreateSharded:
		return n.applyCreateSharded(b, body)
	}
	return metaResult{}, fmt.Errorf("unknown meta command %d", kind)
}

// applyCreateQueue places a new queue on replicas chosen from the known
// nodes (those holding the fewest queues first, then by ID), and opens
// its group here if this node is one of them.
func (n *Node) applyCreateQueue(b *store.Batch, spec sched.QueueSpec) (metaResult, error) {
	if err := n.checkNewName(spec.Name); err != nil {
		return metaResult{err: err}, nil
	}
	return n.placeQueue(b, spec)
}

// checkNewName returns the error of creating a queue named name: one
// wrapping fault.ErrQueueExists when a queue, a sharded queue or a shard
// has it, or fault.ErrInvalidArgument for a DLQ's name.
func (n *Node) checkNewName(name string) error {
	n.mu.RLock()
	_, sharded := n.meta.sharded[name]
	exists := sharded || n.meta.queueOf(name) != nil
	n.mu.RUnlock()
	if exists {
		return fmt.Errorf("create queue %s: %w", name, fault.ErrQueueExists)
	}
	if _, isDLQ := cutSuffix(name, sched.DLQSuffix); isDLQ {
		return fmt.Errorf("create queue %s: the %s suffix is reserved for dead-letter queues: %w",
			name, sched.DLQSuffix, fault.ErrInvalidArgument)
	}
	return nil
}

// placeQueue places a queue whose name is free on replicas chosen from
// the known nodes, opens its group here if this node is one of them, and
// puts its records into b.
func (n *Node) placeQueue(b *store.Batch, spec sched.QueueSpec) (metaResult, error) {
	n.mu.Lock()
	// No new replica goes to a node being drained, while another can
	// take it.
	members := n.meta.byLoad(n.meta.memberIDs())
	if i := slices.IndexFunc(members, func(id uint64) bool { return n.meta.draining[id] }); i > 0 {
		members = members[:i]
	}
	rf := min(n.cfg.ReplicationFactor, len(members))
	replicas := slices.Sorted(slices.Values(members[:rf]))
	q := &queueInfo{spec: spec, group: n.meta.nextGroup, replicas: replicas, boot: replicas}
	n.meta.nextGroup++
	n.meta.queues[spec.Name] = q
	next := n.meta.nextGroup
	n.mu.Unlock()

	if slices.Contains(replicas, n.cfg.NodeID) {
		if _, err := n.openQueueGroup(q); err != nil {
			// The same spec fails the same way on every node (the
			// proposer checked it, so only a difference of boot
			// configuration gets here): the queue is not created.
			n.mu.Lock()
			delete(n.meta.queues, spec.Name)
			n.mu.Unlock()
			n.log.Error("cannot create a queue replica", "queue", spec.Name, "err", err)
			return metaResult{err: err}, nil
		}
	}
	n.cfg.Effects.QueueCreated(spec)
	b.Put([]byte("m/q/"+spec.Name), appendQueueInfo(nil, q))
	b.Put([]byte("m/next"), binary.BigEndian.AppendUint64(nil, next))
	return metaResult{created: sched.QueueCreated{Name: spec.Name, DLQ: spec.Name + sched.DLQSuffix}}, nil
}

// applyDeleteQueue removes a queue: its shard deletes its messages here,
// and its group's log goes.
func (n *Node) applyDeleteQueue(b *store.Batch, name string) (metaResult, error) {
	if r, ok, err := n.deleteSharded(b, name); ok {
		return r, err
	}
	n.mu.RLock()
	q := n.meta.queues[name]
	dlq := q == nil && n.meta.queueOf(name) != nil
	n.mu.RUnlock()
	if q == nil {
		if dlq {
			return metaResult{err: fmt.Errorf("delete queue %s: a dead-letter queue goes with its queue: %w", name, fault.ErrInvalidArgument)}, nil
		}
		return metaResult{err: fmt.Errorf("delete queue %s: %w", name, fault.ErrQueueNotFound)}, nil
	}
	b.Delete([]byte("m/q/" + name))
	return metaResult{}, n.dropQueue(b, name)
}

// dropQueue forgets queue name on this node and, if it holds a replica,
// deletes its messages and puts the deletion of its group's log and
// records into b; the queue's meta record is the caller's (driver
// goroutine).
func (n *Node) dropQueue(b *store.Batch, name string) error {
	n.mu.Lock()
	q := n.meta.queues[name]
	if q == nil {
		n.mu.Unlock()
		return nil
	}
	delete(n.meta.queues, name)
	g := n.groups[q.group]
	n.mu.Unlock()
	b.Delete(placementKey(name))
	n.cfg.Effects.QueueDeleted(name)
	if g == nil {
		return nil
	}
	return n.dropReplica(b, q, g)
}

// register proposes this node's client address until the meta state
// holds it.
func (n *Node) register() {
	for {
		n.mu.RLock()
		addr, ok := n.meta.nodes[n.cfg.NodeID]
		n.mu.RUnlock()
		if ok && addr == n.cfg.AdvertiseAddr {
			return
		}
		body := binary.AppendUvarint(nil, n.cfg.NodeID)
		body = append(body, n.cfg.AdvertiseAddr...)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := n.proposeMeta(ctx, metaNodeAddr, body)
		cancel()
		if errors.Is(err, ErrStopped) {
			return
		}
		select {
		case <-n.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// CreateQueue creates a queue through the meta group and places it. It
// returns once this node has applied the creation (the queue's group may
// still be electing its leader: operations on it answer NOT_LEADER with
// no hint until then). The error wraps fault.ErrQueueExists,
// fault.ErrInvalidArgument or fault.ErrUnavailable.
func (n *Node) CreateQueue(ctx context.Context, spec sched.QueueSpec) (sched.QueueCreated, error) {
	spec, err := n.fixSpec(spec)
	if err != nil {
		return sched.QueueCreated{}, err
	}
	r, err := n.proposeMeta(ctx, metaCreateQueue, shard.AppendCommand(nil, &shard.CreateQueue{Spec: spec}))
	if err != nil {
		return sched.QueueCreated{}, err
	}
	if r.err == nil {
		n.awaitLeader(ctx, spec.Name)
	}
	return r.created, r.err
}

// fixSpec fills in spec what this node's defaults decide, so that every
// replica schedules the queue alike, and checks it (an error wrapping
// fault.ErrInvalidArgument).
func (n *Node) fixSpec(spec sched.QueueSpec) (sched.QueueSpec, error) {
	// Every replica must schedule alike, whatever its own default: the
	// queue takes this node's default policy now, if it names none.
	if spec.Policy == "" && (spec.TenantSeparator != "" || spec.CostByTime) {
		spec.Policy = sched.PolicySTFQ // they need it
	}
	if spec.Policy == "" {
		spec.Policy = cmp.Or(n.cfg.Shard.Sched.Policy, sched.DefaultPolicy)
	}
	if c := n.cfg.Shard.Sched; spec.Policy == sched.PolicySTFQ {
		if spec.LatencyBudget == 0 && c.LatencyBudget > 0 {
			spec.LatencyBudget = uint32(min(c.LatencyBudget, sched.MaxLatencyBudget))
		}
		if spec.LatencyIdle == 0 && c.LatencyIdle > 0 {
			spec.LatencyIdle = min(c.LatencyIdle, sched.MaxLatencyIdle)
		}
	}
	if err := sched.New(n.cfg.Shard.Sched).CheckSpec(spec); err != nil {
		return sched.QueueSpec{}, err
	}
	return spec, nil
}

// awaitLeader waits, for a few seconds at most, until this node knows the
// leader of queue's group (when it holds a replica), so that operations
// sent right after the queue's creation find it led.
func (n *Node) awaitLeader(ctx context.Context, queue string) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		n.mu.RLock()
		g := n.byQueue[queue]
		n.mu.RUnlock()
		if g == nil || g.leader.Load() != 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// DeleteQueue deletes a queue, its DLQ and their messages on every
// replica. The error wraps fault.ErrQueueNotFound, fault.ErrInvalidArgument
// (a DLQ) or fault.ErrUnavailable.
func (n *Node) DeleteQueue(ctx context.Context, name string) error {
	r, err := n.proposeMeta(ctx, metaDeleteQueue, []byte(name))
	if err != nil {
		return err
	}
	return r.err
}

// ProposeAuth applies an encoded auth.Change on every node, through the
// meta group, and returns its result on this node.
func (n *Node) ProposeAuth(ctx context.Context, change []byte) error {
	r, err := n.proposeMeta(ctx, metaAuth, change)
	if err != nil {
		return err
	}
	return r.err
}

// ProposeConfig applies an encoded rtconf.Change on every node, through
// the meta group, and returns its result on this node.
func (n *Node) ProposeConfig(ctx context.Context, change []byte) error {
	r, err := n.proposeMeta(ctx, metaConfig, change)
	if err != nil {
		return err
	}
	return r.err
}

// handOver makes this node give up the leadership of the groups it
// leads in which node id is rebuilding its replica, when it believes
// that replica holds more than it does (groups: each rebuilding group's
// last index on node id). Raft's leader keeps, for each follower, the
// last index it knows the follower holds (its match), and never sends it
// entries at or below it again: a follower that lost its log could never
// catch up under the same leader. A new leader starts from no such
// knowledge. An announcement older than what the leader has since sent
// the replica (it sent it a snapshot past the announced index within
// snapshotGrace) is ignored. The leadership goes to another replica
// this node is connected to; with none, the group waits until one is
// back (the rebuilding replica does not vote before it has caught up).
// Driver goroutine.
func (n *Node) handOver(id uint64, groups map[uint64]uint64) {
	if id == n.cfg.NodeID {
		return
	}
	for gid, last := range groups {
		g := n.groups[gid]
		if g == nil || g.leader.Load() != n.cfg.NodeID || !slices.Contains(g.replicas, id) {
			continue
		}
		var match uint64
		g.rn.WithProgress(func(pid uint64, _ raft.ProgressType, pr tracker.Progress) {
			if pid == id {
				match = pr.Match
			}
		})
		if match <= last {
			continue // the leader's view holds: it catches the replica up
		}
		// An announcement made before the replica caught up, applied
		// after: the leader sent it a snapshot past what it announced,
		// within snapshotGrace. Handing over would only make the next
		// leader send another snapshot. The leader's replicating to it
		// proves nothing: a replica that lost its log while the group
		// was idle, and came back before the leader noticed, finds the
		// leader in the replicate state, whose appends it rejects in
		// vain (raft takes a rejection at or below the match for a stale
		// one).
		n.expireGrants(g)
		if gr, ok := g.granted[id]; ok && gr.index > last {
			continue
		}
		for _, to := range g.replicas {
			if to != n.cfg.NodeID && to != id && n.tr.Connected(to) {
				n.log.Info("handing over leadership so that a rebuilt replica can catch up", "group", g.id, "queue", g.queue, "rebuilt", id, "match", match, "last", last, "to", to)
				g.rn.TransferLeader(to)
				break
			}
		}
	}
}

func appendRebuilt(b []byte, id uint64, groups map[uint64]uint64) []byte {
	b = binary.AppendUvarint(b, id)
	b = binary.AppendUvarint(b, uint64(len(groups)))
	for _, gid := range slices.Sorted(mapKeys(groups)) {
		b = binary.AppendUvarint(b, gid)
		b = binary.AppendUvarint(b, groups[gid])
	}
	return b
}

func decodeRebuilt(b []byte) (uint64, map[uint64]uint64, error) {
	next := func() (uint64, error) {
		v, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, errors.New("rebuilt: bad body")
		}
		b = b[k:]
		return v, nil
	}
	id, err := next()
	if err != nil {
		return 0, nil, err
	}
	cnt, err := next()
	if err != nil || cnt > uint64(len(b)) {
		return 0, nil, errors.New("rebuilt: bad count")
	}
	groups := make(map[uint64]uint64, cnt)
	for range cnt {
		gid, err := next()
		if err != nil {
			return 0, nil, err
		}
		last, err := next()
		if err != nil {
			return 0, nil, err
		}
		groups[gid] = last
	}
	return id, groups, nil
}

// announceRebuild tells the cluster, through the meta group, which of
// this node's groups are still rebuilding and how far each has got, every
// two election timeouts, until none is (Config.Rebuild). The first
// announcement names the meta group only: the queues' groups open as the
// meta group's entries replay.
func (n *Node) announceRebuild() {
	every := 2 * time.Duration(n.cfg.ElectionTicks) * n.cfg.TickInterval
	for {
		groups := map[uint64]uint64{}
		n.mu.RLock()
		for _, g := range n.groups {
			if g.rebuilding.Load() {
				last, _ := g.log.LastIndex()
				groups[g.id] = last
			}
		}
		if len(groups) == 0 {
			n.announcing.Store(false)
			n.mu.RUnlock()
			return
		}
		n.mu.RUnlock()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := n.proposeMeta(ctx, metaRebuilt, appendRebuilt(nil, n.cfg.NodeID, groups))
		cancel()
		if errors.Is(err, ErrStopped) {
			return
		}
		select {
		case <-n.stop:
			return
		case <-time.After(every):
		}
	}
}
