package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// rangeOps is apply with range deletes: "[start,end)" deletes the range.
func rangeOps(t *testing.T, s store, ops ...string) {
	t.Helper()
	var b Batch
	for _, op := range ops {
		if r, ok := strings.CutPrefix(op, "["); ok {
			start, end, _ := strings.Cut(strings.TrimSuffix(r, ")"), ",")
			b.DeleteRange([]byte(start), []byte(end))
			continue
		}
		if k, ok := strings.CutPrefix(op, "-"); ok {
			b.Delete([]byte(k))
			continue
		}
		k, v, _ := strings.Cut(op, "=")
		b.Put([]byte(k), []byte(v))
	}
	if err := s.Apply(&b); err != nil {
		t.Fatalf("Apply(%q) = %v", ops, err)
	}
}

// TestDeleteRange checks a range delete's bounds and its order among the
// mutations of its group and of later groups, on id keys and others.
func TestDeleteRange(t *testing.T) {
	id := idKeyIn
	both(t, func(t *testing.T, s store) {
		rangeOps(t, s, "a=1", "b=2", "c=3", "d=4", id("m/q", 1)+"=q1", id("m/q", 2)+"=q2", id("m/q.dlq", 1)+"=d1", "m/q=def")
		rangeOps(t, s, "[b,d)")
		want := map[string]string{"a": "1", "d": "4", id("m/q", 1): "q1", id("m/q", 2): "q2", id("m/q.dlq", 1): "d1", "m/q": "def"}
		if diff := diffState(dump(t, s), want); diff != "" {
			t.Fatalf("after [b,d): %s", diff)
		}
		// Within a group mutations apply in order: a put before the range
		// is removed, one after it stays.
		rangeOps(t, s, "b=before", "[a,e)", "c=after", id("m/q", 3)+"=q3")
		want = map[string]string{"c": "after", id("m/q", 1): "q1", id("m/q", 2): "q2", id("m/q", 3): "q3", id("m/q.dlq", 1): "d1", "m/q": "def"}
		if diff := diffState(dump(t, s), want); diff != "" {
			t.Fatalf("after a group with puts around a range: %s", diff)
		}
		// The id keys of one prefix, and not those of a longer one, nor
		// the prefix's own key.
		rangeOps(t, s, "[m/q\x00,m/q\x01)")
		want = map[string]string{"c": "after", id("m/q.dlq", 1): "d1", "m/q": "def"}
		if diff := diffState(dump(t, s), want); diff != "" {
			t.Fatalf("after deleting prefix m/q: %s", diff)
		}
		// A later group puts the keys back.
		rangeOps(t, s, id("m/q", 1)+"=again", "b=again")
		want[id("m/q", 1)], want["b"] = "again", "again"
		if diff := diffState(dump(t, s), want); diff != "" {
			t.Fatalf("after putting keys back: %s", diff)
		}
		// A range over nothing, and an empty range, change nothing.
		rangeOps(t, s, "[x,y)", "[c,c)", "[d,a)")
		if diff := diffState(dump(t, s), want); diff != "" {
			t.Fatalf("after empty ranges: %s", diff)
		}
		if st := s.Stats(); st.Keys != len(want) {
			t.Errorf("Stats().Keys = %d; want %d", st.Keys, len(want))
		}
	})
}

