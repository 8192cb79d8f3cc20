package idem

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestEachAppend: a table rebuilt with Append from another's Each, and
// Restore from its Pending, answers the same and forgets the same keys in
// the same order from then on.
func TestEachAppend(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var a Table
		now := int64(0)
		keys := []string{"a", "b", "c", "long-key-0123456789", ""}
		op := func(tb *Table, kind int, key string, id byte, d int64) string {
			switch kind {
			case 0:
				first, dup := tb.Remember(key, [16]byte{id}, now, now+d)
				return fmt.Sprint(first[0], dup)
			case 1:
				id, ok := tb.Lookup(key, now)
				return fmt.Sprint(id[0], ok)
			case 2:
				var forgot []string
				tb.Expire(now, func(k []byte) { forgot = append(forgot, string(k)) })
				next, ok := tb.Next()
				return fmt.Sprint(forgot, next, ok, tb.Len())
			case 3:
				tb.Restore(key, [16]byte{id}, now+d)
			}
			return ""
		}
		type step struct {
			kind int
			key  string
			id   byte
			d    int64
			tick int64
		}
		var steps []step
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			steps = append(steps, step{rapid.IntRange(0, 3).Draw(t, "op"), rapid.SampledFrom(keys).Draw(t, "key"),
				rapid.Byte().Draw(t, "id"), rapid.Int64Range(1, 10).Draw(t, "window"), rapid.Int64Range(0, 3).Draw(t, "tick")})
		}
		at := rapid.IntRange(0, len(steps)).Draw(t, "save at")
		for _, st := range steps[:at] {
			op(&a, st.kind, st.key, st.id, st.d)
			now += st.tick
		}
		var b Table
		a.Each(func(key []byte, id [16]byte, expires int64) {
			if !b.Append(string(key), id, expires) {
				t.Fatalf("key %q appended twice", key)
			}
		})
		a.Pending(func(key string, id [16]byte, expires int64) { b.Restore(key, id, expires) })
		var ea, eb []string
		a.Each(func(k []byte, _ [16]byte, _ int64) { ea = append(ea, string(k)) })
		b.Each(func(k []byte, _ [16]byte, _ int64) { eb = append(eb, string(k)) })
		if !slices.Equal(ea, eb) {
			t.Fatalf("rebuilt keys %q; want %q", eb, ea)
		}
		for j, st := range steps[at:] {
			if ga, gb := op(&a, st.kind, st.key, st.id, st.d), op(&b, st.kind, st.key, st.id, st.d); ga != gb {
				t.Fatalf("step %d after the save: %s, rebuilt %s", j, ga, gb)
			}
			now += st.tick
		}
	})
}
