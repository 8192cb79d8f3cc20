package stfq_test

import (
	"fmt"
	"math"
	"testing"

	"github.com/fila-mq/fila/broker/internal/sched/stfq"
	"pgregory.net/rapid"
)

// flow is a test flow: a count of backlogged units of one cost.
type flow struct {
	stfq.Flow[*flow]
	name    string
	backlog int
	cost    int64
	served  int64 // cost units served
}

func (f *flow) STFQ() *stfq.Flow[*flow] { return &f.Flow }

// serve makes one decision, as the broker does: Next, serve one unit,
// Charge, and Remove the flow once it has nothing left.
func serve(s *stfq.Scheduler[*flow]) *flow {
	f, ok := s.Next()
	if !ok {
		return nil
	}
	f.backlog--
	f.served += f.cost
	s.Charge(f, f.cost)
	if f.backlog == 0 {
		s.Remove(f)
	}
	return f
}

// TestShortWindowShares: at weights 1:2:3:4:5, every flow backlogged,
// every window of 100 consecutive deliveries gives each flow its entitled
// count, 100 × w / 15, within ±2 messages.
func TestShortWindowShares(t *testing.T) {
	var s stfq.Scheduler[*flow]
	flows := make([]*flow, 5)
	for i := range flows {
		flows[i] = &flow{name: fmt.Sprint(i + 1), backlog: 1 << 30, cost: 1}
		s.SetWeight(flows[i], uint32(i+1))
		s.Activate(flows[i])
	}
	const n, window = 30000, 100
	order := make([]int, n)
	for d := range order {
		order[d] = int(serve(&s).Weight()) - 1
	}
	worst := 0.0
	for start := 0; start+window <= n; start++ {
		var count [5]int
		for _, i := range order[start : start+window] {
			count[i]++
		}
		for i, c := range count {
			want := float64(window) * float64(i+1) / 15
			if e := math.Abs(float64(c) - want); e > worst {
				worst = e
			}
			if math.Abs(float64(c)-want) > 2 {
				t.Fatalf("window at delivery %d: weight %d served %d, entitled %.1f", start, i+1, c, want)
			}
		}
	}
	t.Logf("largest error over every window of %d: %.2f messages", window, worst)
}

// TestNewFlowServedAtOnce: a flow that becomes backlogged beside flows
// with deep backlogs is served before any of them is served twice.
func TestNewFlowServedAtOnce(t *testing.T) {
	var s stfq.Scheduler[*flow]
	noisy := make([]*flow, 50)
	for i := range noisy {
		noisy[i] = &flow{name: fmt.Sprint("noisy", i), backlog: 1 << 20, cost: 1}
		s.Activate(noisy[i])
	}
	for range 1234 {
		serve(&s)
	}
	quiet := &flow{name: "quiet", backlog: 1, cost: 1}
	s.Activate(quiet)
	seen := map[*flow]bool{}
	for d := 0; ; d++ {
		f := serve(&s)
		if f == quiet {
			if d > len(noisy) {
				t.Fatalf("the new flow waited %d deliveries beside %d backlogged flows", d, len(noisy))
			}
			return
		}
		if seen[f] {
			t.Fatalf("%s was served twice before the new flow", f.name)
		}
		seen[f] = true
	}
}

// TestNoCreditWhileOut: a flow taken out (its messages wait for tokens)
// comes back at the virtual time, not behind it: it is not owed the
// service it missed, so it gets its share from then on, not a burst.
func TestNoCreditWhileOut(t *testing.T) {
	var s stfq.Scheduler[*flow]
	a := &flow{name: "a", backlog: 1 << 20, cost: 1}
	b := &flow{name: "b", backlog: 1 << 20, cost: 1}
	s.Activate(a)
	s.Activate(b)
	for range 10 {
		serve(&s)
	}
	s.Remove(b)
	for range 1000 {
		if f := serve(&s); f != a {
			t.Fatalf("served %s while it was out", f.name)
		}
	}
	s.Activate(b)
	if lag := s.Lag(b); lag < 0 {
		t.Fatalf("returned with lag %.2f: it hoards the service it missed", lag)
	}
	var count = map[*flow]int{}
	for range 100 {
		count[serve(&s)]++
	}
	if count[a] < 49 || count[b] < 49 {
		t.Fatalf("after the return: a %d, b %d of 100; want an even split", count[a], count[b])
	}
}

