package sched

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/fila-mq/fila/broker/internal/fault"
	"github.com/fila-mq/fila/broker/internal/sched/bucket"
)

// ThrottlePrefix is the runtime-config prefix of throttle keys: the value
// of "throttle.K" configures the token bucket of throttle key K.
const ThrottlePrefix = "throttle."

// ParseThrottle parses a throttle config value "rate,burst": rate in
// tokens per second and burst (the bucket size) in tokens. Each is a
// decimal number, digits with an optional fraction ("100", "0.5"), with
// spaces or tabs allowed around it; signs, exponents, hexadecimal,
// underscores, "inf" and "nan" are refused. See ValidateThrottle for the
// values accepted. Errors wrap fault.ErrInvalidConfigValue and name the
// expected form.
func ParseThrottle(value string) (rate, burst float64, err error) {
	r, b, ok := strings.Cut(value, ",")
	if !ok {
		return 0, 0, throttleErr(value, "missing comma")
	}
	rate, ok = parseDecimal(r)
	if !ok {
		return 0, 0, throttleErr(value, "rate is not a decimal number")
	}
	burst, ok = parseDecimal(b)
	if !ok {
		return 0, 0, throttleErr(value, "burst is not a decimal number")
	}
	if err := ValidateThrottle(rate, burst); err != nil {
		return 0, 0, err
	}
	return rate, burst, nil
}

// parseDecimal parses digits with an optional fraction ("12", "0.25"),
// with spaces and tabs around them, and reports false for anything else
// or a number too large for a float64.
func parseDecimal(s string) (float64, bool) {
	s = strings.Trim(s, " \t")
	digits := func(i int) int {
		for i < len(s) && '0' <= s[i] && s[i] <= '9' {
			i++
		}
		return i
	}
	i := digits(0)
	if i == 0 {
		return 0, false
	}
	if i < len(s) && s[i] == '.' {
		j := digits(i + 1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if i != len(s) {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	return f, err == nil
}

// ValidateThrottle checks a bucket's rate (tokens per second) and burst
// (tokens): both finite and not negative, and burst at least 1 unless
// both are 0. A bucket of rate 0 never refills: it admits the tokens it
// holds (a new bucket starts with burst) and then pauses its key until
// the config changes; "0,0" pauses it at once. Errors wrap
// fault.ErrInvalidConfigValue.
func ValidateThrottle(rate, burst float64) error {
	v := strconv.FormatFloat(rate, 'g', -1, 64) + "," + strconv.FormatFloat(burst, 'g', -1, 64)
	switch {
	case math.IsNaN(rate) || math.IsInf(rate, 0) || rate < 0:
		return throttleErr(v, "rate must be a finite number ≥ 0")
	case math.IsNaN(burst) || math.IsInf(burst, 0) || burst < 0:
		return throttleErr(v, "burst must be a finite number ≥ 0")
	case burst < 1 && !(rate == 0 && burst == 0):
		return throttleErr(v, "burst must be at least 1 (or \"0,0\" to pause)")
	}
	return nil
}

func throttleErr(value, why string) error {
	return fmt.Errorf("throttle value %q: %s; want \"rate,burst\" (tokens per second, bucket size), such as \"100,200\": %w", value, why, fault.ErrInvalidConfigValue)
}

// SetThrottle creates or changes the token bucket of throttle key (the
// part after "throttle.") live. A new bucket starts full; a changed one
// keeps its tokens, capped at the new burst. Messages waiting on it are
// woken when its next token is due under the new rate. Values
// ValidateThrottle rejects are ignored (the shell validates them first).
func (s *Sched) SetThrottle(key string, rate, burst float64) {
	if ValidateThrottle(rate, burst) != nil {
		return
	}
	b := s.bucketFor(key)
	now := int64(s.now)
	if !b.limited {
		b.b = bucket.New(now, rate, burst)
		b.limited = true
	} else {
		b.b.Set(now, rate, burst)
	}
	s.arm(b)
}

// RemoveThrottle removes the limit on throttle key: it is unlimited
// again, and every message waiting on it is woken.
func (s *Sched) RemoveThrottle(key string) {
	b := s.buckets[key]
	if b == nil || !b.limited {
		return
	}
	b.limited = false
	if b.hidx >= 0 {
		s.wakes.remove(b)
	}
	s.wake(b)
	s.dropBucketIfUnused(b)
}
