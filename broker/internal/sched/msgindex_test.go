package sched

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"pgregory.net/rapid"
)

// TestMsgIndexModel checks msgIndex against a map through random puts,
// gets and deletes, with IDs shaped like UUIDv7 (clock, then counter) and
// with arbitrary ones, across table growth, splits and shrinks.
func TestMsgIndexModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var x msgIndex
		var tab recSlab
		model := map[[16]byte]mref{}
		var ids [][16]byte
		seq := uint64(0)
		newID := func() [16]byte {
			var id [16]byte
			if rapid.Bool().Draw(t, "uuid7") {
				seq++
				binary.BigEndian.PutUint64(id[:], 1_750_000_000_000<<16|seq>>10)
				binary.BigEndian.PutUint64(id[8:], seq)
			} else {
				copy(id[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "id"))
			}
			return id
		}
		steps := rapid.IntRange(1, 6000).Draw(t, "steps")
		for range steps {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op < 6: // put a new ID, in bulk sometimes
				for range rapid.IntRange(1, 200).Draw(t, "bulk") {
					id := newID()
					if model[id] != 0 {
						continue
					}
					m := mref(tab.alloc())
					tab.at(uint32(m)).id = id
					x.put(&tab, m)
					model[id] = m
					ids = append(ids, id)
				}
			case op < 9 && len(ids) > 0: // delete some
				for range rapid.IntRange(1, 300).Draw(t, "dels") {
					if len(ids) == 0 {
						break
					}
					k := rapid.IntRange(0, len(ids)-1).Draw(t, "victim")
					id := ids[k]
					ids[k] = ids[len(ids)-1]
					ids = ids[:len(ids)-1]
					x.del(&tab, model[id])
					tab.free(uint32(model[id]))
					delete(model, id)
				}
			default: // look up a missing ID
				id := newID()
				if x.get(&tab, id) != model[id] {
					t.Fatalf("get of a missing id found a message")
				}
			}
			if x.len() != len(model) {
				t.Fatalf("len %d, model %d", x.len(), len(model))
			}
		}
		for id, m := range model {
			if x.get(&tab, id) != m {
				t.Fatalf("get %x: wrong message", id)
			}
		}
		seen := map[mref]bool{}
		for m := range x.all() {
			if seen[m] || model[tab.at(uint32(m)).id] != m {
				t.Fatalf("all: %d twice or not in the model", m)
			}
			seen[m] = true
		}
		if tab.len() != len(model) {
			t.Fatalf("%d records in use for %d messages", tab.len(), len(model))
		}
		if len(seen) != len(model) {
			t.Fatalf("all yielded %d, want %d", len(seen), len(model))
		}
	})
}

// BenchmarkMsgIndex measures lookups and deletes in an index of 2^20
// messages, in a random order (as acks come), beside a map[[16]byte]mref.
func BenchmarkMsgIndex(b *testing.B) {
	const n = 1 << 20
	var tab recSlab
	ms := make([]mref, n)
	ids := make([][16]byte, n)
	for i := range ms {
		binary.BigEndian.PutUint64(ids[i][:], 1_750_000_000_000<<16|uint64(i)>>10)
		binary.BigEndian.PutUint64(ids[i][8:], uint64(i))
		ms[i] = mref(tab.alloc())
		tab.at(uint32(ms[i])).id = ids[i]
	}
	order := rand.New(rand.NewPCG(1, 2)).Perm(n)
	b.Run("index/get", func(b *testing.B) {
		var x msgIndex
		for _, m := range ms {
			x.put(&tab, m)
		}
		b.ResetTimer()
		for i := range b.N {
			if x.get(&tab, ids[order[i%n]]) == 0 {
				b.Fatal("missing")
			}
		}
	})
	b.Run("map/get", func(b *testing.B) {
		m := make(map[[16]byte]mref)
		for i := range ms {
			m[ids[i]] = ms[i]
		}
		b.ResetTimer()
		for i := range b.N {
			if m[ids[order[i%n]]] == 0 {
				b.Fatal("missing")
			}
		}
	})
	b.Run("index/del", func(b *testing.B) {
		var x msgIndex
		for i := range b.N {
			if i%n == 0 {
				b.StopTimer()
				x = msgIndex{}
				for _, m := range ms {
					x.put(&tab, m)
				}
				b.StartTimer()
			}
			x.del(&tab, ms[order[i%n]])
		}
	})
	b.Run("map/del", func(b *testing.B) {
		var m map[[16]byte]mref
		for i := range b.N {
			if i%n == 0 {
				b.StopTimer()
				m = make(map[[16]byte]mref)
				for j := range ms {
					m[ids[j]] = ms[j]
				}
				b.StartTimer()
			}
			delete(m, ids[order[i%n]])
		}
	})
}
