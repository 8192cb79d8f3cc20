package store

import (
	"bytes"
	"fmt"
	"maps"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// keyGen makes random keys of every shape the index tells apart: id keys
// (prefix, 0x00, 16 bytes) under prefixes that are prefixes of each other
// or differ in one byte, and general keys close to them in byte order: a
// prefix alone, a prefix with a shorter or longer tail, a 0x00 inside the
// prefix. IDs come from a small pool of bytes that sort at the extremes
// (0x00, 0x01, 0x80, 0xff), so that keys collide and sort at boundaries.
type keyGen struct {
	rng      *rand.Rand
	prefixes []string
	ids      [][idLen]byte
}

// newKeyGen returns a keyGen drawing from rng, with a pool of nids IDs.
func newKeyGen(rng *rand.Rand, nids int) *keyGen {
	g := &keyGen{
		rng:      rng,
		prefixes: []string{"", "m", "m/q", "m/q.dlq", "m/q\x01", "m/q/", "m/r", "s/st/a", "\xff"},
	}
	alphabet := []byte{0x00, 0x01, 0x80, 0xff}
	for range nids {
		var id [idLen]byte
		for i := range id {
			id[i] = alphabet[rng.IntN(len(alphabet))]
		}
		g.ids = append(g.ids, id)
	}
	return g
}

// prefix returns one of the prefixes.
func (g *keyGen) prefix() string { return g.prefixes[g.rng.IntN(len(g.prefixes))] }

// id returns one of the pool's IDs.
func (g *keyGen) id() []byte {
	id := g.ids[g.rng.IntN(len(g.ids))]
	return id[:]
}

// key returns an id key three times in four, else a general key.
func (g *keyGen) key() []byte {
	p := g.prefix()
	if g.rng.IntN(4) != 0 {
		return slices.Concat([]byte(p), []byte{0}, g.id())
	}
	switch g.rng.IntN(5) {
	case 0:
		return []byte(p)
	case 1: // a shorter tail
		return slices.Concat([]byte(p), []byte{0}, g.id()[:g.rng.IntN(idLen)])
	case 2: // a longer tail
		return slices.Concat([]byte(p), []byte{0}, g.id(), g.id()[:1+g.rng.IntN(3)])
	case 3: // 0x00 inside what would be the prefix
		return slices.Concat([]byte(p), []byte{0, 'x'}, g.id())
	default:
		return slices.Concat([]byte(p), []byte{byte(g.rng.IntN(3))})
	}
}

// bound returns a key, or a key cut short or followed by a byte, or the
// start or end of a prefix's id keys.
func (g *keyGen) bound() []byte {
	switch g.rng.IntN(6) {
	case 0:
		return append([]byte(g.prefix()), 0)
	case 1:
		return append([]byte(g.prefix()), 1)
	case 2:
		k := g.key()
		return k[:g.rng.IntN(len(k)+1)]
	case 3:
		return append(g.key(), byte(g.rng.IntN(2)))
	default:
		return g.key()
	}
}

// span returns the bounds of a range delete: one within a prefix's id
// keys mostly, else a whole prefix's, else any two bounds.
func (g *keyGen) span() (start, end []byte) {
	switch g.rng.IntN(6) {
	case 0:
		start, end = g.bound(), g.bound()
	case 1:
		p := g.prefix()
		start, end = append([]byte(p), 0), append([]byte(p), 1)
	default:
		p := append([]byte(g.prefix()), 0)
		start = append(bytes.Clone(p), g.id()[:1+g.rng.IntN(idLen)]...)
		end = append(bytes.Clone(p), g.id()[:1+g.rng.IntN(idLen)]...)
	}
	if bytes.Compare(start, end) > 0 {
		start, end = end, start
	}
	return start, end
}

// checkIndex checks the invariants of x's leaves: none empty or over
// leafMax, ids ascending within and across the leaves of a prefix, fences
// at most their leaf's first id and above the previous leaf's last, the
// zero fence on each prefix's first leaf, and the id count.
func checkIndex(t *testing.T, x *keyIndex) {
	t.Helper()
	var prev leafRef
	first := true
	ids := 0
	x.leaves.Scan(func(r leafRef) bool {
		l := r.l
		if l.n <= 0 || int(l.n) > x.leafMax {
			t.Fatalf("leaf %q/%x holds %d items (max %d)", r.prefix, r.fence, l.n, x.leafMax)
		}
		ids += int(l.n)
		for i := 1; i < int(l.n); i++ {
			if idCompare(&l.items[i-1].id, &l.items[i].id) >= 0 {
				t.Fatalf("leaf %q/%x: ids out of order at %d", r.prefix, r.fence, i)
			}
		}
		if idCompare(&r.fence, &l.items[0].id) > 0 {
			t.Fatalf("leaf %q: fence %x above first id %x", r.prefix, r.fence, l.items[0].id)
		}
		if first || prev.prefix != r.prefix {
			if r.fence != ([idLen]byte{}) {
				t.Fatalf("first leaf of prefix %q has fence %x", r.prefix, r.fence)
			}
		} else if last := prev.l.items[prev.l.n-1].id; idCompare(&last, &r.fence) >= 0 {
			t.Fatalf("prefix %q: leaf fence %x not above the previous leaf's last id %x", r.prefix, r.fence, last)
		}
		prev, first = r, false
		return true
	})
	if ids != x.ids {
		t.Fatalf("leaves hold %d ids; index counts %d", ids, x.ids)
	}
}

// indexKeys returns the keys and locations ascend visits in [start, end).
func indexKeys(x *keyIndex, start, end []byte) ([]string, []loc) {
	var keys []string
	var locs []loc
	x.ascend(start, end, func(k []byte, l loc) bool {
		keys = append(keys, string(k))
		locs = append(locs, l)
		return true
	})
	return keys, locs
}

// modelKeys returns the keys of model in [start, end), sorted.
func modelKeys(model map[string]loc, start, end []byte) ([]string, []loc) {
	var keys []string
	for k := range model {
		if k >= string(start) && (end == nil || k < string(end)) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	locs := make([]loc, len(keys))
	for i, k := range keys {
		locs[i] = model[k]
	}
	return keys, locs
}

// TestIndexModel applies random sets, deletes and range deletes of keys of
// every shape to a keyIndex and to a map, and checks after each step that
// get, ascend over random ranges and the kill calls of range deletes match
// the map, and that snapshots keep showing the moment they were taken.
// Small leaves make splits, merges and dropped leaves frequent.
func TestIndexModel(t *testing.T) {
	for _, leafMax := range []int{3, 4, 8, leafCap} {
		t.Run(fmt.Sprintf("leaf=%d", leafMax), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed(t), uint64(leafMax)))
			g := newKeyGen(rng, 60+leafMax*8)
			x := newKeyIndex()
			x.leafMax = leafMax
			model := map[string]loc{}
			type snap struct {
				x     *keyIndex
				model map[string]loc
			}
			var snaps []snap
			next := uint32(0)
			ranges, rangeKeys := 0, 0
			steps := 20000
			if testing.Short() {
				steps = 4000
			}
			// With big leaves, fewer deletes, so that prefixes grow to
			// several leaves.
			sets, dels, spans := 600, 800, 10
			if leafMax == leafCap {
				sets, dels, spans = 750, 820, 1
			}
			for step := range steps {
				switch op := rng.IntN(1000); {
				case op < sets:
					k := g.key()
					next++
					l := loc{seg: next, off: next * 3, vlen: uint32(len(k))}
					old, replaced := x.set(k, l)
					want, had := model[string(k)]
					if replaced != had || old != want {
						t.Fatalf("step %d: set(%q) = %v, %v; want %v, %v", step, k, old, replaced, want, had)
					}
					model[string(k)] = l
				case op < dels:
					k := g.key()
					if rng.IntN(2) == 0 { // a present key, if any
						for mk := range model {
							k = []byte(mk)
							break
						}
					}
					old, ok := x.delete(k)
					want, had := model[string(k)]
					if ok != had || old != want {
						t.Fatalf("step %d: delete(%q) = %v, %v; want %v, %v", step, k, old, ok, want, had)
					}
					delete(model, string(k))
				case op < dels+spans:
					start, end := g.span()
					if rng.IntN(10) == 0 {
						start, end = end, start // empty
					}
					wantKeys, wantLocs := modelKeys(model, start, end)
					if bytes.Compare(start, end) >= 0 {
						wantKeys, wantLocs = nil, nil
					}
					got := map[loc]int{}
					x.deleteRange(start, end, func(klen int, l loc) { got[l] = klen })
					want := map[loc]int{}
					for i, k := range wantKeys {
						want[wantLocs[i]] = len(k)
						delete(model, k)
					}
					ranges++
					rangeKeys += len(got)
					if !maps.Equal(got, want) {
						t.Fatalf("step %d: deleteRange(%q, %q) killed %d keys; want %d", step, start, end, len(got), len(want))
					}
				case op < 900:
					k := g.key()
					l, ok := x.get(k)
					want, had := model[string(k)]
					if ok != had || l != want {
						t.Fatalf("step %d: get(%q) = %v, %v; want %v, %v", step, k, l, ok, want, had)
					}
				case op < 970:
					start, end := g.bound(), g.bound()
					if rng.IntN(4) == 0 {
						end = nil
					}
					gk, gl := indexKeys(x, start, end)
					wk, wl := modelKeys(model, start, end)
					if !slices.Equal(gk, wk) || !slices.Equal(gl, wl) {
						t.Fatalf("step %d: ascend(%q, %q) = %q; want %q", step, start, end, gk, wk)
					}
				default:
					snaps = append(snaps, snap{x.snapshot(), maps.Clone(model)})
					if len(snaps) > 3 {
						snaps = snaps[1:]
					}
				}
				if step%50 == 0 {
					checkIndex(t, x)
					if x.len() != len(model) {
						t.Fatalf("step %d: len = %d; want %d", step, x.len(), len(model))
					}
					for _, s := range snaps {
						gk, gl := indexKeys(s.x, nil, nil)
						wk, wl := modelKeys(s.model, nil, nil)
						if !slices.Equal(gk, wk) || !slices.Equal(gl, wl) {
							t.Fatalf("step %d: a snapshot changed: %d keys, want %d", step, len(gk), len(wk))
						}
					}
				}
			}
			checkIndex(t, x)
			gk, _ := indexKeys(x, nil, nil)
			wk, _ := modelKeys(model, nil, nil)
			if !slices.Equal(gk, wk) {
				t.Fatalf("final ascend: %d keys; want %d", len(gk), len(wk))
			}
			t.Logf("%d keys, %d id keys in %d leaves, %d ranges deleted %d keys", x.len(), x.ids, x.leaves.Len(), ranges, rangeKeys)
		})
	}
}

