package sched

import (
	"cmp"
	"container/heap"
	"math"
	"math/bits"
	"strings"
	"time"
)

// Fairness you can see: what QueueStats reports of each backlogged key
// beyond its state. Each key delivered to keeps, from its first delivery
// until it is dropped (nothing of it left), its deliveries and a histogram
// of their dwell (enqueue to delivery) over two epochs of statsEpoch: the
// stats window is the previous epoch and the current one, 30 to 60 s.
// Each queue keeps its deliveries the same way. None of it takes part in
// scheduling, in the image or in the digest: a replica's window starts
// when it starts.

// statsEpoch is the length of a stats window's epochs.
const statsEpoch = 30 * time.Second

// dwellBuckets is the number of buckets of a dwell histogram: bucket 0
// holds dwells under 1 ms, bucket b ≥ 1 those from 2^(b-1) ms to under
// 2^b ms; the last holds everything longer.
const dwellBuckets = 32

// window is the delivery counts of a key or a queue over the current
// epoch ([0]) and the previous one ([1]).
type window struct {
	epoch int64 // the epoch of n[0] and dwell[0]
	n     [2]uint32
	dwell [2][dwellBuckets]uint16 // saturating counts
}

func epochOf(t Time) int64 { return int64(t) / int64(statsEpoch) }

// roll moves w on to epoch e.
func (w *window) roll(e int64) {
	switch d := e - w.epoch; {
	case d <= 0:
		return
	case d == 1:
		w.n[1], w.n[0] = w.n[0], 0
		w.dwell[1], w.dwell[0] = w.dwell[0], [dwellBuckets]uint16{}
	default:
		*w = window{}
	}
	w.epoch = e
}

// view returns w's counts as of epoch e (w unchanged): both of its
// epochs while e is its current one, only the current one (now the
// previous) an epoch later, nothing after that.
func (w *window) view(e int64) (n uint64, dwell [dwellBuckets]uint32) {
	var epochs int
	switch e - w.epoch {
	case 0:
		epochs = 2
	case 1:
		epochs = 1
	}
	for i := range epochs {
		n += uint64(w.n[i])
		for b, c := range w.dwell[i] {
			dwell[b] += uint32(c)
		}
	}
	return n, dwell
}

func dwellBucket(d time.Duration) int {
	return min(bits.Len64(uint64(max(d, 0)/time.Millisecond)), dwellBuckets-1)
}

// percentile estimates the p-th quantile (0 < p ≤ 1) of a dwell histogram
// holding n dwells, interpolating within its power-of-two bucket.
func percentile(h *[dwellBuckets]uint32, n uint64, p float64) time.Duration {
	if n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(p * float64(n)))
	var seen uint64
	for b, c := range h {
		if c == 0 {
			continue
		}
		if seen+uint64(c) >= rank {
			lo, hi := 0.0, 1.0
			if b > 0 {
				lo, hi = math.Ldexp(1, b-1), math.Ldexp(1, b)
			}
			ms := lo + (hi-lo)*float64(rank-seen)/float64(c)
			return time.Duration(ms * float64(time.Millisecond))
		}
		seen += uint64(c)
	}
	return 0
}

// windowSpan returns how long the stats window is now: the previous
// epoch and the current one so far, or since the first Tick if less.
func (s *Sched) windowSpan() time.Duration {
	if s.statsFrom == 0 {
		return 0
	}
	return min(statsEpoch+time.Duration(int64(s.now)%int64(statsEpoch)), time.Duration(s.now-s.statsFrom))
}

// noteDelivery counts the delivery from key k of q of a message enqueued
// at enq.
func (s *Sched) noteDelivery(q *queue, k *fkey, enq Time) {
	e := epochOf(s.now)
	if k.win == nil {
		k.win = &window{epoch: e}
	}
	k.win.roll(e)
	q.win.roll(e)
	k.win.n[0]++
	q.win.n[0]++
	b := dwellBucket(time.Duration(s.now - enq))
	if k.win.dwell[0][b] < math.MaxUint16 {
		k.win.dwell[0][b]++
	}
}

// keyStats is a backlogged key for QueueStats' top-N selection: a heap
// whose root is the key that goes first when a more pending one comes.
type keyStats []*fkey

func (h keyStats) Len() int { return len(h) }
func (h keyStats) Less(i, j int) bool {
	a, b := h[i], h[j]
	return cmp.Or(cmp.Compare(a.pending, b.pending), strings.Compare(b.name, a.name)) < 0
}
func (h keyStats) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *keyStats) Push(x any)   { *h = append(*h, x.(*fkey)) }
func (h *keyStats) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// fairnessStats fills st's fairness fields for q: its top backlogged keys
// (most pending first, then by key), each with its share and dwell over
// the window, and the queue's window and Jain's index. It costs
// O(K log top) for K keys.
func (s *Sched) fairnessStats(q *queue, st *QueueStats, top int) {
	e := epochOf(s.now)
	qn, _ := q.win.view(e)
	st.WindowDelivered = qn
	st.Window = s.windowSpan()
	share := q.fair.shares(q, nil)
	h := make(keyStats, 0, min(top, len(q.keys)))
	for _, k := range q.keys {
		if k.pending == 0 {
			continue
		}
		st.BackloggedKeys++
		switch {
		case len(h) < top:
			heap.Push(&h, k)
		case keyStats([]*fkey{h[0], k}).Less(0, 1):
			h[0] = k
			heap.Fix(&h, 0)
		}
	}
	// Jain's index over the backlogged keys delivered to in the window,
	// of their window share over their entitled share.
	var sum, sumSq float64
	var n int
	for _, k := range q.keys {
		if k.pending == 0 || k.win == nil || qn == 0 {
			continue
		}
		kn, _ := k.win.view(e)
		if kn == 0 {
			continue
		}
		x := (float64(kn) / float64(qn)) / share(k)
		sum += x
		sumSq += x * x
		n++
	}
	if n > 0 {
		st.JainIndex = sum * sum / (float64(n) * sumSq)
	}
	st.FairnessKeys = make([]FairnessKeyStats, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		k := heap.Pop(&h).(*fkey)
		ks := FairnessKeyStats{
			Key:           k.name,
			Pending:       uint64(k.pending),
			Weight:        q.fair.weight(k),
			Deficit:       k.flow.Deficit(),
			Delivered:     k.delivered,
			EntitledShare: share(k),
			Lane:          q.fair.lane(k),
		}
		if q.fair.stfq {
			ks.Lag = q.fair.lag(k)
		}
		if k.win != nil {
			kn, dwell := k.win.view(e)
			ks.WindowDelivered = kn
			if qn > 0 {
				ks.WindowShare = float64(kn) / float64(qn)
			}
			var counted uint64 // the histogram saturates
			for _, c := range dwell {
				counted += uint64(c)
			}
			ks.DwellP50 = percentile(&dwell, counted, 0.5)
			ks.DwellP99 = percentile(&dwell, counted, 0.99)
		}
		st.FairnessKeys[i] = ks
	}
}
