package main

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// Adaptive collector headroom (server.gc_percent = 0, the default).
//
// Go starts a collection when the heap has grown by GOGC percent of what
// the last one left live. Its default, 100, lets a broker holding a large
// backlog reach twice its live heap; a fixed lower value makes a small
// broker collect needlessly often. The broker's per-message state (the
// scheduler's table, the store's index) holds no pointers, so a
// collection costs little however large the heap is, and the headroom
// can be sized in bytes instead: after each collection the tuner sets
// GOGC so that the next one starts once the heap has grown by
// max(minHeadroom, headroomShare × live), at most 100 % of live. A broker
// with 40 MiB live runs at GOGC 100; one holding 1 GiB of backlog at 25.
const (
	minHeadroom   = 64 << 20
	headroomShare = 0.25
)

// gcPercentFor returns the GOGC that gives a heap of live bytes its
// headroom: 100 up to minHeadroom of live heap, then falling to
// headroomShare × 100.
func gcPercentFor(live uint64) int {
	if live == 0 {
		return 100
	}
	room := max(float64(minHeadroom), headroomShare*float64(live))
	return int(min(100, max(headroomShare*100, 100*room/float64(live))))
}

// gcTuner re-sets GOGC after every collection (see gcPercentFor). It
// learns of each collection from a finalizer, which the runtime runs
// once the collection that found its object unreachable has finished.
type gcTuner struct {
	stopped atomic.Bool
	percent int // the GOGC set last; only the finalizer goroutine writes it
	sample  []metrics.Sample
}

// gcSentinel is the object whose finalizer runs after each collection.
// Its pointer keeps it out of the tiny allocator, whose blocks hold
// several small objects and are freed (finalizing them) only once all
// are unreachable.
type gcSentinel struct{ _ *byte }

// startGCTuner sets GOGC for the current heap and keeps it tuned until
// stop is called.
func startGCTuner() (stop func()) {
	t := &gcTuner{percent: -1, sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}}
	t.tune()
	t.arm()
	return func() { t.stopped.Store(true) }
}

func (t *gcTuner) arm() {
	runtime.SetFinalizer(&gcSentinel{}, func(*gcSentinel) {
		if t.stopped.Load() {
			return
		}
		t.tune()
		t.arm()
	})
}

func (t *gcTuner) tune() {
	metrics.Read(t.sample)
	var live uint64
	if v := t.sample[0].Value; v.Kind() == metrics.KindUint64 {
		live = v.Uint64()
	}
	if p := gcPercentFor(live); p != t.percent {
		t.percent = p
		debug.SetGCPercent(p)
	}
}
