package cluster

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"net"
	"slices"

	"go.etcd.io/raft/v3"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/store"
)

// The cluster's members are recorded in the meta group once they first
// change (AddNode, RemoveNode); until then they are Config.Peers, the
// same on every node:
//
//	m/m/<id:8>    a member's peer address
//	m/x/<id:8>    a removed node's ID, empty: never a member again

// ErrRemoved is returned by Open, and is the error a running node stops
// with, when this node was removed from the cluster (RemoveNode). Node
// IDs are never reused: a machine comes back under a new ID, with an
// empty data directory, added with AddNode.
var ErrRemoved = errors.New("this node was removed from the cluster; node IDs are never reused: start it with an empty data directory under a new node ID, and add it with fila cluster add-node")

func memberKey(id uint64) []byte  { return binary.BigEndian.AppendUint64([]byte("m/m/"), id) }
func removedKey(id uint64) []byte { return binary.BigEndian.AppendUint64([]byte("m/x/"), id) }

// Removed returns a channel closed once this node has stopped taking
// part because it was removed from the cluster (RemoveNode): a server
// then shuts down, as nothing it could serve would be current.
func (n *Node) Removed() <-chan struct{} { return n.removedc }

// memberIDs returns the members' IDs, sorted: the recorded members, or
// until the first change the meta group's voters, which every node
// applying the same entries sees alike (a node's Config.Peers need not be
// alike: a node that joins lists itself). n.mu held, or the driver
// goroutine.
func (m *metaState) memberIDs() []uint64 {
	if len(m.members) > 0 {
		return slices.Sorted(mapKeys(m.members))
	}
	return slices.Clone(m.voters)
}

// isMember reports whether id is a member (as memberIDs).
func (m *metaState) isMember(id uint64) bool {
	if len(m.members) > 0 {
		_, ok := m.members[id]
		return ok
	}
	return slices.Contains(m.voters, id)
}

// memberAddrs returns the members and their peer addresses: the
// recorded ones, or the voters with Config.Peers's addresses (n.mu held,
// or the driver goroutine).
func (n *Node) memberAddrs() map[uint64]string {
	if len(n.meta.members) > 0 {
		return maps.Clone(n.meta.members)
	}
	out := map[uint64]string{}
	for _, id := range n.meta.voters {
		out[id] = n.cfg.Peers[id]
	}
	return out
}

func appendMembers(b []byte, m map[uint64]string) []byte {
	b = binary.AppendUvarint(b, uint64(len(m)))
	for _, id := range slices.Sorted(mapKeys(m)) {
		b = binary.AppendUvarint(b, id)
		b = binary.AppendUvarint(b, uint64(len(m[id])))
		b = append(b, m[id]...)
	}
	return b
}

func decodeMembers(b []byte) (map[uint64]string, []byte, error) {
	cnt, k := binary.Uvarint(b)
	if k <= 0 || cnt > uint64(len(b)) {
		return nil, nil, errors.New("bad member count")
	}
	b = b[k:]
	m := map[uint64]string{}
	for range cnt {
		id, k1 := binary.Uvarint(b)
		if k1 <= 0 {
			return nil, nil, errors.New("truncated member")
		}
		l, k2 := binary.Uvarint(b[k1:])
		if k2 <= 0 || l > uint64(len(b)-k1-k2) {
			return nil, nil, errors.New("truncated member address")
		}
		m[id] = string(b[k1+k2 : k1+k2+int(l)])
		b = b[k1+k2+int(l):]
	}
	return m, b, nil
}

