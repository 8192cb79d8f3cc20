package shard

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched"
	"github.com/fila-mq/fila/broker/internal/store"
)

// snapshotOf encodes a snapshot of queue at index with image and records.
func snapshotOf(index uint64, image []byte, records ...[2]string) []byte {
	b := []byte{snapshotVersion}
	b = binary.AppendUvarint(b, index)
	b = binary.AppendUvarint(b, uint64(len(image)))
	b = append(b, image...)
	for _, r := range records {
		b = binary.AppendUvarint(b, uint64(len(r[0])))
		b = append(b, r[0]...)
		b = binary.AppendUvarint(b, uint64(len(r[1])))
		b = append(b, r[1]...)
	}
	return b
}

// snapshotData returns the snapshot of queue's replica in st, with the
// image stored under imageKey, as a leader streams it.
func snapshotData(st Storage, queue string, imageKey []byte) (uint64, []byte, error) {
	index, image, found, err := LoadImage(st, imageKey)
	if err != nil {
		return 0, nil, err
	}
	if !found {
		return 0, nil, fmt.Errorf("%w: no image of queue %s", ErrBadSnapshot, queue)
	}
	var buf bytes.Buffer
	if err := WriteSnapshot(&buf, st, queue, index, image); err != nil {
		return 0, nil, err
	}
	return index, buf.Bytes(), nil
}

// snapshot is a decoded snapshot's data.
type snapshot struct {
	index   uint64
	image   []byte
	records [][2][]byte
}

// decodeSnapshot decodes a whole snapshot of queue.
func decodeSnapshot(queue string, data []byte) (*snapshot, error) {
	r, err := readSnapshot(queue, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	s := &snapshot{index: r.index, image: r.image}
	for {
		k, v, err := r.next()
		if err == io.EOF {
			return s, nil
		}
		if err != nil {
			return nil, err
		}
		s.records = append(s.records, [2][]byte{bytes.Clone(k), bytes.Clone(v)})
	}
}

// TestSnapshotData: a snapshot holds the stored image and every record of
// the queue's key ranges, and nothing of another queue; it decodes to
// them, and a record outside the queue's ranges is refused.
func TestSnapshotData(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	var b store.Batch
	own := sched.QueueRanges("jobs")
	other := sched.QueueRanges("jobs2")
	b.Put(append(own[2].Start, "m1"...), []byte("payload"))
	b.Put(own[0].Start, []byte("definition"))
	b.Put(append(other[2].Start, "m1"...), []byte("not mine"))
	b.Put([]byte("image"), append(binary.BigEndian.AppendUint64(nil, 42), "IMG"...))
	if err := st.Apply(&b); err != nil {
		t.Fatal(err)
	}
	index, data, err := snapshotData(st, "jobs", []byte("image"))
	if err != nil || index != 42 {
		t.Fatalf("snapshotData = %d, %v", index, err)
	}
	s, err := decodeSnapshot("jobs", data)
	if err != nil {
		t.Fatal(err)
	}
	if s.index != 42 || string(s.image) != "IMG" || len(s.records) != 2 {
		t.Fatalf("decoded index %d image %q, %d records; want 42, IMG, 2", s.index, s.image, len(s.records))
	}
	if _, err := decodeSnapshot("jobs2", data); !errors.Is(err, ErrBadSnapshot) {
		t.Errorf("decoded as another queue's: %v; want ErrBadSnapshot", err)
	}
	if _, _, err := snapshotData(st, "jobs", []byte("none")); !errors.Is(err, ErrBadSnapshot) {
		t.Errorf("snapshotData without an image: %v; want ErrBadSnapshot", err)
	}
}

// TestCheckSnapshot: a receiver's check reads a whole snapshot and returns
// its index; data cut short is a bad snapshot, and a failing reader's
// error comes back as itself, not as bad data.
func TestCheckSnapshot(t *testing.T) {
	img := sched.New(sched.Config{}).AppendImage(nil)
	r := sched.QueueRanges("q")
	data := snapshotOf(9, img, [2]string{string(r[2].Start) + "id", "body"})
	if index, err := CheckSnapshot("q", bytes.NewReader(data)); err != nil || index != 9 {
		t.Fatalf("CheckSnapshot = %d, %v; want 9", index, err)
	}
	// Cut anywhere but between records, it is refused.
	between := len(snapshotOf(9, img))
	for cut := 1; cut < len(data); cut++ {
		if _, err := CheckSnapshot("q", bytes.NewReader(data[:cut])); !errors.Is(err, ErrBadSnapshot) && cut != between {
			t.Fatalf("cut at %d of %d: %v; want ErrBadSnapshot", cut, len(data), err)
		}
	}
	broken := errors.New("connection lost")
	_, err := CheckSnapshot("q", io.MultiReader(bytes.NewReader(data[:len(data)-3]), iotest.ErrReader(broken)))
	if !errors.Is(err, broken) || errors.Is(err, ErrBadSnapshot) {
		t.Errorf("a reader that fails: %v; want its error, not ErrBadSnapshot", err)
	}
}

func FuzzDecodeSnapshot(f *testing.F) {
	r := sched.QueueRanges("q")
	f.Add(snapshotOf(7, []byte("image"), [2]string{string(r[2].Start) + "id", "body"}, [2]string{string(r[0].Start), "def"}))
	f.Add(snapshotOf(0, nil))
	f.Add([]byte{snapshotVersion, 0x80})
	f.Add(snapshotOf(1, nil, [2]string{"elsewhere", "x"}))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := decodeSnapshot("q", data)
		if err != nil {
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error %v does not wrap ErrBadSnapshot", err)
			}
			if _, err := CheckSnapshot("q", bytes.NewReader(data)); !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("CheckSnapshot of data that does not decode: %v; want ErrBadSnapshot", err)
			}
			return
		}
		var recs [][2]string
		for _, kv := range s.records {
			in := false
			for _, rg := range r {
				if bytes.Compare(kv[0], rg.Start) >= 0 && bytes.Compare(kv[0], rg.End) < 0 {
					in = true
				}
			}
			if !in {
				t.Fatalf("record %q outside the queue's ranges", kv[0])
			}
			recs = append(recs, [2]string{string(kv[0]), string(kv[1])})
		}
		// What decodes encodes, and decodes again to the same.
		again, err := decodeSnapshot("q", snapshotOf(s.index, s.image, recs...))
		if err != nil || again.index != s.index || !bytes.Equal(again.image, s.image) || len(again.records) != len(recs) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, s)
		}
		// The receiver's check agrees.
		if index, err := CheckSnapshot("q", bytes.NewReader(data)); err != nil || index != s.index {
			t.Fatalf("CheckSnapshot = %d, %v; want %d", index, err, s.index)
		}
	})
}

