package stfq_test

import (
	"fmt"
	"testing"

	"github.com/fila-mq/fila/broker/internal/sched/stfq"
	"pgregory.net/rapid"
)

// TestSaveLoad: a scheduler rebuilt from another's state (V, Seq, its
// backlogged flows Inserted with their FlowStates) serves the same flows
// in the same order from then on, though it holds none of the stale
// entries the original may.
func TestSaveLoad(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var a stfq.Scheduler[*flow]
		fa := make([]*flow, rapid.IntRange(1, 6).Draw(t, "flows"))
		for i := range fa {
			fa[i] = &flow{name: fmt.Sprint("f", i), cost: 1}
		}
		op := func(s *stfq.Scheduler[*flow], fs []*flow, kind, i int, w uint32) string {
			f := fs[i]
			switch kind {
			case 0:
				s.SetWeight(f, w)
				if f.backlog++; !f.Active() {
					s.Activate(f)
				}
				return ""
			case 1: // taken out while backlogged
				s.Remove(f)
				return ""
			case 2:
				if f.backlog > 0 {
					s.Activate(f)
				}
				return ""
			}
			if f := serve(s); f != nil {
				return fmt.Sprint(f.name, "@", s.V())
			}
			return "-"
		}
		type step struct {
			kind, i int
			w       uint32
		}
		var steps []step
		for range rapid.IntRange(1, 300).Draw(t, "steps") {
			steps = append(steps, step{rapid.IntRange(0, 5).Draw(t, "op"), rapid.IntRange(0, len(fa)-1).Draw(t, "flow"), rapid.Uint32Range(0, 4).Draw(t, "weight")})
		}
		at := rapid.IntRange(0, len(steps)).Draw(t, "save at")
		for _, st := range steps[:at] {
			op(&a, fa, st.kind, st.i, st.w)
		}
		var b stfq.Scheduler[*flow]
		b.Load(a.V(), a.Seq())
		fb := make([]*flow, len(fa))
		for i, f := range fa {
			fb[i] = &flow{name: f.name, cost: f.cost, backlog: f.backlog}
			fb[i].SetState(f.State())
			if f.Active() {
				b.Insert(fb[i])
			}
		}
		for j, st := range steps[at:] {
			ga, gb := op(&a, fa, st.kind, st.i, st.w), op(&b, fb, st.kind, st.i, st.w)
			if ga != gb || a.Len() != b.Len() || a.Seq() != b.Seq() {
				t.Fatalf("step %d after the save: %q, rebuilt %q", j, ga, gb)
			}
			for i := range fa {
				if fa[i].State() != fb[i].State() || fa[i].Active() != fb[i].Active() {
					t.Fatalf("step %d after the save: flow %d: %+v, rebuilt %+v", j, i, fa[i].State(), fb[i].State())
				}
			}
		}
	})
}