// TestWeightChangeAppliesToBacklog: raising a backlogged flow's weight
// changes its share from the next delivery, not after its backlog.
func TestWeightChangeAppliesToBacklog(t *testing.T) {
	var s stfq.Scheduler[*flow]
	a := &flow{name: "a", backlog: 1 << 20, cost: 1}
	b := &flow{name: "b", backlog: 1 << 20, cost: 1}
	s.Activate(a)
	s.Activate(b)
	for range 100 {
		serve(&s)
	}
	s.SetWeight(b, 3)
	count := map[*flow]int{}
	for range 100 {
		count[serve(&s)]++
	}
	if count[b] < 73 || count[b] > 77 {
		t.Fatalf("after the weight went 1 → 3: b served %d of 100, want 75 ± 2", count[b])
	}
}

// TestTagsWrap: the virtual time may run past 2^64: tags compare as
// wrapping differences.
func TestTagsWrap(t *testing.T) {
	var s stfq.Scheduler[*flow]
	a := &flow{name: "a", backlog: 1 << 20, cost: 1}
	s.Activate(a)
	s.Charge(a, math.MaxInt64/stfq.Scale) // far ahead
	s.Charge(a, math.MaxInt64/stfq.Scale)
	for range 100 {
		serve(&s) // a alone, V follows it past the wrap
	}
	b := &flow{name: "b", backlog: 1 << 20, cost: 1}
	s.Activate(b)
	count := map[*flow]int{}
	for range 100 {
		count[serve(&s)]++
	}
	if count[a] != 50 || count[b] != 50 {
		t.Fatalf("across the wrap: a %d, b %d of 100", count[a], count[b])
	}
}

// model is the reference: the same rules, a linear scan instead of a
// heap.
type model struct {
	v, seq uint64
	flows  []*mflow
}

type mflow struct {
	tag, seq uint64
	weight   uint32
	in       bool
}

func (m *model) activate(f *mflow) {
	if f.in {
		return
	}
	if int64(f.tag-m.v) < 0 {
		f.tag = m.v
	}
	m.seq++
	f.seq, f.in = m.seq, true
}

func (m *model) next() int {
	best := -1
	for i, f := range m.flows {
		if !f.in {
			continue
		}
		if b := best; b < 0 || int64(f.tag-m.flows[b].tag) < 0 || (f.tag == m.flows[b].tag && f.seq < m.flows[b].seq) {
			best = i
		}
	}
	if best >= 0 && int64(m.flows[best].tag-m.v) > 0 {
		m.v = m.flows[best].tag
	}
	return best
}

func (m *model) charge(f *mflow, cost int64) {
	d := uint64(max(cost, 1)) * stfq.Scale / uint64(max(f.weight, 1))
	f.tag += max(d, 1)
	m.seq++
	f.seq = m.seq
}

// TestPropertyMatchesModel: under any sequence of activations, removals,
// weight changes and services, the heap makes the decisions of a linear
// scan over the same rules.
func TestPropertyMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nf := rapid.IntRange(1, 12).Draw(t, "flows")
		var s stfq.Scheduler[*flow]
		m := &model{}
		flows := make([]*flow, nf)
		for i := range flows {
			flows[i] = &flow{name: fmt.Sprint(i)}
			m.flows = append(m.flows, &mflow{})
		}
		for step := range rapid.IntRange(1, 300).Draw(t, "steps") {
			i := rapid.IntRange(0, nf-1).Draw(t, "flow")
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0, 1:
				s.Activate(flows[i])
				m.activate(m.flows[i])
			case 2:
				s.Remove(flows[i])
				m.flows[i].in = false
			case 3:
				w := rapid.Uint32Range(0, 10).Draw(t, "weight")
				s.SetWeight(flows[i], w)
				m.flows[i].weight = w
			default:
				f, ok := s.Next()
				want := m.next()
				if !ok {
					if want >= 0 {
						t.Fatalf("step %d: heap empty, model serves %d", step, want)
					}
					continue
				}
				if f != flows[want] {
					t.Fatalf("step %d: heap serves %s, model %d", step, f.name, want)
				}
				cost := rapid.Int64Range(1, 5).Draw(t, "cost")
				s.Charge(f, cost)
				m.charge(m.flows[want], cost)
			}
			if s.V() != m.v {
				t.Fatalf("step %d: V %d, model %d", step, s.V(), m.v)
			}
		}
	})
}

