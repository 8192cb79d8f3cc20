package idem

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

func id(n int) [16]byte { return [16]byte{15: byte(n), 14: byte(n >> 8)} }

func TestRememberExpire(t *testing.T) {
	var tb Table
	if got, dup := tb.Remember("a", id(1), 0, 10); dup || got != id(1) {
		t.Fatalf("Remember(a) = %v, %v; want id 1, false", got, dup)
	}
	if got, dup := tb.Remember("a", id(2), 5, 15); !dup || got != id(1) {
		t.Fatalf("Remember(a) again = %v, %v; want id 1, true", got, dup)
	}
	tb.Remember("b", id(3), 5, 15)
	if next, ok := tb.Next(); !ok || next != 10 {
		t.Fatalf("Next() = %d, %v; want 10, true", next, ok)
	}
	var forgot []string
	tb.Expire(10, func(k []byte) { forgot = append(forgot, string(k)) })
	if fmt.Sprint(forgot) != "[a]" || tb.Len() != 1 {
		t.Fatalf("Expire(10) forgot %v, Len %d; want [a], 1", forgot, tb.Len())
	}
	if _, ok := tb.Lookup("a", 10); ok {
		t.Fatalf("Lookup(a) after expiry = true; want false")
	}
	if got, ok := tb.Lookup("b", 10); !ok || got != id(3) {
		t.Fatalf("Lookup(b) = %v, %v; want id 3, true", got, ok)
	}
	// A key whose window passed before Expire ran is accepted again and
	// not forgotten by its old entry's expiry.
	if _, dup := tb.Remember("b", id(4), 15, 25); dup {
		t.Fatalf("Remember(b) at its expiry = dup; want accepted")
	}
	forgot = nil
	tb.Expire(15, func(k []byte) { forgot = append(forgot, string(k)) })
	if len(forgot) != 0 || tb.Len() != 1 {
		t.Fatalf("Expire(15) forgot %v, Len %d; want nothing, 1", forgot, tb.Len())
	}
	tb.Expire(25, func(k []byte) { forgot = append(forgot, string(k)) })
	if fmt.Sprint(forgot) != "[b]" || tb.Len() != 0 {
		t.Fatalf("Expire(25) forgot %v, Len %d; want [b], 0", forgot, tb.Len())
	}
}

func TestRestoreSorts(t *testing.T) {
	var tb Table
	tb.Restore("late", id(1), 30)
	tb.Restore("early", id(2), 10)
	var order []string
	tb.All(func(k []byte, _ [16]byte, _ int64) { order = append(order, string(k)) })
	if fmt.Sprint(order) != "[early late]" {
		t.Fatalf("All after Restore = %v; want [early late]", order)
	}
	if got, ok := tb.Lookup("late", 0); !ok || got != id(1) {
		t.Fatalf("Lookup(late) = %v, %v; want id 1, true", got, ok)
	}
}

// TestPropertyModel compares the table with a map under random
// remembers, lookups and expiries with a monotonic clock.
func TestPropertyModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var tb Table
		type val struct {
			id      [16]byte
			expires int64
		}
		model := map[string]val{}
		now := int64(0)
		window := rapid.Int64Range(1, 50).Draw(t, "window")
		nkeys := rapid.IntRange(1, 300).Draw(t, "keys")
		for i := 0; i < 2000; i++ {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0:
				now += rapid.Int64Range(0, 20).Draw(t, "tick")
				tb.Expire(now, func(k []byte) {
					v, ok := model[string(k)]
					if !ok || v.expires > now {
						t.Fatalf("forgot %q at %d; model %v %v", k, now, v, ok)
					}
					delete(model, string(k))
				})
				for k, v := range model {
					if v.expires <= now {
						t.Fatalf("%q (expires %d) not forgotten at %d", k, v.expires, now)
					}
				}
			case 1:
				k := fmt.Sprint(rapid.IntRange(0, nkeys).Draw(t, "key"))
				got, ok := tb.Lookup(k, now)
				v, live := model[k]
				live = live && v.expires > now
				if ok != live || ok && got != v.id {
					t.Fatalf("Lookup(%q) = %v, %v; want %v, %v", k, got, ok, v.id, live)
				}
			default:
				k := fmt.Sprint(rapid.IntRange(0, nkeys).Draw(t, "key"))
				got, dup := tb.Remember(k, id(i), now, now+window)
				v, live := model[k]
				live = live && v.expires > now
				if dup != live || dup && got != v.id || !dup && got != id(i) {
					t.Fatalf("Remember(%q) = %v, %v; want dup %v of %v", k, got, dup, live, v.id)
				}
				if !dup {
					model[k] = val{id(i), now + window}
				}
			}
			if tb.Len() != len(model) {
				t.Fatalf("Len() = %d; model has %d", tb.Len(), len(model))
			}
		}
	})
}

// BenchmarkRemember measures remembering a fresh key and forgetting the
// oldest, with a window of one million keys.
func BenchmarkRemember(b *testing.B) {
	const window = 1_000_000
	var tb Table
	keys := make([]string, 0, window+b.N)
	for i := 0; i < window+b.N; i++ {
		keys = append(keys, fmt.Sprintf("order-%d", i))
	}
	for i := 0; i < window; i++ {
		tb.Remember(keys[i], id(i), int64(i), int64(i+window))
	}
	b.ResetTimer()
	for i := window; i < window+b.N; i++ {
		tb.Remember(keys[i], id(i), int64(i), int64(i+window))
		tb.Expire(int64(i), func([]byte) {})
	}
}
