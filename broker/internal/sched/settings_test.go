package sched

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestQueueSettingsCheck(t *testing.T) {
	valid := QueueSettings{VisibilityTimeout: 30 * time.Second, MaxAttempts: 3, BackoffBase: time.Second, BackoffMax: time.Minute, DedupWindow: 5 * time.Minute}
	tests := []struct {
		name string
		edit func(*QueueSettings)
		want []string // "setting value: want form", in field order
	}{
		{"valid", func(*QueueSettings) {}, nil},
		{"every bound reached", func(s *QueueSettings) {
			*s = QueueSettings{VisibilityTimeout: 12 * time.Hour, MaxAttempts: MaxAttemptsLimit, BackoffBase: MaxBackoff, BackoffMax: MaxBackoff, DedupWindow: MaxDedupWindow}
		}, nil},
		{"every least value", func(s *QueueSettings) {
			*s = QueueSettings{VisibilityTimeout: time.Millisecond, MaxAttempts: 1, BackoffBase: time.Millisecond, BackoffMax: time.Millisecond, DedupWindow: time.Millisecond}
		}, nil},
		{"zeros", func(s *QueueSettings) { *s = QueueSettings{} }, []string{
			"visibility_timeout 0s: want a duration from 1ms to max_lease_extension (12h)",
			"max_attempts 0: want an integer from 1 to 1000000",
			"backoff_base 0s: want a duration from 1ms to 24h",
			"backoff_max 0s: want a duration from 1ms to 24h",
			"dedup_window 0s: want a duration from 1ms to 168h",
		}},
		{"every limit passed", func(s *QueueSettings) {
			*s = QueueSettings{VisibilityTimeout: math.MaxInt64, MaxAttempts: MaxAttemptsLimit + 1, BackoffBase: 25 * time.Hour, BackoffMax: 25 * time.Hour, DedupWindow: 169 * time.Hour}
		}, []string{
			"visibility_timeout 9223372036854775807ns: want a duration from 1ms to max_lease_extension (12h)",
			"max_attempts 1000001: want an integer from 1 to 1000000",
			"backoff_base 25h: want a duration from 1ms to 24h",
			"backoff_max 25h: want a duration from backoff_base (25h) to 24h",
			"dedup_window 169h: want a duration from 1ms to 168h",
		}},
		{"negative", func(s *QueueSettings) { s.VisibilityTimeout, s.MaxAttempts = -time.Second, -1 }, []string{
			"visibility_timeout -1s: want a duration from 1ms to max_lease_extension (12h)",
			"max_attempts -1: want an integer from 1 to 1000000",
		}},
		{"sub-millisecond", func(s *QueueSettings) { s.DedupWindow = 500 * time.Microsecond }, []string{
			"dedup_window 500us: want a duration from 1ms to 168h",
		}},
		{"backoff max below base", func(s *QueueSettings) { s.BackoffBase, s.BackoffMax = 10*time.Second, 9*time.Second }, []string{
			"backoff_max 9s: want a duration from backoff_base (10s) to 24h",
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := valid
			tt.edit(&s)
			var got []string
			for _, e := range s.Check(12 * time.Hour) {
				got = append(got, e.Error())
			}
			if strings.Join(got, "\n") != strings.Join(tt.want, "\n") {
				t.Errorf("%+v.Check(12h) =\n%s\nwant\n%s", s, strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{12 * time.Hour, "12h"},
		{90 * time.Minute, "90m"},
		{90 * time.Second, "90s"},
		{1500 * time.Microsecond, "1500us"},
		{43200001 * time.Millisecond, "43200001ms"},
		{-time.Second, "-1s"},
		{7, "7ns"},
		{math.MinInt64, "-9223372036854775808ns"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.d); got != tt.want {
			t.Errorf("FormatDuration(%d) = %q; want %q", int64(tt.d), got, tt.want)
		}
	}
}
