package hook

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/fault"
)

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name                 string
		onEnqueue, onFailure string
		want                 string // substring of the error
	}{
		{"syntax error", "function on_enqueue(msg)\n  return {\nend", "", "line 3 near 'end'"},
		{"syntax error on failure script", "", "function on_failure(msg)\n\n  x = = 1\nend", "compile on_failure: line 3"},
		{"unfinished at end", "function on_enqueue(msg)\n  if x then\n", "", "line 3 at end of script"},
		{"unfinished string", "function on_enqueue(msg)\n  return 'abc\nend", "", "unterminated string"},
		{"goto without label", "function on_enqueue(msg)\n\n  goto nowhere\nend", "", "line 3"},
		{"vararg at top level", "local x = ...\nfunction on_enqueue(msg) end", "", "line 1"},
		// gopher-lua's compiler recurses on the syntax tree: too deep a
		// tree would overflow the Go stack.
		{"nested calls", "function on_enqueue(msg)\n  return " + strings.Repeat("tostring(", 1e5) + "1" + strings.Repeat(")", 1e5) + "\nend", "", "line 2: more than 200 nested levels"},
		{"nested unary minus", "function on_enqueue(msg)\n  return " + strings.Repeat("- ", 1e5) + "1\nend", "", "nested levels"},
		{"nested powers", "function on_enqueue(msg)\n  return 2" + strings.Repeat(" ^ 2", 1e5) + "\nend", "", "nested levels"},
		{"nested tables", "function on_enqueue(msg)\n  return " + strings.Repeat("{", 1e5) + strings.Repeat("}", 1e5) + "\nend", "", "nested levels"},
		{"nested blocks", strings.Repeat("do ", 1e5) + strings.Repeat("end ", 1e5) + "function on_enqueue(msg) end", "", "nested levels"},
		{"nested functions", strings.Repeat("local function f() ", 1e4) + strings.Repeat("end ", 1e4) + "function on_enqueue(msg) end", "", "nested levels"},
		{"nested ifs", strings.Repeat("if x then ", 1e4) + strings.Repeat("end ", 1e4) + "function on_enqueue(msg) end", "", "nested levels"},
		{"no function", "x = 1", "", "does not define function on_enqueue"},
		{"wrong function", "function on_failure(msg) end", "", "does not define function on_enqueue"},
		{"function not a function", "on_enqueue = 42", "", "does not define function on_enqueue"},
		{"top level error", "local x = nil\nlocal y = x.field\nfunction on_enqueue(msg) end", "", "on_enqueue:2:"},
		{"top level timeout", "while true do end\nfunction on_enqueue(msg) end", "", "timeout after 100ms"},
		{"top level memory", "local s = string.rep('x', 1e9)\nfunction on_enqueue(msg) end", "", "memory limit 8MB exceeded"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Compile(tt.onEnqueue, tt.onFailure)
			enq, fail := short(tt.onEnqueue), short(tt.onFailure)
			if err == nil {
				t.Fatalf("Compile(%q, %q) = %v, nil; want an error", enq, fail, p)
			}
			if !errors.Is(err, fault.ErrScriptError) {
				t.Errorf("Compile(%q, %q) = %v; want an error wrapping fault.ErrScriptError", enq, fail, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Compile(%q, %q) = %v; want an error containing %q", enq, fail, err, tt.want)
			}
		})
	}
}

func TestCompileEmpty(t *testing.T) {
	r := newTestRunner(t, "", "", nil, testLimits)
	if r.HasOnEnqueue() || r.HasOnFailure() {
		t.Errorf("HasOnEnqueue, HasOnFailure = %v, %v; want false, false", r.HasOnEnqueue(), r.HasOnFailure())
	}
	in := EnqueueInput{Queue: "q", FairnessKey: "k", Weight: 2, ThrottleKeys: []string{"a"}}
	out, err := r.OnEnqueue(context.Background(), in)
	want := EnqueueOutput{FairnessKey: "k", Weight: 2, ThrottleKeys: []string{"a"}}
	if err != nil || !reflect.DeepEqual(out, want) {
		t.Errorf("OnEnqueue(%+v) = %+v, %v; want %+v, nil", in, out, err, want)
	}
	if _, err := r.OnFailure(context.Background(), FailureInput{Queue: "q"}); !errors.Is(err, ErrNoHook) {
		t.Errorf("OnFailure without hook: err = %v; want ErrNoHook", err)
	}
	if got := r.Stats(); got != (Stats{}) {
		t.Errorf("Stats() = %+v; want zero", got)
	}
}

