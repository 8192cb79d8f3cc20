package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/shard"
	"github.com/fila-mq/fila/broker/internal/store"
)

// A sharded queue is split into shards, each an ordinary queue of its
// own, with its own Raft group and dead-letter queue: shard i of queue q
// is the queue q~i (sched.ShardName). The meta group records the split
// under m/s/<q> (the shard count) beside each shard's m/q/ record, and
// creates and deletes the shards together. Nothing routes by the shard
// hash on the broker: operations naming q itself where a shard is needed
// fail with fault.ErrQueueSharded, and clients address the shards that
// Topology lists.

func shardedKey(name string) []byte { return []byte("m/s/" + name) }

func (m *metaState) loadSharded(st Storage) error {
	return st.Scan([]byte("m/s/"), []byte("m/s0"), func(k, v []byte) error {
		cnt, n := binary.Uvarint(v)
		if n <= 0 || n != len(v) || cnt < 2 || cnt > sched.MaxShards {
			return fmt.Errorf("meta state: sharded queue %s: bad shard count", k[4:])
		}
		m.sharded[string(k[4:])] = int(cnt)
		return nil
	})
}

// shardedOf returns the sharded queue that name names, itself or its
// DLQ's name (q.dlq), and its shard count; ok is false for any other
// name.
func (m *metaState) shardedOf(name string) (base string, count int, ok bool) {
	if c, ok := m.sharded[name]; ok {
		return name, c, true
	}
	if b, isDLQ := cutSuffix(name, sched.DLQSuffix); isDLQ {
		if c, ok := m.sharded[b]; ok {
			return b, c, true
		}
	}
	return "", 0, false
}

// errSharded is the error of an operation naming sharded queue name (or
// its DLQ) where it needs one of its shards.
func errSharded(name string, count int) error {
	return fmt.Errorf("queue %s has %d shards, %s to %s: name one (Topology lists them): %w",
		name, count, sched.ShardName(name, 0), sched.ShardName(name, count-1), fault.ErrQueueSharded)
}

// CreateShardedQueue creates a queue of shards shards (2 to
// sched.MaxShards) through the meta group: one queue per shard, named
// sched.ShardName(spec.Name, i), each with spec's settings and its own
// group, placed as CreateQueue places a queue, the shards' leaders spread
// over the replicas. It returns once this node has applied the creation,
// and waits a few seconds at most for the shards' leaders it can see.
// The error wraps fault.ErrQueueExists, fault.ErrInvalidArgument or
// fault.ErrUnavailable.
func (n *Node) CreateShardedQueue(ctx context.Context, spec sched.QueueSpec, shards int) (sched.QueueCreated, error) {
	if shards < 2 || shards > sched.MaxShards {
		return sched.QueueCreated{}, fmt.Errorf("create queue %s: %d shards: want 2 to %d: %w", spec.Name, shards, sched.MaxShards, fault.ErrInvalidArgument)
	}
	spec, err := n.fixSpec(spec)
	if err != nil {
		return sched.QueueCreated{}, err
	}
	body := binary.AppendUvarint(nil, uint64(shards))
	r, err := n.proposeMeta(ctx, metaCreateSharded, shard.AppendCommand(body, &shard.CreateQueue{Spec: spec}))
	if err != nil {
		return sched.QueueCreated{}, err
	}
	if r.err == nil {
		for i := range shards {
			n.awaitLeader(ctx, sched.ShardName(spec.Name, i))
		}
	}
	return r.created, r.err
}

// applyCreateSharded creates a sharded queue's shards (the
// metaCreateSharded command), all or none.
func (n *Node) applyCreateSharded(b *store.Batch, body []byte) (metaResult, error) {
	cnt, k := binary.Uvarint(body)
	if k <= 0 || cnt < 2 || cnt > sched.MaxShards {
		return metaResult{}, errors.New("create sharded queue: bad shard count")
	}
	c, err := shard.DecodeCommand(body[k:])
	if err != nil {
		return metaResult{}, err
	}
	cq, ok := c.(*shard.CreateQueue)
	if !ok {
		return metaResult{}, fmt.Errorf("create sharded queue: %s command", c.Kind())
	}
	base := cq.Spec.Name
	if err := n.checkNewName(base); err != nil {
		return metaResult{err: err}, nil
	}
	for i := range int(cnt) {
		if err := n.checkNewName(sched.ShardName(base, i)); err != nil {
			return metaResult{err: err}, nil
		}
	}
	for i := range int(cnt) {
		spec := cq.Spec
		spec.Name = sched.ShardName(base, i)
		if r, err := n.placeQueue(b, spec); err != nil || r.err != nil {
			// Only a difference of boot configuration fails here (see
			// placeQueue): the shards placed so far stay, as shards of
			// a queue that was not created, until it is created again.
			return r, err
		}
	}
	n.mu.Lock()
	n.meta.sharded[base] = int(cnt)
	n.mu.Unlock()
	b.Put(shardedKey(base), binary.AppendUvarint(nil, cnt))
	return metaResult{created: sched.QueueCreated{Name: base, DLQ: base + sched.DLQSuffix}}, nil
}

