package sched

import (
	"fmt"
	"strconv"
	"time"
)

// Bounds of a queue's settings. CreateQueue and the [queue] section of the
// broker's configuration (the defaults of queues) check against the same
// bounds, with QueueSettings.Check, so that a value one accepts the other
// accepts too.
const (
	// MinQueueDuration is the shortest visibility timeout, backoff and
	// dedup window: the protocol carries them in milliseconds, and zero
	// means the broker's default.
	MinQueueDuration = time.Millisecond
	// MaxAttemptsLimit is the largest max_attempts.
	MaxAttemptsLimit = 1_000_000
	// MaxBackoff bounds backoff_base and backoff_max: a day between two
	// attempts of a message.
	MaxBackoff = 24 * time.Hour
	// MaxDedupWindow bounds dedup_window: an idempotency key costs memory
	// for as long as it is remembered.
	MaxDedupWindow = 7 * 24 * time.Hour
	// MaxLeaseExtensionLimit bounds Config.MaxLeaseExtension itself
	// ([queue] max_lease_extension).
	MaxLeaseExtensionLimit = 7 * 24 * time.Hour
)

// QueueSettings are the settings of a queue that have broker-wide
// defaults: the [queue] section of the configuration, and the fields of a
// QueueSpec, whose zeros CreateQueue resolves against the scheduler's
// Config before it checks them.
type QueueSettings struct {
	VisibilityTimeout       time.Duration // lease length
	MaxAttempts             int64         // deliveries before dead-lettering
	BackoffBase, BackoffMax time.Duration // the default failure policy's first delay and cap
	DedupWindow             time.Duration // how long an idempotency key is remembered
}

// A SettingError reports a queue setting out of range. Its text,
// "<Setting> <Value>: want <Want>", is the same whether the value came
// from CreateQueue or from the configuration file.
type SettingError struct {
	// Setting is the setting's name, as the configuration file spells it:
	// "visibility_timeout", "max_attempts", "backoff_base", "backoff_max",
	// "dedup_window".
	Setting string
	// Value is the value, written as the configuration file writes it
	// ("90s", "5").
	Value string
	// Want describes the accepted values, such as "a duration from
	// backoff_base (2m) to 24h".
	Want string
}

func (e *SettingError) Error() string { return e.Setting + " " + e.Value + ": want " + e.Want }

// Check returns a *SettingError for each setting of s out of range, in
// field order, or nil when all are valid. Every value is checked as
// given: a caller with zeros meaning "default" resolves them first.
//
//   - VisibilityTimeout: from MinQueueDuration to maxLease, the broker's
//     longest lease extension (a lease is never longer than the longest
//     extension of one).
//   - MaxAttempts: from 1 to MaxAttemptsLimit.
//   - BackoffBase: from MinQueueDuration to MaxBackoff.
//   - BackoffMax: from BackoffBase (and MinQueueDuration) to MaxBackoff.
//   - DedupWindow: from MinQueueDuration to MaxDedupWindow.
func (s QueueSettings) Check(maxLease time.Duration) []*SettingError {
	var errs []*SettingError
	dur := func(setting string, v, lo time.Duration, loName string, hi time.Duration, hiName string) {
		if v >= lo && v >= MinQueueDuration && v <= hi {
			return
		}
		errs = append(errs, &SettingError{Setting: setting, Value: FormatDuration(v),
			Want: "a duration from " + loName + " to " + hiName})
	}
	named := func(name string, d time.Duration) string { return name + " (" + FormatDuration(d) + ")" }
	least := FormatDuration(MinQueueDuration)

	dur("visibility_timeout", s.VisibilityTimeout, MinQueueDuration, least, maxLease, named("max_lease_extension", maxLease))
	if s.MaxAttempts < 1 || s.MaxAttempts > MaxAttemptsLimit {
		errs = append(errs, &SettingError{Setting: "max_attempts", Value: strconv.FormatInt(s.MaxAttempts, 10),
			Want: fmt.Sprintf("an integer from 1 to %d", MaxAttemptsLimit)})
	}
	dur("backoff_base", s.BackoffBase, MinQueueDuration, least, MaxBackoff, FormatDuration(MaxBackoff))
	lo := least
	if s.BackoffBase > MinQueueDuration {
		lo = named("backoff_base", s.BackoffBase)
	}
	dur("backoff_max", s.BackoffMax, s.BackoffBase, lo, MaxBackoff, FormatDuration(MaxBackoff))
	dur("dedup_window", s.DedupWindow, MinQueueDuration, least, MaxDedupWindow, FormatDuration(MaxDedupWindow))
	return errs
}

// FormatDuration writes d with the largest unit that divides it exactly,
// as the configuration file writes durations: 30s is "30s", 12 hours
// "12h", 90 seconds "90s", 1.5 milliseconds "1500us". Zero is "0s".
func FormatDuration(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	sign := ""
	u := uint64(d)
	if d < 0 {
		sign = "-"
		u = -u
	}
	for _, unit := range []struct {
		name string
		d    uint64
	}{
		{"h", uint64(time.Hour)},
		{"m", uint64(time.Minute)},
		{"s", uint64(time.Second)},
		{"ms", uint64(time.Millisecond)},
		{"us", uint64(time.Microsecond)},
	} {
		if u%unit.d == 0 {
			return sign + strconv.FormatUint(u/unit.d, 10) + unit.name
		}
	}
	return sign + strconv.FormatUint(u, 10) + "ns"
}
