package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// configEffects are noEffects, except that Config stores its data, a
// "key=value" string, at c/key, as the runtime config store does, and
// Reload counts its calls.
func configEffects(reloads *atomic.Int32) func(int, *store.Mem) Effects {
	return func(_ int, st *store.Mem) Effects {
		e := noEffects()
		e.Config = func(data []byte) error {
			k, v, _ := strings.Cut(string(data), "=")
			var b store.Batch
			b.Put([]byte("c/"+k), []byte(v))
			return st.Apply(&b)
		}
		e.StatePrefixes = []string{"c/"}
		e.Reload = func() error {
			reloads.Add(1)
			return nil
		}
		return e
	}
}

// records returns node i's records under prefix, as "key=value".
func (c *testCluster) records(i int, prefix string) []string {
	var out []string
	c.stores[i].Scan([]byte(prefix), prefixEnd(prefix), func(k, v []byte) error {
		out = append(out, string(k)+"="+string(v))
		return nil
	})
	return out
}

// queueNames returns the queues node i's meta state holds, and those it
// has a group for.
func queueNames(n *Node) (meta, groups []string) {
	n.mu.RLock()
	defer n.mu.RUnlock()
	for name := range n.meta.queues {
		meta = append(meta, name)
	}
	for _, g := range n.groups {
		if g.queue != "" {
			groups = append(groups, g.queue)
		}
	}
	slices.Sort(meta)
	slices.Sort(groups)
	return meta, groups
}

