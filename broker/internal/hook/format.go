package hook

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// A formatSpec is one parsed conversion of string.format, such as %-08.3f.
type formatSpec struct {
	flags   string
	width   int
	prec    int
	hasPrec bool
}

func (f formatSpec) has(flag byte) bool { return strings.IndexByte(f.flags, flag) >= 0 }

// goFormat returns the equivalent format for Go's fmt, with verb.
func (f formatSpec) goFormat(verb byte) string {
	b := make([]byte, 0, 12)
	b = append(b, '%')
	b = append(b, f.flags...)
	if f.width > 0 {
		b = strconv.AppendInt(b, int64(f.width), 10)
	}
	if f.hasPrec {
		b = append(b, '.')
		b = strconv.AppendInt(b, int64(f.prec), 10)
	}
	return string(append(b, verb))
}

// pad pads s with spaces to the spec's width.
func (f formatSpec) pad(s string) string {
	if len(s) >= f.width {
		return s
	}
	fill := strings.Repeat(" ", f.width-len(s))
	if f.has('-') {
		return s + fill
	}
	return fill + s
}

const formatFlags = "-+ #0"

// scanFormat parses the conversion of format f that starts at i, after
// its '%', with Lua 5.1's limits: at most 5 flags, and at most 2 digits of
// width and of precision, so that no conversion produces more than a few
// hundred bytes (%099999999d is an error, not 100 MB).
func scanFormat(L *lua.LState, f string, i int) (spec formatSpec, conv byte, next int) {
	start := i
	for i < len(f) && strings.IndexByte(formatFlags, f[i]) >= 0 {
		i++
	}
	if i-start > len(formatFlags) {
		L.RaiseError("invalid format (repeated flags)")
	}
	spec.flags = f[start:i]
	digits := func() int {
		n := 0
		for k := 0; k < 2 && i < len(f) && isDigit(f[i]); k++ {
			n = n*10 + int(f[i]-'0')
			i++
		}
		return n
	}
	spec.width = digits()
	if i < len(f) && f[i] == '.' {
		i++
		spec.hasPrec = true
		spec.prec = digits()
	}
	if i < len(f) && isDigit(f[i]) {
		L.RaiseError("invalid format (width or precision too long)")
	}
	if i == len(f) {
		L.RaiseError("%s", "invalid option '%' to 'format'")
	}
	return spec, f[i], i + 1
}

// strFormat is string.format, with Lua 5.1's conversions and C's output.
func strFormat(L *lua.LState) int {
	st := current(L)
	f := L.CheckString(1)
	top := L.GetTop()
	arg := 1
	b := meteredBuilder{st: st, L: L}
	for i := 0; i < len(f); {
		if f[i] != '%' {
			j := strings.IndexByte(f[i:], '%')
			if j < 0 {
				j = len(f) - i
			}
			b.writeString(f[i : i+j])
			i += j
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			b.writeByte('%')
			i++
			continue
		}
		arg++
		if arg > top {
			L.ArgError(arg, "no value")
		}
		spec, conv, next := scanFormat(L, f, i)
		i = next
		switch conv {
		case 'c':
			b.writeString(spec.pad(string([]byte{byte(toInteger(L.CheckNumber(arg)))})))
		case 'd', 'i':
			b.writeString(fmt.Sprintf(spec.goFormat('d'), toInteger(L.CheckNumber(arg))))
		case 'u':
			b.writeString(fmt.Sprintf(spec.goFormat('d'), uint64(toInteger(L.CheckNumber(arg)))))
		case 'o', 'x', 'X':
			b.writeString(fmt.Sprintf(spec.goFormat(conv), uint64(toInteger(L.CheckNumber(arg)))))
		case 'e', 'E', 'f', 'g', 'G':
			b.writeString(formatFloat(spec, conv, float64(L.CheckNumber(arg))))
		case 'q':
			quote(&b, L.CheckString(arg))
		case 's':
			s := L.CheckString(arg)
			if spec.hasPrec && len(s) > spec.prec {
				s = s[:spec.prec]
			}
			if len(s) >= spec.width {
				b.writeString(s)
			} else {
				b.writeString(spec.pad(s))
			}
		default:
			L.RaiseError("invalid option '%%%c' to 'format'", conv)
		}
	}
	L.Push(lua.LString(b.String()))
	return 1
}

// toInteger converts a number as C's cast to long long does, clamping what
// it leaves undefined.
func toInteger(n lua.LNumber) int64 {
	f := float64(n)
	switch {
	case f != f:
		return 0
	case f >= math.MaxInt64:
		return math.MaxInt64
	case f <= math.MinInt64:
		return math.MinInt64
	}
	return int64(f)
}

// formatFloat formats f as C's printf does with conv: Go's fmt agrees once
// the precision is explicit (its %g otherwise prints the shortest form),
// except for infinities and NaN, which C spells inf and nan.
func formatFloat(spec formatSpec, conv byte, f float64) string {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		s := "inf"
		switch {
		case math.IsNaN(f):
			s = "nan"
		case f < 0:
			s = "-inf"
		case spec.has('+'):
			s = "+inf"
		case spec.has(' '):
			s = " inf"
		}
		if conv == 'E' || conv == 'G' {
			s = strings.ToUpper(s)
		}
		return spec.pad(s)
	}
	if !spec.hasPrec {
		spec.hasPrec, spec.prec = true, 6
	}
	return fmt.Sprintf(spec.goFormat(conv), f)
}

// quote writes s as %q does in Lua 5.1: in double quotes, with ", \ and
// newline escaped by a backslash, \r as \r and NUL as \000.
func quote(b *meteredBuilder, s string) {
	b.writeByte('"')
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '"', '\\', '\n':
			b.writeByte('\\')
			b.writeByte(c)
		case '\r':
			b.writeString(`\r`)
		case 0:
			b.writeString(`\000`)
		default:
			b.writeByte(c)
		}
	}
	b.writeByte('"')
}
