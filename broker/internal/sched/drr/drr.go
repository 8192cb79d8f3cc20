// Package drr implements Deficit Round Robin (M. Shreedhar and G. Varghese,
// "Efficient Fair Queuing Using Deficit Round Robin", SIGCOMM 1995) over
// flows that the caller owns, in the surplus round robin variant that
// serves one unit per visit.
//
// Every round, each backlogged flow earns weight × quantum cost units of
// deficit and spends the cost of each unit (a message, for the scheduler)
// it is served. The rules, all O(1) in the number of flows:
//
//   - The scheduler keeps two intrusive lists: the flows of the current
//     round and the flows waiting for the next one. Idle flows are in
//     neither and cost nothing.
//   - A visit serves one unit from the flow at the head of the current
//     round, provided its deficit is positive. After the visit the flow
//     goes to the tail of the current round if its deficit is still
//     positive, else to the next round. A flow may overdraw by less than
//     one unit's cost (the surplus) and repays it in later rounds, so a
//     unit larger than the quantum is served at once instead of after
//     rounds of accumulation.
//   - When the current round is empty the next one starts. Credit is
//     applied lazily when a flow is first visited in a round, so starting a
//     round costs nothing; rounds in which no flow could reach a positive
//     deficit are skipped arithmetically instead of being visited.
//   - A newly backlogged flow joins the tail of the current round with a
//     fresh deficit of weight × quantum, so it waits for at most one visit
//     per flow already in the current round: a quiet flow never waits
//     behind a noisy flow's burst.
//
// Over n whole rounds during which a flow stays backlogged, it is served
// n × weight × quantum cost units, give or take less than one unit's cost
// (its deficit at a round's start lies in (-maxCost, 0]).
//
// The package has no goroutines and no clock; a Scheduler is not safe for
// concurrent use.
package drr

// DefaultQuantum is the deficit, in cost units, a flow of weight 1 earns
// per round when no quantum is configured.
const DefaultQuantum = 1000

// MaxQuantum bounds the quantum so that weight × quantum (weight up to
// 2^32-1) and the deficits derived from it stay far from int64 overflow.
const MaxQuantum = 1 << 24

// A Flow is the DRR state of one flow, embedded in the caller's per-flow
// struct and reached through Node.DRR. The zero value is an idle flow of
// weight 1.
type Flow[T any] struct {
	next, prev *Flow[T]
	owner      T // the caller's struct, set when the flow is first listed
	deficit    int64
	round      uint64 // the round whose credit deficit already includes
	weight     uint32 // 0 reads as 1
	in         uint8  // 0: in no list; 1, 2: in lists[in-1]
}

// Deficit reports the flow's deficit in cost units as of its last visit
// (credit for the rounds since then is applied at its next visit). It is
// zero for a flow that has not been backlogged since it was last forgotten.
func (f *Flow[T]) Deficit() int64 { return f.deficit }

// Weight reports the flow's weight, at least 1.
func (f *Flow[T]) Weight() uint32 {
	if f.weight == 0 {
		return 1
	}
	return f.weight
}

// Active reports whether the flow is in the current or the next round.
func (f *Flow[T]) Active() bool { return f.in != 0 }

// A Node is a pointer to the caller's per-flow struct; DRR returns the
// embedded Flow. The zero value of T (nil) ends lists.
type Node[T any] interface {
	comparable
	DRR() *Flow[T]
}

type list[T any] struct {
	head, tail *Flow[T]
	n          int
}

// A Scheduler orders the active flows of one queue. The zero value is not
// usable; call Init first.
type Scheduler[T Node[T]] struct {
	quantum int64
	round   uint64
	lists   [2]list[T]
	cur     uint8 // index in lists of the current round
	// target is a lower bound on the first round in which a flow of the
	// next round's list has a positive deficit (0: none computed). Flows
	// leaving that list early may leave it lower than the true bound,
	// which only costs visits, never fairness.
	target uint64
}

// Init sets the quantum, the deficit a flow of weight 1 earns per round,
// in cost units: values below 1 mean DefaultQuantum, values above
// MaxQuantum are clamped to it. Init empties the scheduler.
func (s *Scheduler[T]) Init(quantum int64) {
	switch {
	case quantum < 1:
		quantum = DefaultQuantum
	case quantum > MaxQuantum:
		quantum = MaxQuantum
	}
	*s = Scheduler[T]{quantum: quantum, round: 1}
}

