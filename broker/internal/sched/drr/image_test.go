package drr_test

import (
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"
)

// TestSaveLoad: a scheduler rebuilt from another's state (Quantum, Round,
// Target, its flows in Each's order with their FlowStates) serves the
// same flows in the same rounds from then on.
func TestSaveLoad(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		a := newSim(rapid.Int64Range(1, 2000).Draw(t, "quantum"))
		fa := make([]*flow, rapid.IntRange(1, 6).Draw(t, "flows"))
		for i := range fa {
			fa[i] = &flow{name: fmt.Sprint("f", i)}
		}
		op := func(m *sim, fs []*flow, kind, i int, w uint32, cost int64) string {
			switch kind {
			case 0:
				m.enqueue(fs[i], w, cost)
				return ""
			case 1: // every message of the flow waits for something: out, deficit kept
				m.s.Remove(fs[i])
				return ""
			case 2:
				if len(fs[i].costs) > 0 && !fs[i].Active() {
					m.s.Resume(fs[i])
				}
				return ""
			}
			if f := m.step(); f != nil {
				return fmt.Sprint(f.name, "@", m.s.Round())
			}
			return "-"
		}
		type step struct {
			kind, i int
			w       uint32
			cost    int64
		}
		var steps []step
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			steps = append(steps, step{rapid.IntRange(0, 5).Draw(t, "op"), rapid.IntRange(0, len(fa)-1).Draw(t, "flow"),
				rapid.Uint32Range(0, 4).Draw(t, "weight"), rapid.Int64Range(1, 3000).Draw(t, "cost")})
		}
		at := rapid.IntRange(0, len(steps)).Draw(t, "save at")
		for _, st := range steps[:at] {
			op(a, fa, st.kind, st.i, st.w, st.cost)
		}
		b := newSim(1)
		fb := make([]*flow, len(fa))
		for i, f := range fa {
			fb[i] = &flow{name: f.name, costs: slices.Clone(f.costs)}
			fb[i].SetState(f.State())
		}
		b.s.Load(a.s.Quantum(), a.s.Round(), a.s.Target())
		a.s.Each(func(f *flow, next bool) { b.s.Append(fb[slices.Index(fa, f)], next) })
		for j, st := range steps[at:] {
			ga, gb := op(a, fa, st.kind, st.i, st.w, st.cost), op(b, fb, st.kind, st.i, st.w, st.cost)
			if ga != gb || a.s.Round() != b.s.Round() || a.s.Len() != b.s.Len() {
				t.Fatalf("step %d after the save: %q round %d, rebuilt %q round %d", j, ga, a.s.Round(), gb, b.s.Round())
			}
			for i := range fa {
				if fa[i].State() != fb[i].State() || fa[i].Active() != fb[i].Active() {
					t.Fatalf("step %d after the save: flow %d: %+v, rebuilt %+v", j, i, fa[i].State(), fb[i].State())
				}
			}
		}
	})
}
