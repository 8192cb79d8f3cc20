package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestGCPercentFor(t *testing.T) {
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{0, 100},
		{32 << 20, 100},
		{64 << 20, 100},
		{128 << 20, 50},
		{200 << 20, 32},
		{256 << 20, 25},
		{4 << 30, 25},
	} {
		if got := gcPercentFor(tc.live); got != tc.want {
			t.Errorf("gcPercentFor(%d MiB) = %d; want %d", tc.live>>20, got, tc.want)
		}
	}
}

// TestGCTunerFollowsLiveHeap: with 300 MiB live the tuner sets GOGC 25
// after the next collection, and back to 100 once it is garbage.
func TestGCTunerFollowsLiveHeap(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	stop := startGCTuner()
	defer stop()
	// settle runs collections until the tuner's finalizer has run after
	// one of them and set GOGC to want, and returns GOGC then (read by
	// setting it, so a concurrent tune may be undone: the next round
	// tunes again).
	settle := func(want int) int {
		var got int
		for range 50 {
			runtime.GC()
			runtime.Gosched()
			got = debug.SetGCPercent(-1)
			debug.SetGCPercent(got)
			if got == want {
				break
			}
		}
		return got
	}
	ballast := make([]byte, 300<<20)
	if got := settle(25); got != 25 {
		t.Errorf("GOGC with 300 MiB live = %d; want 25", got)
	}
	runtime.KeepAlive(ballast)
	ballast = nil
	if got := settle(100); got != 100 {
		t.Errorf("GOGC once it is garbage = %d; want 100", got)
	}
}
