package hook

import (
	lua "github.com/yuin/gopher-lua"
)

// Lua 5.1 patterns (reference manual §5.4.1), matched by backtracking as
// the reference implementation does, with two additions for the sandbox:
// every step is counted on the call's meter, so a pattern such as
// string.rep("a?", 30) .. string.rep("a", 30), exponential in a backtracking
// matcher, stops at the time limit instead of running for hours; and the
// recursion depth is capped ("pattern too complex"), as in Lua 5.2.

const (
	maxCaptures   = 32 // LUA_MAXCAPTURES
	maxMatchDepth = 200
	capUnfinished = -1
	capPosition   = -2
	patternEscape = '%'
	// patternSpecials are the bytes that make string.find use the matcher
	// instead of a plain search.
	patternSpecials = "^$*+?.([%-"
)

// A patternError is an error in a pattern, raised in Lua by the caller.
type patternError string

type capture struct {
	init, len int
}

// A matcher matches one pattern against one subject.
type matcher struct {
	src, pat string
	level    int // captures opened so far
	capture  [maxCaptures]capture
	depth    int
	steps    int // steps not yet reported to the meter
	m        *meter
	L        *lua.LState
}

func newMatcher(st *state, L *lua.LState, src, pat string) *matcher {
	return &matcher{src: src, pat: pat, m: &st.m, L: L}
}

func (ms *matcher) fail(msg string) {
	panic(patternError(msg))
}

// tick counts one step, and reports to the meter every pollEvery steps.
func (ms *matcher) tick() {
	ms.steps++
	if ms.steps == pollEvery {
		ms.steps = 0
		ms.m.step(ms.L, pollEvery)
	}
}

// find tries the pattern at every position from init on (only at init if
// anchored) and returns the start and end of the first match, or -1.
// Errors in the pattern are raised in L.
func (ms *matcher) find(init int, p int, anchor bool) (start, end int) {
	defer ms.recover()
	for s := init; s <= len(ms.src); s++ {
		ms.level = 0
		ms.depth = 0
		if e := ms.match(s, p); e >= 0 {
			return s, e
		}
		if anchor {
			break
		}
	}
	return -1, -1
}

// matchAt tries the pattern at s only.
func (ms *matcher) matchAt(s, p int) (end int) {
	defer ms.recover()
	ms.level = 0
	ms.depth = 0
	return ms.match(s, p)
}

// recover turns a pattern error into a Lua error, once the matcher's
// panic has unwound its recursion.
func (ms *matcher) recover() {
	if r := recover(); r != nil {
		msg, ok := r.(patternError)
		if !ok {
			panic(r)
		}
		ms.L.RaiseError("%s", string(msg))
	}
}

// match matches the pattern from p against the subject from s and returns
// the end of the match, or -1.
func (ms *matcher) match(s, p int) int {
	ms.depth++
	if ms.depth > maxMatchDepth {
		ms.fail("pattern too complex")
	}
	defer func() { ms.depth-- }()
	for {
		ms.tick()
		if p == len(ms.pat) {
			return s
		}
		switch ms.pat[p] {
		case '(':
			if p+1 < len(ms.pat) && ms.pat[p+1] == ')' {
				return ms.startCapture(s, p+2, capPosition)
			}
			return ms.startCapture(s, p+1, capUnfinished)
		case ')':
			return ms.endCapture(s, p+1)
		case '$':
			if p+1 == len(ms.pat) {
				if s == len(ms.src) {
					return s
				}
				return -1
			}
		case patternEscape:
			if p+1 < len(ms.pat) {
				switch c := ms.pat[p+1]; {
				case c == 'b':
					s = ms.matchBalance(s, p+2)
					if s < 0 {
						return -1
					}
					p += 4
					continue
				case c == 'f':
					p += 2
					if p >= len(ms.pat) || ms.pat[p] != '[' {
						ms.fail("missing '[' after '%f' in pattern")
					}
					ep := ms.classEnd(p)
					var prev, cur byte
					if s > 0 {
						prev = ms.src[s-1]
					}
					if s < len(ms.src) {
						cur = ms.src[s]
					}
					if ms.matchBracketClass(prev, p, ep-1) || !ms.matchBracketClass(cur, p, ep-1) {
						return -1
					}
					p = ep
					continue
				case isDigit(c):
					s = ms.matchCapture(s, c)
					if s < 0 {
						return -1
					}
					p += 2
					continue
				}
			}
		}

		// A single-character class, perhaps with a quantifier.
		ep := ms.classEnd(p)
		m := s < len(ms.src) && ms.singleMatch(ms.src[s], p, ep)
		if ep < len(ms.pat) {
			switch ms.pat[ep] {
			case '?':
				if m {
					if res := ms.match(s+1, ep+1); res >= 0 {
						return res
					}
				}
				p = ep + 1
				continue
			case '*':
				return ms.maxExpand(s, p, ep)
			case '+':
				if !m {
					return -1
				}
				return ms.maxExpand(s+1, p, ep)
			case '-':
				return ms.minExpand(s, p, ep)
			}
		}
		if !m {
			return -1
		}
		s++
		p = ep
	}
}