// TestDeleteRangeBatch checks the batch encoding: one mutation per range,
// none for an empty one, ErrTooLarge for a bound over MaxKeySize, and the
// record version: 1 without range deletes, 2 with.
func TestDeleteRangeBatch(t *testing.T) {
	var b Batch
	b.DeleteRange([]byte("b"), []byte("a"))
	b.DeleteRange([]byte("a"), []byte("a"))
	if b.Len() != 0 || b.Size() != 0 {
		t.Errorf("empty ranges recorded %d mutations, %d bytes; want none", b.Len(), b.Size())
	}
	b.Put([]byte("k"), []byte("v"))
	if rec := b.seal(1); rec[4] != recordVersion {
		t.Errorf("record without range deletes has version %d; want %d", rec[4], recordVersion)
	}
	b.DeleteRange([]byte("a"), []byte("b"))
	if b.Len() != 2 {
		t.Errorf("Len = %d; want 2", b.Len())
	}
	rec := bytes.Clone(b.seal(1))
	if rec[4] != recordVersionRange {
		t.Errorf("record with a range delete has version %d; want %d", rec[4], recordVersionRange)
	}
	if _, _, err := verifyRecord(rec); err != nil {
		t.Errorf("verifyRecord = %v", err)
	}
	// One encoding per record: the version must match the contents.
	var plain Batch
	plain.Put([]byte("k"), []byte("v"))
	for _, tc := range []struct {
		name string
		rec  []byte
	}{
		{"version 1 with a range delete", resealed(rec, recordVersion)},
		{"version 2 without one", resealed(plain.seal(1), recordVersionRange)},
		{"empty range", resealed(append(bytes.Clone(plain.seal(1)), kindDeleteRange, 1, 'b', 1, 'a'), recordVersionRange)},
	} {
		if _, _, err := verifyRecord(tc.rec); !errors.Is(err, errRecord) {
			t.Errorf("%s: verifyRecord = %v; want errRecord", tc.name, err)
		}
	}
	b.Reset()
	b.Put([]byte("k"), nil)
	if rec := b.seal(1); rec[4] != recordVersion {
		t.Errorf("after Reset the version is %d; want %d", rec[4], recordVersion)
	}
	b.DeleteRange(make([]byte, MaxKeySize+1), []byte("z"))
	if err := b.check(); !errors.Is(err, ErrTooLarge) {
		t.Errorf("check of a range over MaxKeySize = %v; want ErrTooLarge", err)
	}
}

// resealed returns a copy of rec with version v and a valid checksum.
func resealed(rec []byte, v byte) []byte {
	rec = bytes.Clone(rec)
	rec[4] = v
	binary.LittleEndian.PutUint32(rec, crc32.Checksum(rec[4:], castagnoli))
	return rec
}