// TestPropertyFairnessBound: for any weights and unit costs up to cmax,
// any two flows backlogged throughout an interval are served, per unit of
// weight, within cmax/w_i + cmax/w_j of each other over the interval.
func TestPropertyFairnessBound(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		nf := rapid.IntRange(2, 8).Draw(t, "flows")
		const cmax = 4
		var s stfq.Scheduler[*flow]
		flows := make([]*flow, nf)
		for i := range flows {
			flows[i] = &flow{name: fmt.Sprint(i), backlog: 1 << 30, cost: rapid.Int64Range(1, cmax).Draw(t, "cost")}
			s.SetWeight(flows[i], rapid.Uint32Range(1, 8).Draw(t, "weight"))
			s.Activate(flows[i])
		}
		warm := rapid.IntRange(0, 200).Draw(t, "warm-up")
		for range warm {
			serve(&s)
		}
		before := make([]int64, nf)
		for i, f := range flows {
			before[i] = f.served
		}
		for d := range rapid.IntRange(1, 500).Draw(t, "interval") {
			serve(&s)
			for i, fi := range flows {
				for j, fj := range flows[i+1:] {
					wi, wj := float64(fi.Weight()), float64(fj.Weight())
					gap := math.Abs(float64(fi.served-before[i])/wi - float64(fj.served-before[i+1+j])/wj)
					if bound := cmax/wi + cmax/wj + 1e-9; gap > bound {
						t.Fatalf("after %d deliveries: flows %d and %d differ by %.3f per weight, bound %.3f", d+1, i, i+1+j, gap, bound)
					}
				}
			}
		}
	})
}

// TestStaleEntriesDoNotAccumulate: a flow taken out and returned again
// and again leaves the heap no larger than a small multiple of the
// backlogged flows.
func TestStaleEntriesDoNotAccumulate(t *testing.T) {
	var s stfq.Scheduler[*flow]
	a := &flow{name: "a", backlog: 1 << 30, cost: 1}
	b := &flow{name: "b", backlog: 1 << 30, cost: 1}
	s.Activate(a)
	for range 100000 {
		s.Activate(b)
		s.Remove(b)
	}
	if got := stfq.HeapLenForTest(&s); got > 4*s.Len()+64+1 {
		t.Fatalf("heap of %d entries for %d backlogged flows", got, s.Len())
	}
	if f, _ := s.Next(); f != a {
		t.Fatal("the flow left backlogged is not served")
	}
}

// BenchmarkDecision measures one decision (Next, then Charge) among n
// backlogged flows of mixed weights.
func BenchmarkDecision(b *testing.B) {
	for _, n := range []int{10, 10000, 1000000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			var s stfq.Scheduler[*flow]
			for i := range n {
				f := &flow{backlog: 1 << 30, cost: 1}
				s.SetWeight(f, uint32(1+i%5))
				s.Activate(f)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				f, _ := s.Next()
				s.Charge(f, 1)
			}
		})
	}
}

// TestAdjust: a cost learnt after the charge moves the tag: a flow whose
// units cost 10 but are charged 1, adjusted by 9 after each, gets a tenth
// of the units of a flow of true cost 1; a flow charged too much and
// adjusted back gets its share back, and an adjustment never takes a tag
// behind the virtual time.
func TestAdjust(t *testing.T) {
	var s stfq.Scheduler[*flow]
	slow := &flow{name: "slow", backlog: 1 << 20, cost: 1}
	fast := &flow{name: "fast", backlog: 1 << 20, cost: 1}
	s.Activate(slow)
	s.Activate(fast)
	count := map[*flow]int{}
	for range 1100 {
		f := serve(&s)
		count[f]++
		if f == slow {
			s.Adjust(slow, 9)
		}
	}
	if count[slow] < 95 || count[slow] > 105 {
		t.Fatalf("slow served %d of 1100; want 100 (a tenth of fast's)", count[slow])
	}
	// Charged 5 a unit, truly 1: adjusted back by 4, an even split.
	slow.cost, count = 5, map[*flow]int{}
	for range 1000 {
		f := serve(&s)
		count[f]++
		if f == slow {
			s.Adjust(slow, -4)
		}
	}
	if count[slow] < 490 || count[slow] > 510 {
		t.Fatalf("slow, charged 5 and adjusted by -4, served %d of 1000; want 500", count[slow])
	}
	s.Remove(slow)
	s.Adjust(slow, -1<<30)
	if s.Lag(slow) < 0 {
		t.Fatalf("adjusted behind the virtual time: lag %.1f", s.Lag(slow))
	}
}