var producerInput = EnqueueInput{
	Queue:        "orders",
	Headers:      []Header{{"tenant", "acme"}, {"tier", "gold"}, {"tenant", "globex"}},
	PayloadSize:  512,
	FairnessKey:  "producer-key",
	Weight:       7,
	ThrottleKeys: []string{"p1", "p2"},
}

var producerOutput = EnqueueOutput{FairnessKey: "producer-key", Weight: 7, ThrottleKeys: []string{"p1", "p2"}}

func TestOnEnqueue(t *testing.T) {
	tests := []struct {
		name   string
		script string
		in     EnqueueInput
		want   EnqueueOutput
	}{
		{"nil keeps the producer's values", `function on_enqueue(msg) end`, producerInput, producerOutput},
		{"empty table keeps them too", `function on_enqueue(msg) return {} end`, producerInput, producerOutput},
		{"fairness key", `function on_enqueue(msg) return {fairness_key = "k2"} end`, producerInput,
			EnqueueOutput{FairnessKey: "k2", Weight: 7, ThrottleKeys: []string{"p1", "p2"}}},
		{"weight", `function on_enqueue(msg) return {weight = 3} end`, producerInput,
			EnqueueOutput{FairnessKey: "producer-key", Weight: 3, ThrottleKeys: []string{"p1", "p2"}}},
		{"maximum weight", `function on_enqueue(msg) return {weight = 1000} end`, producerInput,
			EnqueueOutput{FairnessKey: "producer-key", Weight: 1000, ThrottleKeys: []string{"p1", "p2"}}},
		{"throttle keys", `function on_enqueue(msg) return {throttle_keys = {"a", "b", "c"}} end`, producerInput,
			EnqueueOutput{FairnessKey: "producer-key", Weight: 7, ThrottleKeys: []string{"a", "b", "c"}}},
		{"no throttle keys", `function on_enqueue(msg) return {throttle_keys = {}} end`, producerInput,
			EnqueueOutput{FairnessKey: "producer-key", Weight: 7, ThrottleKeys: []string{}}},
		{"all three", `function on_enqueue(msg) return {fairness_key = "f", weight = 2, throttle_keys = {"t"}} end`, producerInput,
			EnqueueOutput{FairnessKey: "f", Weight: 2, ThrottleKeys: []string{"t"}}},
		{"the message's fields", `
function on_enqueue(msg)
  return {
    fairness_key = table.concat({msg.queue, msg.headers.tier, msg.headers.tenant, msg.payload_size,
      msg.fairness_key, msg.weight, #msg.throttle_keys, msg.throttle_keys[1], msg.throttle_keys[2]}, ","),
  }
end`, producerInput,
			EnqueueOutput{FairnessKey: "orders,gold,globex,512,producer-key,7,2,p1,p2", Weight: 7, ThrottleKeys: []string{"p1", "p2"}}},
		{"unset producer values are nil", `
function on_enqueue(msg)
  return {fairness_key = tostring(msg.fairness_key) .. "," .. tostring(msg.weight) .. "," .. #msg.throttle_keys}
end`, EnqueueInput{Queue: "q"}, EnqueueOutput{FairnessKey: "nil,nil,0"}},
		{"headers iterate", `
function on_enqueue(msg)
  local keys = {}
  for k, v in pairs(msg.headers) do keys[#keys + 1] = k .. "=" .. v end
  table.sort(keys)
  return {throttle_keys = keys}
end`, producerInput, EnqueueOutput{FairnessKey: "producer-key", Weight: 7, ThrottleKeys: []string{"tenant=globex", "tier=gold"}}},
		{"numbers that are whole", `function on_enqueue(msg) return {weight = 2.0 * 3} end`, EnqueueInput{},
			EnqueueOutput{Weight: 6}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newTestRunner(t, tt.script, "", nil, testLimits)
			out, err := r.OnEnqueue(context.Background(), tt.in)
			if err != nil || !reflect.DeepEqual(out, tt.want) {
				t.Errorf("OnEnqueue(%+v) = %+v, %v; want %+v, nil", tt.in, out, err, tt.want)
			}
		})
	}
}

