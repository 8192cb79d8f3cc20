package drr_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/fila-mq/fila/broker/internal/sched/drr"
	"pgregory.net/rapid"
)

// flow is a test flow: a FIFO of message costs.
type flow struct {
	drr.Flow[*flow]
	name   string
	costs  []int64
	served int64 // cost units served
	visits int   // deliveries
}

func (f *flow) DRR() *drr.Flow[*flow] { return &f.Flow }

// sim drives a Scheduler the way the broker does: a flow is active while
// it has messages, forgotten when it empties.
type sim struct {
	s     drr.Scheduler[*flow]
	log   []string
	round []uint64 // round of each delivery
}

func newSim(quantum int64) *sim {
	m := &sim{}
	m.s.Init(quantum)
	return m
}

func (m *sim) enqueue(f *flow, w uint32, cost int64) {
	m.s.SetWeight(f, w)
	f.costs = append(f.costs, cost)
	if len(f.costs) == 1 && !f.Active() {
		m.s.Activate(f)
	}
}

// step serves one message; it returns nil when nothing is backlogged.
func (m *sim) step() *flow {
	f, ok := m.s.Next()
	if !ok {
		return nil
	}
	c := f.costs[0]
	f.costs = f.costs[1:]
	f.served += c
	f.visits++
	m.s.Charge(f, c)
	if len(f.costs) == 0 {
		m.s.Forget(f)
	}
	m.log = append(m.log, f.name)
	m.round = append(m.round, m.s.Round())
	return f
}

func TestOrder(t *testing.T) {
	tests := []struct {
		name    string
		quantum int64
		setup   func(m *sim, fs map[string]*flow)
		steps   int
		want    string
	}{
		{
			name:    "one message per visit rotates",
			quantum: 1000,
			setup: func(m *sim, fs map[string]*flow) {
				for i := 0; i < 3; i++ {
					m.enqueue(fs["a"], 1, 100)
					m.enqueue(fs["b"], 1, 100)
				}
			},
			steps: 6,
			want:  "a b a b a b",
		},
		{
			name:    "weight doubles the share per round",
			quantum: 100,
			setup: func(m *sim, fs map[string]*flow) {
				for i := 0; i < 6; i++ {
					m.enqueue(fs["a"], 2, 100)
					m.enqueue(fs["b"], 1, 100)
				}
			},
			steps: 9,
			want:  "a b a b a a b a a",
		},
		{
			name:    "a message larger than the quantum is served at once and repaid",
			quantum: 100,
			setup: func(m *sim, fs map[string]*flow) {
				m.enqueue(fs["a"], 1, 350)
				m.enqueue(fs["a"], 1, 100)
				for i := 0; i < 5; i++ {
					m.enqueue(fs["b"], 1, 100)
				}
			},
			steps: 7,
			want:  "a b b b a b b",
		},
		{
			name:    "a newly backlogged flow joins the current round",
			quantum: 1000,
			setup: func(m *sim, fs map[string]*flow) {
				for i := 0; i < 50; i++ {
					m.enqueue(fs["a"], 1, 10)
				}
				m.step()
				m.step()
				m.enqueue(fs["b"], 1, 10)
			},
			steps: 2,
			want:  "a a a b",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := newSim(tt.quantum)
			fs := map[string]*flow{"a": {name: "a"}, "b": {name: "b"}}
			tt.setup(m, fs)
			for i := 0; i < tt.steps; i++ {
				m.step()
			}
			if got := strings.Join(m.log, " "); got != tt.want {
				t.Errorf("deliveries = %q; want %q", got, tt.want)
			}
		})
	}
}

func TestRoundSkip(t *testing.T) {
	// One flow with messages 100 × the quantum: every delivery is
	// followed by 99 rounds of repayment, skipped without visits.
	m := newSim(10)
	f := &flow{name: "a"}
	for i := 0; i < 5; i++ {
		m.enqueue(f, 1, 1000)
	}
	for i := 0; i < 5; i++ {
		if got := m.step(); got != f {
			t.Fatalf("step %d = %v; want a", i, got)
		}
	}
	if got, want := m.s.Round(), uint64(1+4*100); got != want {
		t.Errorf("Round() = %d; want %d", got, want)
	}
}

func TestRemoveKeepsDeficitForgetClears(t *testing.T) {
	var s drr.Scheduler[*flow]
	s.Init(100)
	a := &flow{name: "a"}
	s.SetWeight(a, 3)
	s.Activate(a)
	if got := a.Deficit(); got != 300 {
		t.Fatalf("Deficit() after Activate = %d; want 300", got)
	}
	n, _ := s.Next()
	s.Charge(n, 120)
	s.Remove(a)
	if a.Active() || a.Deficit() != 180 {
		t.Fatalf("after Remove: Active() = %v, Deficit() = %d; want false, 180", a.Active(), a.Deficit())
	}
	s.Resume(a)
	if !a.Active() || a.Deficit() != 180 {
		t.Fatalf("after Resume: Active() = %v, Deficit() = %d; want true, 180", a.Active(), a.Deficit())
	}
	s.Forget(a)
	if a.Active() || a.Deficit() != 0 || s.Len() != 0 {
		t.Fatalf("after Forget: Active() = %v, Deficit() = %d, Len() = %d; want false, 0, 0", a.Active(), a.Deficit(), s.Len())
	}
}

