package raftlog

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"go.etcd.io/raft/v3"
	pb "go.etcd.io/raft/v3/raftpb"
	"google.golang.org/protobuf/proto"

	"github.com/fila-mq/fila/broker/internal/store"
)

func entry(i, term uint64, data string) *pb.Entry {
	e := &pb.Entry{Index: proto.Uint64(i), Term: proto.Uint64(term), Type: pb.EntryType_EntryNormal.Enum()}
	if data != "" {
		e.Data = []byte(data)
	}
	return e
}

// commit applies b to st and tells l its entries are durable.
func commit(t *testing.T, st *store.Mem, l *Log, b *store.Batch) {
	t.Helper()
	if err := st.Apply(b); err != nil {
		t.Fatal(err)
	}
	last, _ := l.LastIndex()
	l.Settled(last)
}

// sameView checks that l answers as the oracle does, for every index from
// below the first to beyond the last.
func sameView(t *testing.T, what string, l *Log, ms *raft.MemoryStorage) {
	t.Helper()
	f1, _ := l.FirstIndex()
	f2, _ := ms.FirstIndex()
	l1, _ := l.LastIndex()
	l2, _ := ms.LastIndex()
	if f1 != f2 || l1 != l2 {
		t.Fatalf("%s: first, last = %d, %d; want %d, %d", what, f1, l1, f2, l2)
	}
	for i := f1 - 1; i <= l1+1; i++ {
		t1, e1 := l.Term(i)
		t2, e2 := ms.Term(i)
		if t1 != t2 || !errors.Is(e1, e2) && (e1 != nil || e2 != nil) {
			t.Fatalf("%s: Term(%d) = %d, %v; want %d, %v", what, i, t1, e1, t2, e2)
		}
	}
	if l1 >= f1 {
		got, err := l.Entries(f1, l1+1, 1<<62)
		want, _ := ms.Entries(f1, l1+1, 1<<62)
		if err != nil || len(got) != len(want) {
			t.Fatalf("%s: Entries = %d, %v; want %d", what, len(got), err, len(want))
		}
		for j := range got {
			if !proto.Equal(got[j], want[j]) {
				t.Fatalf("%s: entry %d = %v; want %v", what, want[j].GetIndex(), got[j], want[j])
			}
		}
	}
	if _, err := l.Entries(f1-1, l1+1, 1<<62); f1 > 1 && !errors.Is(err, raft.ErrCompacted) {
		t.Fatalf("%s: Entries below first = %v; want ErrCompacted", what, err)
	}
}