func TestOnEnqueueBadResults(t *testing.T) {
	tests := []struct {
		result string // what on_enqueue returns
		want   string
	}{
		{`{weight = "x"}`, `returned weight "x": want a positive integer`},
		{`{weight = "3"}`, `returned weight "3": want a positive integer`},
		{`{weight = 0}`, `returned weight 0: want a positive integer`},
		{`{weight = -1}`, `returned weight -1: want a positive integer`},
		{`{weight = 1.5}`, `returned weight 1.5: want a positive integer`},
		{`{weight = 0/0}`, `want a positive integer`},
		{`{weight = 1/0}`, `want a positive integer`},
		{`{weight = 1001}`, `returned weight 1001: want at most 1000`},
		{`{weight = 2^40}`, `want at most 1000`},
		{`{weight = {}}`, `returned weight a table: want a positive integer`},
		{`{fairness_key = 42}`, `returned fairness_key 42: want a non-empty string`},
		{`{fairness_key = ""}`, `returned fairness_key "": want a non-empty string`},
		{`{fairness_key = true}`, `returned fairness_key true: want a non-empty string`},
		{`{throttle_keys = "a"}`, `returned throttle_keys "a": want a list of strings`},
		{`{throttle_keys = {1, 2}}`, `returned throttle_keys[1] 1: want a non-empty string`},
		{`{throttle_keys = {"a", ""}}`, `returned throttle_keys[2] "": want a non-empty string`},
		{`{throttle_keys = {"a", x = "b"}}`, `returned throttle_keys with key "x": want a list of strings`},
		{`{throttle_keys = {[1] = "a", [3] = "c"}}`, `want a non-empty string`},
		{`{fairnes_key = "typo"}`, `returned unknown field "fairnes_key"`},
		{`{"positional"}`, `returned unknown field 1`},
		{`"tenant"`, `returned "tenant": want a table or nil`},
		{`42`, `returned 42: want a table or nil`},
		{`true`, `returned true: want a table or nil`},
		{`function() end`, `returned a function: want a table or nil`},
	}
	for _, tt := range tests {
		t.Run(tt.result, func(t *testing.T) {
			r := newTestRunner(t, "function on_enqueue(msg) return "+tt.result+" end", "", nil, testLimits)
			out, err := r.OnEnqueue(context.Background(), producerInput)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("OnEnqueue() error = %v; want one containing %q", err, tt.want)
			}
			if !strings.HasPrefix(fmt.Sprint(err), "on_enqueue orders: ") {
				t.Errorf("OnEnqueue() error = %v; want it to start with the hook and queue", err)
			}
			if !reflect.DeepEqual(out, producerOutput) {
				t.Errorf("OnEnqueue() = %+v; want the producer's values %+v", out, producerOutput)
			}
			if s := r.Stats(); s.OnEnqueueCalls != 1 || s.OnEnqueueFailures != 1 {
				t.Errorf("Stats() = %+v; want 1 call, 1 failure", s)
			}
		})
	}
}

func TestOnEnqueueResultMetatableNotRun(t *testing.T) {
	// Results are read raw: a metatable on the result cannot run code
	// after the call, nor make fields appear.
	r := newTestRunner(t, `
function on_enqueue(msg)
  return setmetatable({}, {__index = function(t, k) while true do end end})
end`, "", nil, testLimits)
	out, err := r.OnEnqueue(context.Background(), producerInput)
	if err != nil || !reflect.DeepEqual(out, producerOutput) {
		t.Errorf("OnEnqueue() = %+v, %v; want %+v, nil", out, err, producerOutput)
	}
}

