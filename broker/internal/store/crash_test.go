package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

var seedFlag = flag.Uint64("store.seed", 0, "seed for randomized store tests (0: from the clock)")

// seed returns the seed of a randomized test, logging it so that a failure
// can be replayed with -store.seed.
func seed(t testing.TB) uint64 {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -store.seed=%d)", s, s)
	return s
}

// workload is a sequence of groups and the state after each prefix of it.
type workload struct {
	groups []*Batch
	states []map[string]string // states[k]: after groups[:k]
}

func newWorkload(rng *rand.Rand, n, keys, maxValue int) *workload {
	return newWorkloadOf(rng, n, keys, maxValue, false)
}

// newRangeWorkload is newWorkload with range deletes, and with half the
// keys shaped as the scheduler's (prefix, 0x00, 16-byte id), which the
// index keeps apart (index.go).
func newRangeWorkload(rng *rand.Rand, n, keys, maxValue int) *workload {
	return newWorkloadOf(rng, n, keys, maxValue, true)
}

// idKey returns the i-th id key of the range workloads, under one of
// three prefixes.
func idKey(i int) string { return idKeyIn([]string{"m/q", "m/q.dlq", "s/st/q"}[i%3], i) }

// idKeyIn returns the id key of prefix with the ID i, big endian.
func idKeyIn(prefix string, i int) string {
	var id [idLen]byte
	binary.BigEndian.PutUint64(id[8:], uint64(i))
	return prefix + "\x00" + string(id[:])
}

// newWorkloadOf makes n groups of up to six mutations each over keys keys
// and values of up to maxValue bytes; with ranges, as newRangeWorkload.
// Without, it draws from rng exactly as newWorkload always did, so that
// the tests with fixed seeds keep their layouts.
func newWorkloadOf(rng *rand.Rand, n, keys, maxValue int, ranges bool) *workload {
	w := &workload{states: []map[string]string{{}}}
	key := func() string {
		if ranges && rng.IntN(2) == 0 {
			return idKey(rng.IntN(keys))
		}
		return fmt.Sprintf("k%03d", rng.IntN(keys))
	}
	for g := range n {
		b := new(Batch)
		st := maps.Clone(w.states[g])
		for i := range 1 + rng.IntN(6) {
			if ranges && rng.IntN(6) == 0 {
				start, end := key(), key()
				if rng.IntN(2) == 0 { // every id key of a prefix
					p := []string{"m/q", "m/q.dlq", "s/st/q"}[rng.IntN(3)]
					start, end = p+"\x00", p+"\x01"
				}
				b.DeleteRange([]byte(start), []byte(end))
				for k := range st {
					if k >= start && k < end {
						delete(st, k)
					}
				}
				continue
			}
			k := key()
			if rng.IntN(4) == 0 {
				b.Delete([]byte(k))
				delete(st, k)
				continue
			}
			v := fmt.Sprintf("g%d.%d:", g, i)
			v += strings.Repeat(string(rune('a'+g%26)), rng.IntN(maxValue+1))
			b.Put([]byte(k), []byte(v))
			st[k] = v
		}
		w.groups = append(w.groups, b)
		w.states = append(w.states, st)
	}
	return w
}

// matchPrefix returns the k in [lo, hi] such that got is the state after
// the first k groups, or -1.
func (w *workload) matchPrefix(got map[string]string, lo, hi int) int {
	for k := hi; k >= lo; k-- {
		if maps.Equal(got, w.states[k]) {
			return k
		}
	}
	return -1
}

func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o640); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

func lastSegment(t testing.TB, dir string) string {
	t.Helper()
	indexes, err := listSegments(dir)
	if err != nil || len(indexes) == 0 {
		t.Fatalf("listSegments(%q) = %v, %v", dir, indexes, err)
	}
	return filepath.Join(dir, segmentName(indexes[len(indexes)-1]))
}

// TestTornGroup writes durable groups, then one more, and tears that last
// record at every byte: cut there, or zeroed from there to its end. Open
// must recover exactly the groups before it, never part of it.
func TestTornGroup(t *testing.T) {
	tornGroup(t, newWorkload(rand.New(rand.NewPCG(1, 2)), 20, 10, 30))
}