// TestImageTooLarge: a replica whose image would not fit in a store
// record writes none and goes on applying entries, rather than failing
// its storage group and stopping; with room, it writes one.
func TestImageTooLarge(t *testing.T) {
	st := store.NewMem()
	defer st.Close()
	rep := &Replication{
		Queue: "q", NodeID: 1, AppliedKey: []byte("applied"), ImageKey: []byte("image"), ImageEvery: 1,
		Propose:   func([]byte, func()) {},
		NotLeader: func() error { return errors.New("not the leader") },
	}
	sh, err := Open(Config{Logger: quiet, Replication: rep}, st)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	done := make(chan Result, 1)
	if err := sh.Init(&CreateQueue{Spec: sched.QueueSpec{Name: "q"}}, func(r Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.Err != nil {
		t.Fatal(r.Err)
	}
	commit := func(index uint64) {
		t.Helper()
		cmds := []Command{&Tick{Now: sched.Time(index)}, &Enqueue{Items: []sched.EnqueueItem{{Queue: "q", Msg: sched.Message{ID: [16]byte{byte(index)}, Body: []byte("x"), PayloadSize: 1}}}}, &Deliver{}}
		sh.Commit([]Entry{{Index: index, Data: appendEntry(nil, 2, index, cmds)}})
		for {
			if a, err := Applied(st, rep.AppliedKey); err != nil || a >= index {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if err := sh.Err(); err != nil {
			t.Fatalf("entry %d: %v", index, err)
		}
	}
	defer maxImageSize.Store(maxImageSize.Load())
	maxImageSize.Store(10)
	for i := uint64(1); i <= 3; i++ {
		commit(i)
	}
	if _, _, found, _ := LoadImage(st, rep.ImageKey); found {
		t.Fatal("an image larger than the limit was stored")
	}
	maxImageSize.Store(store.MaxValueSize - 8)
	commit(4)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		index, _, found, err := LoadImage(st, rep.ImageKey)
		if err != nil {
			t.Fatal(err)
		}
		if found && index == 4 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no image at entry 4 with room for it")
		}
	}
}

// loopback is a replicated shard whose group has no other replica:
// every proposal commits at once.
type loopback struct {
	*Shard
	st    *store.Mem
	rep   *Replication
	mu    sync.Mutex
	index uint64
	// drop, when set, says whether Raft drops a proposal.
	drop atomic.Pointer[func() bool]
}

func openLoopback(t *testing.T) *loopback {
	t.Helper()
	l := &loopback{st: store.NewMem()}
	t.Cleanup(func() { l.st.Close() })
	l.rep = &Replication{
		Queue: "q", NodeID: 1, AppliedKey: []byte("applied"), ImageKey: []byte("image"), ImageEvery: 1,
		Propose: func(data []byte, dropped func()) {
			if f := l.drop.Load(); f != nil && (*f)() {
				dropped()
				return
			}
			l.commit(data)
		},
		NotLeader: func() error { return errors.New("not the leader") },
	}
	sh, err := Open(Config{Logger: quiet, Replication: l.rep}, l.st)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sh.Close)
	l.Shard = sh
	return l
}

// commit appends data to the log and commits it.
func (l *loopback) commit(data []byte) uint64 {
	l.mu.Lock()
	l.index++
	e := Entry{Index: l.index, Data: data}
	l.mu.Unlock()
	l.Commit([]Entry{e})
	return e.Index
}

// last returns the index of the last entry.
func (l *loopback) last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.index
}

