package hook

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// The tables a hook returns are read here, outside the meter, and raw: no
// metamethod of a returned table runs, so nothing of the script runs after
// its call.

// parseEnqueue reads on_enqueue's result into out, which holds the
// producer's values: nil keeps them all; a table overrides those of its
// fields that are set. Any other value, an unknown field, or a field of the
// wrong type or range is an error, and out is then not to be used.
func parseEnqueue(v lua.LValue, maxWeight uint32, out *EnqueueOutput) error {
	if v == lua.LNil {
		return nil
	}
	tb, ok := v.(*lua.LTable)
	if !ok {
		return fmt.Errorf("returned %s: want a table or nil", describe(v))
	}
	if err := checkFields(tb, "fairness_key", "weight", "throttle_keys"); err != nil {
		return err
	}
	if v := tb.RawGetString("fairness_key"); v != lua.LNil {
		s, ok := v.(lua.LString)
		if !ok || s == "" {
			return fmt.Errorf("returned fairness_key %s: want a non-empty string", describe(v))
		}
		out.FairnessKey = string(s)
	}
	if v := tb.RawGetString("weight"); v != lua.LNil {
		n, ok := v.(lua.LNumber)
		if !ok || !isWhole(float64(n)) || n < 1 {
			return fmt.Errorf("returned weight %s: want a positive integer", describe(v))
		}
		if float64(n) > float64(maxWeight) {
			return fmt.Errorf("returned weight %s: want at most %d", describe(v), maxWeight)
		}
		out.Weight = uint32(n)
	}
	if v := tb.RawGetString("throttle_keys"); v != lua.LNil {
		keys, err := stringList(v)
		if err != nil {
			return err
		}
		out.ThrottleKeys = keys
	}
	return nil
}

// stringList reads throttle_keys: a list of non-empty strings.
func stringList(v lua.LValue) ([]string, error) {
	tb, ok := v.(*lua.LTable)
	if !ok {
		return nil, fmt.Errorf("returned throttle_keys %s: want a list of strings", describe(v))
	}
	n := tb.Len()
	for k, _ := tb.Next(lua.LNil); k != lua.LNil; k, _ = tb.Next(k) {
		if i, ok := k.(lua.LNumber); !ok || !isWhole(float64(i)) || i < 1 || int(i) > n {
			return nil, fmt.Errorf("returned throttle_keys with key %s: want a list of strings", describe(k))
		}
	}
	keys := make([]string, n)
	for i := range keys {
		s, ok := tb.RawGetInt(i + 1).(lua.LString)
		if !ok || s == "" {
			return nil, fmt.Errorf("returned throttle_keys[%d] %s: want a non-empty string", i+1, describe(tb.RawGetInt(i+1)))
		}
		keys[i] = string(s)
	}
	return keys, nil
}

// maxDelayMS is the longest delay on_failure may ask for: what a
// time.Duration holds, about 292 years.
const maxDelayMS = math.MaxInt64 / int64(time.Millisecond)

// parseFailure reads on_failure's result: {action = "retry", delay_ms = n}
// (n defaults to 0: retry at once; a fraction of a millisecond is dropped)
// or {action = "dlq"}.
func parseFailure(v lua.LValue, d *Decision) error {
	tb, ok := v.(*lua.LTable)
	if !ok {
		return fmt.Errorf(`returned %s: want a table with action "retry" or "dlq"`, describe(v))
	}
	if err := checkFields(tb, "action", "delay_ms"); err != nil {
		return err
	}
	action := tb.RawGetString("action")
	switch action {
	case lua.LString("dlq"):
		*d = Decision{DeadLetter: true}
		return nil
	case lua.LString("retry"):
	default:
		return fmt.Errorf(`returned action %s: want "retry" or "dlq"`, describe(action))
	}
	delay := tb.RawGetString("delay_ms")
	if delay == lua.LNil {
		*d = Decision{}
		return nil
	}
	n, ok := delay.(lua.LNumber)
	if !ok || !(n >= 0) || float64(n) > float64(maxDelayMS) {
		return fmt.Errorf("returned delay_ms %s: want a number of milliseconds from 0 to %d", describe(delay), maxDelayMS)
	}
	*d = Decision{Delay: time.Duration(n) * time.Millisecond}
	return nil
}

// checkFields returns an error naming a key of tb that is not one of
// fields (the first, in sorted order, for a stable message).
func checkFields(tb *lua.LTable, fields ...string) error {
	var unknown []string
	for k, _ := tb.Next(lua.LNil); k != lua.LNil; k, _ = tb.Next(k) {
		if s, ok := k.(lua.LString); !ok || !slices.Contains(fields, string(s)) {
			unknown = append(unknown, describe(k))
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return fmt.Errorf("returned unknown field %s: want only %v", unknown[0], fields)
}

func isWhole(f float64) bool { return f == math.Trunc(f) && !math.IsInf(f, 0) }

// describe renders a Lua value for an error message: strings quoted and
// clipped, numbers as Lua prints them, other values by their type.
func describe(v lua.LValue) string {
	switch v := v.(type) {
	case lua.LString:
		s := string(v)
		if len(s) > 64 {
			s = s[:64] + "..."
		}
		return strconv.Quote(s)
	case lua.LNumber:
		return v.String()
	case lua.LBool:
		return v.String()
	}
	if v == lua.LNil {
		return "nil"
	}
	return "a " + v.Type().String()
}