// TestMatchesMemoryStorage appends (overwriting diverging tails), compacts
// and reopens at random, and checks after each step that the Log answers
// as raft's MemoryStorage does, and as it did before it was reopened from
// the store.
func TestMatchesMemoryStorage(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 1))
		st := store.NewMem()
		l, err := Open(st, 7)
		if err != nil {
			t.Fatal(err)
		}
		ms := raft.NewMemoryStorage()
		term := uint64(1)
		for step := range 200 {
			what := fmt.Sprintf("seed %d step %d", seed, step)
			var b store.Batch
			first, _ := ms.FirstIndex()
			last, _ := ms.LastIndex()
			switch r := rng.IntN(10); {
			case r < 6: // append, sometimes over a tail
				from := last + 1
				if last >= first && rng.IntN(3) == 0 {
					from = first + uint64(rng.IntN(int(last-first+1)))
					term++
				}
				n := 1 + rng.IntN(5)
				var ents []*pb.Entry
				for i := range n {
					ents = append(ents, entry(from+uint64(i), term, fmt.Sprint("d", step, i)))
				}
				if err := ms.Append(ents); err != nil {
					t.Fatal(err)
				}
				if err := l.Append(&b, ents); err != nil {
					t.Fatalf("%s: Append: %v", what, err)
				}
			case r < 8 && last > first: // compact
				i := first + uint64(rng.IntN(int(last-first)))
				cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
				if _, err := ms.CreateSnapshot(i, cs, []byte("snap")); err != nil {
					t.Fatal(err)
				}
				if err := ms.Compact(i); err != nil {
					t.Fatal(err)
				}
				if err := l.Compact(&b, i, cs, []byte("snap")); err != nil {
					t.Fatalf("%s: Compact: %v", what, err)
				}
			case r < 9 && rng.IntN(3) == 0: // a snapshot from the leader, beyond the log or within it
				term++
				snap := &pb.Snapshot{Data: []byte("leader"), Metadata: &pb.SnapshotMetadata{
					ConfState: &pb.ConfState{Voters: []uint64{1, 2, 3}}, Index: proto.Uint64(last + uint64(rng.IntN(3)) + 1), Term: proto.Uint64(term)}}
				if err := ms.ApplySnapshot(snap); err != nil {
					t.Fatal(err)
				}
				if _, err := l.ApplySnapshot(&b, snap); err != nil {
					t.Fatalf("%s: ApplySnapshot: %v", what, err)
				}
			default: // hard state
				hs := &pb.HardState{Term: proto.Uint64(term), Vote: proto.Uint64(2), Commit: proto.Uint64(last)}
				ms.SetHardState(hs)
				l.SetHardState(&b, hs)
			}
			sameView(t, what+" (before commit)", l, ms)
			commit(t, st, l, &b)
			sameView(t, what, l, ms)
			if rng.IntN(10) == 0 {
				if l, err = Open(st, 7); err != nil {
					t.Fatalf("%s: reopen: %v", what, err)
				}
				sameView(t, what+" (reopened)", l, ms)
				stored := 0
				st.Scan(l.entryKey(0), l.entryKey(^uint64(0)), func(k, v []byte) error { stored++; return nil })
				f, _ := l.FirstIndex()
				ll, _ := l.LastIndex()
				if stored != int(ll+1-f) {
					t.Fatalf("%s: %d entries stored; want %d (compacted and replaced ones deleted)", what, stored, ll+1-f)
				}
				hs1, cs1, _ := l.InitialState()
				hs2, _, _ := ms.InitialState()
				if !proto.Equal(hs1, hs2) && (hs1.GetTerm() != hs2.GetTerm() || hs1.GetVote() != hs2.GetVote() || hs1.GetCommit() != hs2.GetCommit()) {
					t.Fatalf("%s: reopened hard state %v; want %v", what, hs1, hs2)
				}
				snap, _ := ms.Snapshot()
				if snap.GetMetadata().GetIndex() > 0 && len(cs1.Voters) != 3 {
					t.Fatalf("%s: reopened conf state %v; want the snapshot's", what, cs1)
				}
			}
		}
	}
}

// TestAppendRefusesAGap: entries that do not follow the log are refused
// and change nothing.
func TestAppendRefusesAGap(t *testing.T) {
	l, _ := Open(store.NewMem(), 1)
	var b store.Batch
	if err := l.Append(&b, []*pb.Entry{entry(1, 1, "a")}); err != nil {
		t.Fatal(err)
	}
	if err := l.Append(&b, []*pb.Entry{entry(3, 1, "c")}); err == nil {
		t.Fatal("Append after a gap succeeded")
	}
	if err := l.Append(&b, []*pb.Entry{entry(2, 1, "b"), entry(4, 1, "d")}); err == nil {
		t.Fatal("Append of a run with a hole succeeded")
	}
	if last, _ := l.LastIndex(); last != 1 {
		t.Fatalf("LastIndex after refused appends = %d; want 1", last)
	}
}

// TestCommitAtLeast: the commit index rises to an applied index the log
// holds, never falls, and never passes the last entry.
func TestCommitAtLeast(t *testing.T) {
	l, _ := Open(store.NewMem(), 1)
	var b store.Batch
	l.Append(&b, []*pb.Entry{entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 1, "c")})
	l.SetHardState(&b, &pb.HardState{Term: proto.Uint64(1), Vote: proto.Uint64(1), Commit: proto.Uint64(1)})
	commitOf := func() uint64 {
		hs, _, _ := l.InitialState()
		return hs.GetCommit()
	}
	l.CommitAtLeast(2)
	if c := commitOf(); c != 2 {
		t.Fatalf("commit after CommitAtLeast(2) = %d; want 2", c)
	}
	l.CommitAtLeast(1)
	if c := commitOf(); c != 2 {
		t.Fatalf("commit after CommitAtLeast(1) = %d; want 2 (never lowered)", c)
	}
	l.CommitAtLeast(4)
	if c := commitOf(); c != 2 {
		t.Fatalf("commit after CommitAtLeast(4), beyond the last entry = %d; want 2", c)
	}
}