// TestTornRangeDelete is TestTornGroup with range deletes and id keys, the
// torn last group holding a range delete of a whole prefix and a put into
// that prefix after it.
func TestTornRangeDelete(t *testing.T) {
	w := newRangeWorkload(rand.New(rand.NewPCG(7, 8)), 20, 10, 30)
	last := w.groups[19]
	last.DeleteRange([]byte("m/q\x00"), []byte("m/q\x01"))
	last.Put([]byte(idKey(3)), []byte("after the range"))
	w.states[20] = stateOf(w.groups)
	if _, ok := w.states[20][idKey(3)]; !ok {
		t.Fatal("the put after the range delete is missing from the model")
	}
	tornGroup(t, w)
}

// tornGroup applies the first 19 groups of w, then tears the 20th at every
// byte (TestTornGroup).
func tornGroup(t *testing.T, w *workload) {
	base := t.TempDir()
	d := openT(t, base, Options{}, false)
	for _, b := range w.groups[:19] {
		if err := d.Apply(b); err != nil {
			t.Fatal(err)
		}
	}
	start := d.segs[0].size
	// The last group's commit is torn: it never became durable, so the
	// durable-position marker never recorded it. Keep the marker from
	// before it.
	mk, err := os.ReadFile(filepath.Join(base, markerName))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Apply(w.groups[19]); err != nil {
		t.Fatal(err)
	}
	end := d.segs[0].size
	d.Close()
	if err := os.WriteFile(filepath.Join(base, markerName), mk, 0o640); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"cut", "zero"} {
		for at := start; at < end; at++ {
			dir := copyDir(t, base)
			path := lastSegment(t, dir)
			switch mode {
			case "cut":
				if err := os.Truncate(path, at); err != nil {
					t.Fatal(err)
				}
			case "zero":
				data, _ := os.ReadFile(path)
				clear(data[at:end])
				os.WriteFile(path, data, 0o640)
			}
			d, err := Open(dir, Options{Logger: quiet})
			if err != nil {
				t.Fatalf("%s at %d: Open = %v; want the torn group cut", mode, at, err)
			}
			if diff := diffState(dump(t, d), w.states[19]); diff != "" {
				t.Fatalf("%s at %d: recovered state differs from the 19 durable groups: %s", mode, at, diff)
			}
			// The cut is durable: the log appends after it.
			if err := d.Apply(w.groups[19]); err != nil {
				t.Fatal(err)
			}
			d.Close()
			d, err = Open(dir, Options{Logger: quiet})
			if err != nil {
				t.Fatalf("%s at %d: reopen after append = %v", mode, at, err)
			}
			if diff := diffState(dump(t, d), w.states[20]); diff != "" {
				t.Fatalf("%s at %d: after reapplying: %s", mode, at, diff)
			}
			d.Close()
		}
	}
}