// AddNode adds node id, whose peer transport listens at peerAddr
// (host:port), to the cluster: every node records it and connects to it,
// and the meta group's leader adds it to the meta group, as a learner
// until it holds the meta log, then as a voter (a joint configuration
// change). The new node is started with cluster.join set, so that it
// waits to be added rather than start a cluster of its own; it then
// holds no queue until a move or a rebalance places some on it. It
// returns once this node has applied the addition; status shows the
// node's progress in the meta group.
//
// The error wraps fault.ErrInvalidArgument (ID 0, a member already, a
// node removed before (IDs are never reused), or an address that is not
// host:port) or fault.ErrUnavailable (no meta leader took it in time).
func (n *Node) AddNode(ctx context.Context, id uint64, peerAddr string) error {
	if err := n.checkAdd(id, peerAddr); err != nil {
		return err
	}
	body := binary.AppendUvarint(nil, id)
	body = binary.AppendUvarint(body, uint64(len(peerAddr)))
	body = append(body, peerAddr...)
	n.mu.RLock()
	body = appendMembers(body, n.memberAddrs())
	n.mu.RUnlock()
	r, err := n.proposeMeta(ctx, metaAddNode, body)
	if err != nil {
		return err
	}
	return r.err
}

func (n *Node) checkAdd(id uint64, addr string) error {
	if id == 0 {
		return fmt.Errorf("add node: node ID 0: %w", fault.ErrInvalidArgument)
	}
	if _, _, err := net.SplitHostPort(addr); err != nil || addr == "" {
		return fmt.Errorf("add node %d: peer address %q is not host:port: %w", id, addr, fault.ErrInvalidArgument)
	}
	n.mu.RLock()
	defer n.mu.RUnlock()
	if n.meta.removed[id] {
		return fmt.Errorf("add node %d: it was removed from the cluster, and node IDs are never reused: %w", id, fault.ErrInvalidArgument)
	}
	if n.meta.isMember(id) {
		return fmt.Errorf("add node %d: already a member: %w", id, fault.ErrInvalidArgument)
	}
	return nil
}

// RemoveNode removes node id from the cluster for good: it must hold no
// replica of any queue (drain it first, DrainNode). The meta group's
// leader takes it out of the meta group (handing its own lead over first
// if it is the node removed); every node then forgets it and refuses its
// connections, and the removed node stops taking part (its server shuts
// down: Removed). Its ID is never accepted again: restarted with its
// data directory, it refuses to start (ErrRemoved). It returns once this node has applied the removal.
//
// The error wraps fault.ErrInvalidArgument (not a member, the last
// member, or a node that still holds replicas) or fault.ErrUnavailable
// (no meta leader took it in time).
func (n *Node) RemoveNode(ctx context.Context, id uint64) error {
	if err := n.checkRemove(id); err != nil {
		return err
	}
	n.mu.RLock()
	body := appendMembers(binary.AppendUvarint(nil, id), n.memberAddrs())
	n.mu.RUnlock()
	r, err := n.proposeMeta(ctx, metaRemoveNode, body)
	if err != nil {
		return err
	}
	return r.err
}

func (n *Node) checkRemove(id uint64) error {
	n.mu.RLock()
	defer n.mu.RUnlock()
	if !n.meta.isMember(id) {
		return fmt.Errorf("remove node %d: not a member of the cluster: %w", id, fault.ErrInvalidArgument)
	}
	if len(n.meta.memberIDs()) == 1 {
		return fmt.Errorf("remove node %d: the last member: %w", id, fault.ErrInvalidArgument)
	}
	var held []string
	for _, name := range slices.Sorted(mapKeys(n.meta.queues)) {
		if n.meta.queues[name].hosts(id) {
			held = append(held, name)
		}
	}
	if len(held) > 0 {
		return fmt.Errorf("remove node %d: it holds replicas of %d queues (%s…): drain it first: %w", id, len(held), held[0], fault.ErrInvalidArgument)
	}
	return nil
}

// recordMembers makes the members recorded, from their first change on:
// from the proposer's list (carried in the command, so that every node
// records the same addresses), which must hold the meta group's voters.
// It puts every member's record into b (driver goroutine).
func (n *Node) recordMembers(b *store.Batch, proposed map[uint64]string) error {
	if len(n.meta.members) == 0 {
		if !slices.Equal(slices.Sorted(mapKeys(proposed)), n.meta.voters) {
			return fmt.Errorf("the members changed since the proposal (%v, now %v); retry: %w",
				slices.Sorted(mapKeys(proposed)), n.meta.voters, fault.ErrUnavailable)
		}
		n.mu.Lock()
		n.meta.members = maps.Clone(proposed)
		n.mu.Unlock()
	}
	for id, addr := range n.meta.members {
		b.Put(memberKey(id), []byte(addr))
	}
	return nil
}