// TestOpenFindsAGap: a group whose stored entries skip an index is
// corrupt.
func TestOpenFindsAGap(t *testing.T) {
	st := store.NewMem()
	l, _ := Open(st, 1)
	var b store.Batch
	l.Append(&b, []*pb.Entry{entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 1, "c")})
	st.Apply(&b)
	var del store.Batch
	del.Delete(l.entryKey(2))
	st.Apply(&del)
	if _, err := Open(st, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with entry 2 missing = %v; want ErrCorrupt", err)
	}
	var bad store.Batch
	bad.Put(l.entryKey(2), []byte{0xff})
	st.Apply(&bad)
	if _, err := Open(st, 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open with entry 2 undecodable = %v; want ErrCorrupt", err)
	}
}

// TestGroupsApart: two groups in one store do not see each other.
func TestGroupsApart(t *testing.T) {
	st := store.NewMem()
	a, _ := Open(st, 1)
	b, _ := Open(st, 2)
	var batch store.Batch
	a.Append(&batch, []*pb.Entry{entry(1, 1, "a1"), entry(2, 1, "a2")})
	b.Append(&batch, []*pb.Entry{entry(1, 5, "b1")})
	st.Apply(&batch)
	a, _ = Open(st, 1)
	b, _ = Open(st, 2)
	if la, _ := a.LastIndex(); la != 2 {
		t.Fatalf("group 1 last = %d; want 2", la)
	}
	if tb, _ := b.Term(1); tb != 5 {
		t.Fatalf("group 2 term of 1 = %d; want 5", tb)
	}
}

// cluster is three raft.RawNodes over Logs, each with its own store,
// exchanging messages in memory.
type cluster struct {
	t      *testing.T
	stores map[uint64]*store.Mem
	logs   map[uint64]*Log
	nodes  map[uint64]*raft.RawNode
	down   map[uint64]bool
	// applied is each node's committed normal entries' data, in order.
	applied map[uint64][][]byte
}

func (c *cluster) start(id uint64, bootstrap bool) {
	c.t.Helper()
	l, err := Open(c.stores[id], 1)
	if err != nil {
		c.t.Fatal(err)
	}
	hs, _, _ := l.InitialState()
	rn, err := raft.NewRawNode(&raft.Config{ID: id, ElectionTick: 10, HeartbeatTick: 1, Storage: l,
		MaxSizePerMsg: 1 << 20, MaxInflightMsgs: 256, CheckQuorum: true, PreVote: true, Applied: hs.GetCommit(),
		Logger: discard{}})
	if err != nil {
		c.t.Fatal(err)
	}
	if bootstrap {
		if err := rn.Bootstrap([]raft.Peer{{ID: 1}, {ID: 2}, {ID: 3}}); err != nil {
			c.t.Fatal(err)
		}
	}
	c.logs[id], c.nodes[id] = l, rn
	c.down[id] = false
}

// step runs one round: each live node's Ready is persisted in one batch,
// its messages delivered, its committed entries applied.
func (c *cluster) step() {
	c.t.Helper()
	var msgs []*pb.Message
	for id := uint64(1); id <= 3; id++ {
		rn := c.nodes[id]
		if c.down[id] || !rn.HasReady() {
			continue
		}
		rd := rn.Ready()
		l := c.logs[id]
		var b store.Batch
		if !raft.IsEmptySnap(rd.Snapshot) {
			if _, err := l.ApplySnapshot(&b, rd.Snapshot); err != nil {
				c.t.Fatal(err)
			}
		}
		if err := l.Append(&b, rd.Entries); err != nil {
			c.t.Fatal(err)
		}
		if rd.HardState != nil && !raft.IsEmptyHardState(rd.HardState) {
			l.SetHardState(&b, rd.HardState)
		}
		if err := c.stores[id].Apply(&b); err != nil {
			c.t.Fatal(err)
		}
		if n := len(rd.Entries); n > 0 {
			l.Settled(rd.Entries[n-1].GetIndex())
		}
		msgs = append(msgs, rd.Messages...)
		for _, e := range rd.CommittedEntries {
			if e.GetType() == pb.EntryType_EntryNormal && len(e.Data) > 0 {
				c.applied[id] = append(c.applied[id], e.Data)
			}
			if e.GetType() == pb.EntryType_EntryConfChange {
				var cc pb.ConfChange
				if err := proto.Unmarshal(e.Data, &cc); err != nil {
					c.t.Fatal(err)
				}
				rn.ApplyConfChange(&cc)
			}
		}
		rn.Advance(rd)
	}
	for _, m := range msgs {
		if to := m.GetTo(); !c.down[to] && !c.down[m.GetFrom()] {
			c.nodes[to].Step(m)
		}
	}
}

