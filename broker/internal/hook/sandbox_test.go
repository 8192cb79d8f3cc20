package hook

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// bigTime is a time limit long enough that only the memory limit can stop
// a memory bomb, so that the test sees which limit held.
var bigTime = Limits{Timeout: time.Minute}

// escapes are scripts that try to leave the sandbox, or to take more than
// their share of time or memory. Each must be stopped with a clear error,
// and the interpreter that ran it must serve the next call as if nothing
// had happened.
var escapes = []struct {
	name   string
	attack string // the body of on_enqueue
	lim    Limits // zero fields: the defaults
	want   string // in the error
	is     error  // the error wraps it, if not nil
}{
	// Libraries that are not there.
	{"os", `return os.exit(1)`, Limits{}, "attempt to index a non-table object(nil) with key 'exit'", nil},
	{"io", `return io.open("/etc/passwd")`, Limits{}, "attempt to index a non-table object(nil)", nil},
	{"debug", `return debug.getregistry()`, Limits{}, "attempt to index a non-table object(nil)", nil},
	{"package", `return package.loadlib("x", "y")`, Limits{}, "attempt to index a non-table object(nil)", nil},
	{"require", `return require("os")`, Limits{}, "attempt to call a non-function object", nil},
	{"load", `return load(function() return "os.exit()" end)()`, Limits{}, "attempt to call a non-function object", nil},
	{"loadstring", `return loadstring("return 1")()`, Limits{}, "attempt to call a non-function object", nil},
	{"dofile", `return dofile("/etc/passwd")`, Limits{}, "attempt to call a non-function object", nil},
	{"loadfile", `return loadfile("/etc/passwd")`, Limits{}, "attempt to call a non-function object", nil},
	{"module", `module("x")`, Limits{}, "attempt to call a non-function object", nil},
	{"collectgarbage", `collectgarbage("collect")`, Limits{}, "attempt to call a non-function object", nil},
	{"print", `print("to the broker's stdout")`, Limits{}, "attempt to call a non-function object", nil},
	{"newproxy", `return newproxy(true)`, Limits{}, "attempt to call a non-function object", nil},
	{"string.dump", `return string.dump(on_enqueue)`, Limits{}, "attempt to call a non-function object", nil},

	// The environment and metatables.
	{"getfenv", `return getfenv(0).os`, Limits{}, "attempt to call a non-function object", nil},
	{"getfenv of a builtin", `return getfenv(pcall)`, Limits{}, "attempt to call a non-function object", nil},
	{"setfenv", `setfenv(1, {})`, Limits{}, "attempt to call a non-function object", nil},
	{"setmetatable on the globals", `setmetatable(_G, {__index = function() return 1 end})`, Limits{}, "cannot change a protected metatable", nil},
	{"globals' metatable", `return getmetatable(_G).__index`, Limits{}, "attempt to index a non-table object(boolean)", nil},
	{"string metatable", `getmetatable("").__index.rep = nil`, Limits{}, "attempt to index a non-table object(boolean)", nil},
	{"setmetatable on strings", `setmetatable("", {})`, Limits{}, "cannot change a protected metatable", nil},
	{"setmetatable on a library", `setmetatable(string, nil)`, Limits{}, "cannot change a protected metatable", nil},
	{"assign to a library", `string.rep = function() return "" end`, Limits{}, "string library is read-only", nil},
	{"add to a library", `math.evil = true`, Limits{}, "math library is read-only", nil},
	{"assign to fila", `fila.get = function() return "1" end`, Limits{}, "fila library is read-only", nil},
	{"rawset on a library", `rawset(table, "insert", print)`, Limits{}, "rawset: library tables are read-only", nil},
	{"table.insert into a library", `table.insert(string, "x")`, Limits{}, "insert: library tables are read-only", nil},
	{"table.sort of a library", `table.sort(math)`, Limits{}, "sort: library tables are read-only", nil},

	// Time.
	{"while true", `while true do end`, Limits{}, "timeout after 10ms", ErrTimeout},
	{"repeat", `repeat until false`, Limits{}, "timeout after 10ms", ErrTimeout},
	{"goto", "::top:: goto top", Limits{}, "timeout after 10ms", ErrTimeout},
	{"numeric for", `for i = 1, 2^53 do end`, Limits{}, "timeout", ErrTimeout},
	{"tail calls", `local function f(n) return f(n + 1) end return f(1)`, Limits{}, "timeout", ErrTimeout},
	{"pcall cannot catch a timeout", `while true do pcall(function() while true do end end) end`, Limits{}, "timeout", ErrTimeout},
	{"nor xpcall", `xpcall(function() while true do end end, function() while true do end end) return {}`, Limits{}, "timeout", ErrTimeout},
	{"after a caught timeout", `pcall(function() while true do end end) return {fairness_key = "survived"}`, Limits{}, "timeout", ErrTimeout},
	{"exponential recursion", `local function f() pcall(f) pcall(f) end f()`, Limits{}, "timeout", ErrTimeout},
	{"__tostring loop in tostring", `return tostring(setmetatable({}, {__tostring = function() while true do end end}))`, Limits{}, "timeout", ErrTimeout},
	{"sort comparator loop", `table.sort({3, 2, 1}, function(a, b) while true do end end)`, Limits{}, "timeout", ErrTimeout},
	{"gsub callback loop", `string.gsub("abc", ".", function() while true do end end)`, Limits{}, "timeout", ErrTimeout},
	{"pattern backtracking", `return string.find(string.rep("a", 40), string.rep("a?", 40) .. string.rep("a", 40))`, Limits{}, "timeout", ErrTimeout},
	{"pattern lazy backtracking", `return string.find(string.rep("a", 1e5), ".-.-.-.-b")`, Limits{}, "timeout", ErrTimeout},
	{"gsub backtracking", `return string.gsub(string.rep("a", 1e4), ".-.-b", "")`, Limits{}, "timeout", ErrTimeout},

	// Memory.
	{"string.rep", `return string.rep("x", 2^31)`, bigTime, "memory limit 8MB exceeded", ErrMemoryLimit},
	{"string.rep method", `return ("ab"):rep(1e9)`, bigTime, "memory limit 8MB exceeded", ErrMemoryLimit},
	{"string.rep infinite", `return string.rep("x", 1/0)`, bigTime, "memory limit", ErrMemoryLimit},
	{"string.rep 2^53", `return string.rep("xy", 2^53)`, bigTime, "memory limit", ErrMemoryLimit},
	{"pcall cannot catch the memory limit", `pcall(string.rep, "x", 1e9) return {fairness_key = "survived"}`, bigTime, "memory limit", ErrMemoryLimit},
	{".. doubling", `local s = "x" while true do s = s .. s end`, bigTime, "memory limit 8MB exceeded", ErrMemoryLimit},
	{".. tripling", `local s = "x" for i = 1, 40 do s = s .. s .. s end`, bigTime, "memory limit", ErrMemoryLimit},
	{"quadratic ..", `local s = "" for i = 1, 1e6 do s = s .. "xxxxxxxxxx" end`, bigTime, "memory limit", ErrMemoryLimit},
	{"gsub amplification", `return (string.rep("x", 1e4):gsub("x", string.rep("y", 1e4)))`, bigTime, "memory limit", ErrMemoryLimit},
	{"gsub doubling", `local s = "x" for i = 1, 40 do s = s:gsub(".", "%0%0") end`, bigTime, "memory limit", ErrMemoryLimit},
	{"gsub table amplification", `return (string.rep("x", 1e4):gsub("x", {x = string.rep("y", 1e4)}))`, bigTime, "memory limit", ErrMemoryLimit},
	{"format width", `return string.format("%099999d", 1)`, Limits{}, "invalid format (width or precision too long)", nil},
	{"format precision", `return string.format("%.100f", 1)`, Limits{}, "invalid format (width or precision too long)", nil},
	{"format padding doubling", `local s = "x" for i = 1, 40 do s = string.format("%s%s", s, s) end`, bigTime, "memory limit", ErrMemoryLimit},
	{"format padding loop", `local s = "" for i = 1, 1e6 do s = string.format("%s%99s", s, "") end`, bigTime, "memory limit", ErrMemoryLimit},
	{"string.char of 9000", `local t = {} for i = 1, 9000 do t[i] = 65 end return string.char(unpack(t))`, Limits{}, "too many results to unpack", nil},
	{"string.char of many", `return string.char(string.byte(string.rep("a", 1e5), 1, -1))`, Limits{}, "string slice too long", nil},
	{"upper of big", `local s = string.rep("a", 5e6) return s:upper() .. s:lower()`, bigTime, "memory limit", ErrMemoryLimit},
	{"reverse of big", `local s = string.rep("ab", 2e6) return s:reverse() .. s:reverse()`, bigTime, "memory limit", ErrMemoryLimit},
	{"unpack huge range", `return unpack({}, 1, 1e9)`, Limits{}, "too many results to unpack", nil},
	{"unpack negative range", `return unpack({}, -2^53, 2^53)`, Limits{}, "too many results to unpack", nil},
	{"huge table constructors", `local t = {} for i = 1, 7999 do t[i] = i end while true do local u = {unpack(t)} end`, bigTime, "memory limit", ErrMemoryLimit},
	{"string in a constructor", `return {string.rep("x", 1e7)}`, bigTime, "memory limit", ErrMemoryLimit},
	{"table fill", `local t = {} for i = 1, 2^53 do t[i] = i end`, bigTime, "memory limit", ErrMemoryLimit},
	{"table fill by #", `local t = {} while true do t[#t + 1] = true end`, bigTime, "memory limit", ErrMemoryLimit},
	{"table fill by string keys", `local t = {} for i = 1, 2^53 do t["k" .. i] = i end`, bigTime, "memory limit", ErrMemoryLimit},
	{"table of tables", `local t = {} for i = 1, 2^53 do t[i] = {} end`, bigTime, "memory limit", ErrMemoryLimit},
	{"sparse array store", `local t = {} t[2^26 - 1] = true`, Limits{}, "memory limit", ErrMemoryLimit},
	{"sparse array constructor", `return {[2^26 - 1] = true}`, Limits{}, "memory limit", ErrMemoryLimit},
	{"sparse rawset", `rawset({}, 2^25, true)`, Limits{}, "memory limit", ErrMemoryLimit},
	{"table.insert fill", `local t = {} for i = 1, 2^53 do table.insert(t, i) end`, bigTime, "memory limit", ErrMemoryLimit},
	{"rawset fill", `local t = {} for i = 1, 2^53 do rawset(t, i, i) end`, bigTime, "memory limit", ErrMemoryLimit},
	{"linked list", `local l for i = 1, 2^53 do l = {next = l} end`, bigTime, "memory limit", ErrMemoryLimit},
	{"linked list by store", `local l for i = 1, 2^53 do local n = {} n.next = l l = n end`, bigTime, "memory limit", ErrMemoryLimit},
	{"closure chain", `local f = function() end for i = 1, 2^53 do local g = f f = function() return g end end`, bigTime, "memory limit", ErrMemoryLimit},
	{"table.concat", `local t = {} for i = 1, 1e5 do t[i] = string.rep("x", 100) end local s = table.concat(t) return s .. s`, bigTime, "memory limit", ErrMemoryLimit},
	{"table.concat doubling", `local t = {"x"} for i = 1, 40 do t[#t + 1] = table.concat(t) end`, bigTime, "memory limit", ErrMemoryLimit},
	{"error message amplification", `local s = string.rep("x", 1e6) for i = 1, 40 do local _, e = pcall(error, s) s = e .. e end`, bigTime, "memory limit", ErrMemoryLimit},
	{"string.byte slice", `return string.byte(string.rep("x", 1e5), 1, -1)`, Limits{}, "string slice too long", nil},

	// Recursion.
	{"deep recursion", `local function f() return 1 + f() end return f()`, Limits{}, "stack overflow", nil},
	{"__index recursion", `local t = setmetatable({}, {}) getmetatable(t).__index = function(t, k) return t[k] end return t.x`, Limits{}, "stack overflow", nil},
	{"__newindex recursion", `local t = setmetatable({}, {__newindex = function(t, k, v) t[k] = v end}) t.x = 1`, Limits{}, "stack overflow", nil},
	{"__concat recursion", `local t = setmetatable({}, {__concat = function(a, b) return a .. b end}) return t .. "x"`, Limits{}, "stack overflow", nil},
	{"__tostring recursion", `local t = setmetatable({}, {}) getmetatable(t).__tostring = function(x) return tostring(x) end return tostring(t)`, Limits{}, "stack overflow", nil},
	{"__call recursion", `local t = setmetatable({}, {}) getmetatable(t).__call = function(self) return 1 + self() end return t()`, Limits{}, "stack overflow", nil},
	{"sort comparator recursion", `local function less(a, b) table.sort({2, 1}, less) return a < b end table.sort({2, 1}, less)`, Limits{}, "stack overflow", nil},
	{"gsub callback recursion", `local function f(c) return (string.gsub(c, ".", f)) end return string.gsub("x", ".", f)`, Limits{}, "stack overflow", nil},
	{"pattern depth", `return string.match(string.rep("a", 300), string.rep("a?", 300))`, Limits{}, "pattern too complex", nil},
	{"pattern captures", `return string.match("x", string.rep("(", 40))`, Limits{}, "too many captures", nil},

	// Errors that are not strings.
	{"error table with __tostring loop", `error(setmetatable({}, {__tostring = function() while true do end end}))`, Limits{}, "error object is a table value", nil},
	{"error table with __tostring error", `error(setmetatable({}, {__tostring = function() error("again") end}))`, Limits{}, "error object is a table value", nil},
	{"error function", `error(function() end)`, Limits{}, "error object is a function value", nil},
	{"error nil", `error()`, Limits{}, "error object is a nil value", nil},

	// Coroutines.
	{"yield", `return coroutine.yield(1)`, Limits{}, "attempt to index a non-table object(nil) with key 'yield'", nil},
	{"wrap", `return coroutine.wrap(function() end)()`, Limits{}, "attempt to index a non-table object(nil)", nil},
}