func (ms *matcher) maxExpand(s, p, ep int) int {
	i := 0
	for s+i < len(ms.src) && ms.singleMatch(ms.src[s+i], p, ep) {
		ms.tick()
		i++
	}
	for ; i >= 0; i-- {
		if res := ms.match(s+i, ep+1); res >= 0 {
			return res
		}
	}
	return -1
}

func (ms *matcher) minExpand(s, p, ep int) int {
	for {
		if res := ms.match(s, ep+1); res >= 0 {
			return res
		}
		if s < len(ms.src) && ms.singleMatch(ms.src[s], p, ep) {
			s++
		} else {
			return -1
		}
	}
}

func (ms *matcher) startCapture(s, p, what int) int {
	if ms.level >= maxCaptures {
		ms.fail("too many captures")
	}
	ms.capture[ms.level] = capture{init: s, len: what}
	ms.level++
	res := ms.match(s, p)
	if res < 0 {
		ms.level--
	}
	return res
}

func (ms *matcher) endCapture(s, p int) int {
	l := -1
	for i := ms.level - 1; i >= 0; i-- {
		if ms.capture[i].len == capUnfinished {
			l = i
			break
		}
	}
	if l < 0 {
		ms.fail("invalid pattern capture")
	}
	ms.capture[l].len = s - ms.capture[l].init
	res := ms.match(s, p)
	if res < 0 {
		ms.capture[l].len = capUnfinished
	}
	return res
}

func (ms *matcher) matchBalance(s, p int) int {
	if p+1 >= len(ms.pat) {
		ms.fail("unbalanced pattern")
	}
	if s >= len(ms.src) || ms.src[s] != ms.pat[p] {
		return -1
	}
	b, e := ms.pat[p], ms.pat[p+1]
	cont := 1
	for s++; s < len(ms.src); s++ {
		ms.tick()
		switch ms.src[s] {
		case e:
			cont--
			if cont == 0 {
				return s + 1
			}
		case b:
			cont++
		}
	}
	return -1
}

func (ms *matcher) matchCapture(s int, c byte) int {
	l := ms.checkCapture(c)
	n := ms.capture[l].len
	if n < 0 { // a position capture matches no text
		return -1
	}
	init := ms.capture[l].init
	if len(ms.src)-s >= n && ms.src[init:init+n] == ms.src[s:s+n] {
		ms.m.step(ms.L, n)
		return s + n
	}
	return -1
}

func (ms *matcher) checkCapture(c byte) int {
	l := int(c) - '1'
	if l < 0 || l >= ms.level || ms.capture[l].len == capUnfinished {
		ms.fail("invalid capture index")
	}
	return l
}

