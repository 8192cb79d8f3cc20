package config

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/fila-mq/fila/broker/internal/sched"
)

// Size units. Sizes are binary: KB and KiB both mean 1024 bytes, MB and MiB
// 1024 KB, and so on, so that "16MB" is the protocol's 16 MiB default frame
// size exactly.
const (
	Byte     int64 = 1
	Kilobyte       = 1024 * Byte
	Megabyte       = 1024 * Kilobyte
	Gigabyte       = 1024 * Megabyte
	Terabyte       = 1024 * Gigabyte
)

// sizeUnits lists the accepted unit spellings, matched without regard to
// case, and their multipliers. FormatSize writes the first spelling of each.
var sizeUnits = []struct {
	name string
	mult int64
}{
	{"TB", Terabyte}, {"TiB", Terabyte},
	{"GB", Gigabyte}, {"GiB", Gigabyte},
	{"MB", Megabyte}, {"MiB", Megabyte},
	{"KB", Kilobyte}, {"KiB", Kilobyte},
	{"B", Byte},
}

// sizeForm and durationForm describe the accepted forms in error messages.
const (
	sizeForm     = `a size: a whole number and a unit (B, KB, MB, GB, TB, binary: 1KB = 1KiB = 1024B), such as "64MB"`
	durationForm = `a duration: a number and a unit (ns, us, ms, s, m, h), such as "30s" or "250ms"`
)

// ParseSize parses a byte size written as a whole number followed by a unit:
// B, KB, MB, GB or TB, or their binary spellings KiB, MiB, GiB, TiB, which
// mean the same (1KB = 1KiB = 1024 bytes). Units are matched without regard
// to case and may be separated from the number by spaces. A bare "0" is
// accepted; any other number needs a unit. Fractions, signs and values above
// math.MaxInt64 bytes are rejected.
//
// ParseSize returns the size in bytes, or an error naming s and the expected
// form.
func ParseSize(s string) (int64, error) {
	n, err := parseSize(s)
	if err != nil {
		return 0, fmt.Errorf("config: size %q: %w", s, err)
	}
	return n, nil
}

var errSizeForm = errors.New("want " + sizeForm)

func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	i := 0
	for i < len(t) && '0' <= t[i] && t[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, errSizeForm
	}
	var n int64
	for _, c := range t[:i] {
		d := int64(c - '0')
		if n > (math.MaxInt64-d)/10 {
			return 0, fmt.Errorf("too large: want at most %d bytes", int64(math.MaxInt64))
		}
		n = n*10 + d
	}
	unit := strings.TrimLeft(t[i:], " \t")
	if unit == "" {
		if n == 0 {
			return 0, nil
		}
		return 0, errSizeForm
	}
	for _, u := range sizeUnits {
		if strings.EqualFold(unit, u.name) {
			if n > math.MaxInt64/u.mult {
				return 0, fmt.Errorf("too large: want at most %d bytes", int64(math.MaxInt64))
			}
			return n * u.mult, nil
		}
	}
	return 0, errSizeForm
}

// FormatSize writes n bytes in the form ParseSize reads, with the largest
// unit that divides n exactly: 16777216 is "16MB", 3072 is "3KB", 1536 is
// "1536B" and 0 is "0B". A negative n is written with a leading minus sign,
// which ParseSize does not read back.
func FormatSize(n int64) string {
	if n == 0 {
		return "0B"
	}
	for _, u := range sizeUnits {
		if u.mult > 1 && !strings.HasSuffix(u.name, "iB") && n%u.mult == 0 {
			return fmt.Sprintf("%d%s", n/u.mult, u.name)
		}
	}
	return fmt.Sprintf("%dB", n)
}

// ParseDuration parses a duration with time.ParseDuration, which takes a
// decimal number and a unit ("30s", "1.5h", "250ms", "1h30m"; units ns, us,
// µs, ms, s, m, h). A bare "0" is accepted. The error names s and the
// expected form.
func ParseDuration(s string) (time.Duration, error) {
	d, err := time.ParseDuration(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("config: duration %q: want %s", s, durationForm)
	}
	return d, nil
}

// FormatDuration writes d in the form ParseDuration reads, with the largest
// unit that divides d exactly: 30s is "30s", 5 minutes "5m", 90 seconds
// "90s", 10 milliseconds "10ms". Zero is "0s". It is sched.FormatDuration,
// so that the scheduler's errors write durations as the file does.
func FormatDuration(d time.Duration) string { return sched.FormatDuration(d) }

// Size is a byte count that reads and writes itself in the form of
// ParseSize and FormatSize, for use with encoding packages and flags.
type Size int64

// UnmarshalText parses text with ParseSize.
func (s *Size) UnmarshalText(text []byte) error {
	n, err := ParseSize(string(text))
	if err != nil {
		return err
	}
	*s = Size(n)
	return nil
}

// MarshalText writes s with FormatSize.
func (s Size) MarshalText() ([]byte, error) { return []byte(FormatSize(int64(s))), nil }

// String returns FormatSize(int64(s)).
func (s Size) String() string { return FormatSize(int64(s)) }

// Duration is a time.Duration that reads and writes itself in the form of
// ParseDuration and FormatDuration, for use with encoding packages and flags.
type Duration time.Duration

// UnmarshalText parses text with ParseDuration.
func (d *Duration) UnmarshalText(text []byte) error {
	v, err := ParseDuration(string(text))
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalText writes d with FormatDuration.
func (d Duration) MarshalText() ([]byte, error) {
	return []byte(FormatDuration(time.Duration(d))), nil
}

// String returns FormatDuration(time.Duration(d)).
func (d Duration) String() string { return FormatDuration(time.Duration(d)) }
