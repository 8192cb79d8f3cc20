package hook

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	lua "github.com/yuin/gopher-lua"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// Scripts, patterns and formats come from users: the fuzz targets check
// that no input makes the compiler, the interpreter or the sandbox's own
// libraries panic, and that the libraries keep their invariants. Seed
// corpora are in testdata/fuzz.

var fuzzLimits = Limits{Timeout: 50 * time.Millisecond, MemoryLimit: 1 << 20, States: 1}

// FuzzCompile compiles a script as an on_enqueue hook and, if it compiles,
// runs it twice.
func FuzzCompile(f *testing.F) {
	f.Add("function on_enqueue(msg) return {fairness_key = msg.headers.tenant or 'x'} end")
	f.Add("function on_enqueue(msg) local t = {} for i = 1, 10 do t[#t + 1] = i .. '' end return {throttle_keys = t} end")
	f.Add("function on_enqueue(msg)\n  return {\nend")
	f.Fuzz(func(t *testing.T, src string) {
		p, err := Compile(src, "")
		if err != nil {
			if !errors.Is(err, fault.ErrScriptError) {
				t.Fatalf("Compile(%q) error = %v; want it to wrap fault.ErrScriptError", src, err)
			}
			if strings.Contains(err.Error(), "internal compiler error") {
				t.Fatalf("Compile(%q) = %v", src, err)
			}
			return
		}
		r := NewRunner(p, newTestConfig("k", "v"), fuzzLimits, nil, nil)
		defer r.Close()
		for range 2 {
			_, err := r.OnEnqueue(context.Background(), EnqueueInput{Queue: "q", Headers: headers("tenant", "acme")})
			if err != nil && strings.Contains(err.Error(), "internal error") {
				t.Fatalf("OnEnqueue with script %q: %v", src, err)
			}
		}
	})
}

// callLib calls a library function of st with args, and fails the test if
// it panicked in Go. It returns the results, or nil and false if the call
// raised a Lua error.
func callLib(t *testing.T, st *state, fn lua.LGFunction, args ...lua.LValue) ([]lua.LValue, bool) {
	t.Helper()
	L := st.L
	lim := fuzzLimits.withDefaults()
	if cerr := st.begin(context.Background(), &lim); cerr != nil {
		t.Fatal(cerr.err)
	}
	defer st.end()
	err := L.CallByParam(lua.P{Fn: L.NewFunction(fn), NRet: lua.MultRet, Protect: true}, args...)
	if err != nil {
		if apiErr, ok := err.(*lua.ApiError); ok && apiErr.Type == lua.ApiErrorPanic {
			t.Fatalf("panic: %v", err)
		}
		return nil, false
	}
	out := make([]lua.LValue, L.GetTop())
	for i := range out {
		out[i] = L.Get(i + 1)
	}
	return out, true
}

// FuzzPattern runs string.find, string.match and string.gsub with a
// subject and a pattern.
func FuzzPattern(f *testing.F) {
	f.Add("hello world", "o w")
	f.Add("key=value", "(%w+)=(%w+)")
	f.Add("f(a(b)c)d", "%b()")
	f.Add("THE (quick) fox", "%f[%a]%a+")
	f.Fuzz(func(t *testing.T, s, p string) {
		st, err := newState(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.close()
		subject, pattern := lua.LString(s), lua.LString(p)

		if out, ok := callLib(t, st, strFind, subject, pattern); ok && out[0] != lua.LNil {
			start, end := int(out[0].(lua.LNumber)), int(out[1].(lua.LNumber))
			if start < 1 || start > end+1 || end > len(s) {
				t.Fatalf("string.find(%q, %q) = %d, %d; want 1 <= start <= end+1 <= %d", s, p, start, end, len(s)+1)
			}
		}
		if !strings.ContainsAny(p, patternSpecials) {
			out, ok := callLib(t, st, strFind, subject, pattern)
			want := strings.Index(s, p)
			if !ok || (want < 0) != (out[0] == lua.LNil) || (want >= 0 && int(out[0].(lua.LNumber)) != want+1) {
				t.Fatalf("string.find(%q, %q) = %v; want the plain search's %d", s, p, out, want+1)
			}
		}
		callLib(t, st, strMatch, subject, pattern)
		// Replacing every match by itself gives back the subject.
		if out, ok := callLib(t, st, strGsub, subject, pattern, lua.LString("%0")); ok && string(out[0].(lua.LString)) != s {
			t.Fatalf("string.gsub(%q, %q, \"%%0\") = %q; want the subject", s, p, out[0])
		}
	})
}

// FuzzFormat runs string.format with a format and a few arguments.
func FuzzFormat(f *testing.F) {
	f.Add("%5.2f|%-5d|%s", 3.14159, "abc")
	f.Add("%q %x %g", 255.0, "a\"b")
	f.Fuzz(func(t *testing.T, format string, n float64, s string) {
		st, err := newState(nil)
		if err != nil {
			t.Fatal(err)
		}
		defer st.close()
		args := []lua.LValue{lua.LString(format)}
		for range 4 {
			args = append(args, lua.LNumber(n), lua.LString(s))
		}
		if out, ok := callLib(t, st, strFormat, args...); ok {
			// At most ~420 bytes per conversion, besides the arguments.
			if limit := len(format)*420 + 8*len(s) + 8*420; len(string(out[0].(lua.LString))) > limit {
				t.Fatalf("string.format(%q, ...) returned %d bytes; want at most %d", format, len(out[0].(lua.LString)), limit)
			}
		}
	})
}
