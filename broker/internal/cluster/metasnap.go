package cluster

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/fila-mq/fila/broker/internal/store"
)

// Snapshots and log compaction of the meta group.
//
// The meta group's state is small and lives in the store: the records
// under "m/" (metaState) and those under Effects.StatePrefixes (the API
// keys and the runtime config). Every Config.MetaSnapshotEvery entries it
// applies, a node copies those records into a snapshot and compacts its
// meta log up to the entry it last applied (compactMeta): the snapshot is
// the state after exactly that entry, so the log cannot keep entries
// before it, as a queue's group does for a slow follower; a follower
// that needs them gets the snapshot instead, which is cheap. A follower
// installs a snapshot it receives (installMeta): it replaces its own
// records with the snapshot's, then brings the node in line with them
// (openQueueGroup for the queues it now holds, dropQueue for those that
// are gone, Effects.Reload for keys and config).
//
// A snapshot's data:
//
//	+-----------+------------------------------------------------------+
//	| version 1 | records: key length uvarint, key, value length       |
//	|           | uvarint, value; in key order, until the end           |
//	+-----------+------------------------------------------------------+

// metaSnapshotVersion is the first byte of a meta snapshot's data.
const metaSnapshotVersion = 1

// maxMetaSnapshot bounds a meta snapshot's data: it is stored with the
// log's snapshot record, in one store record. A larger state is left
// uncompacted.
const maxMetaSnapshot = 64 << 20

// metaPrefixes returns the key prefixes of the meta group's state, in
// order (records are scanned prefix by prefix).
func (n *Node) metaPrefixes() []string {
	p := append([]string{"m/"}, n.cfg.Effects.StatePrefixes...)
	slices.Sort(p)
	return slices.Compact(p)
}

// prefixEnd returns the first key after every key starting with prefix
// (prefix ends in a byte below 0xff).
func prefixEnd(prefix string) []byte {
	end := []byte(prefix)
	end[len(end)-1]++
	return end
}