func TestOnFailure(t *testing.T) {
	in := FailureInput{
		Queue: "orders", ID: "0190a0b2-0000-7000-8000-000000000001", Attempts: 2, Error: "HTTP 503",
		Headers: []Header{{"tenant", "acme"}}, FairnessKey: "acme", Weight: 3, ThrottleKeys: []string{"t"}, PayloadSize: 10,
	}
	tests := []struct {
		result  string
		want    Decision
		wantErr string
	}{
		{`{action = "retry", delay_ms = 1500}`, Decision{Delay: 1500 * time.Millisecond}, ""},
		{`{action = "retry"}`, Decision{}, ""},
		{`{action = "retry", delay_ms = 0}`, Decision{}, ""},
		{`{action = "retry", delay_ms = 2.75}`, Decision{Delay: 2 * time.Millisecond}, ""},
		{`{action = "dlq"}`, Decision{DeadLetter: true}, ""},
		{`{action = "retry", delay_ms = msg.attempts * 1000}`, Decision{Delay: 2 * time.Second}, ""},
		{`{action = msg.error == "HTTP 503" and "dlq" or "retry"}`, Decision{DeadLetter: true}, ""},
		{`{action = "retry", delay_ms = #msg.id + msg.payload_size + msg.weight + #msg.throttle_keys}`,
			Decision{Delay: (36 + 10 + 3 + 1) * time.Millisecond}, ""},
		{`{action = "retry", delay_ms = msg.headers.tenant == "acme" and msg.fairness_key == "acme" and msg.queue == "orders" and 1 or 0}`,
			Decision{Delay: time.Millisecond}, ""},
		{`{action = "requeue"}`, Decision{}, `returned action "requeue": want "retry" or "dlq"`},
		{`{}`, Decision{}, `returned action nil: want "retry" or "dlq"`},
		{`nil`, Decision{}, `returned nil: want a table with action "retry" or "dlq"`},
		{`"dlq"`, Decision{}, `returned "dlq": want a table`},
		{`{action = "retry", delay_ms = -1}`, Decision{}, `returned delay_ms -1: want a number of milliseconds`},
		{`{action = "retry", delay_ms = "10"}`, Decision{}, `returned delay_ms "10"`},
		{`{action = "retry", delay_ms = 1/0}`, Decision{}, `want a number of milliseconds`},
		{`{action = "retry", delay_ms = 0/0}`, Decision{}, `want a number of milliseconds`},
		{`{action = "retry", delay = 10}`, Decision{}, `returned unknown field "delay"`},
	}
	for _, tt := range tests {
		t.Run(tt.result, func(t *testing.T) {
			r := newTestRunner(t, "", "function on_failure(msg) return "+tt.result+" end", nil, testLimits)
			d, err := r.OnFailure(context.Background(), in)
			if tt.wantErr == "" {
				if err != nil || d != tt.want {
					t.Errorf("OnFailure() = %+v, %v; want %+v, nil", d, err, tt.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("OnFailure() = %+v, %v; want an error containing %q", d, err, tt.wantErr)
			}
			if d != (Decision{}) {
				t.Errorf("OnFailure() decision = %+v on error; want zero", d)
			}
			if s := r.Stats(); s.OnFailureCalls != 1 || s.OnFailureFailures != 1 {
				t.Errorf("Stats() = %+v; want 1 call, 1 failure", s)
			}
		})
	}
}

func TestRuntimeErrors(t *testing.T) {
	tests := []struct {
		body string
		want string
	}{
		{`local x = nil; return x.y`, "on_enqueue:2: attempt to index"},
		{`error("boom")`, "on_enqueue:2: boom"},
		{`error("boom", 0)`, "on_enqueue orders: boom"},
		{`error({code = 1})`, "error object is a table value"},
		{`error(42)`, "on_enqueue:2: 42"},
		{`assert(false, "nope")`, "on_enqueue:2: nope"},
		{`assert(nil)`, "assertion failed!"},
		{`error(string.rep("x", 5000))`, "... (5014 bytes)"},
		{`return nil .. "x"`, "attempt to concatenate a nil value"},
		{`return {} .. "x"`, "attempt to concatenate a table value"},
		{`local t = {}; t[nil] = 1`, "table index is nil"},
		{`local t = {}; t[0/0] = 1`, "table index is NaN"},
		{`return {[nil] = 1}`, "table index is nil"},
		{`return string.rep()`, "bad argument #1"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			r := newTestRunner(t, "function on_enqueue(msg)\n"+tt.body+"\nend", "", nil, testLimits)
			_, err := r.OnEnqueue(context.Background(), EnqueueInput{Queue: "orders"})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("OnEnqueue() error = %v; want one containing %q", err, tt.want)
			}
		})
	}
}

