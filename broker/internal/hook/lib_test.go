package hook

import (
	"strings"
	"testing"
)

// The libraries the sandbox writes itself must behave as Lua 5.1's do. Each
// case is a chunk and its results, as eval shows them.
var libCases = []struct {
	src  string
	want string
}{
	// string.find
	{`return string.find("hello world", "o w")`, `5, 7`},
	{`return string.find("hello", "l")`, `3, 3`},
	{`return string.find("hello", "xyz")`, `nil`},
	{`return string.find("hello", "")`, `1, 0`},
	{`return string.find("hello", "", 10)`, `6, 5`},
	{`return string.find("hello", "l", -2)`, `4, 4`},
	{`return string.find("a.b", ".", 1, true)`, `2, 2`},
	{`return string.find("a+b", "+", 1, true)`, `2, 2`},
	{`return string.find("key=value", "(%w+)=(%w+)")`, `1, 9, "key", "value"`},
	{`return string.find("abc", "^b")`, `nil`},
	{`return string.find("abc", "c$")`, `3, 3`},
	{`return string.find("a$c", "$c")`, `2, 3`},
	{`return string.find("  x", "^%s*")`, `1, 2`},
	{`return string.find("abc", "()b()")`, `2, 2, 2, 3`},
	{`return ("abc"):find("b")`, `2, 2`},
	// string.match
	{`return string.match("hello 123", "%d+")`, `"123"`},
	{`return string.match("2024-01-15", "(%d+)-(%d+)-(%d+)")`, `"2024", "01", "15"`},
	{`return string.match("hello", ".-")`, `""`},
	{`return string.match("[[x]]", "%[(.-)%]")`, `"[x"`},
	{`return string.match("THE (quick) fox", "%((%a+)%)")`, `"quick"`},
	{`return string.match("f(a(b)c)d", "%b()")`, `"(a(b)c)"`},
	{`return string.match("THE quick", "%f[%a]%a+")`, `"THE"`},
	{`return string.match("the (quick)", "%f[%w]%w+$")`, `nil`},
	{`return string.match("hello", "(h)(e)(l)")`, `"h", "e", "l"`},
	{`return string.match("aaa", "a-b")`, `nil`},
	{`return string.match("abab", "(ab)%1")`, `"ab"`},
	{`return string.match("x = 10", "^(%w+)%s*=%s*(%d+)$")`, `"x", "10"`},
	{`return string.match("hello", "[^aeiou]+")`, `"h"`},
	{`return string.match("a]b", "[]]")`, `"]"`},
	{`return string.match("a-b", "[a%-]+")`, `"a-"`},
	{`return string.match("abc", "[a-b]+")`, `"ab"`},
	{`return string.match("hello", "()ll()")`, `3, 5`},
	{`return string.match("HeLLo", "%u+"), string.match("HeLLo", "%u%u+")`, `"H", "LL"`},
	{`return string.match("a1_ b", "[%w_]+")`, `"a1_"`},
	{`return string.match("x\0y", "%z")`, "\"\x00\""},
	{`return string.match(" \t\n", "^%s+$") ~= nil`, `true`},
	{`return string.match("a.b", "%.")`, `"."`},
	{`return string.match("0x1F", "^0x(%x+)$")`, `"1F"`},
	{`return string.match("hello", "l+", 4)`, `"l"`},
	{`return string.match("abc", "^(a?)(b?)(c?)(d?)$")`, `"a", "b", "c", ""`},
	// string.gmatch
	{`local t = {} for k, v in string.gmatch("a=1, b=2", "(%w+)=(%w+)") do t[#t + 1] = k .. v end return table.concat(t, ",")`, `"a1,b2"`},
	{`local n = 0 for w in ("one two three"):gmatch("%a+") do n = n + 1 end return n`, `3`},
	{`local t = {} for w in ("abc"):gmatch("x*") do t[#t + 1] = "[" .. w .. "]" end return table.concat(t)`, `"[][][][]"`},
	{`local t = {} for w in ("^a^b"):gmatch("^.") do t[#t + 1] = w end return table.concat(t, ",")`, `"^a,^b"`},
	// string.gsub
	{`return string.gsub("hello world", "o", "0")`, `"hell0 w0rld", 2`},
	{`return string.gsub("hello", "", "-")`, `"-h-e-l-l-o-", 6`},
	{`return string.gsub("abc", "%w", "%0%0")`, `"aabbcc", 3`},
	{`return string.gsub("hello world", "(%w+)", "<%1>")`, `"<hello> <world>", 2`},
	{`return string.gsub("abc", "b", "%%")`, `"a%c", 1`},
	{`return string.gsub("hello", "l", "L", 1)`, `"heLlo", 1`},
	{`return string.gsub("$name is $age", "%$(%w+)", {name = "bob", age = 3})`, `"bob is 3", 2`},
	{`return string.gsub("abc", "%w", function(c) return c:upper() .. "." end)`, `"A.B.C.", 3`},
	{`return string.gsub("abc", "%w", function(c) if c == "b" then return false end return "x" end)`, `"xbx", 3`},
	{`return string.gsub("aaa", "^a", "X")`, `"Xaa", 1`},
	{`return string.gsub("abc", "%w", {})`, `"abc", 3`},
	{`return string.gsub("abc", "b", 7)`, `"a7c", 1`},
	{`return string.gsub("a b", "()", "%1")`, `"1a2 3b4", 4`},
	{`return string.gsub("hello world", "%s+", "")`, `"helloworld", 1`},
	{`return string.gsub("abc", "(a)(b)(c)", "%3%2%1")`, `"cba", 1`},
	// string.format
	{`return string.format("%d", 3.7)`, `"3"`},
	{`return string.format("%5d|%-5d|%05d", 42, 42, 42)`, `"   42|42   |00042"`},
	{`return string.format("%+d % d", 5, 5)`, `"+5  5"`},
	{`return string.format("%x %X %o", 255, 255, 8)`, `"ff FF 10"`},
	{`return string.format("%#x", 255)`, `"0xff"`},
	{`return string.format("%x", -1)`, `"ffffffffffffffff"`},
	{`return string.format("%.2f", 3.14159)`, `"3.14"`},
	{`return string.format("%10.3f|", 3.14159)`, `"     3.142|"`},
	{`return string.format("%e", 12345.678)`, `"1.234568e+04"`},
	{`return string.format("%g %g %g %g", 0.1, 1e20, 100000, 1e6)`, `"0.1 1e+20 100000 1e+06"`},
	{`return string.format("%g", 1/3)`, `"0.333333"`},
	{`return string.format("%G", 1e-10)`, `"1E-10"`},
	{`return string.format("%.3g", 2/3)`, `"0.667"`},
	{`return string.format("%s|%5s|%-5s|%.2s|%5.1s|", "abc", "abc", "abc", "abc", "abc")`, `"abc|  abc|abc  |ab|    a|"`},
	{`return string.format("%s %s", 12, 1.5)`, `"12 1.5"`},
	{`return string.format("%q", 'a"b\\c') == '"a\\"b\\\\c"'`, `true`},
	{`return string.format("%q", "x\ny\rz\0") == '"x\\\ny\\rz\\000"'`, `true`},
	{`return string.format("%c%c%c", 76, 117, 97)`, `"Lua"`},
	{`return string.format("%%|%d%%", 5)`, `"%|5%"`},
	{`return string.format("%d", "12")`, `"12"`},
	{`return string.format("%5.2f|%f|%.1f", 1/0, -1/0, 0/0)`, `"  inf|-inf|nan"`},
	{`return string.format("%-5d|%i|%u", -3, 7, 7)`, `"-3   |7|7"`},
	{`return string.format("x")`, `"x"`},
	{`return string.format("%s", string.rep("y", 200)) == string.rep("y", 200)`, `true`},
	// rep, sub, byte, char, len, upper, lower, reverse
	{`return string.rep("ab", 3), string.rep("x", 0), string.rep("x", -1), string.rep("", 1e9)`, `"ababab", "", "", ""`},
	{`return string.sub("hello", 2, 4), ("hello"):sub(-3), ("hello"):sub(2), ("hello"):sub(0)`, `"ell", "llo", "ello", "hello"`},
	{`return ("hello"):sub(10), ("hello"):sub(3, 2), ("hello"):sub(-100, 2), ("hello"):sub(2, -2)`, `"", "", "he", "ell"`},
	{`return string.byte("ABC"), string.byte("ABC", 2), string.byte("ABC", -1)`, `65, 66, 67`},
	{`return string.byte("ABC", 1, 3)`, `65, 66, 67`},
	{`return select("#", string.byte("", 1)), select("#", string.byte("abc", 3, 2))`, `0, 0`},
	{`return string.char(72, 105), string.char()`, `"Hi", ""`},
	{`return string.len("abc"), #"abc", string.len("")`, `3, 3, 0`},
	{`return string.upper("aBc1"), string.lower("aBc1"), string.reverse("abc"), string.reverse("")`, `"ABC1", "abc1", "cba", ""`},
	{`return string.upper("\195\169") == "\195\169"`, `true`},
	// table
	{`return table.concat({1, 2, 3}, ", ")`, `"1, 2, 3"`},
	{`return table.concat({"a", "b", "c"}, "", 2), table.concat({"a", "b", "c"}, "-", 2, 3)`, `"bc", "b-c"`},
	{`return table.concat({}, ","), table.concat({"a"}, ",", 3)`, `"", ""`},
	{`local t = {1, 2, 3} table.insert(t, 4) table.insert(t, 1, 0) table.insert(t, 6, 5) return table.concat(t, ",")`, `"0,1,2,3,4,5"`},
	{`local t = {1, 2, 3} local a = table.remove(t) local b = table.remove(t, 1) return a, b, #t, t[1]`, `3, 1, 1, 2`},
	{`return select("#", table.remove({})), table.remove({1}, 5)`, `0`},
	{`return table.maxn({1, 2, [10] = 3}), table.maxn({}), table.maxn({[1.5] = true})`, `10, 0, 1.5`},
	{`local t = {3, 1, 2} table.sort(t) return table.concat(t, ",")`, `"1,2,3"`},
	{`local t = {3, 1, 2} table.sort(t, function(a, b) return a > b end) return table.concat(t, ",")`, `"3,2,1"`},
	{`local t = {"b", "c", "a"} table.sort(t) return table.concat(t)`, `"abc"`},
	// base
	{`return unpack({1, 2, 3})`, `1, 2, 3`},
	{`return unpack({1, 2, 3}, 2)`, `2, 3`},
	{`return unpack({1, 2, 3}, 2, 3)`, `2, 3`},
	{`return unpack({}, 1, 3)`, `nil, nil, nil`},
	{`return select("#", unpack({}, 1, 8000))`, `8000`},
	{`local t = {} return rawset(t, "a", 1) == t, t.a`, `true, 1`},
	{`return select("#", assert(1, 2, 3))`, `3`},
	{`return pcall(error)`, `false, nil`},
	{`return pcall(error, "m")`, `false, "m"`},
	{`return pcall(error, "m", 0)`, `false, "m"`},
	{`return pcall(function() error("m") end)`, `false, "eval:1: m"`},
	{`return pcall(function() error("m", 2) end)`, `false, "m"`},
	{`local function f() error("m", 2) end return pcall(function()
	  f() end)`, `false, "eval:2: m"`},
	{`return pcall(assert, false)`, `false, "assertion failed!"`},
	{`return pcall(function() assert(false, "no") end)`, `false, "eval:1: no"`},
	// The rewritten operators.
	{`return 1 .. 2, "a" .. 1.5, "a" .. "b" .. "c"`, `"12", "a1.5", "abc"`},
	{`local t = setmetatable({}, {__concat = function(a, b) return "T" end}) return t .. "x", "x" .. t, "a" .. "b" .. t`, `"T", "T", "aT"`},
	{`local t = setmetatable({}, {__concat = function(a, b) return type(a) .. type(b) end}) return (t .. 1) .. t`, `"stringtable"`},
	{`local t = {} local i = 1 i, t[i] = i + 1, 20 return i, t[1], t[2]`, `2, 20, nil`},
	{`local t = {1, 2} t[1], t[2] = t[2], t[1] return t[1], t[2]`, `2, 1`},
	{`local function f() return 1, 2 end local a, b, c = f() local t = {} t.x, t.y = f() return a, b, c, t.x, t.y`, `1, 2, nil, 1, 2`},
	{`local obj = {n = 1} function obj:inc(k) self.n = self.n + k return self end return obj:inc(2).n`, `3`},
	{`local a = {b = {}} function a.b.c() return 5 end return a.b.c()`, `5`},
	{`function g(x) return x * 2 end return g(4)`, `8`},
	{`local function fact(n) if n <= 1 then return 1 end return n * fact(n - 1) end return fact(5)`, `120`},
	{`local f = function(n) if n == 0 then return 0 end return f(n - 1) end return f(3)`, `0`},
	{`local function counter() local n = 0 return function() n = n + 1 return n end end local c = counter() c() return c()`, `2`},
	{`local function f(...) return select("#", ...), ... end return f(1, nil, 3)`, `3, 1, nil, 3`},
	{`local function f(...) local t = {...} return #t, arg end return f(1, 2, 3)`, `3, nil`},
	{`local function f() return 1, 2, 3 end return #{f()}, #{f(), f()}, #{(f())}`, `3, 4, 1`},
	{`local k = "x" local t = {[k] = 1, y = 2, [true] = 3, "b"} return t.x, t.y, t[true], #t`, `1, 2, 3, 1`},
	{`local t = setmetatable({}, {__newindex = function(t, k, v) rawset(t, k, v * 2) end}) t.a = 2 t.a = 5 return t.a`, `5`},
	{`local log = {} local t = setmetatable({}, {__newindex = log}) t.a = 1 return rawget(t, "a"), log.a`, `nil, 1`},
	{`local s = 0 for i = 1, 5 do if i % 2 == 0 then goto continue end s = s + i ::continue:: end return s`, `9`},
	{`local t = {} for i = 1, 3 do t[i] = function() return i end end return t[1]() + t[3]()`, `4`},
	{`return ("x"):rep(3), ("%d"):format(7)`, `"xxx", "7"`},
	// gopher-lua's numbers, as docs/lua-patterns.md describes them.
	{`return tostring(1e15), math.huge == 1/0, math.huge > 1e308`, `"1000000000000000", false, true`},
}