// TestPropertyShareOverWholeRounds checks the DRR service bound: over any
// window of whole rounds in which every flow stays backlogged, a flow of
// weight w is served n·w·quantum cost units give or take less than one
// message (n rounds, skipped rounds included), and when no message costs
// more than half the smallest flow's quantum, its share of the total
// differs from w/Σw by at most quantum × max weight.
func TestPropertyShareOverWholeRounds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		quantum := rapid.Int64Range(1, 2000).Draw(t, "quantum")
		nflows := rapid.IntRange(1, 12).Draw(t, "flows")
		small := rapid.Bool().Draw(t, "small")
		maxCost := 4 * quantum
		if small {
			maxCost = quantum / 2
			if maxCost < 1 {
				maxCost = 1
			}
		}
		m := newSim(quantum)
		flows := make([]*flow, nflows)
		var wmax, wsum int64
		for i := range flows {
			f := &flow{name: fmt.Sprint(i)}
			w := uint32(rapid.IntRange(1, 8).Draw(t, "weight"))
			if small && maxCost*2 > quantum {
				w = 1 // keep every message ≤ half of w·quantum
			}
			flows[i] = f
			wsum += int64(w)
			wmax = max(wmax, int64(w))
			// Enough messages that no flow empties during the run.
			for j := 0; j < 400; j++ {
				m.enqueue(f, w, rapid.Int64Range(1, maxCost).Draw(t, "cost"))
			}
		}
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		// served[r] = per-flow service at the start of round r.
		type snap struct {
			round  uint64
			served []int64
		}
		take := func() snap {
			s := snap{round: m.s.Round(), served: make([]int64, nflows)}
			for i, f := range flows {
				s.served[i] = f.served
			}
			return s
		}
		var snaps []snap
		last := uint64(0)
		for i := 0; i < steps; i++ {
			// A round starts when Next moves to it; snapshot before the
			// first delivery of each round.
			if _, ok := m.s.Next(); !ok {
				t.Fatalf("no flow active after %d steps", i)
			}
			if r := m.s.Round(); r != last {
				snaps = append(snaps, take())
				last = r
			}
			m.step()
			for _, f := range flows {
				if len(f.costs) == 0 {
					t.Fatalf("flow %s emptied; the test needs more messages", f.name)
				}
			}
		}
		for a := 0; a < len(snaps); a++ {
			for b := a + 1; b < len(snaps); b++ {
				n := int64(snaps[b].round - snaps[a].round)
				var total int64
				for i := range flows {
					total += snaps[b].served[i] - snaps[a].served[i]
				}
				for i, f := range flows {
					got := snaps[b].served[i] - snaps[a].served[i]
					want := n * int64(f.Weight()) * quantum
					if d := got - want; d <= -maxCost || d >= maxCost {
						t.Fatalf("flow %s over rounds [%d,%d): served %d; want %d ± %d", f.name, snaps[a].round, snaps[b].round, got, want, maxCost)
					}
					if small {
						ideal := float64(total) * float64(f.Weight()) / float64(wsum)
						if d := float64(got) - ideal; d > float64(quantum*wmax) || d < -float64(quantum*wmax) {
							t.Fatalf("flow %s over rounds [%d,%d): served %d of %d; want %.1f ± %d", f.name, snaps[a].round, snaps[b].round, got, total, ideal, quantum*wmax)
						}
					}
				}
			}
		}
	})
}

// TestPropertyNewFlowServedWithinK checks that a flow that becomes
// backlogged while K others are gets its first delivery within K
// deliveries, whatever the others' weights, costs and history.
func TestPropertyNewFlowServedWithinK(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		quantum := rapid.Int64Range(1, 5000).Draw(t, "quantum")
		k := rapid.IntRange(1, 30).Draw(t, "k")
		m := newSim(quantum)
		for i := 0; i < k; i++ {
			f := &flow{name: fmt.Sprint(i)}
			w := uint32(rapid.IntRange(1, 100).Draw(t, "weight"))
			for j := 0; j < 200; j++ {
				m.enqueue(f, w, rapid.Int64Range(1, 3*quantum).Draw(t, "cost"))
			}
		}
		warm := rapid.IntRange(0, 500).Draw(t, "warm")
		for i := 0; i < warm; i++ {
			m.step()
		}
		active := m.s.Len()
		quiet := &flow{name: "quiet"}
		m.enqueue(quiet, uint32(rapid.IntRange(1, 100).Draw(t, "quietWeight")), rapid.Int64Range(1, 3*quantum).Draw(t, "quietCost"))
		for n := 0; ; n++ {
			if m.step() == quiet {
				if n > active {
					t.Fatalf("quiet flow served after %d deliveries; want at most %d (backlogged flows)", n, active)
				}
				return
			}
		}
	})
}

// BenchmarkVisit measures one DRR decision (Next and Charge) with n flows
// always backlogged, against a plain FIFO ring of the same flows (the
// cost of rotating without deficits).
func BenchmarkVisit(b *testing.B) {
	for _, n := range []int{1, 10, 10_000, 1_000_000} {
		b.Run(fmt.Sprintf("flows=%d", n), func(b *testing.B) {
			var s drr.Scheduler[*flow]
			s.Init(1000)
			for i := 0; i < n; i++ {
				f := &flow{}
				s.SetWeight(f, uint32(1+i%3))
				s.Activate(f)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				f, _ := s.Next()
				s.Charge(f, 100)
			}
		})
	}
}