// metaSnapshot returns the meta group's state in the store, encoded as a
// snapshot's data.
func (n *Node) metaSnapshot() ([]byte, error) {
	b := []byte{metaSnapshotVersion}
	for _, p := range n.metaPrefixes() {
		err := n.st.Scan([]byte(p), prefixEnd(p), func(k, v []byte) error {
			b = appendRecord(b, k, v)
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return b, nil
}

// appendRecord appends one record of a meta snapshot's data to b.
func appendRecord(b, k, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(k)))
	b = append(b, k...)
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// decodeMetaSnapshot calls fn for each record of a meta snapshot's data.
// It fails, before calling fn at all, on another version, truncated
// records, lengths not in their shortest form, keys out of order, and a
// key outside prefixes.
func decodeMetaSnapshot(data []byte, prefixes []string, fn func(k, v []byte)) error {
	if len(data) == 0 || data[0] != metaSnapshotVersion {
		return errors.New("meta snapshot: not version 1")
	}
	type rec struct{ k, v []byte }
	var recs []rec
	b := data[1:]
	field := func() ([]byte, error) {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errors.New("meta snapshot: truncated")
		}
		if k != len(binary.AppendUvarint(nil, l)) {
			return nil, errors.New("meta snapshot: a length not in its shortest form")
		}
		f := b[k : k+int(l)]
		b = b[k+int(l):]
		return f, nil
	}
	for len(b) > 0 {
		k, err := field()
		if err != nil {
			return err
		}
		v, err := field()
		if err != nil {
			return err
		}
		if !slices.ContainsFunc(prefixes, func(p string) bool { return bytes.HasPrefix(k, []byte(p)) }) {
			return fmt.Errorf("meta snapshot: key %q outside the meta state", k)
		}
		if len(recs) > 0 && bytes.Compare(recs[len(recs)-1].k, k) >= 0 {
			return fmt.Errorf("meta snapshot: key %q out of order", k)
		}
		recs = append(recs, rec{k, v})
	}
	for _, r := range recs {
		fn(r.k, r.v)
	}
	return nil
}

// compactMeta compacts the meta group's log up to its last applied entry,
// with a snapshot of the state, once Config.MetaSnapshotEvery entries have
// been applied since the last (driver goroutine, after apply).
func (n *Node) compactMeta(g *group) {
	applied := g.applied.Load()
	first, _ := g.log.FirstIndex()
	if applied < first || applied-first+1 < n.cfg.MetaSnapshotEvery || applied-g.snapTried < n.cfg.MetaSnapshotEvery {
		return
	}
	g.snapTried = applied
	data, err := n.metaSnapshot()
	if err != nil {
		n.fail(err)
		return
	}
	if len(data) > maxMetaSnapshot {
		if !g.snapTooBig {
			g.snapTooBig = true
			n.log.Warn("the meta group's state is too large for a snapshot; its log is not compacted", "bytes", len(data), "limit", maxMetaSnapshot)
		}
		return
	}
	if n.compactLog(g, applied, data) {
		n.log.Debug("compacted the meta group's log", "to", applied, "bytes", len(data))
	}
}

// writeMeta replaces the meta group's state in the store with that of a
// snapshot's data at index, and records index as applied.
func (n *Node) writeMeta(index uint64, data []byte) error {
	var b store.Batch
	prefixes := n.metaPrefixes()
	for _, p := range prefixes {
		err := n.st.Scan([]byte(p), prefixEnd(p), func(k, _ []byte) error {
			b.Delete(bytes.Clone(k))
			return nil
		})
		if err != nil {
			return err
		}
	}
	err := decodeMetaSnapshot(data, prefixes, func(k, v []byte) { b.Put(k, v) })
	if err != nil {
		return fmt.Errorf("%w: group %d: snapshot at %d: %v", ErrCorruptSnapshot, MetaGroup, index, err)
	}
	b.Put(appliedKey(MetaGroup), binary.BigEndian.AppendUint64(nil, index))
	return n.st.Apply(&b)
}

// ErrCorruptSnapshot is the error of a meta snapshot whose data does not
// decode: the node stops taking part rather than apply it.
var ErrCorruptSnapshot = errors.New("corrupt meta snapshot")

// installMeta installs a snapshot of the meta group received from its
// leader and made durable in the log: the state is replaced with the
// snapshot's, and the node follows it, opening the groups of the queues
// it now holds a replica of and deleting those of the queues that are
// gone (driver goroutine).
func (n *Node) installMeta(g *group, index uint64, data []byte) error {
	if err := n.writeMeta(index, data); err != nil {
		return err
	}
	var next metaState
	if err := next.load(n.st); err != nil {
		return err
	}
	n.mu.Lock()
	old := maps.Clone(n.meta.queues)
	n.meta.nodes, n.meta.nextGroup, n.meta.draining, n.meta.pending = next.nodes, next.nextGroup, next.draining, next.pending
	if len(next.members) > 0 {
		n.meta.members = next.members
	}
	n.meta.removed = next.removed
	n.mu.Unlock()
	// Queues gone, or replaced by another of the same name (another group).
	var b store.Batch
	for _, name := range slices.Sorted(mapKeys(old)) {
		if q := next.queues[name]; q == nil || q.group != old[name].group {
			if err := n.dropQueue(&b, name); err != nil {
				return err
			}
		}
	}
	if b.Len() > 0 {
		if err := n.st.Apply(&b); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(mapKeys(next.queues)) {
		q := next.queues[name]
		n.mu.Lock()
		n.meta.queues[name] = q
		n.mu.Unlock()
		if o := old[name]; o != nil && o.group == q.group {
			// The same queue, maybe moved since.
			if err := n.place(q); err != nil {
				return err
			}
			continue
		}
		n.cfg.Effects.QueueCreated(q.spec)
		if q.hosts(n.cfg.NodeID) {
			if _, err := n.openQueueGroup(q); err != nil {
				return fmt.Errorf("queue %s: %w", name, err)
			}
		}
	}
	for id, addr := range n.meta.members {
		n.tr.SetPeer(id, addr)
	}
	n.followMembers()
	if f := n.cfg.Effects.Reload; f != nil {
		if err := f(); err != nil {
			return err
		}
	}
	g.applied.Store(index)
	n.log.Info("installed a snapshot of the meta group", "index", index, "bytes", len(data), "queues", len(next.queues))
	return nil
}

// recoverMeta installs, at open, a snapshot of the meta group received
// and made durable in the log before the node stopped, but not yet
// written into the state: before the meta group's RawNode exists, which
// must not start from an applied index before its log's snapshot. It
// returns the applied index.
func (n *Node) recoverMeta(si uint64, data []byte, applied uint64) (uint64, error) {
	if si <= applied {
		return applied, nil
	}
	if len(data) == 0 {
		return 0, fmt.Errorf("meta log compacted to %d, past the applied %d, with no snapshot data", si, applied)
	}
	n.log.Info("installing a snapshot of the meta group received before the node stopped", "index", si)
	if err := n.writeMeta(si, data); err != nil {
		return 0, err
	}
	n.reload = true
	return si, n.meta.load(n.st)
}
