package hook

import (
	"context"
	"errors"
	"runtime"
	"testing"
)

// maxAllocRatio bounds what a call stopped at its memory limit may have
// allocated, as a multiple of the limit. The charges are estimates
// (ops.go); this is where they are held to account.
const maxAllocRatio = 3

// TestMemoryLimitBoundsTheHeap runs every memory bomb of the escapes and
// measures, with the Go runtime's count of bytes allocated, how much the
// call allocated before it was stopped: everything it allocated, live or
// not, so an upper bound on what it added to the heap. It must stay within
// a small multiple of the limit, and nothing of the call may remain live
// once it returns.
func TestMemoryLimitBoundsTheHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a few hundred MB in all")
	}
	for _, limit := range []int64{1 << 20, DefaultMemoryLimit} {
		for _, tt := range escapes {
			if tt.is != ErrMemoryLimit {
				continue
			}
			t.Run(formatBytes(limit)+"/"+tt.name, func(t *testing.T) {
				script := "function on_enqueue(msg)\n  if msg.headers.attack then\n" + tt.attack +
					"\n  end\nend"
				r := newTestRunner(t, script, "", nil, Limits{Timeout: bigTime.Timeout, MemoryLimit: limit, States: 1})
				ctx := context.Background()
				if _, err := r.OnEnqueue(ctx, EnqueueInput{Queue: "q"}); err != nil { // makes the state
					t.Fatal(err)
				}
				in := EnqueueInput{Queue: "q", Headers: []Header{{"attack", "1"}}}

				runtime.GC()
				var before, after runtime.MemStats
				runtime.ReadMemStats(&before)
				_, err := r.OnEnqueue(ctx, in)
				runtime.ReadMemStats(&after)
				if !errors.Is(err, ErrMemoryLimit) {
					t.Fatalf("OnEnqueue() error = %v; want ErrMemoryLimit", err)
				}
				allocated := int64(after.TotalAlloc - before.TotalAlloc)
				ratio := float64(allocated) / float64(limit)
				t.Logf("allocated %d bytes, %.2f times the limit", allocated, ratio)
				if ratio > maxAllocRatio {
					t.Errorf("the call allocated %d bytes, %.1f times its limit %d; want at most %d times",
						allocated, ratio, limit, maxAllocRatio)
				}

				runtime.GC()
				var live runtime.MemStats
				runtime.ReadMemStats(&live)
				if grown := int64(live.HeapAlloc) - int64(before.HeapAlloc); grown > 1<<20 {
					t.Errorf("the live heap grew by %d bytes across the call; want nothing of the call kept", grown)
				}
			})
		}
	}
}

// TestMemoryLimitAllowsWork checks the other side: ordinary work within
// the limit is not stopped.
func TestMemoryLimitAllowsWork(t *testing.T) {
	tests := []string{
		// 1 MB of strings, built properly.
		`local t = {} for i = 1, 1e4 do t[i] = string.rep("x", 100) end return #table.concat(t)`,
		// A 1,000-entry lookup table, rebuilt on every call.
		`local t = {} for i = 1, 1000 do t["k" .. i] = {id = i, name = "n" .. i} end return t.k500.id`,
		// Pattern work on a 100 KB string.
		`local n = 0 for w in string.rep("word ", 2e4):gmatch("%a+") do n = n + 1 end return n`,
	}
	want := []string{"1000000", "500", "20000"}
	for i, src := range tests {
		out, err := eval(t, src, Limits{Timeout: bigTime.Timeout}, nil)
		if err != nil || len(out) != 1 || out[0] != want[i] {
			t.Errorf("eval(%q) = %v, %v; want [%s], nil", src, out, err, want[i])
		}
	}
}