// waitApplied waits until the replica's state at index is durable.
func (l *loopback) waitApplied(t *testing.T, index uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		if a, err := Applied(l.st, l.rep.AppliedKey); err == nil && a >= index {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("entry %d not applied", index)
		}
	}
}

func (l *loopback) stats(t *testing.T) sched.QueueStats {
	t.Helper()
	ch := make(chan Result, 1)
	if err := l.QueueStats(context.Background(), "q", 0, func(r Result) { ch <- r }); err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.Err != nil {
		t.Fatal(r.Err)
	}
	return r.Stats
}

// TestNewLeaderExpiresLeases: a replica that takes over the leadership
// of its group proposes the expiry of the leases it holds when they fall
// due, though nothing else happens in the group, also when Raft drops its
// proposals for a while (a leadership transfer under way). As a follower
// it applied the deliveries without arming its timer (the leader expires
// leases), and neither taking over nor a dropped proposal changes a
// deadline, which is what armed it: the leases stayed held until some
// client request came. (The test watches the log, not the replica: any
// request to the replica would arm its timer.)
func TestNewLeaderExpiresLeases(t *testing.T) {
	for _, tc := range []struct {
		name string
		drop bool
	}{{"take-over", false}, {"proposals dropped", true}} {
		t.Run(tc.name, func(t *testing.T) {
			l := openLoopback(t)
			done := make(chan Result, 1)
			spec := sched.QueueSpec{Name: "q", VisibilityTimeout: 300 * time.Millisecond}
			if err := l.Init(&CreateQueue{Spec: spec}, func(r Result) { done <- r }); err != nil {
				t.Fatal(err)
			}
			if r := <-done; r.Err != nil {
				t.Fatal(r.Err)
			}
			// Node 2 leads: a message is delivered to a subscription
			// of node 2's, whose consumer then goes, leaving the lease
			// held.
			now := time.Now()
			last := l.commit(appendEntry(nil, 2, 1, []Command{
				&Tick{Now: sched.Time(now.UnixNano())},
				&Enqueue{Items: []sched.EnqueueItem{{Queue: "q", Msg: sched.Message{ID: [16]byte{1}, Body: []byte("x"), PayloadSize: 1}}}},
				&Subscribe{Sub: 7, Queue: "q", Credit: 1},
				&Deliver{},
				&Unsubscribe{Sub: 7},
				&Deliver{},
			}))
			l.waitApplied(t, last)
			if s := l.stats(t); s.Leased != 1 {
				t.Fatalf("after the delivery: %+v, want 1 leased", s)
			}

			// This replica takes over before the lease is due. Its
			// first proposal commits at once, or Raft drops its
			// proposals until the lease is due.
			due := now.Add(spec.VisibilityTimeout)
			if tc.drop {
				drop := func() bool { return time.Now().Before(due) }
				l.drop.Store(&drop)
			} else {
				last++
			}
			l.SetLeader(true)
			for deadline := time.Now().Add(10 * time.Second); l.last() <= last; time.Sleep(10 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatal("10 s after a 300 ms lease, the new leader has proposed nothing")
				}
			}
			l.waitApplied(t, l.last())
			if s := l.stats(t); s.Leased != 0 || s.Ready+s.Delayed != 1 {
				t.Fatalf("under the new leader, after the lease's deadline: %+v, want it expired", s)
			}
		})
	}
}

