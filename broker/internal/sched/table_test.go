package sched

import (
	"reflect"
	"testing"

	"pgregory.net/rapid"
)

// TestRecordSizes pins the record layouts table.go states: 48 bytes a
// message record, 48 an extension record, neither holding anything the
// garbage collector would have to scan.
func TestRecordSizes(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[msg](), reflect.TypeFor[msgExt]()} {
		if !pointerFree(typ) {
			t.Errorf("%v holds a pointer, string, slice, map, channel, function or interface", typ)
		}
	}
	if n := reflect.TypeFor[msg]().Size(); n != 48 {
		t.Errorf("msg: %d bytes; want 48", n)
	}
	if n := reflect.TypeFor[msgExt]().Size(); n != 48 {
		t.Errorf("msgExt: %d bytes; want 48", n)
	}
}

// TestSlabModel checks a slab against a map through random allocations
// and frees, in bursts that fill and drain pages: indices are unique and
// nonzero, records come zeroed and keep what is written to them, and a
// page whose records are all free is returned unless records are being
// allocated from it.
func TestSlabModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var sl recSlab
		model := map[uint32]uint64{} // index → the value written in its record
		var live []uint32
		var next uint64
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			if rapid.Bool().Draw(t, "alloc") {
				for range rapid.IntRange(1, 3*slabPageSize).Draw(t, "n") {
					i := sl.alloc()
					if _, dup := model[i]; dup || i == 0 {
						t.Fatalf("alloc: index %d zero or in use", i)
					}
					if *sl.at(i) != (msg{}) {
						t.Fatalf("alloc: record %d not zeroed", i)
					}
					next++
					sl.at(i).enq = Time(next)
					model[i] = next
					live = append(live, i)
				}
			} else {
				for range rapid.IntRange(1, 3*slabPageSize).Draw(t, "n") {
					if len(live) == 0 {
						break
					}
					k := rapid.IntRange(0, len(live)-1).Draw(t, "victim")
					i := live[k]
					live[k] = live[len(live)-1]
					live = live[:len(live)-1]
					if got := uint64(sl.at(i).enq); got != model[i] {
						t.Fatalf("record %d holds %d; want %d", i, got, model[i])
					}
					sl.free(i)
					delete(model, i)
				}
			}
			if sl.len() != len(model) {
				t.Fatalf("len %d; model %d", sl.len(), len(model))
			}
			used := map[uint32]uint32{}
			for i := range model {
				used[(i-1)>>slabBits]++
			}
			for pn, p := range sl.pages {
				switch {
				case p == nil && used[uint32(pn)] > 0:
					t.Fatalf("page %d returned with %d records in use", pn, used[uint32(pn)])
				case p != nil && used[uint32(pn)] == 0 && uint32(pn) != sl.cur:
					t.Fatalf("page %d kept with no record in use", pn)
				case p != nil && sl.meta[pn].live != used[uint32(pn)]:
					t.Fatalf("page %d: %d live, %d in use", pn, sl.meta[pn].live, used[uint32(pn)])
				}
			}
		}
	})
}

// pointerFree reports whether values of typ hold nothing the garbage
// collector scans.
func pointerFree(typ reflect.Type) bool {
	switch typ.Kind() {
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return true
	case reflect.Array:
		return pointerFree(typ.Elem())
	case reflect.Struct:
		for i := range typ.NumField() {
			if !pointerFree(typ.Field(i).Type) {
				return false
			}
		}
		return true
	}
	return false
}
