// Package stfq implements start-time fair queueing (P. Goyal, H. M. Vin
// and H. Cheng, "Start-time Fair Queuing: A Scheduling Algorithm for
// Integrated Services Packet Switching Networks", SIGCOMM 1996) over flows
// that the caller owns, with one tag per flow rather than per packet.
//
// Each backlogged flow has a start tag, the virtual time of its next
// service. The scheduler serves the flow with the smallest start tag (ties
// go to the flow that took its tag first) and the virtual time follows the
// start tag of the flow in service. Serving a unit of cost c to a flow of
// weight w advances its tag by c/w. The rules:
//
//   - A flow that becomes backlogged takes the tag max(V, its own tag): a
//     flow that was idle starts at the virtual time, so it is served after
//     at most one unit of each flow whose tag equals V, and never waits
//     behind another flow's backlog; a flow that left a moment ago with
//     its tag ahead keeps it, so leaving and coming back gains nothing.
//   - A flow taken out while still backlogged (every message it has waits
//     for a token, say) keeps its tag, and on its return takes
//     max(V, its tag) too: it earns no credit while it is out (no
//     wind-up) and cannot come back ahead of the others (no hoarding).
//   - Tags are advanced when a unit is served, with the flow's weight at
//     that moment: a weight change applies to the backlog at once.
//
// For any two flows i and j backlogged throughout an interval, the work
// served to each over the interval, divided by its weight, differs by at
// most cmax/w_i + cmax/w_j (cmax the largest unit's cost): at weights 1:2,
// unit costs, that is within 1.5 messages of the entitled shares at every
// time scale, not only over whole rounds as with deficit round robin.
//
// The backlogged flows are kept in a 4-ary heap of (tag, sequence)
// entries stored inline, so a decision costs O(log n) comparisons that
// touch no flow; flows taken out are left in the heap and skipped when
// they surface (each flow carries a generation). Idle flows are in no
// structure and cost nothing. Tags are compared as wrapping differences,
// so the virtual time may run past 2^64.
//
// The package has no goroutines and no clock; a Scheduler is not safe for
// concurrent use.
package stfq

// Scale is the virtual time one unit of cost takes from a flow of
// weight 1: a flow of weight w advances Scale/w per unit.
const Scale = 1 << 20

// A Flow is the scheduling state of one flow, embedded in the caller's
// per-flow struct and reached through Node.STFQ. The zero value is an idle
// flow of weight 1 with tag 0.
type Flow[T any] struct {
	owner  T
	tag    uint64 // start tag: the virtual time of the next service
	seq    uint64 // when the tag was taken: the tie-break
	gen    uint32 // bumped when the flow leaves the heap; entries of older generations are stale
	weight uint32 // 0 reads as 1
	in     bool   // in the heap, with an entry of generation gen
}

// Tag reports the flow's start tag in virtual time units (Scale per unit
// of cost at weight 1).
func (f *Flow[T]) Tag() uint64 { return f.tag }

// Seq reports when the flow took its tag, in the scheduler's count of
// tags given: among equal tags, the smaller is served first.
func (f *Flow[T]) Seq() uint64 { return f.seq }

// Weight reports the flow's weight, at least 1.
func (f *Flow[T]) Weight() uint32 {
	if f.weight == 0 {
		return 1
	}
	return f.weight
}

// Active reports whether the flow is backlogged in the scheduler.
func (f *Flow[T]) Active() bool { return f.in }

// A Node is a pointer to the caller's per-flow struct; STFQ returns the
// embedded Flow.
type Node[T any] interface {
	comparable
	STFQ() *Flow[T]
}

type entry[T any] struct {
	tag, seq uint64
	f        *Flow[T]
	gen      uint32
}

// before orders entries by tag, as a wrapping difference, then by
// sequence.
func (e *entry[T]) before(o *entry[T]) bool {
	if e.tag != o.tag {
		return int64(e.tag-o.tag) < 0
	}
	return e.seq < o.seq
}

// A Scheduler orders the backlogged flows of one queue. The zero value is
// an empty scheduler at virtual time 0.
type Scheduler[T Node[T]] struct {
	v    uint64 // virtual time: the start tag of the flow last served
	seq  uint64 // last sequence number given
	n    int    // flows in the heap
	heap []entry[T]
}

