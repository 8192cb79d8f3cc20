package sched

// timed is an element of a timerHeap: a pointer to a struct that keeps
// its own heap index, so that removal and re-keying are O(log n).
type timed[T any] interface {
	comparable
	// before orders elements: earlier due time first, ties broken by a
	// stable key so that equal deadlines pop in a deterministic order.
	before(T) bool
	// setIndex records the element's index in the heap; -1 when out.
	setIndex(int32)
	index() int32
}

// A timerHeap is a binary min-heap of deadlines.
type timerHeap[T timed[T]] struct {
	a []T
}

// top returns the earliest element; ok is false when the heap is empty.
func (h *timerHeap[T]) top() (t T, ok bool) {
	if len(h.a) == 0 {
		return t, false
	}
	return h.a[0], true
}

func (h *timerHeap[T]) push(x T) {
	x.setIndex(int32(len(h.a)))
	h.a = append(h.a, x)
	h.up(len(h.a) - 1)
}

func (h *timerHeap[T]) pop() T {
	x := h.a[0]
	h.remove(x)
	return x
}

// remove takes x out of the heap; x must be in it.
func (h *timerHeap[T]) remove(x T) {
	var zero T
	i := int(x.index())
	n := len(h.a) - 1
	if i != n {
		h.swap(i, n)
	}
	h.a[n] = zero
	h.a = h.a[:n]
	x.setIndex(-1)
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

// fix restores the heap after x's deadline changed; x must be in it.
func (h *timerHeap[T]) fix(x T) {
	i := int(x.index())
	if !h.down(i) {
		h.up(i)
	}
}

func (h *timerHeap[T]) swap(i, j int) {
	h.a[i], h.a[j] = h.a[j], h.a[i]
	h.a[i].setIndex(int32(i))
	h.a[j].setIndex(int32(j))
}

func (h *timerHeap[T]) up(j int) {
	for j > 0 {
		i := (j - 1) / 2
		if !h.a[j].before(h.a[i]) {
			break
		}
		h.swap(i, j)
		j = i
	}
}

func (h *timerHeap[T]) down(i0 int) bool {
	i := i0
	n := len(h.a)
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && h.a[r].before(h.a[j]) {
			j = r
		}
		if !h.a[j].before(h.a[i]) {
			break
		}
		h.swap(i, j)
		i = j
	}
	return i > i0
}

// setTimer sets m's deadline (a delay, backoff or lease deadline) in
// Sched.timers.
func (s *Sched) setTimer(m *msg, due Time) {
	s.tseq++
	m.due = due
	m.tseq = s.tseq
	if m.hidx >= 0 {
		s.timers.fix(m)
	} else {
		s.timers.push(m)
	}
}