// TestCrashBeforeSync crashes a commit after its write and before its
// fsync, then models what the disk may hold of the unsynced bytes: all of
// them, a prefix, a lost block in the middle, a prefix and garbage. Open
// must hold every acknowledged group and be the state after some prefix of
// the submitted groups. Half the workloads hold range deletes.
func TestCrashBeforeSync(t *testing.T) {
	rng := rand.New(rand.NewPCG(seed(t), 0))
	beyond := 0
	defer func() { t.Logf("%d of 40 crashes recovered unacknowledged groups too", beyond) }()
	for iter := range 40 {
		segSize := []int64{1 << 20, 600}[iter%2]
		w := newWorkloadOf(rng, 60, 15, 200, iter%4 >= 2) // half with range deletes
		dir := t.TempDir()
		d := openT(t, dir, Options{SegmentSize: segSize}, false)
		durable := 10 + rng.IntN(30)
		for _, b := range w.groups[:durable] {
			if err := d.Apply(b); err != nil {
				t.Fatal(err)
			}
		}
		tail := d.segs[len(d.segs)-1]
		tailPath, synced := tail.path, tail.synced
		// The next commit crashes. Submit the rest at once so that it
		// carries several groups.
		var once sync.Once
		stop := make(chan struct{})
		d.hooks.afterWrite = func() error {
			once.Do(func() { close(stop) })
			return errCrash
		}
		var wg sync.WaitGroup
		for _, b := range w.groups[durable:] {
			wg.Add(1)
			d.ApplyAsync(b, func(err error) {
				defer wg.Done()
				if err == nil {
					t.Errorf("a group was acknowledged by a crashed commit")
				}
			})
		}
		wg.Wait()
		<-stop
		d.Close()

		path := lastSegment(t, dir)
		from := int64(0)
		if path == tailPath {
			from = synced
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		size := int64(len(data))
		mode := rng.IntN(4)
		if size > from {
			at := from + rng.Int64N(size-from)
			if rng.IntN(2) == 0 { // near the start: often inside the first unacknowledged record
				at = from + rng.Int64N(min(size-from, 300))
			}
			switch mode {
			case 1: // a prefix landed
				data = data[:at]
			case 2: // a block in the middle was lost
				n := min(1+rng.Int64N(600), size-at)
				clear(data[at : at+n])
			case 3: // a prefix, then garbage
				data = data[:at]
				for range rng.IntN(300) {
					data = append(data, byte(rng.Uint32()))
				}
			}
		}
		if err := os.WriteFile(path, data, 0o640); err != nil {
			t.Fatal(err)
		}
		d2, err := Open(dir, Options{SegmentSize: segSize, Logger: quiet})
		if err != nil {
			t.Fatalf("iter %d mode %d: Open after crash = %v", iter, mode, err)
		}
		got := dump(t, d2)
		k := w.matchPrefix(got, durable, len(w.groups))
		if k < 0 {
			t.Fatalf("iter %d mode %d: recovered state is no prefix of %d..%d groups: vs durable: %s", iter, mode, durable, len(w.groups), diffState(got, w.states[durable]))
		}
		if k > durable {
			beyond++
		}
		d2.Close()
	}
}

// TestDamageFails damages a durable record that a later commit follows,
// in the newest and in an older segment: Open must fail naming the
// segment and offset, and with Repair drop that record only, logging it,
// and keep every other group, those after it included.
func TestDamageFails(t *testing.T) {
	for _, tc := range []struct {
		name    string
		segSize int64
		segment int // which segment file to damage, from the front
	}{
		{"newest segment", 1 << 20, 0},
		{"older segment", 1500, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWorkload(rand.New(rand.NewPCG(3, 4)), 40, 20, 100)
			base := t.TempDir()
			d := openT(t, base, Options{SegmentSize: tc.segSize}, false)
			for _, b := range w.groups {
				if err := d.Apply(b); err != nil {
					t.Fatal(err)
				}
			}
			seg := d.segs[tc.segment]
			if tc.segment == 0 && len(d.segs) != 1 || tc.segment > 0 && len(d.segs) < 3 {
				t.Fatalf("test needs another layout: %d segments", len(d.segs))
			}
			// Damage the third record of the segment.
			r := &entryReader{f: seg.f, size: seg.size}
			var off int64
			var rec []byte
			for range 3 {
				off, _, rec, _ = r.next()
			}
			damaged := int(seg.index) + 1 // groups before it
			name := seg.name()
			d.Close()

			dir := copyDir(t, base)
			path := filepath.Join(dir, name)
			data, _ := os.ReadFile(path)
			data[off+int64(uvarintLen(uint64(len(rec))))+7] ^= 0x40
			os.WriteFile(path, data, 0o640)

			_, err := Open(dir, Options{SegmentSize: tc.segSize, Logger: quiet})
			if err == nil || !strings.Contains(err.Error(), "segment "+name) || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", off)) {
				t.Fatalf("Open of damaged log = %v; want an error naming segment %s offset %d", err, name, off)
			}
			var logs bytes.Buffer
			d, err = Open(dir, Options{SegmentSize: tc.segSize, Repair: true, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
			if err != nil {
				t.Fatalf("Open with Repair = %v", err)
			}
			want := stateOf(slices.Concat(w.groups[:damaged], w.groups[damaged+1:]))
			if diff := diffState(dump(t, d), want); diff != "" {
				t.Errorf("state after repair differs from every group but the damaged one: %s", diff)
			}
			if n := strings.Count(logs.String(), "repair dropped"); n != 2 ||
				!strings.Contains(logs.String(), fmt.Sprintf("offset=%d bytes=%d records=%d-%d", off, uvarintLen(uint64(len(rec)))+len(rec), damaged+1, damaged+1)) {
				t.Errorf("repair logged %d drops; want the damaged record (offset %d, record %d) and its summary\n%s", n, off, damaged+1, logs.String())
			}
			// Later groups are kept, and the log goes on after them.
			apply(t, d, "after=1")
			d.Close()
			d, err = Open(dir, Options{SegmentSize: tc.segSize, Logger: quiet})
			if err != nil {
				t.Fatalf("reopen after repair = %v", err)
			}
			want["after"] = "1"
			if diff := diffState(dump(t, d), want); diff != "" {
				t.Errorf("state after reopening the repaired log: %s", diff)
			}
			d.Close()
		})
	}
}

// TestCompactionCrash crashes compaction after its copies are durable and
// before the log is truncated, and then at each step of the truncation
// itself, as tidwall/wal performs it: a partial START.TEMP copy; the START
// file written; older segments partly deleted; all deleted, START not yet
// renamed. Every state must open to the same data.
func TestCompactionCrash(t *testing.T) {
	base := t.TempDir()
	d := openT(t, base, Options{SegmentSize: 1024, CompactionThreshold: 0.9}, false)
	want := map[string]string{}
	for i := range 120 {
		var b Batch
		k := fmt.Sprintf("k%03d", i)
		v := strings.Repeat("v", 100)
		b.Put([]byte(k), []byte(v))
		want[k] = v
		if i%4 != 0 && i > 0 {
			dk := fmt.Sprintf("k%03d", i-1)
			b.Delete([]byte(dk))
			delete(want, dk)
		}
		if err := d.Apply(&b); err != nil {
			t.Fatal(err)
		}
	}
	d.hooks.beforeTruncate = func() error { return errCrash }
	if err := d.Compact(); !errors.Is(err, errCrash) {
		t.Fatalf("Compact with crash hook = %v; want %v", err, errCrash)
	}
	if d.Stats().CopiedBytes == 0 {
		t.Fatalf("Compact copied nothing; the test needs live records in old segments")
	}
	// The prefix the pass would have truncated: now without live records.
	var older []string
	var last *segment
	for _, s := range d.segs[:len(d.segs)-1] {
		if s.live != 0 {
			break
		}
		older = append(older, s.path)
		last = s
	}
	if len(older) < 2 {
		t.Fatalf("%d dead segments after copying; the test needs more", len(older))
	}
	truncAt, lastPath, lastOff := last.lastIndex(), last.path, last.lastOff
	d.Close()

	check := func(name, dir string) {
		t.Helper()
		d, err := Open(dir, Options{SegmentSize: 1024, Logger: quiet})
		if err != nil {
			t.Fatalf("%s: Open = %v", name, err)
		}
		defer d.Close()
		if diff := diffState(dump(t, d), want); diff != "" {
			t.Fatalf("%s: %s", name, diff)
		}
		if err := d.Compact(); err != nil {
			t.Fatalf("%s: Compact after reopen = %v", name, err)
		}
		if diff := diffState(dump(t, d), want); diff != "" {
			t.Fatalf("%s: after compacting: %s", name, diff)
		}
	}
	check("copies durable, not truncated", copyDir(t, base))

	lastData, err := os.ReadFile(lastPath)
	if err != nil {
		t.Fatal(err)
	}
	start := segmentName(truncAt) + ".START"
	rel := func(dir, p string) string { return filepath.Join(dir, filepath.Base(p)) }
	steps := []struct {
		name string
		do   func(dir string)
	}{
		{"partial START.TEMP", func(dir string) {
			os.WriteFile(filepath.Join(dir, start+".TEMP"), lastData[lastOff:lastOff+3], 0o640)
		}},
		{"START written", func(dir string) {
			os.WriteFile(filepath.Join(dir, start), lastData[lastOff:], 0o640)
		}},
		{"some older segments deleted", func(dir string) {
			os.WriteFile(filepath.Join(dir, start), lastData[lastOff:], 0o640)
			for _, p := range older[:len(older)/2+1] {
				os.Remove(rel(dir, p))
			}
		}},
		{"all deleted, START not renamed", func(dir string) {
			os.WriteFile(filepath.Join(dir, start), lastData[lastOff:], 0o640)
			for _, p := range older {
				os.Remove(rel(dir, p))
			}
		}},
	}
	for _, step := range steps {
		dir := copyDir(t, base)
		step.do(dir)
		check(step.name, dir)
	}
}

// TestNoResurrection checks that a deleted key never comes back when the
// segment holding its delete is reclaimed while an older put of it
// survives: in the remnant record a truncation leaves, or in a copy the
// compactor made before the delete.
func TestNoResurrection(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 1024, CompactionThreshold: -1}
	d := openT(t, dir, opts, false)
	filler := func(n int, tag string) {
		for i := range n {
			var b Batch
			b.Put(fmt.Appendf(nil, "fill/%s/%d", tag, i), bytes.Repeat([]byte("f"), 200))
			if err := d.Apply(&b); err != nil {
				t.Fatal(err)
			}
		}
	}
	deleteFiller := func(n int, tag string) {
		var b Batch
		for i := range n {
			b.Delete(fmt.Appendf(nil, "fill/%s/%d", tag, i))
		}
		if err := d.Apply(&b); err != nil {
			t.Fatal(err)
		}
	}
	filler(8, "a")
	// The put of "ghost" ends a segment: it becomes the remnant.
	for d.segs[len(d.segs)-1].size != 0 {
		var b Batch
		b.Put([]byte("ghost"), bytes.Repeat([]byte("g"), 300))
		if err := d.Apply(&b); err != nil {
			t.Fatal(err)
		}
	}
	filler(8, "b")
	apply(t, d, "-ghost")
	deleteFiller(8, "a")
	if err := d.Compact(); err != nil {
		t.Fatal(err)
	}
	if d.Stats().Compactions != 1 {
		t.Fatalf("Stats().Compactions = %d; want 1", d.Stats().Compactions)
	}
	reopen := func() {
		t.Helper()
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		d = openT(t, dir, opts, false)
		if _, err := d.Get([]byte("ghost")); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(ghost) after reopen = %v; want ErrNotFound", err)
		}
	}
	reopen()
	deleteFiller(8, "b")
	filler(8, "c")
	if err := d.Compact(); err != nil {
		t.Fatal(err)
	}
	reopen()

	// A compaction copy made before an overwrite or delete of its key is
	// dropped by the committer.
	apply(t, d, "moved=old", "gone=old")
	d.mu.RLock()
	eMoved, _ := d.index.get([]byte("moved"))
	eGone, _ := d.index.get([]byte("gone"))
	d.mu.RUnlock()
	apply(t, d, "moved=new", "-gone")
	var b Batch
	b.Put([]byte("moved"), []byte("old"))
	b.Put([]byte("gone"), []byte("old"))
	done := make(chan error, 1)
	d.submit(request{b: &b, copies: []location{{eMoved.seg, eMoved.off}, {eGone.seg, eGone.off}}, done: func(err error) { done <- err }})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v, err := d.Get([]byte("moved")); string(v) != "new" {
		t.Errorf("Get(moved) after a stale copy = %q, %v; want new", v, err)
	}
	if _, err := d.Get([]byte("gone")); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get(gone) after a stale copy = %v; want ErrNotFound", err)
	}
	reopen()
}