// Quantum returns the quantum in cost units.
func (s *Scheduler[T]) Quantum() int64 { return s.quantum }

// Round returns the number of the current round. It only grows; it may
// grow by more than one when rounds are skipped.
func (s *Scheduler[T]) Round() uint64 { return s.round }

// Len returns the number of active flows (current and next round).
func (s *Scheduler[T]) Len() int { return s.lists[0].n + s.lists[1].n }

// SetWeight sets the flow's weight (0 means 1). The new weight applies to
// credit the flow earns from now on; a deficit above the new weight ×
// quantum is cut to it, so a deficit never exceeds one round's credit.
func (s *Scheduler[T]) SetWeight(n T, w uint32) {
	if w == 0 {
		w = 1
	}
	f := n.DRR()
	if f.weight == w {
		return
	}
	f.weight = w
	if c := int64(w) * s.quantum; f.deficit > c {
		f.deficit = c
	}
	if f.in == (s.cur^1)+1 { // waiting for the next round
		s.lowerTarget(f)
	}
}

// Activate adds a flow that has just become backlogged to the tail of the
// current round with a fresh deficit of weight × quantum. The flow must be
// inactive.
func (s *Scheduler[T]) Activate(n T) {
	f := n.DRR()
	f.owner = n
	f.deficit = int64(f.Weight()) * s.quantum
	f.round = s.round
	s.push(s.cur, f)
}

// Resume returns an inactive flow that kept its deficit (it was removed
// while still backlogged, for instance because every message it had was
// waiting for a token) to the lists: the current round if its deficit is
// positive, else the next. It earns no credit for the rounds it missed.
func (s *Scheduler[T]) Resume(n T) {
	f := n.DRR()
	f.owner = n
	f.round = s.round
	if f.deficit > 0 {
		s.push(s.cur, f)
		return
	}
	s.pushNext(f)
}

// Remove takes an active flow out of the lists and keeps its deficit, for
// a later Resume. Removing an inactive flow does nothing.
func (s *Scheduler[T]) Remove(n T) {
	f := n.DRR()
	if f.in == 0 {
		return
	}
	s.unlink(f.in-1, f)
}

// Forget removes the flow, if active, and clears its deficit: the flow is
// idle and its next Activate starts afresh.
func (s *Scheduler[T]) Forget(n T) {
	s.Remove(n)
	f := n.DRR()
	f.deficit = 0
	f.round = 0
}

// Next returns the flow to visit: the head of the current round, credited
// for the rounds it has been waiting, with a positive deficit. Flows whose
// deficit is still not positive after crediting move to the next round;
// an empty current round starts the next, skipping rounds in which no flow
// could be served. Next does not move the returned flow: serve it and call
// Charge, or take it out with Remove or Forget. ok is false when no flow is
// active.
func (s *Scheduler[T]) Next() (n T, ok bool) {
	var zero T
	for {
		f := s.lists[s.cur].head
		if f == nil {
			if s.lists[s.cur^1].n == 0 {
				return zero, false
			}
			s.cur ^= 1
			r := s.round + 1
			if s.target > r {
				r = s.target
			}
			s.round = r
			s.target = 0
			continue
		}
		if f.round < s.round {
			// At most one round's credit is kept: more accrues only when
			// the weight rose after the rounds to skip were computed.
			c := int64(f.Weight()) * s.quantum
			f.deficit = min(f.deficit+int64(s.round-f.round)*c, c)
			f.round = s.round
		}
		if f.deficit > 0 {
			return f.owner, true
		}
		s.unlink(s.cur, f)
		s.pushNext(f)
	}
}

// Ahead returns how many active flows are visited before n: those ahead
// of it in the current round, or, for a flow in the next round, the whole
// current round and those ahead of it in the next. It walks the lists:
// O(flows), for explanations, not hot paths. 0 for an inactive flow.
func (s *Scheduler[T]) Ahead(n T) int {
	f := n.DRR()
	if f.in == 0 {
		return 0
	}
	i := f.in - 1
	ahead := 0
	if i != s.cur {
		ahead = s.lists[s.cur].n
	}
	for x := s.lists[i].head; x != nil && x != f; x = x.next {
		ahead++
	}
	return ahead
}