// TestIndexLeaf checks the layout the memory figures rest on: a leaf holds
// no pointer and fills Go's 4 KiB size class.
func TestIndexLeaf(t *testing.T) {
	if size := unsafe.Sizeof(leaf{}); size > 4096 || size+unsafe.Sizeof(idItem{}) <= 4096 {
		t.Errorf("leaf is %d bytes; want the most items that fit in 4,096", size)
	}
	if size := unsafe.Sizeof(idItem{}); size != 28 {
		t.Errorf("idItem is %d bytes; want 28", size)
	}
}

// TestIndexSequentialFill checks that ids arriving in ascending order fill
// leaves whole, and that deleting them from the front, as a queue is
// consumed, leaves no empty leaf behind.
func TestIndexSequentialFill(t *testing.T) {
	x := newKeyIndex()
	key := func(q string, i uint64) []byte { return brokerKey(nil, q, i) }
	const n = 100 * leafCap
	for i := range uint64(n) {
		for _, q := range []string{"a", "b"} {
			x.set(key(q, i), loc{seg: 1, vlen: 1})
		}
	}
	checkIndex(t, x)
	if got, want := x.leaves.Len(), 2*n/leafCap; got != want {
		t.Errorf("%d ascending ids in 2 prefixes fill %d leaves; want %d", 2*n, got, want)
	}
	for i := range uint64(n - 10) {
		x.delete(key("a", i))
	}
	checkIndex(t, x)
	if got, want := x.leaves.Len(), n/leafCap+1; got != want {
		t.Errorf("after consuming all but 10 of a prefix: %d leaves; want %d", got, want)
	}
}

