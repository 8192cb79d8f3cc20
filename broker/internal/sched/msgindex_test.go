package sched

import (
	"encoding/binary"
	"testing"

	"pgregory.net/rapid"
)

// TestMsgIndexModel checks msgIndex against a map through random puts,
// gets and deletes, with IDs shaped like UUIDv7 (clock, then counter) and
// with arbitrary ones, across table growth, splits and shrinks.
func TestMsgIndexModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var x msgIndex
		model := map[[16]byte]*msg{}
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
					if model[id] != nil {
						continue
					}
					m := &msg{id: id}
					x.put(m)
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
					x.del(model[id])
					delete(model, id)
				}
			default: // look up a missing ID
				id := newID()
				if x.get(id) != model[id] {
					t.Fatalf("get of a missing id found a message")
				}
			}
			if x.len() != len(model) {
				t.Fatalf("len %d, model %d", x.len(), len(model))
			}
		}
		for id, m := range model {
			if x.get(id) != m {
				t.Fatalf("get %x: wrong message", id)
			}
		}
		seen := map[*msg]bool{}
		for m := range x.all() {
			if seen[m] || model[m.id] != m {
				t.Fatalf("all: %x twice or not in the model", m.id)
			}
			seen[m] = true
		}
		if len(seen) != len(model) {
			t.Fatalf("all yielded %d, want %d", len(seen), len(model))
		}
	})
}

func BenchmarkMsgIndex(b *testing.B) {
	const n = 1 << 20
	ms := make([]msg, n)
	for i := range ms {
		binary.BigEndian.PutUint64(ms[i].id[:], 1_750_000_000_000<<16|uint64(i)>>10)
		binary.BigEndian.PutUint64(ms[i].id[8:], uint64(i))
	}
	b.Run("put+del", func(b *testing.B) {
		var x msgIndex
		for i := range b.N {
			x.put(&ms[i%n])
			if i >= 1000 {
				x.del(&ms[(i-1000)%n])
			}
		}
	})
	var x msgIndex
	for i := range ms {
		x.put(&ms[i])
	}
	b.Run("get", func(b *testing.B) {
		for i := range b.N {
			if x.get(ms[(i*7919)%n].id) == nil {
				b.Fatal("missing")
			}
		}
	})
	b.ReportMetric(float64(x.slots*8+len(x.dir)*8)/float64(n), "bytes/msg")
}