// Charge spends cost (at least 1) from the deficit of n, the flow Next
// returned, and requeues it: at the tail of the current round if its
// deficit is still positive, else in the next round.
func (s *Scheduler[T]) Charge(n T, cost int64) {
	if cost < 1 {
		cost = 1
	}
	f := n.DRR()
	f.deficit -= cost
	if f.in != 0 {
		s.unlink(f.in-1, f)
	}
	if f.deficit > 0 {
		s.push(s.cur, f)
		return
	}
	s.pushNext(f)
}

// pushNext appends n to the next round's list and lowers the skip target
// to the first round in which n's deficit turns positive.
func (s *Scheduler[T]) pushNext(f *Flow[T]) {
	s.push(s.cur^1, f)
	s.lowerTarget(f)
}

func (s *Scheduler[T]) lowerTarget(f *Flow[T]) {
	// Credit is applied per round after f.round; the deficit turns
	// positive after floor(-deficit / (weight × quantum)) + 1 rounds.
	t := f.round + 1
	if f.deficit <= 0 {
		t += uint64(-f.deficit / (int64(f.Weight()) * s.quantum))
	}
	if s.target == 0 || t < s.target {
		s.target = t
	}
}

func (s *Scheduler[T]) push(i uint8, f *Flow[T]) {
	l := &s.lists[i]
	f.next, f.prev = nil, l.tail
	if l.tail != nil {
		l.tail.next = f
	} else {
		l.head = f
	}
	l.tail = f
	l.n++
	f.in = i + 1
}

func (s *Scheduler[T]) unlink(i uint8, f *Flow[T]) {
	l := &s.lists[i]
	if f.prev != nil {
		f.prev.next = f.next
	} else {
		l.head = f.next
	}
	if f.next != nil {
		f.next.prev = f.prev
	} else {
		l.tail = f.prev
	}
	f.next, f.prev = nil, nil
	f.in = 0
	l.n--
}

// A FlowState is the state of a flow apart from the list it is in: what
// Flow.State reports and Flow.SetState restores, so that a scheduler can
// be saved and rebuilt exactly (see Scheduler.Each and Scheduler.Load).
type FlowState struct {
	Deficit int64  // cost units, as of the flow's last visit
	Round   uint64 // the round whose credit Deficit already includes
	Weight  uint32 // as set: 0 reads as 1
}

// State returns the flow's state apart from its list membership.
func (f *Flow[T]) State() FlowState {
	return FlowState{Deficit: f.deficit, Round: f.round, Weight: f.weight}
}

// SetState sets the state of an inactive flow, as State reported it.
func (f *Flow[T]) SetState(st FlowState) {
	f.deficit, f.round, f.weight = st.Deficit, st.Round, st.Weight
}

// Target returns the skip target: a lower bound on the first round in
// which a flow waiting for the next round has a positive deficit, 0 when
// none is computed. With Quantum, Round, the flows in Each's order and
// their FlowStates, it is the whole state of the scheduler.
func (s *Scheduler[T]) Target() uint64 { return s.target }

// Each calls fn for every active flow in list order: the current round's
// flows in the order they will be visited, then the next round's (next
// set). fn must not change the scheduler.
func (s *Scheduler[T]) Each(fn func(n T, next bool)) {
	for i, l := range [2]uint8{s.cur, s.cur ^ 1} {
		for f := s.lists[l].head; f != nil; f = f.next {
			fn(f.owner, i == 1)
		}
	}
}

// Load empties the scheduler and gives it the quantum (clamped as by
// Init), the round and the skip target of a saved one; Append then
// rebuilds its lists.
func (s *Scheduler[T]) Load(quantum int64, round, target uint64) {
	s.Init(quantum)
	s.round, s.target = round, target
}

// Append adds n, an inactive flow, at the tail of the current round's list
// or, with next, of the next round's, keeping its deficit and round as
// SetState left them: called in Each's order, it rebuilds a saved
// scheduler's lists.
func (s *Scheduler[T]) Append(n T, next bool) {
	f := n.DRR()
	if f.in != 0 {
		return
	}
	f.owner = n
	i := s.cur
	if next {
		i ^= 1
	}
	s.push(i, f)
}