// TestDeleteRangeVersionOnDisk checks the version bytes a Disk writes:
// 1 for groups without range deletes, 2 for the one with one.
func TestDeleteRangeVersionOnDisk(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir, Options{}, false)
	rangeOps(t, d, "a=1", "b=2")
	rangeOps(t, d, "[a,b)")
	rangeOps(t, d, "-b")
	d.Close()
	data, err := os.ReadFile(lastSegment(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	var versions []byte
	r := &entryReader{f: bytes.NewReader(data), size: int64(len(data))}
	for {
		_, _, rec, err := r.next()
		if err != nil {
			break
		}
		versions = append(versions, rec[4])
	}
	if !bytes.Equal(versions, []byte{1, 2, 1}) {
		t.Errorf("record versions %v; want [1 2 1]", versions)
	}
}

// TestStoreModel applies random groups of puts, deletes and range deletes
// over keys of every shape (keyGen) to a Disk and a Mem, and checks them
// against a map after each group: Get, Scan and ScanKeys over random
// ranges, Stats.Keys and, for the Disk, Stats.LiveBytes, which must be
// the record bytes of exactly the live puts. The Disk has small leaves and
// segments, and is compacted and reopened now and then.
func TestStoreModel(t *testing.T) {
	testLeafMax = 4
	t.Cleanup(func() { testLeafMax = 0 })
	rng := rand.New(rand.NewPCG(seed(t), 3))
	g := newKeyGen(rng, 60)
	dir := t.TempDir()
	opts := Options{SegmentSize: 4096, CacheSize: 2048, CompactionThreshold: 0.6}
	disk := openT(t, dir, opts, false)
	mem := NewMem()
	defer mem.Close()
	model := map[string]string{}
	check := func(step int, s store, name string) {
		t.Helper()
		for range 3 {
			k := g.key()
			v, err := s.Get(k)
			want, ok := model[string(k)]
			if ok != (err == nil) || string(v) != want || !ok && !errors.Is(err, ErrNotFound) {
				t.Fatalf("step %d %s: Get(%q) = %q, %v; want %q, %t", step, name, k, v, err, want, ok)
			}
		}
		start, end := g.bound(), g.bound()
		if rng.IntN(4) == 0 {
			end = nil
		}
		var keys []string
		for k := range model {
			if k >= string(start) && (end == nil || k < string(end)) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		var got, gotKeys []string
		if err := s.Scan(start, end, func(k, v []byte) error {
			if want := model[string(k)]; string(v) != want {
				return fmt.Errorf("Scan: %q = %q; want %q", k, v, want)
			}
			got = append(got, string(k))
			return nil
		}); err != nil {
			t.Fatalf("step %d %s: %v", step, name, err)
		}
		if err := s.ScanKeys(start, end, func(k []byte) error {
			gotKeys = append(gotKeys, string(k))
			return nil
		}); err != nil {
			t.Fatalf("step %d %s: %v", step, name, err)
		}
		if !slices.Equal(got, keys) || !slices.Equal(gotKeys, keys) {
			t.Fatalf("step %d %s: Scan(%q, %q) = %d keys, ScanKeys %d; want %d", step, name, start, end, len(got), len(gotKeys), len(keys))
		}
		if st := s.Stats(); st.Keys != len(model) {
			t.Fatalf("step %d %s: Stats().Keys = %d; want %d", step, name, st.Keys, len(model))
		}
	}
	liveBytes := func() int64 {
		var n int64
		for k, v := range model {
			n += recordSize(len(k), len(v))
		}
		return n
	}
	steps := 1500
	if testing.Short() {
		steps = 400
	}
	for step := range steps {
		var b Batch
		for range 1 + rng.IntN(8) {
			switch op := rng.IntN(100); {
			case op < 65:
				k, v := g.key(), bytes.Repeat([]byte{byte(step)}, rng.IntN(200))
				b.Put(k, v)
				model[string(k)] = string(v)
			case op < 95:
				k := g.key()
				b.Delete(k)
				delete(model, string(k))
			default:
				start, end := g.span()
				b.DeleteRange(start, end)
				for k := range model {
					if k >= string(start) && k < string(end) {
						delete(model, k)
					}
				}
			}
		}
		c := b
		c.data = bytes.Clone(b.data)
		if err := disk.Apply(&b); err != nil {
			t.Fatal(err)
		}
		if err := mem.Apply(&c); err != nil {
			t.Fatal(err)
		}
		check(step, disk, "disk")
		check(step, mem, "mem")
		if live := disk.Stats().LiveBytes; live != liveBytes() {
			t.Fatalf("step %d: Stats().LiveBytes = %d; want %d, the record bytes of the live puts", step, live, liveBytes())
		}
		switch rng.IntN(40) {
		case 0:
			if err := disk.Compact(); err != nil {
				t.Fatal(err)
			}
		case 1:
			if err := disk.Close(); err != nil {
				t.Fatal(err)
			}
			disk = openT(t, dir, opts, false)
			checkIndex(t, disk.index)
		}
	}
	checkIndex(t, disk.index)
	if diff := diffState(dump(t, disk), model); diff != "" {
		t.Fatalf("disk differs from the model at the end: %s", diff)
	}
	if diff := diffState(dump(t, mem), model); diff != "" {
		t.Fatalf("mem differs from the model at the end: %s", diff)
	}
	t.Logf("disk: %+v", disk.Stats())
}

// TestDeleteRangeCompaction deletes most keys of many segments with range
// deletes and compacts: the segments are reclaimed and the live bytes
// match the surviving puts. Then it turns the segments after the range
// deletes to garbage, so that compaction drops the range tombstones with
// the segments that hold them, and checks that no key they deleted comes
// back, across reopening.
func TestDeleteRangeCompaction(t *testing.T) {
	dir := t.TempDir()
	opts := Options{SegmentSize: 4096, CompactionThreshold: 0.5}
	d := openT(t, dir, opts, false)
	want := map[string]string{}
	apply := func(b *Batch) {
		t.Helper()
		if err := d.Apply(b); err != nil {
			t.Fatal(err)
		}
		want = stateOf([]*Batch{stateBatch(want), b})
	}
	put := func(from, to int) {
		var b Batch
		for i := from; i < to; i++ {
			b.Put([]byte(idKey(i)), []byte(strings.Repeat("v", 100)))
			if b.Len() == 8 || i == to-1 {
				apply(&b)
				b.Reset()
			}
		}
	}
	churn := func(from, to int) {
		put(from, to)
		var b Batch
		for i := from; i < to; i++ {
			b.Delete([]byte(idKey(i)))
		}
		apply(&b)
	}
	live := func() int64 {
		var n int64
		for k, v := range want {
			n += recordSize(len(k), len(v))
		}
		return n
	}
	put(0, 900)
	// Keep the keys of prefix m/q below 30; drop the rest.
	var b Batch
	b.DeleteRange([]byte(idKey(30)), []byte("m/q\x01"))
	b.DeleteRange([]byte("m/q.dlq\x00"), []byte("m/q.dlq\x01"))
	b.DeleteRange([]byte("s/st/q\x00"), []byte("s/st/q\x01"))
	apply(&b)
	tomb := d.lastIndex // the range deletes' record
	if len(want) != 10 {
		t.Fatalf("the model holds %d keys after the range deletes; want 10", len(want))
	}
	put(900, 1000)
	before := d.Stats()
	if before.LiveBytes != live() {
		t.Fatalf("LiveBytes after the range deletes = %d; want %d", before.LiveBytes, live())
	}
	if err := d.Compact(); err != nil {
		t.Fatal(err)
	}
	after := d.Stats()
	if after.Compactions == 0 || after.LogBytes > before.LogBytes/2 {
		t.Errorf("compaction after range deletes: %d passes, log %d -> %d bytes; want it halved", after.Compactions, before.LogBytes, after.LogBytes)
	}
	if after.LiveBytes != live() {
		t.Errorf("LiveBytes after compaction = %d; want %d", after.LiveBytes, live())
	}
	for round := range 2 {
		if diff := diffState(dump(t, d), want); diff != "" {
			t.Fatalf("round %d: %s", round, diff)
		}
		if err := d.Close(); err != nil {
			t.Fatal(err)
		}
		d = openT(t, dir, opts, false)
		if diff := diffState(dump(t, d), want); diff != "" {
			t.Fatalf("round %d, after reopening: %s", round, diff)
		}
		if st := d.Stats(); st.LiveBytes != live() {
			t.Errorf("round %d: LiveBytes after reopening = %d; want %d", round, st.LiveBytes, live())
		}
		churn(1000+round*600, 1600+round*600)
		if err := d.Compact(); err != nil {
			t.Fatal(err)
		}
	}
	if first := d.segs[0].index; first <= tomb {
		t.Errorf("the log still starts at record %d; want the range deletes' record %d reclaimed", first, tomb)
	}
}

// stateBatch returns a group putting every key of st.
func stateBatch(st map[string]string) *Batch {
	b := new(Batch)
	for _, k := range slices.Sorted(maps.Keys(st)) {
		b.Put([]byte(k), []byte(st[k]))
	}
	return b
}

// TestDamageBeforeRangeRecord damages a durable record that only a range
// delete's (version 2) record follows: recovery must see that later commit
// and refuse to start, not take the damage for a torn final commit.
func TestDamageBeforeRangeRecord(t *testing.T) {
	dir := t.TempDir()
	d := openT(t, dir, Options{}, false)
	rangeOps(t, d, "a=1")
	rangeOps(t, d, "b="+strings.Repeat("2", 50))
	rangeOps(t, d, "[a,b)")
	d.Close()
	recs := entries(t, dir)
	if len(recs) != 3 {
		t.Fatalf("log holds %d records; want 3", len(recs))
	}
	path := lastSegment(t, dir)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	data[recs[1].off+20] ^= 0x01
	if err := os.WriteFile(path, data, 0o640); err != nil {
		t.Fatal(err)
	}
	// Without the durable-position marker, only the later record tells.
	if err := os.Remove(filepath.Join(dir, markerName)); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{Logger: quiet})
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("offset %d", recs[1].off)) {
		t.Fatalf("Open = %v; want the damage at offset %d reported", err, recs[1].off)
	}
}