func (c *cluster) leader() uint64 {
	for id, rn := range c.nodes {
		if !c.down[id] && rn.BasicStatus().RaftState == raft.StateLeader {
			return id
		}
	}
	return 0
}

// until ticks and steps until cond holds, or fails after many rounds.
func (c *cluster) until(what string, cond func() bool) {
	c.t.Helper()
	for range 2000 {
		if cond() {
			return
		}
		for id, rn := range c.nodes {
			if !c.down[id] {
				rn.Tick()
			}
		}
		for range 5 {
			c.step()
		}
	}
	c.t.Fatalf("gave up waiting for %s", what)
}

// TestRaftOverLogs runs three raft nodes over Logs in their stores:
// proposals commit on every node in the same order; a follower stopped
// and restarted from its store catches up; after the leader stops, a new
// one is elected and the log goes on.
func TestRaftOverLogs(t *testing.T) {
	c := &cluster{t: t, stores: map[uint64]*store.Mem{}, logs: map[uint64]*Log{}, nodes: map[uint64]*raft.RawNode{},
		down: map[uint64]bool{}, applied: map[uint64][][]byte{}}
	for id := uint64(1); id <= 3; id++ {
		c.stores[id] = store.NewMem()
		c.start(id, true)
	}
	c.until("a leader", func() bool { return c.leader() != 0 })
	propose := func(from, to int) {
		for i := from; i < to; i++ {
			ld := c.leader()
			if err := c.nodes[ld].Propose([]byte(fmt.Sprint("m", i))); err != nil {
				t.Fatal(err)
			}
			c.step()
		}
	}
	applied := func(id uint64, n int) func() bool { return func() bool { return len(c.applied[id]) >= n } }

	propose(0, 50)
	for id := uint64(1); id <= 3; id++ {
		c.until(fmt.Sprint("node ", id, " to apply 50"), applied(id, 50))
	}

	// A follower goes down, misses entries, and restarts from its store.
	f := c.leader()%3 + 1
	c.down[f] = true
	propose(50, 100)
	c.start(f, false)
	c.until("the restarted follower to catch up", func() bool {
		last, _ := c.logs[f].LastIndex()
		ll, _ := c.logs[c.leader()].LastIndex()
		return c.leader() != 0 && last == ll
	})

	// The leader goes down: another is elected, and proposals commit.
	old := c.leader()
	c.down[old] = true
	c.until("a new leader", func() bool { ld := c.leader(); return ld != 0 && ld != old })
	before := len(c.applied[c.leader()])
	propose(100, 120)
	ld := c.leader()
	c.until("the new leader to apply 20 more", applied(ld, before+20))

	// Every live node's log holds the same entries.
	var logs [][]*pb.Entry
	for id := uint64(1); id <= 3; id++ {
		if c.down[id] {
			continue
		}
		c.until(fmt.Sprint("node ", id, " to catch up"), func() bool {
			a, _ := c.logs[id].LastIndex()
			b, _ := c.logs[ld].LastIndex()
			return a == b
		})
		last, _ := c.logs[id].LastIndex()
		ents, err := c.logs[id].Entries(1, last+1, 1<<62)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, ents)
	}
	for i := range logs[0] {
		if !bytes.Equal(logs[0][i].Data, logs[1][i].Data) || logs[0][i].GetTerm() != logs[1][i].GetTerm() {
			t.Fatalf("entry %d differs between the live nodes", i+1)
		}
	}
}

type discard struct{}

func (discard) Debug(...any)              {}
func (discard) Debugf(string, ...any)     {}
func (discard) Error(...any)              {}
func (discard) Errorf(string, ...any)     {}
func (discard) Info(...any)               {}
func (discard) Infof(string, ...any)      {}
func (discard) Warning(...any)            {}
func (discard) Warningf(string, ...any)   {}
func (discard) Fatal(v ...any)            { panic(fmt.Sprint(v...)) }
func (discard) Fatalf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }
func (discard) Panic(v ...any)            { panic(fmt.Sprint(v...)) }
func (discard) Panicf(f string, v ...any) { panic(fmt.Sprintf(f, v...)) }