// TestIndexRangeDropsLeaves checks that a range delete of a whole prefix
// removes its leaves without copying them, even while a snapshot shares
// them, and that other prefixes are untouched.
func TestIndexRangeDropsLeaves(t *testing.T) {
	x := newKeyIndex()
	const n = 50 * leafCap
	for i := range uint64(n) {
		x.set(brokerKey(nil, "q", i), loc{seg: 1, vlen: 1})
		x.set(brokerKey(nil, "q.dlq", i), loc{seg: 1, vlen: 1})
	}
	snap := x.snapshot()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	killed := 0
	x.deleteRange([]byte("m/q\x00"), []byte("m/q\x01"), func(int, loc) { killed++ })
	runtime.ReadMemStats(&after)
	if killed != n || x.len() != n {
		t.Fatalf("range delete of prefix m/q killed %d keys, left %d; want %d, %d", killed, x.len(), n, n)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<10 {
		t.Errorf("range delete of %d keys allocated %d bytes", n, grew)
	}
	checkIndex(t, x)
	if keys, _ := indexKeys(snap, nil, nil); len(keys) != 2*n {
		t.Errorf("snapshot holds %d keys after the delete; want %d", len(keys), 2*n)
	}
	keys, _ := indexKeys(x, nil, nil)
	for _, k := range keys {
		if !strings.HasPrefix(k, "m/q.dlq\x00") {
			t.Fatalf("key %q survived", k)
		}
	}
}