func TestConfigGet(t *testing.T) {
	cfg := newTestConfig("weight.acme", "3")
	r := newTestRunner(t, `
local default = fila.get("weight.default")
function on_enqueue(msg)
  local tenant = msg.headers.tenant
  return {
    fairness_key = tenant,
    weight = tonumber(fila.get("weight." .. tenant) or default or "1"),
  }
end`, "", cfg, testLimits)
	call := func(tenant string) uint32 {
		t.Helper()
		out, err := r.OnEnqueue(context.Background(), EnqueueInput{Queue: "q", Headers: []Header{{"tenant", tenant}}})
		if err != nil {
			t.Fatalf("OnEnqueue(tenant %s): %v", tenant, err)
		}
		return out.Weight
	}
	steps := []struct {
		set    []string // key, value to set before the call
		tenant string
		want   uint32
	}{
		{nil, "acme", 3},
		{nil, "globex", 1},
		{[]string{"weight.globex", "5"}, "globex", 5},
		{[]string{"weight.acme", "9"}, "acme", 9},
		{[]string{"weight.default", "2"}, "initech", 2}, // read at the top level, which runs on every call
	}
	for _, s := range steps {
		if s.set != nil {
			cfg.Set(s.set[0], s.set[1])
		}
		if got := call(s.tenant); got != s.want {
			t.Errorf("after Set(%v): weight of %s = %d; want %d", s.set, s.tenant, got, s.want)
		}
	}

	got := evalOK(t, `return fila.get("nope"), type(fila.get), fila.get(12)`)
	if want := `nil, "function", nil`; got != want {
		t.Errorf("fila.get without config = %s; want %s", got, want)
	}
}

func TestCallsAreIsolated(t *testing.T) {
	// Nothing a call does survives it: globals, upvalues, tables, the
	// global table itself, whatever state of the pool runs the next call.
	r := newTestRunner(t, `
local counter = 0
local seen = {}
function on_enqueue(msg)
  counter = counter + 1
  calls = (calls or 0) + 1
  seen[#seen + 1] = msg.headers.n
  _G["dyn" .. msg.headers.n] = true
  rawset(_G, "raw" .. msg.headers.n, true)
  local leaked = 0
  for k in pairs(_G) do
    if k ~= "_G" and k ~= "on_enqueue" and k ~= "calls" and k ~= "dyn" .. msg.headers.n and k ~= "raw" .. msg.headers.n then
      leaked = leaked + 1
    end
  end
  return {weight = counter * 100 + calls * 10 + #seen + leaked}
end`, "", nil, Limits{Timeout: 10 * time.Second, States: 1})
	for i := range 5 {
		out, err := r.OnEnqueue(context.Background(), EnqueueInput{Queue: "q", Headers: []Header{{"n", fmt.Sprint(i)}}})
		if err != nil || out.Weight != 111 {
			t.Errorf("call %d: OnEnqueue() = %+v, %v; want weight 111 (no state from earlier calls)", i, out, err)
		}
	}
}

