package hook

import (
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// stringFuncs is the string library: Lua 5.1's, written for the sandbox. Every function
// that builds a string charges its length to the meter before building it,
// and the pattern functions count their steps (pattern.go), so no single
// call can allocate past the memory limit or run far past the time limit.
// gopher-lua's own versions are not used: its string.rep and gsub
// allocate without bound, its string.format hands the format to Go's fmt
// (where %099999999d allocates 100 MB), and its pattern matcher cannot be
// stopped.
var stringFuncs = map[string]lua.LGFunction{
	"byte":    strByte,
	"char":    strChar,
	"find":    strFind,
	"format":  strFormat,
	"gmatch":  strGmatch,
	"gsub":    strGsub,
	"len":     strLen,
	"lower":   strLower,
	"match":   strMatch,
	"rep":     strRep,
	"reverse": strReverse,
	"sub":     strSub,
	"upper":   strUpper,
}

// strRange converts Lua's 1-based, possibly negative positions i and j into
// a half-open byte range of a string of length n, as string.sub does.
func strRange(i, j, n int) (start, end int) {
	if i < 0 {
		i += n + 1
	}
	if j < 0 {
		j += n + 1
	}
	if i < 1 {
		i = 1
	}
	if j > n {
		j = n
	}
	if i > j {
		return 0, 0
	}
	return i - 1, j
}

func strLen(L *lua.LState) int {
	L.Push(lua.LNumber(len(L.CheckString(1))))
	return 1
}

func strSub(L *lua.LState) int {
	s := L.CheckString(1)
	start, end := strRange(optInteger(L, 2, 1), optInteger(L, 3, -1), len(s))
	L.Push(lua.LString(s[start:end]))
	return 1
}

func strByte(L *lua.LState) int {
	s := L.CheckString(1)
	i := optInteger(L, 2, 1)
	start, end := strRange(i, optInteger(L, 3, i), len(s))
	if end-start > maxResults {
		L.RaiseError("string slice too long")
	}
	for i := start; i < end; i++ {
		L.Push(lua.LNumber(s[i]))
	}
	return end - start
}

func strChar(L *lua.LState) int {
	st := current(L)
	n := L.GetTop()
	st.m.charge(L, costString+int64(n))
	var b strings.Builder
	b.Grow(n)
	for i := 1; i <= n; i++ {
		c := float64(L.CheckNumber(i))
		if !(c >= 0 && c < 256) {
			L.ArgError(i, "invalid value")
		}
		b.WriteByte(byte(c))
	}
	L.Push(lua.LString(b.String()))
	return 1
}

func strRep(L *lua.LState) int {
	st := current(L)
	s := L.CheckString(1)
	n := optInteger(L, 2, 0)
	if n <= 0 || s == "" {
		L.Push(lua.LString(""))
		return 1
	}
	size := int64(len(s)) * int64(n) // at most 2^53 × a string the meter allowed
	if size/int64(n) != int64(len(s)) {
		size = -1
	}
	st.m.charge(L, costString+size)
	L.Push(lua.LString(strings.Repeat(s, n)))
	return 1
}

// mapBytes is string.lower and string.upper: f maps each byte, as in the
// C locale.
func mapBytes(L *lua.LState, f func(c byte) byte) int {
	st := current(L)
	s := L.CheckString(1)
	st.m.charge(L, costString+int64(len(s)))
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		b.WriteByte(f(s[i]))
	}
	L.Push(lua.LString(b.String()))
	return 1
}

func strLower(L *lua.LState) int { return mapBytes(L, lower) }

func strUpper(L *lua.LState) int { return mapBytes(L, upper) }

func strReverse(L *lua.LState) int {
	st := current(L)
	s := L.CheckString(1)
	st.m.charge(L, costString+int64(len(s)))
	var b strings.Builder
	b.Grow(len(s))
	for i := len(s) - 1; i >= 0; i-- {
		b.WriteByte(s[i])
	}
	L.Push(lua.LString(b.String()))
	return 1
}

func strFind(L *lua.LState) int { return findAux(L, true) }

func strMatch(L *lua.LState) int { return findAux(L, false) }

// findAux is string.find (find) and string.match.
func findAux(L *lua.LState, find bool) int {
	st := current(L)
	s := L.CheckString(1)
	p := L.CheckString(2)
	init := optInteger(L, 3, 1)
	if init < 0 {
		init += len(s) + 1
	}
	init-- // to a byte offset
	if init < 0 {
		init = 0
	} else if init > len(s) {
		init = len(s)
	}
	if find && (lua.LVAsBool(L.Get(4)) || !strings.ContainsAny(p, patternSpecials)) {
		st.m.step(L, len(s)-init) // a plain search is linear
		if i := strings.Index(s[init:], p); i >= 0 {
			L.Push(lua.LNumber(init + i + 1))
			L.Push(lua.LNumber(init + i + len(p)))
			return 2
		}
		L.Push(lua.LNil)
		return 1
	}
	ms := newMatcher(st, L, s, p)
	pstart, anchor := 0, false
	if p != "" && p[0] == '^' {
		pstart, anchor = 1, true
	}
	start, end := ms.find(init, pstart, anchor)
	if start < 0 {
		L.Push(lua.LNil)
		return 1
	}
	if find {
		L.Push(lua.LNumber(start + 1))
		L.Push(lua.LNumber(end))
		return 2 + ms.pushCaptures(start, end, false)
	}
	return ms.pushCaptures(start, end, true)
}