// V returns the virtual time, in the units of Flow.Tag.
func (s *Scheduler[T]) V() uint64 { return s.v }

// Len returns the number of backlogged flows.
func (s *Scheduler[T]) Len() int { return s.n }

// Lag returns how far the flow's tag is ahead of the virtual time, in
// units of cost at weight 1 (negative if it is behind, which only a flow
// out of the heap can be).
func (s *Scheduler[T]) Lag(n T) float64 {
	return float64(int64(n.STFQ().tag-s.v)) / Scale
}

// SetWeight sets the flow's weight (0 means 1). It applies to every unit
// served from now on, the flow's backlog included.
func (s *Scheduler[T]) SetWeight(n T, w uint32) {
	n.STFQ().weight = max(w, 1)
}

// Activate adds a flow that has become backlogged, or returns one that
// was taken out, with the tag max(V, its tag). Activating an active flow
// does nothing.
func (s *Scheduler[T]) Activate(n T) {
	f := n.STFQ()
	if f.in {
		return
	}
	f.owner = n
	if int64(f.tag-s.v) < 0 {
		f.tag = s.v
	}
	s.seq++
	f.seq = s.seq
	f.in = true
	s.n++
	s.push(entry[T]{tag: f.tag, seq: f.seq, f: f, gen: f.gen})
}

// Sync brings the tag of a flow that is not in the heap up to the virtual
// time, as Activate would, without adding it: a caller that serves the
// flow by other means (ahead of the heap) then Charges it, so that what
// it was served counts against its share once it is Activated.
func (s *Scheduler[T]) Sync(n T) {
	f := n.STFQ()
	if !f.in && int64(f.tag-s.v) < 0 {
		f.tag = s.v
	}
}

// Ahead returns how many backlogged flows are served before n: those
// whose tag, then sequence, is smaller. It walks the heap: O(flows), for
// explanations, not hot paths. 0 for a flow not in the heap.
func (s *Scheduler[T]) Ahead(n T) int {
	f := n.STFQ()
	if !f.in {
		return 0
	}
	me := entry[T]{tag: f.tag, seq: f.seq}
	ahead := 0
	for i := range s.heap {
		e := &s.heap[i]
		if e.f != f && e.f.in && e.f.gen == e.gen && e.before(&me) {
			ahead++
		}
	}
	return ahead
}

// Remove takes an active flow out and keeps its tag, for a later
// Activate. Removing an inactive flow does nothing.
func (s *Scheduler[T]) Remove(n T) {
	f := n.STFQ()
	if !f.in {
		return
	}
	f.in = false
	f.gen++
	s.n--
	if len(s.heap) > 4*s.n+64 {
		s.compact()
	}
}

// compact drops the stale entries and restores the heap order, so that
// flows taken out and returned often do not grow the heap.
func (s *Scheduler[T]) compact() {
	h := s.heap[:0]
	for _, e := range s.heap {
		if e.f.in && e.f.gen == e.gen {
			h = append(h, e)
		}
	}
	clear(s.heap[len(h):])
	s.heap = h
	for i := len(h)/4 + 1; i >= 0; i-- {
		if i < len(h) {
			s.down(i)
		}
	}
}

// Next returns the backlogged flow with the smallest start tag and moves
// the virtual time to it. Next does not move the flow: serve it and call
// Charge, or take it out with Remove. ok is false when no flow is
// backlogged.
func (s *Scheduler[T]) Next() (n T, ok bool) {
	for len(s.heap) > 0 {
		e := &s.heap[0]
		if f := e.f; f.in && f.gen == e.gen {
			if int64(e.tag-s.v) > 0 {
				s.v = e.tag
			}
			return f.owner, true
		}
		s.pop()
	}
	var zero T
	return zero, false
}