// FuzzDecode: stored entry, hard state and snapshot values decode or fail
// with an error, never a panic, and what decodes encodes to a value that
// decodes the same.
func FuzzDecode(f *testing.F) {
	f.Add(appendEntryValue(nil, entry(3, 2, "data")))
	f.Add(appendHardState(nil, &pb.HardState{Term: proto.Uint64(5), Vote: proto.Uint64(2), Commit: proto.Uint64(9)}))
	f.Add(appendSnapshot(nil, &pb.Snapshot{Data: []byte("x"), Metadata: &pb.SnapshotMetadata{
		ConfState: &pb.ConfState{Voters: []uint64{1, 2}}, Index: proto.Uint64(4), Term: proto.Uint64(1)}}))
	f.Fuzz(func(t *testing.T, v []byte) {
		if typ, term, data, err := decodeEntryValue(v); err == nil {
			e := &pb.Entry{Index: proto.Uint64(1), Term: proto.Uint64(term), Type: typ.Enum(), Data: data}
			typ2, term2, data2, err := decodeEntryValue(appendEntryValue(nil, e))
			if err != nil || typ2 != typ || term2 != term || !bytes.Equal(data2, data) {
				t.Fatalf("entry value %x does not round-trip: %v", v, err)
			}
		}
		if hs, err := decodeHardState(v); err == nil {
			if _, err := decodeHardState(appendHardState(nil, hs)); err != nil {
				t.Fatalf("hard state %v does not round-trip: %v", hs, err)
			}
		}
		if s, err := decodeSnapshot(v); err == nil {
			if _, err := decodeSnapshot(appendSnapshot(nil, s)); err != nil {
				t.Fatalf("snapshot does not round-trip: %v", err)
			}
		}
	})
}

// TestSnapshotSource: a log compacted with no data sends what its source
// makes, while Stored keeps the compaction's metadata; a received
// snapshot is stored with its data, and survives a reopen.
func TestSnapshotSource(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	l, err := Open(st, 4)
	if err != nil {
		t.Fatal(err)
	}
	var b store.Batch
	if err := l.Append(&b, []*pb.Entry{entry(1, 1, "a"), entry(2, 1, "b"), entry(3, 2, "c")}); err != nil {
		t.Fatal(err)
	}
	commit(t, st, l, &b)
	cs := &pb.ConfState{Voters: []uint64{1, 2, 3}}
	if err := l.Compact(&b, 2, cs, nil); err != nil {
		t.Fatal(err)
	}
	commit(t, st, l, &b)
	if s := l.Stored(); s.GetMetadata().GetIndex() != 2 || s.Data != nil {
		t.Fatalf("stored snapshot at %d with %d bytes; want 2 with none", s.GetMetadata().GetIndex(), len(s.Data))
	}
	made := &pb.Snapshot{Data: []byte("image at 3"), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(3), Term: proto.Uint64(2), ConfState: cs}}
	l.SetSource(func() (*pb.Snapshot, error) { return made, nil })
	if s, err := l.Snapshot(); err != nil || s != made {
		t.Fatalf("Snapshot() = %v, %v; want the source's", s, err)
	}
	if first, _ := l.FirstIndex(); first != 3 {
		t.Fatalf("FirstIndex = %d; want 3", first)
	}

	got := &pb.Snapshot{Data: []byte("from the leader"), Metadata: &pb.SnapshotMetadata{Index: proto.Uint64(9), Term: proto.Uint64(3), ConfState: cs}}
	if _, err := l.ApplySnapshot(&b, got); err != nil {
		t.Fatal(err)
	}
	commit(t, st, l, &b)
	again, err := Open(st, 4)
	if err != nil {
		t.Fatal(err)
	}
	if s := again.Stored(); s.GetMetadata().GetIndex() != 9 || string(s.Data) != "from the leader" {
		t.Fatalf("reopened: stored snapshot at %d with %q", s.GetMetadata().GetIndex(), s.Data)
	}
	if first, _ := again.FirstIndex(); first != 10 {
		t.Fatalf("reopened: FirstIndex = %d; want 10", first)
	}
}