// TestMetaCompaction: the meta group's log is compacted every
// Config.MetaSnapshotEvery entries; a node that was down while queues were
// created and deleted and the config changed gets a snapshot of the meta
// state, opens the groups of the new queues, drops those of the deleted
// ones, holds the same config records and reloads them, and serves.
func TestMetaCompaction(t *testing.T) {
	var reloads atomic.Int32
	c := newTestCluster(t, 3, func(c *testCluster) { c.effects, c.meta = configEffects(&reloads), 8 })
	ctx := context.Background()
	create := func(name string) {
		t.Helper()
		eventually(t, "create "+name, func() error {
			_, err := c.nodes[0].CreateQueue(ctx, sched.QueueSpec{Name: name})
			return err
		})
	}
	create("keep")
	c.converged("keep")
	firstKeep := c.nodes[0].meta.queues["keep"].group
	c.stop(2)

	for i := range 10 {
		create(fmt.Sprintf("q%d", i))
	}
	if err := c.nodes[0].DeleteQueue(ctx, "keep"); err != nil {
		t.Fatal(err)
	}
	create("keep") // the same name, another group
	for i := range 5 {
		if err := c.nodes[1].DeleteQueue(ctx, fmt.Sprintf("q%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		if err := c.nodes[0].ProposeConfig(ctx, fmt.Appendf(nil, "k%d=v%d", i%4, i)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 2 {
		c.nodes[i].mu.RLock()
		l := c.nodes[i].groups[MetaGroup].log
		c.nodes[i].mu.RUnlock()
		if first, _ := l.FirstIndex(); first <= c.meta {
			t.Fatalf("node %d: the meta log starts at %d after more than %d entries; want it compacted", i+1, first, 3*c.meta)
		}
	}
	c.start(2)

	want := []string{"keep", "q5", "q6", "q7", "q8", "q9"}
	eventually(t, "node 3 installs the meta snapshot", func() error {
		meta, groups := queueNames(c.nodes[2])
		if !slices.Equal(meta, want) || !slices.Equal(groups, want) {
			return fmt.Errorf("node 3 holds queues %v with groups %v; want %v", meta, groups, want)
		}
		return nil
	})
	if reloads.Load() == 0 {
		t.Fatal("node 3 installed a meta snapshot without Effects.Reload")
	}
	// The snapshot may be older than the last entries, which node 3
	// applies after it.
	eventually(t, "node 3 holds node 1's config and meta records", func() error {
		if a, b := c.records(0, "c/"), c.records(2, "c/"); !slices.Equal(a, b) || len(a) != 4 {
			return fmt.Errorf("config records: node 1 %v, node 3 %v", a, b)
		}
		if a, b := c.records(0, "m/"), c.records(2, "m/"); !slices.Equal(a, b) {
			return fmt.Errorf("meta records differ: node 1 %q, node 3 %q", a, b)
		}
		return nil
	})
	// Nothing is left of the first "keep" group's records on node 3.
	eventually(t, "the deleted group's records go", func() error {
		if recs := c.records(2, string(appliedKey(firstKeep)[:11])); len(recs) != 0 {
			return fmt.Errorf("node 3 keeps records of the deleted group %d: %q", firstKeep, recs)
		}
		return nil
	})
	if r := c.submit("q7", enqueueCmd("q7", "a", "b")); r.Err != nil {
		t.Fatal(r.Err)
	}
	c.converged("q7")
	c.converged("keep")

	// A restart opens from the compacted log and the installed state.
	c.stop(2)
	c.start(2)
	if meta, groups := queueNames(c.nodes[2]); !slices.Equal(meta, want) || !slices.Equal(groups, want) {
		t.Fatalf("after a restart node 3 holds %v with groups %v", meta, groups)
	}
	c.converged("q7")
}

// TestMetaSnapshotRecoveredAtOpen: a snapshot of the meta group durable
// in the log but not in the state (the node stopped between the two) is
// installed when the node opens, before the meta group's Raft node
// starts, and Effects.Reload follows.
func TestMetaSnapshotRecoveredAtOpen(t *testing.T) {
	var reloads atomic.Int32
	c := newTestCluster(t, 3, func(c *testCluster) { c.effects, c.meta = configEffects(&reloads), 4 })
	ctx := context.Background()
	for i := range 6 {
		eventually(t, "create", func() error {
			_, err := c.nodes[0].CreateQueue(ctx, sched.QueueSpec{Name: fmt.Sprintf("q%d", i)})
			if errors.Is(err, fault.ErrQueueExists) {
				return nil
			}
			return err
		})
	}
	c.nodes[2].mu.RLock()
	l := c.nodes[2].groups[MetaGroup].log
	c.nodes[2].mu.RUnlock()
	eventually(t, "node 3 compacts its meta log", func() error {
		if first, _ := l.FirstIndex(); first <= 1 {
			return errors.New("not yet")
		}
		return nil
	})
	si := l.Stored().GetMetadata().GetIndex()
	c.stop(2)
	// Back to before the snapshot: an applied index below it, and a
	// queue record missing.
	var b store.Batch
	b.Put(appliedKey(MetaGroup), binary.BigEndian.AppendUint64(nil, si-2))
	var gone []byte
	c.stores[2].Scan([]byte("m/q/"), prefixEnd("m/q/"), func(k, _ []byte) error {
		if gone == nil {
			gone = bytes.Clone(k)
		}
		return nil
	})
	b.Delete(gone)
	if err := c.stores[2].Apply(&b); err != nil {
		t.Fatal(err)
	}
	reloads.Store(0)
	c.start(2)
	if reloads.Load() == 0 {
		t.Fatal("no Effects.Reload after the meta snapshot was installed at open")
	}
	meta, _ := queueNames(c.nodes[2])
	if !slices.Contains(meta, strings.TrimPrefix(string(gone), "m/q/")) {
		t.Fatalf("node 3 holds %v after recovery; want %s back", meta, gone[4:])
	}
}

// FuzzDecodeMetaSnapshot: any data either decodes into ordered records
// under the prefixes, which encode back to the same data, or fails
// before reporting any record.
func FuzzDecodeMetaSnapshot(f *testing.F) {
	f.Add([]byte{metaSnapshotVersion})
	f.Add([]byte{metaSnapshotVersion, 3, 'm', '/', 'a', 1, 'x', 3, 'm', '/', 'b', 0})
	f.Add([]byte{metaSnapshotVersion, 3, 'c', '/', 'a', 200})
	f.Add([]byte{2})
	prefixes := []string{"m/", "c/", "k/"}
	f.Fuzz(func(t *testing.T, data []byte) {
		out := []byte{metaSnapshotVersion}
		var last []byte
		calls := 0
		err := decodeMetaSnapshot(data, prefixes, func(k, v []byte) {
			calls++
			if last != nil && bytes.Compare(last, k) >= 0 {
				t.Fatalf("key %q after %q", k, last)
			}
			last = bytes.Clone(k)
			out = appendRecord(out, k, v)
		})
		if err != nil {
			if calls != 0 {
				t.Fatalf("%d records reported before the error %v", calls, err)
			}
			return
		}
		if !bytes.Equal(out, data) {
			t.Fatalf("decoded records encode to % x, not % x", out, data)
		}
	})
}

// TestIdentityMovedOutOfConfig: a data directory whose identity record
// is where earlier versions kept it, under the runtime config's prefix,
// opens with the record moved out of it (and Effects.Reload, so that the
// config no longer shows it), and is still checked against it.
func TestIdentityMovedOutOfConfig(t *testing.T) {
	var reloads atomic.Int32
	c := newTestCluster(t, 1, func(c *testCluster) { c.effects = configEffects(&reloads) })
	c.stop(0)
	v, err := c.stores[0].Get(identityKey)
	if err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	b.Put(oldIdentityKey, v)
	b.Delete(identityKey)
	if err := c.stores[0].Apply(&b); err != nil {
		t.Fatal(err)
	}
	reloads.Store(0)
	c.start(0)
	if recs := c.records(0, "c/"); len(recs) != 0 {
		t.Fatalf("runtime config records after the move: %q", recs)
	}
	if got, err := c.stores[0].Get(identityKey); err != nil || !bytes.Equal(got, v) {
		t.Fatalf("identity record after the move: %q, %v", got, err)
	}
	if reloads.Load() == 0 {
		t.Fatal("no Effects.Reload after the identity record left the config's prefix")
	}
	c.stop(0)
	if _, err := checkIdentity(c.stores[0], "another", 1); err == nil {
		t.Fatal("a moved identity record accepts another cluster")
	}
}