// classEnd returns the end of the single-character class at p.
func (ms *matcher) classEnd(p int) int {
	c := ms.pat[p]
	p++
	switch c {
	case patternEscape:
		if p >= len(ms.pat) {
			ms.fail("malformed pattern (ends with '%')")
		}
		return p + 1
	case '[':
		if p < len(ms.pat) && ms.pat[p] == '^' {
			p++
		}
		for { // look for a ']'; the first character may be one
			if p >= len(ms.pat) {
				ms.fail("malformed pattern (missing ']')")
			}
			c := ms.pat[p]
			p++
			if c == patternEscape {
				if p >= len(ms.pat) {
					ms.fail("malformed pattern (missing ']')")
				}
				p++ // skip the escaped character, which may be ']'
			}
			if p < len(ms.pat) && ms.pat[p] == ']' {
				return p + 1
			}
		}
	}
	return p
}

// singleMatch reports whether c matches the class pat[p:ep].
func (ms *matcher) singleMatch(c byte, p, ep int) bool {
	switch ms.pat[p] {
	case '.':
		return true
	case patternEscape:
		return matchClass(c, ms.pat[p+1])
	case '[':
		return ms.matchBracketClass(c, p, ep-1)
	}
	return ms.pat[p] == c
}

// matchBracketClass reports whether c matches the set pat[p:ec+1], p at
// its '[' and ec at its ']'.
func (ms *matcher) matchBracketClass(c byte, p, ec int) bool {
	sig := true
	if ms.pat[p+1] == '^' {
		sig = false
		p++
	}
	for p++; p < ec; p++ {
		ms.tick()
		switch {
		case ms.pat[p] == patternEscape:
			p++
			if matchClass(c, ms.pat[p]) {
				return sig
			}
		case ms.pat[p+1] == '-' && p+2 < ec:
			p += 2
			if ms.pat[p-2] <= c && c <= ms.pat[p] {
				return sig
			}
		case ms.pat[p] == c:
			return sig
		}
	}
	return !sig
}

// matchClass reports whether c is in the class %cl, in the C locale.
func matchClass(c, cl byte) bool {
	var res bool
	switch lower(cl) {
	case 'a':
		res = isAlpha(c)
	case 'c':
		res = c < 32 || c == 127
	case 'd':
		res = isDigit(c)
	case 'l':
		res = 'a' <= c && c <= 'z'
	case 'p':
		res = isPunct(c)
	case 's':
		res = c == ' ' || ('\t' <= c && c <= '\r')
	case 'u':
		res = 'A' <= c && c <= 'Z'
	case 'w':
		res = isAlpha(c) || isDigit(c)
	case 'x':
		res = isDigit(c) || ('a' <= lower(c) && lower(c) <= 'f')
	case 'z':
		res = c == 0
	default:
		return cl == c
	}
	if 'A' <= cl && cl <= 'Z' {
		return !res
	}
	return res
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
func isAlpha(c byte) bool { return 'a' <= lower(c) && lower(c) <= 'z' }
func isPunct(c byte) bool { return c > 32 && c < 127 && !isAlpha(c) && !isDigit(c) }
func lower(c byte) byte {
	if 'A' <= c && c <= 'Z' {
		return c + 'a' - 'A'
	}
	return c
}

func upper(c byte) byte {
	if 'a' <= c && c <= 'z' {
		return c - 'a' + 'A'
	}
	return c
}

// captureValue returns capture i of the match src[s:e]: the whole match
// when the pattern has no captures and i is 0.
func (ms *matcher) captureValue(i, s, e int) lua.LValue {
	if i >= ms.level {
		if i != 0 {
			ms.L.RaiseError("invalid capture index")
		}
		return lua.LString(ms.src[s:e])
	}
	c := ms.capture[i]
	switch c.len {
	case capUnfinished:
		ms.L.RaiseError("unfinished capture")
	case capPosition:
		return lua.LNumber(c.init + 1)
	}
	return lua.LString(ms.src[c.init : c.init+c.len])
}

// pushCaptures pushes the captures of the match src[s:e] (the whole match
// if the pattern has none, and wholeIfNone) and returns how many.
func (ms *matcher) pushCaptures(s, e int, wholeIfNone bool) int {
	n := ms.level
	if n == 0 && wholeIfNone {
		n = 1
	}
	for i := 0; i < n; i++ {
		ms.L.Push(ms.captureValue(i, s, e))
	}
	return n
}