// applyAddNode applies the metaAddNode command (driver goroutine).
func (n *Node) applyAddNode(b *store.Batch, body []byte) (metaResult, error) {
	id, k := binary.Uvarint(body)
	l, k2 := binary.Uvarint(body[max(k, 0):])
	if k <= 0 || k2 <= 0 || l > uint64(len(body)-k-k2) {
		return metaResult{}, errors.New("add node: bad body")
	}
	addr := string(body[k+k2 : k+k2+int(l)])
	proposed, rest, err := decodeMembers(body[k+k2+int(l):])
	if err != nil || len(rest) != 0 {
		return metaResult{}, fmt.Errorf("add node: bad members: %v", err)
	}
	if err := n.checkAdd(id, addr); err != nil {
		return metaResult{err: err}, nil
	}
	if err := n.recordMembers(b, proposed); err != nil {
		return metaResult{err: fmt.Errorf("add node %d: %w", id, err)}, nil
	}
	n.mu.Lock()
	n.meta.members[id] = addr
	n.mu.Unlock()
	b.Put(memberKey(id), []byte(addr))
	n.tr.SetPeer(id, addr)
	n.log.Info("node added to the cluster", "node", id, "peer_addr", addr)
	n.followMembers()
	return metaResult{}, nil
}

// applyRemoveNode applies the metaRemoveNode command (driver goroutine).
func (n *Node) applyRemoveNode(b *store.Batch, body []byte) (metaResult, error) {
	id, k := binary.Uvarint(body)
	if k <= 0 {
		return metaResult{}, errors.New("remove node: bad body")
	}
	proposed, rest, err := decodeMembers(body[k:])
	if err != nil || len(rest) != 0 {
		return metaResult{}, fmt.Errorf("remove node: bad members: %v", err)
	}
	if err := n.checkRemove(id); err != nil {
		return metaResult{err: err}, nil
	}
	if err := n.recordMembers(b, proposed); err != nil {
		return metaResult{err: fmt.Errorf("remove node %d: %w", id, err)}, nil
	}
	n.mu.Lock()
	delete(n.meta.members, id)
	delete(n.meta.draining, id)
	n.meta.removed[id] = true
	n.mu.Unlock()
	b.Delete(memberKey(id))
	b.Delete(drainKey(id))
	b.Put(removedKey(id), nil)
	n.log.Info("node removed from the cluster", "node", id)
	n.followMembers()
	return metaResult{}, nil
}

// followMembers makes the meta group's configuration follow the members:
// its leader adds and removes voters as a queue's leader does in a move
// (moveStep). It also forgets the removed nodes the configuration no
// longer holds, and stops this node if it is one of them and no longer
// leads the meta group (driver goroutine).
func (n *Node) followMembers() {
	g := n.groups[MetaGroup]
	if g == nil {
		return
	}
	ids := n.meta.memberIDs()
	if slices.Equal(ids, g.replicas) && len(g.learners) == 0 && !g.joint {
		g.moveTo = nil
	} else {
		g.moveTo = ids
	}
	for id := range n.meta.removed {
		if id != n.cfg.NodeID && !slices.Contains(g.replicas, id) && !slices.Contains(g.learners, id) {
			n.tr.RemovePeer(id)
		}
	}
	if n.meta.removed[n.cfg.NodeID] && g.rn.BasicStatus().RaftState != raft.StateLeader {
		if n.failed.CompareAndSwap(nil, &ErrRemoved) {
			n.log.Error("this node was removed from the cluster; it stops taking part", "node", n.cfg.NodeID)
			close(n.removedc)
		}
	}
}