func TestStats(t *testing.T) {
	r := newTestRunner(t,
		`function on_enqueue(msg) if msg.headers.fail then error("x") end end`,
		`function on_failure(msg) if msg.attempts > 1 then error("x") end return {action = "dlq"} end`,
		nil, testLimits)
	ctx := context.Background()
	fail := EnqueueInput{Queue: "q", Headers: []Header{{"fail", "1"}}}
	for _, in := range []EnqueueInput{{Queue: "q"}, fail, {Queue: "q"}, fail, {Queue: "q"}} {
		r.OnEnqueue(ctx, in)
	}
	r.OnFailure(ctx, FailureInput{Queue: "q", Attempts: 1})
	r.OnFailure(ctx, FailureInput{Queue: "q", Attempts: 2})
	want := Stats{OnEnqueueCalls: 5, OnEnqueueFailures: 2, OnFailureCalls: 2, OnFailureFailures: 1}
	got := r.Stats()
	if got.OnEnqueueTime <= 0 || got.OnFailureTime <= 0 {
		t.Errorf("Stats() = %+v; want time spent in both hooks", got)
	}
	got.OnEnqueueTime, got.OnFailureTime = 0, 0
	if got != want {
		t.Errorf("Stats() = %+v; want %+v", got, want)
	}
}

func TestContextCanceled(t *testing.T) {
	r := newTestRunner(t, `function on_enqueue(msg) while true do end end`, "", nil,
		Limits{Timeout: time.Hour, CircuitBreakerThreshold: 1})

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	out, err := r.OnEnqueue(ctx, producerInput)
	if !errors.Is(err, context.Canceled) || !reflect.DeepEqual(out, producerOutput) {
		t.Errorf("OnEnqueue(canceled) = %+v, %v; want the producer's values and context.Canceled", out, err)
	}

	// A caller giving up mid-call stops the script; it is not the hook's
	// failure, so the breaker (threshold 1) stays closed.
	ctx, cancel = context.WithCancel(context.Background())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, err := r.OnEnqueue(ctx, producerInput); !errors.Is(err, context.Canceled) {
		t.Errorf("OnEnqueue(canceled while running) error = %v; want context.Canceled", err)
	}
	if s := r.Stats(); s.OnEnqueueFailures != 0 || s.CircuitOpen || s.CircuitTrips != 0 {
		t.Errorf("Stats() = %+v; want no failure and a closed breaker", s)
	}
}