// deleteSharded deletes the sharded queue name, every shard with its
// messages, when name is one (ok); a shard named on its own is refused.
func (n *Node) deleteSharded(b *store.Batch, name string) (r metaResult, ok bool, err error) {
	n.mu.RLock()
	cnt, sharded := n.meta.sharded[name]
	n.mu.RUnlock()
	if !sharded {
		if base, _, isShard := sched.CutShard(name); isShard {
			n.mu.RLock()
			_, of := n.meta.sharded[base]
			n.mu.RUnlock()
			if of {
				return metaResult{err: fmt.Errorf("delete queue %s: a shard goes with its queue %s: %w", name, base, fault.ErrInvalidArgument)}, true, nil
			}
		}
		return metaResult{}, false, nil
	}
	for i := range cnt {
		s := sched.ShardName(name, i)
		b.Delete([]byte("m/q/" + s))
		if err := n.dropQueue(b, s); err != nil {
			return metaResult{}, true, err
		}
	}
	n.mu.Lock()
	delete(n.meta.sharded, name)
	n.mu.Unlock()
	b.Delete(shardedKey(name))
	return metaResult{}, true, nil
}

// ShardInfo is one shard of a queue as Topology reports it.
type ShardInfo struct {
	// Queue is the name to address the shard by: base~i, or the queue's
	// own name when it is not sharded.
	Queue string
	// Leader is the node leading the shard's group, 0 while none is
	// known; Addr its client address ("" then, or the address of a node
	// holding a replica when this node holds none); Term its term.
	Leader uint64
	Addr   string
	Term   uint64
}

// Topology returns the shards of queue (or of the DLQ it names): one per
// shard of a sharded queue, in shard order, with its tenant separator
// (which the shard hash uses), or the queue itself. The error wraps
// fault.ErrQueueNotFound.
func (n *Node) Topology(queue string) (shards []ShardInfo, tenantSep string, err error) {
	n.mu.RLock()
	base, cnt, sharded := n.meta.shardedOf(queue)
	n.mu.RUnlock()
	if !sharded {
		id, addr, term, err := n.Leader(queue)
		if err != nil {
			return nil, "", err
		}
		return []ShardInfo{{Queue: queue, Leader: id, Addr: addr, Term: term}}, "", nil
	}
	dlq := queue != base
	for i := range cnt {
		name := sched.ShardName(base, i)
		id, addr, term, err := n.Leader(name)
		if err != nil {
			return nil, "", err
		}
		if dlq {
			name += sched.DLQSuffix
		}
		shards = append(shards, ShardInfo{Queue: name, Leader: id, Addr: addr, Term: term})
	}
	n.mu.RLock()
	if q := n.meta.queues[sched.ShardName(base, 0)]; q != nil {
		tenantSep = q.spec.TenantSeparator
	}
	n.mu.RUnlock()
	return shards, tenantSep, nil
}

// ShardCount returns the number of shards of queue (or of the DLQ it
// names) when it is sharded, else 0.
func (n *Node) ShardCount(queue string) int {
	n.mu.RLock()
	defer n.mu.RUnlock()
	_, cnt, _ := n.meta.shardedOf(queue)
	return cnt
}

// ShardsOf returns the names of sharded queue queue's shards (or of their
// DLQs, when queue names its DLQ), in shard order; nil when it is not
// sharded.
func (n *Node) ShardsOf(queue string) []string {
	n.mu.RLock()
	base, cnt, ok := n.meta.shardedOf(queue)
	n.mu.RUnlock()
	if !ok {
		return nil
	}
	names := make([]string, cnt)
	for i := range names {
		names[i] = sched.ShardName(base, i)
		if queue != base {
			names[i] += sched.DLQSuffix
		}
	}
	return names
}