// strGmatch is string.gmatch. As in Lua 5.1, a leading '^' is an ordinary
// character, since an anchor would stop the iteration.
func strGmatch(L *lua.LState) int {
	st := current(L)
	s := L.CheckString(1)
	p := L.CheckString(2)
	st.m.charge(L, costClosure)
	pos := 0
	ms := newMatcher(st, L, s, p)
	L.Push(L.NewFunction(func(L *lua.LState) int {
		ms.L = L
		for src := pos; src <= len(s); src++ {
			e := ms.matchAt(src, 0)
			if e < 0 {
				continue
			}
			pos = e
			if e == src {
				pos++ // an empty match: move on at least one position
			}
			return ms.pushCaptures(src, e, true)
		}
		pos = len(s) + 1
		return 0
	}))
	return 1
}

// strGsub is string.gsub, building its result under the meter.
func strGsub(L *lua.LState) int {
	st := current(L)
	src := L.CheckString(1)
	p := L.CheckString(2)
	repl := L.Get(3)
	switch repl.(type) {
	case lua.LNumber, lua.LString, *lua.LTable, *lua.LFunction:
	default:
		L.ArgError(3, "string/function/table expected")
	}
	maxN := optInteger(L, 4, len(src)+1)
	anchor := p != "" && p[0] == '^'
	pstart := 0
	if anchor {
		pstart = 1
	}
	ms := newMatcher(st, L, src, p)
	b := meteredBuilder{st: st, L: L}
	s, n := 0, 0
	for n < maxN {
		e := ms.matchAt(s, pstart)
		if e >= 0 {
			n++
			gsubValue(L, ms, &b, repl, s, e)
		}
		if e > s {
			s = e
		} else if s < len(src) {
			b.writeByte(src[s])
			s++
		} else {
			break
		}
		if anchor {
			break
		}
	}
	b.writeString(src[s:])
	L.Push(lua.LString(b.String()))
	L.Push(lua.LNumber(n))
	return 2
}

// gsubValue appends the replacement for the match src[s:e].
func gsubValue(L *lua.LState, ms *matcher, b *meteredBuilder, repl lua.LValue, s, e int) {
	var v lua.LValue
	switch r := repl.(type) {
	case lua.LString, lua.LNumber:
		gsubString(L, ms, b, lua.LVAsString(r), s, e)
		return
	case *lua.LTable:
		v = L.GetTable(r, ms.captureValue(0, s, e))
	case *lua.LFunction:
		L.Push(r)
		L.Call(ms.pushCaptures(s, e, true), 1)
		v = L.Get(-1)
		L.Pop(1)
	}
	switch v := v.(type) {
	case lua.LString, lua.LNumber:
		b.writeString(lua.LVAsString(v))
	default:
		if lua.LVAsBool(v) {
			L.RaiseError("invalid replacement value (a %s)", v.Type().String())
		}
		b.writeString(ms.src[s:e]) // false or nil: keep the original
	}
}

// gsubString appends a replacement string, expanding %0 to %9; % before
// any other character stands for that character.
func gsubString(L *lua.LState, ms *matcher, b *meteredBuilder, repl string, s, e int) {
	for i := 0; i < len(repl); i++ {
		c := repl[i]
		if c != patternEscape {
			b.writeByte(c)
			continue
		}
		i++
		if i == len(repl) {
			L.RaiseError("%s", "invalid use of '%' in replacement string")
		}
		switch c := repl[i]; {
		case c == '0':
			b.writeString(ms.src[s:e])
		case isDigit(c):
			b.writeString(lua.LVAsString(ms.captureValue(int(c-'1'), s, e)))
		default:
			b.writeByte(c)
		}
	}
}

// A meteredBuilder builds a string, charging the meter for what it grows
// by before growing.
type meteredBuilder struct {
	st      *state
	L       *lua.LState
	b       []byte
	charged int64
}

func (b *meteredBuilder) grow(n int) {
	need := int64(len(b.b)) + int64(n)
	if need <= int64(cap(b.b)) {
		return
	}
	newCap := 2*int64(cap(b.b)) + 64
	if newCap < need {
		newCap = need
	}
	b.st.m.charge(b.L, newCap)
	b.charged += newCap
	nb := make([]byte, len(b.b), newCap)
	copy(nb, b.b)
	b.b = nb
}

func (b *meteredBuilder) writeString(s string) {
	b.grow(len(s))
	b.b = append(b.b, s...)
}

func (b *meteredBuilder) writeByte(c byte) {
	b.grow(1)
	b.b = append(b.b, c)
}

// String returns the built string, charging for its copy.
func (b *meteredBuilder) String() string {
	b.st.m.charge(b.L, costString+int64(len(b.b)))
	return string(b.b)
}
