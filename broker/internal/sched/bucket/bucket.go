// Package bucket implements a token bucket over a monotonic clock in
// nanoseconds: tokens accrue continuously at rate tokens per second up to
// burst, and each admitted unit takes tokens.
//
// Tokens are float64, so fractional rates (0.5 per second) need no
// special casing. Float rounding is absorbed by Epsilon: a bucket holding
// at least n − Epsilon tokens admits n, which keeps the time Next predicts
// exact, so a caller that sleeps until Next and checks again never finds
// the bucket a hair short. Over any interval of t seconds a bucket admits
// at most burst + rate·t tokens (plus Epsilon per admission).
//
// A rate of 0 never refills: the bucket admits what it holds and then
// nothing, until Set changes it; with burst 0 it admits nothing (paused).
//
// The package has no clock of its own and no goroutines; a Bucket is not
// safe for concurrent use.
package bucket

import "math"

// Epsilon is the shortfall, in tokens, that Take and Has forgive.
const Epsilon = 1e-9

// Never is the time Next reports when the bucket will not hold the tokens
// asked for without a Set.
const Never = math.MaxInt64

// A Bucket is a token bucket. The zero value holds no tokens and never
// refills; build one with New.
type Bucket struct {
	rate   float64 // tokens per second, ≥ 0
	burst  float64 // capacity in tokens, ≥ 0
	tokens float64
	last   int64 // time of the last refill, ns
}

// New returns a full bucket: burst tokens at time now (ns), refilling at
// rate tokens per second. Negative or NaN arguments read as 0.
func New(now int64, rate, burst float64) Bucket {
	rate, burst = clean(rate), clean(burst)
	return Bucket{rate: rate, burst: burst, tokens: burst, last: now}
}

func clean(v float64) float64 {
	if !(v > 0) { // NaN too
		return 0
	}
	return v
}

// Rate returns the refill rate in tokens per second.
func (b *Bucket) Rate() float64 { return b.rate }

// Burst returns the capacity in tokens.
func (b *Bucket) Burst() float64 { return b.burst }

// State returns the tokens held at the last refill and that refill's time
// (ns), without refilling: what a digest of the bucket compares.
func (b *Bucket) State() (tokens float64, last int64) { return b.tokens, b.last }

// Set changes the rate and burst at time now. Tokens accrued until now at
// the old rate are kept, capped at the new burst; a larger burst does not
// add tokens by itself.
func (b *Bucket) Set(now int64, rate, burst float64) {
	b.refill(now)
	b.rate, b.burst = clean(rate), clean(burst)
	if b.tokens > b.burst {
		b.tokens = b.burst
	}
}

// refill accrues tokens up to now. A time before the last refill is
// treated as the last refill: the clock is monotonic, so it only happens
// when a caller mixes clocks, and then no tokens are created.
func (b *Bucket) refill(now int64) {
	if now <= b.last {
		return
	}
	if b.tokens < b.burst {
		b.tokens += b.rate * float64(now-b.last) / 1e9
		if b.tokens > b.burst {
			b.tokens = b.burst
		}
	}
	b.last = now
}

// Tokens returns the tokens in the bucket at time now.
func (b *Bucket) Tokens(now int64) float64 {
	b.refill(now)
	return b.tokens
}

// Has reports whether the bucket holds n tokens at time now.
func (b *Bucket) Has(now int64, n float64) bool {
	b.refill(now)
	return b.tokens+Epsilon >= n
}

// Take removes n tokens at time now if the bucket holds them and reports
// whether it did.
func (b *Bucket) Take(now int64, n float64) bool {
	if !b.Has(now, n) {
		return false
	}
	b.tokens -= n
	return true
}

// Peek is Next without refilling the bucket itself: a read that must
// change nothing (an explanation, on any replica) uses it.
func (b Bucket) Peek(now int64, n float64) int64 { return b.Next(now, n) }

// Next returns the earliest time, not before now, at which the bucket will
// hold n tokens if nothing takes any: now if it holds them already, Never
// if it cannot (n above burst, or no refill).
func (b *Bucket) Next(now int64, n float64) int64 {
	b.refill(now)
	if b.tokens+Epsilon >= n {
		return now
	}
	if n > b.burst+Epsilon || b.rate == 0 {
		return Never
	}
	ns := math.Ceil((n - b.tokens) / b.rate * 1e9)
	if ns >= float64(Never-now) {
		return Never
	}
	return now + int64(ns)
}

// Restore returns a bucket with exactly the rate (tokens per second),
// burst (tokens), tokens and last refill time (ns) that Rate, Burst and
// State reported of another: for rebuilding a saved bucket. Unlike New
// it takes the values as they are; a caller decoding them checks them.
func Restore(rate, burst, tokens float64, last int64) Bucket {
	return Bucket{rate: rate, burst: burst, tokens: tokens, last: last}
}