func TestLibraries(t *testing.T) {
	for _, tt := range libCases {
		if got := evalOK(t, tt.src); got != tt.want {
			t.Errorf("eval(%q) = %s; want %s", tt.src, got, tt.want)
		}
	}
}

func TestLibraryErrors(t *testing.T) {
	tests := []struct {
		src  string
		want string
	}{
		{`return string.match("x", "%")`, "malformed pattern (ends with '%')"},
		{`return string.match("x", "[a")`, "malformed pattern (missing ']')"},
		{`return string.match("x", "[a%")`, "malformed pattern (missing ']')"},
		{`return string.match("x", "(x")`, "unfinished capture"},
		{`return string.match("x", "x)")`, "invalid pattern capture"},
		{`return string.match("x", "%1")`, "invalid capture index"},
		{`return string.match("x", "%b")`, "unbalanced pattern"},
		{`return string.match("x", "%fx")`, "missing '[' after '%f' in pattern"},
		{`return string.gsub("abc", ".", "%2")`, "invalid capture index"},
		{`return string.gsub("abc", ".", "%")`, "invalid use of '%' in replacement string"},
		{`return string.gsub("abc", "b", true)`, "string/function/table expected"},
		{`return string.gsub("abc", "b", function() return {} end)`, "invalid replacement value (a table)"},
		{`return string.format("%d")`, "bad argument #2"},
		{`return string.format("%z", 1)`, "invalid option '%z' to 'format'"},
		{`return string.format("%d", "x")`, "number expected"},
		{`return string.format("%s", {})`, "string expected"},
		{`return string.format("%------d", 1)`, "invalid format (repeated flags)"},
		{`return string.format("%", 1)`, "invalid option '%' to 'format'"},
		{`return string.char(256)`, "invalid value"},
		{`return string.char(-1)`, "invalid value"},
		{`return table.concat({1, {}, 3})`, "invalid value (at index 2) in table for 'concat'"},
		{`table.insert({}, 3, 1)`, "position out of bounds"},
		{`table.insert({}, 1, 2, 3)`, "wrong number of arguments to 'insert'"},
		{`table.sort({1, "x"})`, "attempt to compare"},
		{`table.sort({3, 2, 1}, function(a, b) error("in comparator") end)`, "in comparator"},
		{`rawset({}, nil, 1)`, "table index is nil"},
	}
	for _, tt := range tests {
		_, err := eval(t, tt.src, testLimits, nil)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("eval(%q) error = %v; want one containing %q", tt.src, err, tt.want)
		}
	}
}
