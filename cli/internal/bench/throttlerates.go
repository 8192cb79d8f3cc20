package bench

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// ThrottleRate is one throttle key's token bucket in a replay, in trace
// time: Rate jobs per trace hour refill a bucket of Burst jobs. The
// replay sets each on the broker as "throttle.<queue>.<key>", converted
// to wall-clock seconds at the speed-up.
type ThrottleRate struct {
	Key   string  `json:"key"`
	Rate  float64 `json:"rate_jobs_per_hour"`
	Burst float64 `json:"burst"`
}

// parseThrottleRate parses one --throttle-rate value, "key=rate" or
// "key=rate:burst": the key is everything before the last "=", so it may
// hold ":" and "="; rate is jobs per trace hour, above 0; burst is jobs,
// at least 1. A missing burst is 0, for the caller's default. Both must
// be finite.
func parseThrottleRate(s string) (ThrottleRate, error) {
	i := strings.LastIndexByte(s, '=')
	if i <= 0 {
		return ThrottleRate{}, fmt.Errorf("throttle rate %q: want key=rate or key=rate:burst", s)
	}
	rate, burst, _ := strings.Cut(s[i+1:], ":")
	return newThrottleRate(s[:i], rate, burst, func(what string) error {
		return fmt.Errorf("throttle rate %q: %s", s, what)
	})
}

// parseThrottleRates parses a --throttle-rates file: one bucket a line,
// "key rate" or "key rate burst", separated by spaces or tabs, in the
// units of parseThrottleRate. Blank lines and lines whose first
// non-blank character is "#" are skipped. Errors name the line.
func parseThrottleRates(r io.Reader) ([]ThrottleRate, error) {
	var out []ThrottleRate
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		text := strings.TrimSpace(sc.Text())
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		f := strings.Fields(text)
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("line %d: %d fields; want key rate [burst]", line, len(f))
		}
		burst := ""
		if len(f) == 3 {
			burst = f[2]
		}
		tr, err := newThrottleRate(f[0], f[1], burst, func(what string) error {
			return fmt.Errorf("line %d: %s", line, what)
		})
		if err != nil {
			return nil, err
		}
		out = append(out, tr)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// newThrottleRate checks and converts the parts of a throttle rate; an
// empty burst is 0. fail wraps the complaint.
func newThrottleRate(key, rate, burst string, fail func(string) error) (ThrottleRate, error) {
	tr := ThrottleRate{Key: key}
	var err error
	if key == "" {
		return tr, fail("empty key")
	}
	if tr.Rate, err = strconv.ParseFloat(rate, 64); err != nil || !positive(tr.Rate) {
		return tr, fail(fmt.Sprintf("rate %q: want jobs per trace hour, a finite number above 0", rate))
	}
	if burst != "" {
		if tr.Burst, err = strconv.ParseFloat(burst, 64); err != nil || !(tr.Burst >= 1) || math.IsInf(tr.Burst, 1) {
			return tr, fail(fmt.Sprintf("burst %q: want jobs, a finite number of at least 1", burst))
		}
	}
	return tr, nil
}

// throttleRates gathers the rates of the --throttle-rate flags and of
// the --throttle-rates file's contents (nil: none), giving a missing
// burst defBurst. A key named twice is an error.
func throttleRates(flags []string, file io.Reader, defBurst float64) ([]ThrottleRate, error) {
	var rates []ThrottleRate
	if file != nil {
		r, err := parseThrottleRates(file)
		if err != nil {
			return nil, err
		}
		rates = r
	}
	for _, s := range flags {
		r, err := parseThrottleRate(s)
		if err != nil {
			return nil, err
		}
		rates = append(rates, r)
	}
	seen := map[string]bool{}
	for i := range rates {
		if seen[rates[i].Key] {
			return nil, fmt.Errorf("throttle key %q given a rate twice", rates[i].Key)
		}
		seen[rates[i].Key] = true
		if rates[i].Burst == 0 {
			rates[i].Burst = defBurst
		}
	}
	return rates, nil
}

// bucketValue is a throttle rate's runtime-config value, "rate,burst":
// the rate converted from jobs per trace hour to tokens per wall-clock
// second at speedup, both as plain decimals (the broker refuses
// exponents).
func (r ThrottleRate) bucketValue(speedup float64) string {
	return strconv.FormatFloat(r.Rate*speedup/3600, 'f', -1, 64) + "," + strconv.FormatFloat(r.Burst, 'f', -1, 64)
}