func TestClose(t *testing.T) {
	r := NewRunner(mustCompile(t, `function on_enqueue(msg) return {weight = 2} end`, ""), nil, testLimits, nil, nil)
	if _, err := r.OnEnqueue(context.Background(), EnqueueInput{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	r.Close()
	out, err := r.OnEnqueue(context.Background(), EnqueueInput{Queue: "q", Weight: 5})
	if !errors.Is(err, ErrClosed) || out.Weight != 5 {
		t.Errorf("OnEnqueue after Close = %+v, %v; want weight 5 and ErrClosed", out, err)
	}
	r.Close() // twice is fine
}

func TestConcurrentCalls(t *testing.T) {
	// Many goroutines share a runner with fewer states than goroutines,
	// while the config changes under them, and another runner shares the
	// library with it. Run with -race.
	cfg := newTestConfig("weight.t0", "1")
	r := newTestRunner(t, `
function on_enqueue(msg)
  local t = msg.headers.tenant
  return {fairness_key = "tenant:" .. t, weight = tonumber(fila.get("weight." .. t) or "1"), throttle_keys = {t}}
end`, "", cfg, Limits{Timeout: 10 * time.Second, States: 3})
	other := newTestRunner(t, `
function on_enqueue(msg)
  local s = string.format("%s-%05d", msg.headers.tenant:upper(), #msg.headers.tenant)
  return {fairness_key = (s:gsub("%d", "x")), throttle_keys = {s:match("^(%a+)")}}
end`, "", nil, Limits{Timeout: 10 * time.Second, States: 2})
	const goroutines, calls = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tenant := fmt.Sprintf("t%d", g)
			for i := range calls {
				if g == 0 && i%10 == 0 {
					cfg.Set("weight.t0", fmt.Sprint(i/10+1))
				}
				out, err := r.OnEnqueue(context.Background(), EnqueueInput{Queue: "q", Headers: []Header{{"tenant", tenant}}})
				if err != nil {
					errs <- err
					return
				}
				if out.FairnessKey != "tenant:"+tenant || len(out.ThrottleKeys) != 1 || out.ThrottleKeys[0] != tenant || out.Weight < 1 {
					errs <- fmt.Errorf("OnEnqueue(tenant %s) = %+v", tenant, out)
					return
				}
				out, err = other.OnEnqueue(context.Background(), EnqueueInput{Queue: "p", Headers: []Header{{"tenant", tenant}}})
				if want := strings.ToUpper(tenant[:1]) + "x-xxxxx"; err != nil || out.FairnessKey != want {
					errs <- fmt.Errorf("other.OnEnqueue(tenant %s) = %+v, %v; want fairness key %s", tenant, out, err, want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if s := r.Stats(); s.OnEnqueueCalls != goroutines*calls || s.OnEnqueueFailures != 0 {
		t.Errorf("Stats() = %+v; want %d calls, no failure", s, goroutines*calls)
	}
}

func TestDefaultLimits(t *testing.T) {
	want := Limits{
		Timeout:                 10 * time.Millisecond,
		MemoryLimit:             8 << 20,
		CircuitBreakerThreshold: 3,
		CircuitBreakerCooldown:  30 * time.Second,
		MaxWeight:               1000,
	}
	got := DefaultLimits()
	if got.States < 1 {
		t.Errorf("DefaultLimits().States = %d; want at least 1", got.States)
	}
	got.States = 0
	if got != want {
		t.Errorf("DefaultLimits() = %+v; want %+v", got, want)
	}
}

func TestPoolBoundsStates(t *testing.T) {
	// With one state, a second call waits for the first, and gives up with
	// its context; Close while a call runs lets it finish.
	cfg := newTestConfig()
	r := NewRunner(mustCompile(t, `function on_enqueue(msg) while not fila.get("go") do end return {weight = 2} end`, ""),
		cfg, Limits{Timeout: time.Minute, States: 1}, nil, nil)
	first := make(chan error, 1)
	go func() {
		out, err := r.OnEnqueue(context.Background(), EnqueueInput{Queue: "q"})
		if err == nil && out.Weight != 2 {
			err = fmt.Errorf("weight %d; want 2", out.Weight)
		}
		first <- err
	}()
	for r.Stats().OnEnqueueCalls == 0 { // the first call holds the only state
		time.Sleep(time.Millisecond)
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.OnEnqueue(ctx, EnqueueInput{Queue: "q"}); !errors.Is(err, context.Canceled) {
		t.Errorf("OnEnqueue while the only state is busy, context canceled: error = %v; want context.Canceled", err)
	}
	if s := r.Stats(); s.OnEnqueueCalls != 1 || s.OnEnqueueFailures != 0 {
		t.Errorf("Stats() = %+v; want the waiting call neither run nor failed", s)
	}
	if n := len(r.pool.slots); n != 1 {
		t.Errorf("%d states exist; want 1", n)
	}

	r.Close()
	cfg.Set("go", "1")
	if err := <-first; err != nil {
		t.Errorf("the call running during Close: %v", err)
	}
	if n := len(r.pool.slots); n != 0 {
		t.Errorf("%d states exist after Close and the last call; want 0", n)
	}
}

func TestMaxWeight(t *testing.T) {
	r := newTestRunner(t, `function on_enqueue(msg) return {weight = tonumber(msg.headers.w)} end`, "", nil,
		Limits{Timeout: 10 * time.Second, MaxWeight: 10})
	for _, tt := range []struct {
		w       string
		want    uint32
		wantErr string
	}{
		{"10", 10, ""},
		{"11", 0, "returned weight 11: want at most 10"},
	} {
		out, err := r.OnEnqueue(context.Background(), EnqueueInput{Queue: "q", Headers: headers("w", tt.w)})
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("OnEnqueue(weight %s) error = %v; want one containing %q", tt.w, err, tt.wantErr)
			}
			continue
		}
		if err != nil || out.Weight != tt.want {
			t.Errorf("OnEnqueue(weight %s) = %+v, %v; want weight %d", tt.w, out, err, tt.want)
		}
	}
}
