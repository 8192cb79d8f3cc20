package bucket_test

import (
	"math"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched/bucket"
	"pgregory.net/rapid"
)

const sec = int64(time.Second)

func TestTakeRefill(t *testing.T) {
	b := bucket.New(0, 2, 3) // 2 tokens/s, burst 3, starts full
	for i := 0; i < 3; i++ {
		if !b.Take(0, 1) {
			t.Fatalf("Take(0, 1) #%d = false; want true", i+1)
		}
	}
	if b.Take(0, 1) {
		t.Fatalf("Take(0, 1) on an empty bucket = true; want false")
	}
	if got, want := b.Next(0, 1), sec/2; got != want {
		t.Fatalf("Next(0, 1) = %d; want %d", got, want)
	}
	if b.Take(sec/2-1, 1) {
		t.Fatalf("Take(%d, 1) = true; want false (one nanosecond early)", sec/2-1)
	}
	if !b.Take(sec/2, 1) {
		t.Fatalf("Take(%d, 1) = false; want true", sec/2)
	}
	if got := b.Tokens(100 * sec); got != 3 {
		t.Fatalf("Tokens(100s) = %v; want 3 (capped at burst)", got)
	}
}

func TestNext(t *testing.T) {
	tests := []struct {
		name        string
		rate, burst float64
		take        float64
		n           float64
		want        int64
	}{
		{"holds it now", 1, 5, 0, 1, 0},
		{"one token at 10 per second", 10, 1, 1, 1, sec / 10},
		{"fractional rate", 0.5, 1, 1, 1, 2 * sec},
		{"more than burst", 10, 2, 2, 3, bucket.Never},
		{"rate 0 never refills", 0, 1, 1, 1, bucket.Never},
		{"rate 0 burst 0 is paused", 0, 0, 0, 1, bucket.Never},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := bucket.New(0, tt.rate, tt.burst)
			if tt.take > 0 && !b.Take(0, tt.take) {
				t.Fatalf("Take(0, %v) = false; want true", tt.take)
			}
			if got := b.Next(0, tt.n); got != tt.want {
				t.Errorf("Next(0, %v) = %d; want %d", tt.n, got, tt.want)
			}
		})
	}
}

func TestSetKeepsTokensCappedAtBurst(t *testing.T) {
	b := bucket.New(0, 1, 10)
	b.Set(0, 1, 4)
	if got := b.Tokens(0); got != 4 {
		t.Fatalf("Tokens after shrinking burst = %v; want 4", got)
	}
	b.Set(0, 1, 100)
	if got := b.Tokens(0); got != 4 {
		t.Fatalf("Tokens after growing burst = %v; want 4 (no gift)", got)
	}
	// Accrual before a rate change uses the old rate.
	b.Take(0, 4)
	b.Set(2*sec, 10, 100)
	if got := b.Tokens(2 * sec); got != 2 {
		t.Fatalf("Tokens(2s) after Set = %v; want 2", got)
	}
	if got := b.Tokens(3 * sec); got != 12 {
		t.Fatalf("Tokens(3s) = %v; want 12", got)
	}
}

func TestInvalidArgumentsReadAsZero(t *testing.T) {
	b := bucket.New(0, math.NaN(), -3)
	if b.Rate() != 0 || b.Burst() != 0 || b.Has(sec, 1) {
		t.Errorf("New(0, NaN, -3): rate %v burst %v Has %v; want 0 0 false", b.Rate(), b.Burst(), b.Has(sec, 1))
	}
}

// TestPropertyRate drives a bucket the way the scheduler does, waking at
// Next (or a little later: timers fire late) and taking while it can, and
// checks both bounds: in any interval of t seconds at most burst + rate·t
// tokens are taken, and a consumer that is always waiting takes at least
// 0.98·rate·t over t ≥ 10 s.
func TestPropertyRate(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		rate := rapid.Float64Range(0.1, 2000).Draw(t, "rate")
		burst := math.Floor(rapid.Float64Range(1, 200).Draw(t, "burst"))
		dur := rapid.Int64Range(10, 20).Draw(t, "seconds") * sec
		// Wake-up lag: up to 1% of a token's interval, at most 1ms.
		maxLag := min(int64(float64(sec)/rate/100), int64(time.Millisecond))
		lag := lagSource(rapid.Uint64().Draw(t, "lagSeed"), maxLag)
		b := bucket.New(0, rate, burst)
		var takes []int64
		now := int64(0)
		for now <= dur {
			for b.Take(now, 1) {
				takes = append(takes, now)
			}
			next := b.Next(now, 1)
			if next == bucket.Never {
				t.Fatalf("Next = Never with rate %v", rate)
			}
			now = next + lag()
		}
		var n int
		for _, at := range takes {
			if at <= dur {
				n++
			}
		}
		secs := float64(dur) / 1e9
		if float64(n) < 0.98*rate*secs {
			t.Fatalf("took %d tokens in %.3fs at rate %v; want at least %.1f", n, secs, rate, 0.98*rate*secs)
		}
		// Upper bound over every window [takes[i], takes[j]]:
		// (j+1 - rate·t_j) - (i - rate·t_i) ≤ burst, checked in one pass
		// with the running minimum of i - rate·t_i.
		lo := math.Inf(1)
		for j, at := range takes {
			lo = math.Min(lo, float64(j)-rate*float64(at)/1e9)
			if excess := float64(j+1) - rate*float64(at)/1e9 - lo; excess > burst+1e-6*float64(j+1) {
				t.Fatalf("took %.0f tokens more than rate × t ending at %dns; want at most burst %v", excess, at, burst)
			}
		}
	})
}

// lagSource returns a deterministic sequence of lags in [0, max].
func lagSource(seed uint64, max int64) func() int64 {
	x := seed | 1
	return func() int64 {
		if max <= 0 {
			return 0
		}
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		return int64(x % uint64(max+1))
	}
}

// TestRestore: a bucket rebuilt from another's Rate, Burst and State is
// equal to it.
func TestRestore(t *testing.T) {
	b := bucket.New(5, 2.5, 4)
	b.Take(1e9, 3)
	tokens, last := b.State()
	if c := bucket.Restore(b.Rate(), b.Burst(), tokens, last); c != b {
		t.Fatalf("restored %+v; want %+v", c, b)
	}
}