// TestReclaim: a queue whose messages are all consumed leaves little on
// disk; one long-lived message in an old segment is copied forward rather
// than pinning every segment after it.
func TestReclaim(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir, Options{SegmentSize: 4096}, true)
	apply(t, d, "pinned="+strings.Repeat("p", 500))
	v := bytes.Repeat([]byte("m"), 1000)
	written := 0
	for i := range 2000 {
		var b Batch
		b.Put(fmt.Appendf(nil, "m/%06d", i), v)
		if i >= 10 {
			b.Delete(fmt.Appendf(nil, "m/%06d", i-10))
		}
		if err := d.Apply(&b); err != nil {
			t.Fatal(err)
		}
		written += 1000
	}
	if err := d.Compact(); err != nil {
		t.Fatal(err)
	}
	st := d.Stats()
	used := dirSize(t, dir)
	if used > int64(written)/10 {
		t.Errorf("disk holds %d bytes after %d bytes of churn (%+v); want under 10%%", used, written, st)
	}
	if st.Compactions == 0 || st.CopiedBytes == 0 {
		t.Errorf("Stats() = %+v; want compactions that copied the pinned record", st)
	}
	if v, err := d.Get([]byte("pinned")); err != nil || len(v) != 500 {
		t.Errorf("Get(pinned) = %d bytes, %v; want 500", len(v), err)
	}
}