func TestSandboxEscapes(t *testing.T) {
	for _, tt := range escapes {
		t.Run(tt.name, func(t *testing.T) {
			script := "function on_enqueue(msg)\n  if msg.headers.attack then\n" + tt.attack +
				"\n  end\n  return {fairness_key = 'ok'}\nend"
			lim := tt.lim
			if lim.Timeout == 0 && tt.is != ErrTimeout {
				lim.Timeout = testLimits.Timeout // a stalled machine must not turn the expected error into a timeout
			}
			lim.States = 1 // the next call runs in the interpreter the attack ran in
			r := newTestRunner(t, script, "", nil, lim)
			ctx := context.Background()

			out, err := r.OnEnqueue(ctx, EnqueueInput{Queue: "q", FairnessKey: "default", Headers: []Header{{"attack", "1"}}})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("attack: OnEnqueue() = %+v, %v; want an error containing %q", out, err, tt.want)
			}
			if strings.Contains(err.Error(), "internal error") {
				t.Errorf("attack: OnEnqueue() error = %v; want a Lua error, not a recovered Go panic", err)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("attack: OnEnqueue() error = %v; want it to wrap %v", err, tt.is)
			}
			if out.FairnessKey != "default" {
				t.Errorf("attack: OnEnqueue() fairness key = %q; want the producer's %q", out.FairnessKey, "default")
			}

			out, err = r.OnEnqueue(ctx, EnqueueInput{Queue: "q"})
			if err != nil || out.FairnessKey != "ok" {
				t.Errorf("next call: OnEnqueue() = %+v, %v; want fairness key ok, nil", out, err)
			}
		})
	}
}

