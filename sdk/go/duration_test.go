package fila

import (
	"math"
	"testing"
	"time"
)

// TestDurationsRoundUp checks that every duration the SDK puts on the
// wire is rounded up to a whole millisecond, so that a positive duration
// never becomes 0, which the broker reads as "the default" or "none".
func TestDurationsRoundUp(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want uint64
	}{
		{0, 0},
		{-time.Second, 0},
		{math.MinInt64, 0},
		{1, 1},
		{500 * time.Microsecond, 1},
		{time.Millisecond, 1},
		{time.Millisecond + 1, 2},
		{1500 * time.Microsecond, 2},
		{30 * time.Second, 30000},
		{math.MaxInt64, math.MaxInt64/uint64(time.Millisecond) + 1},
	}
	for _, tt := range tests {
		if got := ms(tt.d); got != tt.want {
			t.Errorf("ms(%v) = %d; want %d", tt.d, got, tt.want)
		}
	}

	const sub = 500 * time.Microsecond
	q := NewQueueSpec("q").VisibilityTimeout(sub).Backoff(sub, sub).DedupWindow(sub)
	for name, got := range map[string]uint64{
		"VisibilityTimeout": q.f.VisibilityTimeoutMS,
		"Backoff base":      q.f.BackoffBaseMS,
		"Backoff max":       q.f.BackoffMaxMS,
		"DedupWindow":       q.f.DedupWindowMS,
	} {
		if got != 1 {
			t.Errorf("QueueSpec.%s(%v) sends %d ms; want 1", name, sub, got)
		}
	}
	if got := NewMessage("q", nil).Delay(sub).m.DelayMS; got != 1 {
		t.Errorf("Message.Delay(%v) sends %d ms; want 1", sub, got)
	}
	if got := NewMessage("q", nil).Delay(-time.Second).m.DelayMS; got != 0 {
		t.Errorf("Message.Delay(-1s) sends %d ms; want 0", got)
	}
	var s Subscription
	RateLimit("api", 10, sub, 0)(&s)
	if got := s.limits[0].PeriodMS; got != 1 {
		t.Errorf("RateLimit period %v sends %d ms; want 1", sub, got)
	}
}
