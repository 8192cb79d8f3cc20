package sched

// heapOrder orders the elements of a timerHeap and keeps, for each, its
// index in the heap, so that removal and re-keying are O(log n).
type heapOrder[T any] interface {
	// before orders elements: earlier due time first, ties broken by a
	// stable key so that equal deadlines pop in a deterministic order.
	before(a, b T) bool
	// setIndex records x's index in the heap; -1 when out.
	setIndex(x T, i int32)
	index(x T) int32
}

// timed is an element that orders itself and keeps its own heap index: a
// pointer to a struct (tbucket, queue).
type timed[T any] interface {
	// before orders elements as heapOrder.before does.
	before(T) bool
	// setIndex records the element's index in the heap; -1 when out.
	setIndex(int32)
	index() int32
}

// selfOrder is the heapOrder of elements that are timed themselves.
type selfOrder[T timed[T]] struct{}

// before reports whether a is due before b, as a orders itself.
func (selfOrder[T]) before(a, b T) bool { return a.before(b) }

// setIndex records x's heap index in x.
func (selfOrder[T]) setIndex(x T, i int32) { x.setIndex(i) }

// index returns the heap index x records.
func (selfOrder[T]) index(x T) int32 { return x.index() }

// extOrder is the heapOrder of message timers, which the heap names by
// their extension records (whose msg names the message): by due time,
// then by when the timer was set, so that equal deadlines fire first set,
// first out, and setting the latest deadline costs O(1). The due time,
// tseq and heap index of a timed message are all in its extension
// record, so naming timers by it makes a comparison read two records,
// where naming them by message would read four (each message's record,
// then its extension).
type extOrder struct{ t *extSlab }

// before reports whether timer a is due before timer b: by due time,
// then by tseq.
func (o extOrder) before(a, b xref) bool {
	x, y := o.t.at(uint32(a)), o.t.at(uint32(b))
	if x.due != y.due {
		return x.due < y.due
	}
	return x.tseq < y.tseq
}

// setIndex records timer x's heap index in its extension record.
func (o extOrder) setIndex(x xref, i int32) { o.t.at(uint32(x)).heap = uint32(i + 1) }

// index returns timer x's heap index, -1 when it is not in the heap.
func (o extOrder) index(x xref) int32 { return int32(o.t.at(uint32(x)).heap) - 1 }

// A timerHeap is a binary min-heap of deadlines.
type timerHeap[T any, O heapOrder[T]] struct {
	a []T
	o O
}

// top returns the earliest element; ok is false when the heap is empty.
func (h *timerHeap[T, O]) top() (t T, ok bool) {
	if len(h.a) == 0 {
		return t, false
	}
	return h.a[0], true
}

func (h *timerHeap[T, O]) push(x T) {
	h.o.setIndex(x, int32(len(h.a)))
	h.a = append(h.a, x)
	h.up(len(h.a) - 1)
}

func (h *timerHeap[T, O]) pop() T {
	x := h.a[0]
	h.remove(x)
	return x
}

// remove takes x out of the heap; x must be in it.
func (h *timerHeap[T, O]) remove(x T) {
	var zero T
	i := int(h.o.index(x))
	n := len(h.a) - 1
	if i != n {
		h.swap(i, n)
	}
	h.a[n] = zero
	h.a = h.a[:n]
	h.o.setIndex(x, -1)
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// fix restores the heap after x's deadline changed; x must be in it.
func (h *timerHeap[T, O]) fix(x T) {
	i := int(h.o.index(x))
	if !h.down(i) {
		h.up(i)
	}
}

func (h *timerHeap[T, O]) swap(i, j int) {
	h.a[i], h.a[j] = h.a[j], h.a[i]
	h.o.setIndex(h.a[i], int32(i))
	h.o.setIndex(h.a[j], int32(j))
}

func (h *timerHeap[T, O]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.o.before(h.a[j], h.a[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *timerHeap[T, O]) down(i0 int) bool {
	i := i0
	n := len(h.a)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.o.before(h.a[r], h.a[j]) {
			j = r
		}
		if !h.o.before(h.a[j], h.a[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// setTimer sets message x's deadline (a delay, backoff or lease deadline)
// in Sched.timers; m is its record.
func (s *Sched) setTimer(x mref, m *msg, due Time) {
	s.tseq++
	e := s.extFor(x, m)
	e.due = due
	e.tseq = s.tseq
	if e.heap != 0 {
		s.timers.fix(m.ext)
	} else {
		s.timers.push(m.ext)
	}
}