func TestSandboxContents(t *testing.T) {
	tests := []struct {
		src  string
		want string
	}{
		{`return type(os), type(io), type(debug), type(package), type(coroutine), type(channel)`,
			`"nil", "nil", "nil", "nil", "nil", "nil"`},
		{`return type(require), type(module), type(load), type(loadstring), type(loadfile), type(dofile)`,
			`"nil", "nil", "nil", "nil", "nil", "nil"`},
		{`return type(getfenv), type(setfenv), type(collectgarbage), type(gcinfo), type(newproxy), type(print)`,
			`"nil", "nil", "nil", "nil", "nil", "nil"`},
		{`return type(_printregs), type(_GOPHER_LUA_VERSION), type(string.dump), type(string.gfind), type(table.getn)`,
			`"nil", "nil", "nil", "nil", "nil"`},
		{`return type(assert), type(error), type(ipairs), type(next), type(pairs), type(pcall), type(xpcall)`,
			`"function", "function", "function", "function", "function", "function", "function"`},
		{`return type(rawequal), type(rawget), type(rawset), type(select), type(tonumber), type(tostring), type(type), type(unpack)`,
			`"function", "function", "function", "function", "function", "function", "function", "function"`},
		{`return type(getmetatable), type(setmetatable), _VERSION, _G == _G._G`,
			`"function", "function", "Lua 5.1", true`},
		{`return type(string), type(table), type(math), type(fila), type(fila.get)`,
			`"table", "table", "table", "table", "function"`},
		{`return getmetatable(""), getmetatable(_G), getmetatable(string), getmetatable(fila)`,
			`false, false, false, false`},
		{`local n = 0 for k in pairs(string) do n = n + 1 end return n, next(table)`, `0, nil`},
		{`return math.floor(2.5), math.max(1, 3), math.huge > 1e300, math.pi > 3`, `2, 3, true, true`},
		{`x = 1 return x, _G.x, rawget(_G, "x")`, `1, 1, 1`},
	}
	for _, tt := range tests {
		if got := evalOK(t, tt.src); got != tt.want {
			t.Errorf("eval(%q) = %s; want %s", tt.src, got, tt.want)
		}
	}
}