// TestInstallInGroups: a snapshot whose records exceed one storage group
// is installed over several, the image last, over a replica with records
// of its own, and the replica ends with the state it was sent, in memory
// and in its store.
func TestInstallInGroups(t *testing.T) {
	old := openLoopback(t)
	done := make(chan Result, 1)
	if err := old.Init(&CreateQueue{Spec: sched.QueueSpec{Name: "q"}}, func(r Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.Err != nil {
		t.Fatal(r.Err)
	}
	items := make([]sched.EnqueueItem, 50)
	for i := range items {
		items[i] = sched.EnqueueItem{Queue: "q", Msg: sched.Message{ID: [16]byte{byte(i + 1)}, Body: bytes.Repeat([]byte{'x'}, 100), PayloadSize: 100, FairnessKey: string(rune('a' + i%5))}}
	}
	last := old.commit(appendEntry(nil, 2, 1, []Command{&Tick{Now: 1}, &Enqueue{Items: items}, &Deliver{}}))
	old.waitApplied(t, last)
	var data []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		index, d, err := snapshotData(old.st, "q", old.rep.ImageKey)
		if err == nil && index == last {
			data = d
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no image at entry %d: %v", last, err)
		}
	}

	defer func(n int) { installGroup = n }(installGroup)
	installGroup = 1000 // some ten groups
	// The replica installed over holds records of its own, which go.
	l := openLoopback(t)
	if err := l.Init(&CreateQueue{Spec: sched.QueueSpec{Name: "q"}}, func(r Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.Err != nil {
		t.Fatal(r.Err)
	}
	stale := make([]sched.EnqueueItem, 30)
	for i := range stale {
		stale[i] = sched.EnqueueItem{Queue: "q", Msg: sched.Message{ID: [16]byte{0xee, byte(i)}, Body: bytes.Repeat([]byte{'y'}, 100), PayloadSize: 100}}
	}
	if err := l.Init(&Enqueue{Items: stale}, func(r Result) { done <- r }); err != nil {
		t.Fatal(err)
	}
	if r := <-done; r.Err != nil {
		t.Fatal(r.Err)
	}
	if s := l.stats(t); s.Ready != 30 {
		t.Fatalf("before the install: %+v, want 30 ready", s)
	}
	l.index = last
	l.Install(last, io.NopCloser(bytes.NewReader(data)))
	l.waitApplied(t, last)
	want, _, err := old.QueueDigest("q")
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := l.QueueDigest("q")
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatal("the installed replica's state differs from the one it was sent")
	}
	if s := l.stats(t); s.Ready != 50 {
		t.Fatalf("installed: %+v, want 50 ready", s)
	}
	// The store holds the records sent, and none of its own.
	records := func(st *store.Mem) map[string]string {
		m := map[string]string{}
		for _, rg := range sched.QueueRanges("q") {
			st.Scan(rg.Start, rg.End, func(k, v []byte) error { m[string(k)] = string(v); return nil })
		}
		return m
	}
	if got, want := records(l.st), records(old.st); !maps.Equal(got, want) {
		t.Fatalf("the installed replica's store holds %d records; want the %d sent", len(got), len(want))
	}
	// The records are in the store: the replica reopened from it agrees.
	l.Close()
	sh, err := Open(Config{Logger: quiet, Replication: l.rep}, l.st)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	if got, _, err := sh.QueueDigest("q"); err != nil || got != want {
		t.Fatalf("reopened after the install: differs (%v)", err)
	}
}
