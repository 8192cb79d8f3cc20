package hook

import (
	"context"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// testConfig is a ConfigReader over a map replaced on every Set, as the
// runtime config's copy-on-write snapshot is.
type testConfig struct {
	snap atomic.Pointer[map[string]string]
	mu   sync.Mutex // serializes writers
}

func newTestConfig(kv ...string) *testConfig {
	c := &testConfig{}
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	c.snap.Store(&m)
	return c
}

func (c *testConfig) Get(key string) (string, bool) {
	v, ok := (*c.snap.Load())[key]
	return v, ok
}

func (c *testConfig) Set(key, value string) {
	c.update(func(m map[string]string) { m[key] = value })
}

func (c *testConfig) Delete(key string) {
	c.update(func(m map[string]string) { delete(m, key) })
}

func (c *testConfig) update(f func(map[string]string)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := maps.Clone(*c.snap.Load())
	f(m)
	c.snap.Store(&m)
}

// fakeClock is the breaker's clock in tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// testLimits are generous time limits for tests that are not about time: a
// loaded machine may stall a call for longer than the default 10ms.
var testLimits = Limits{Timeout: 10 * time.Second}

func mustCompile(t testing.TB, onEnqueue, onFailure string) *Program {
	t.Helper()
	p, err := Compile(onEnqueue, onFailure)
	if err != nil {
		t.Fatalf("Compile: %v", err)
	}
	return p
}

func newTestRunner(t testing.TB, onEnqueue, onFailure string, cfg ConfigReader, lim Limits) *Runner {
	t.Helper()
	r := NewRunner(mustCompile(t, onEnqueue, onFailure), cfg, lim, nil, nil)
	t.Cleanup(r.Close)
	return r
}

// eval runs src as a script's top level in a sandboxed state and returns
// its results as tostring shows them (strings quoted with %q), or the
// error of the call.
func eval(t testing.TB, src string, lim Limits, cfg ConfigReader) ([]string, error) {
	t.Helper()
	proto, err := compileChunk("eval", src)
	if err != nil {
		return nil, err
	}
	st, err := newState(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer st.close()
	lim = lim.withDefaults()
	if cerr := st.begin(context.Background(), &lim); cerr != nil {
		return nil, cerr.err
	}
	defer st.end()
	if cerr := st.runTop(proto, lua.MultRet); cerr != nil {
		return nil, cerr.err
	}
	var out []string
	for i := 1; i <= st.L.GetTop(); i++ {
		out = append(out, show(st.L.Get(i)))
	}
	return out, nil
}

// show renders a value the way the expectations of eval are written.
func show(v lua.LValue) string {
	switch v := v.(type) {
	case lua.LString:
		return `"` + string(v) + `"`
	case lua.LNumber:
		return v.String()
	case *lua.LTable:
		return "table"
	case *lua.LFunction:
		return "function"
	}
	return v.String()
}

// evalOK is eval that fails the test on an error, with the results joined
// by ", ".
func evalOK(t testing.TB, src string) string {
	t.Helper()
	out, err := eval(t, src, testLimits, nil)
	if err != nil {
		t.Fatalf("eval(%q): %v", src, err)
	}
	return strings.Join(out, ", ")
}

// short shortens a script for a failure message.
func short(s string) string {
	if len(s) > 100 {
		return s[:100] + "..."
	}
	return s
}
