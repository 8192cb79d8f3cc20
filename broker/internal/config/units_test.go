package config

import (
	"math"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"
)

func TestParseSize(t *testing.T) {
	tests := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"0B", 0},
		{"1B", 1},
		{"1536B", 1536},
		{"1KB", 1024},
		{"1KiB", 1024},
		{"8MB", 8 << 20},
		{"8MiB", 8 << 20},
		{"16MB", 16777216},
		{"2GB", 2 << 30},
		{"2GiB", 2 << 30},
		{"1TB", 1 << 40},
		{"64mb", 64 << 20},
		{"64 MB", 64 << 20},
		{" 64MB ", 64 << 20},
		{"8388607TB", 8388607 << 40},
		{"9223372036854775807B", math.MaxInt64},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseSize(tt.in)
			if err != nil || got != tt.want {
				t.Errorf("ParseSize(%q) = %d, %v; want %d, nil", tt.in, got, err, tt.want)
			}
		})
	}
}

func TestParseSizeErrors(t *testing.T) {
	for _, in := range []string{
		"", " ", "MB", "8", "-8MB", "+8MB", "1.5MB", "8XB", "8 M", "8K", "8MBB", "0x10MB",
		"8388608TB", "9223372036854775808B", "99999999999999999999B",
	} {
		t.Run(in, func(t *testing.T) {
			got, err := ParseSize(in)
			if err == nil {
				t.Fatalf("ParseSize(%q) = %d, nil; want an error", in, got)
			}
			if !strings.Contains(err.Error(), "config: size ") || !strings.Contains(err.Error(), in) {
				t.Errorf("ParseSize(%q) error = %q; want it to name the input", in, err)
			}
		})
	}
}

func TestFormatSize(t *testing.T) {
	tests := []struct {
		in   int64
		want string
	}{
		{0, "0B"},
		{1, "1B"},
		{1023, "1023B"},
		{1024, "1KB"},
		{1536, "1536B"},
		{3072, "3KB"},
		{16 << 20, "16MB"},
		{64 << 20, "64MB"},
		{4 << 30, "4GB"},
		{1 << 40, "1TB"},
		{1<<40 + 1<<30, "1025GB"},
	}
	for _, tt := range tests {
		if got := FormatSize(tt.in); got != tt.want {
			t.Errorf("FormatSize(%d) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestParseDuration(t *testing.T) {
	tests := []struct {
		in   string
		want time.Duration
	}{
		{"0", 0},
		{"30s", 30 * time.Second},
		{"10ms", 10 * time.Millisecond},
		{"1h30m", 90 * time.Minute},
		{"1.5s", 1500 * time.Millisecond},
		{" 5m ", 5 * time.Minute},
	}
	for _, tt := range tests {
		got, err := ParseDuration(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v, nil", tt.in, got, err, tt.want)
		}
	}
	for _, in := range []string{"", "30", "s", "thirty seconds", "30 s", "1d"} {
		if got, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) = %v, nil; want an error", in, got)
		} else if !strings.Contains(err.Error(), `such as "30s"`) {
			t.Errorf("ParseDuration(%q) error = %q; want it to show the form", in, err)
		}
	}
}

func TestFormatDuration(t *testing.T) {
	tests := []struct {
		in   time.Duration
		want string
	}{
		{0, "0s"},
		{30 * time.Second, "30s"},
		{90 * time.Second, "90s"},
		{5 * time.Minute, "5m"},
		{2 * time.Hour, "2h"},
		{10 * time.Millisecond, "10ms"},
		{1500 * time.Millisecond, "1500ms"},
		{3 * time.Microsecond, "3us"},
		{7, "7ns"},
		{-time.Second, "-1s"},
	}
	for _, tt := range tests {
		if got := FormatDuration(tt.in); got != tt.want {
			t.Errorf("FormatDuration(%v) = %q; want %q", tt.in, got, tt.want)
		}
	}
}

func TestSizeAndDurationText(t *testing.T) {
	var s Size
	if err := s.UnmarshalText([]byte("8MB")); err != nil || s != Size(8<<20) {
		t.Errorf("Size.UnmarshalText(8MB) = %d, %v; want %d", s, err, 8<<20)
	}
	if b, _ := s.MarshalText(); string(b) != "8MB" {
		t.Errorf("Size(%d).MarshalText() = %q; want \"8MB\"", s, b)
	}
	if err := s.UnmarshalText([]byte("8")); err == nil {
		t.Errorf("Size.UnmarshalText(\"8\") = nil; want an error")
	}
	var d Duration
	if err := d.UnmarshalText([]byte("250ms")); err != nil || d != Duration(250*time.Millisecond) {
		t.Errorf("Duration.UnmarshalText(250ms) = %v, %v; want 250ms", d, err)
	}
	if got := d.String(); got != "250ms" {
		t.Errorf("Duration.String() = %q; want \"250ms\"", got)
	}
}

// TestFormatRoundTrip checks that the formatters write what the parsers read
// back to the same value.
func TestFormatRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.Int64Range(0, math.MaxInt64).Draw(t, "n")
		if got, err := ParseSize(FormatSize(n)); err != nil || got != n {
			t.Fatalf("ParseSize(FormatSize(%d) = %q) = %d, %v; want %d", n, FormatSize(n), got, err, n)
		}
		d := time.Duration(rapid.Int64().Draw(t, "d"))
		if got, err := ParseDuration(FormatDuration(d)); err != nil || got != d {
			t.Fatalf("ParseDuration(FormatDuration(%d) = %q) = %d, %v; want %d", d, FormatDuration(d), got, err, d)
		}
	})
}

func FuzzParseSize(f *testing.F) {
	for _, s := range []string{"0", "8MB", "16MiB", "1 kb", "9223372036854775807B", "8388608TB", "-1B", "1.5GB"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseSize(s)
		if err != nil {
			return
		}
		if n < 0 {
			t.Fatalf("ParseSize(%q) = %d; want a size of zero or more", s, n)
		}
		if back, err := ParseSize(FormatSize(n)); err != nil || back != n {
			t.Fatalf("ParseSize(FormatSize(%d)) = %d, %v; want %d", n, back, err, n)
		}
	})
}