// Charge advances the tag of n, the flow Next returned, by cost (at least
// 1) over its weight, and puts it back in order behind the flows whose
// tag is now the same.
func (s *Scheduler[T]) Charge(n T, cost int64) {
	f := n.STFQ()
	d := uint64(max(cost, 1)) * Scale / uint64(f.Weight())
	f.tag += max(d, 1)
	s.seq++
	f.seq = s.seq
	if !f.in {
		return
	}
	if e := &s.heap[0]; e.f == f && e.gen == f.gen {
		e.tag, e.seq = f.tag, f.seq
		s.down(0)
		return
	}
	// Not at the top (the caller served a flow Next did not return):
	// leave its entry stale and add a fresh one.
	f.gen++
	s.push(entry[T]{tag: f.tag, seq: f.seq, f: f, gen: f.gen})
}

// Adjust moves the tag of n by delta units of cost over its weight, for
// a cost known only after the unit was charged: forward when it was
// charged less than it used, backward when more, but never behind the
// virtual time (a flow gains no credit to spend later). A flow in the
// heap takes its new place.
func (s *Scheduler[T]) Adjust(n T, delta int64) {
	f := n.STFQ()
	mag := delta
	if mag < 0 {
		mag = -mag
	}
	d := uint64(mag) * Scale / uint64(f.Weight())
	switch ahead := int64(f.tag - s.v); {
	case d == 0:
		return
	case delta > 0:
		f.tag += d
	case ahead <= 0:
		return // behind or at the virtual time already
	case uint64(ahead) > d:
		f.tag -= d
	default:
		f.tag = s.v
	}
	if !f.in {
		return
	}
	f.gen++
	s.push(entry[T]{tag: f.tag, seq: f.seq, f: f, gen: f.gen})
	if len(s.heap) > 4*s.n+64 {
		s.compact()
	}
}

func (s *Scheduler[T]) push(e entry[T]) {
	s.heap = append(s.heap, e)
	s.up(len(s.heap) - 1)
}

func (s *Scheduler[T]) pop() {
	last := len(s.heap) - 1
	s.heap[0] = s.heap[last]
	s.heap[last] = entry[T]{}
	s.heap = s.heap[:last]
	if last > 0 {
		s.down(0)
	}
}

func (s *Scheduler[T]) up(i int) {
	h := s.heap
	e := h[i]
	for i > 0 {
		p := (i - 1) / 4
		if !e.before(&h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
}

func (s *Scheduler[T]) down(i int) {
	h := s.heap
	n := len(h)
	e := h[i]
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < c+4 && j < n; j++ {
			if h[j].before(&h[m]) {
				m = j
			}
		}
		if !h[m].before(&e) {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = e
}

// A FlowState is the state of a flow apart from its place in the heap:
// what Flow.State reports and Flow.SetState restores, so that a scheduler
// can be saved and rebuilt exactly (see Scheduler.Insert).
type FlowState struct {
	Tag    uint64 // the start tag, in virtual time units
	Seq    uint64 // when the tag was taken
	Weight uint32 // as set: 0 reads as 1
}

// State returns the flow's state apart from its place in the heap.
func (f *Flow[T]) State() FlowState { return FlowState{Tag: f.tag, Seq: f.seq, Weight: f.weight} }

// SetState sets the state of a flow that is not backlogged, as State
// reported it.
func (f *Flow[T]) SetState(st FlowState) { f.tag, f.seq, f.weight = st.Tag, st.Seq, st.Weight }

// Seq returns the last sequence number given. With V and the backlogged
// flows' FlowStates it is the whole state of the scheduler.
func (s *Scheduler[T]) Seq() uint64 { return s.seq }

// Load empties the scheduler and gives it the virtual time and the
// sequence counter of a saved one; Insert then adds its backlogged flows.
func (s *Scheduler[T]) Load(v, seq uint64) {
	clear(s.heap)
	*s = Scheduler[T]{v: v, seq: seq, heap: s.heap[:0]}
}

// Insert adds n, a flow that is not backlogged, as backlogged with the
// tag and sequence SetState gave it. Unlike Activate it takes no new tag
// or sequence: it rebuilds a saved scheduler, whose flows then come out
// of Next in the same order, (tag, sequence) being a total order.
func (s *Scheduler[T]) Insert(n T) {
	f := n.STFQ()
	if f.in {
		return
	}
	f.owner = n
	f.in = true
	s.n++
	s.push(entry[T]{tag: f.tag, seq: f.seq, f: f, gen: f.gen})
}
