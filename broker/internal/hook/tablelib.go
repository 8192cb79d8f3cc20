package hook

import (
	"sort"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// tableFuncs is the table library: Lua 5.1's concat, insert, maxn, remove and sort,
// metered (concat charges its result, insert the slot it adds, sort counts
// its comparisons) and refusing to modify the library tables. insert
// checks its position as Lua 5.2 does: Lua 5.1 would shift elements down
// to any negative position, one new hash entry each.
var tableFuncs = map[string]lua.LGFunction{
	"concat": tabConcat,
	"insert": tabInsert,
	"maxn":   tabMaxn,
	"remove": tabRemove,
	"sort":   tabSort,
}

// writable returns argument 1 as a table the call may modify.
func (st *state) writable(L *lua.LState, fn string) *lua.LTable {
	tb := L.CheckTable(1)
	if st.isProxy(tb) {
		L.RaiseError("%s: library tables are read-only", fn)
	}
	st.touch(tb)
	return tb
}

func tabConcat(L *lua.LState) int {
	st := current(L)
	tb := L.CheckTable(1)
	sep := L.OptString(2, "")
	i := optInteger(L, 3, 1)
	last := tb.Len()
	if L.Get(4) != lua.LNil {
		last = optInteger(L, 4, 0)
	}
	if i > last {
		L.Push(lua.LString(""))
		return 1
	}
	// First pass: check the values and add up the size. It stops at the
	// first value that is not a string or number, so it is bounded by the
	// table's size, whatever the range asked for.
	total := int64(costString)
	for k := i; k <= last; k++ {
		v := tb.RawGetInt(k)
		if !lua.LVCanConvToString(v) {
			L.RaiseError("invalid value (at index %d) in table for 'concat'", k)
		}
		total += int64(len(lua.LVAsString(v)))
		if k != last {
			total += int64(len(sep))
		}
	}
	st.m.step(L, last-i+1)
	st.m.charge(L, total)
	var b strings.Builder
	b.Grow(int(total - costString))
	for k := i; k <= last; k++ {
		b.WriteString(lua.LVAsString(tb.RawGetInt(k)))
		if k != last {
			b.WriteString(sep)
		}
	}
	L.Push(lua.LString(b.String()))
	return 1
}

func tabInsert(L *lua.LState) int {
	st := current(L)
	tb := st.writable(L, "insert")
	e := tb.Len() + 1 // the first empty slot
	var pos int
	switch L.GetTop() {
	case 2:
		pos = e
	case 3:
		pos = optInteger(L, 2, 0)
		if pos < 1 || pos > e {
			L.ArgError(2, "position out of bounds")
		}
	default:
		L.RaiseError("wrong number of arguments to 'insert'")
	}
	v := L.Get(L.GetTop())
	st.chargeKey(L, tb, lua.LNumber(e))
	st.m.step(L, e-pos)
	for k := e; k > pos; k-- {
		tb.RawSetInt(k, tb.RawGetInt(k-1))
	}
	tb.RawSetInt(pos, v)
	return 0
}

func tabRemove(L *lua.LState) int {
	st := current(L)
	tb := st.writable(L, "remove")
	e := tb.Len()
	pos := optInteger(L, 2, e)
	if pos < 1 || pos > e {
		return 0
	}
	v := tb.RawGetInt(pos)
	st.m.step(L, e-pos)
	for ; pos < e; pos++ {
		tb.RawSetInt(pos, tb.RawGetInt(pos+1))
	}
	tb.RawSetInt(e, lua.LNil)
	L.Push(v)
	return 1
}

func tabMaxn(L *lua.LState) int {
	st := current(L)
	tb := L.CheckTable(1)
	maxn, n := 0.0, 0
	tb.ForEach(func(k, _ lua.LValue) {
		n++
		if f, ok := k.(lua.LNumber); ok && float64(f) > maxn {
			maxn = float64(f)
		}
	})
	st.m.step(L, n)
	L.Push(lua.LNumber(maxn))
	return 1
}

func tabSort(L *lua.LState) int {
	st := current(L)
	tb := st.writable(L, "sort")
	n := tb.Len()
	var less *lua.LFunction
	if L.Get(2) != lua.LNil {
		less = L.CheckFunction(2)
	}
	st.m.charge(L, costSlot*int64(n))
	s := &sorter{st: st, L: L, less: less, v: make([]lua.LValue, n)}
	for i := range s.v {
		s.v[i] = tb.RawGetInt(i + 1)
	}
	sort.Sort(s)
	for i, v := range s.v {
		tb.RawSetInt(i+1, v)
	}
	return 0
}

// A sorter sorts a table's array part with Lua's < or a comparator,
// counting comparisons on the meter.
type sorter struct {
	st   *state
	L    *lua.LState
	less *lua.LFunction
	v    []lua.LValue
}

func (s *sorter) Len() int      { return len(s.v) }
func (s *sorter) Swap(i, j int) { s.v[i], s.v[j] = s.v[j], s.v[i] }
func (s *sorter) Less(i, j int) bool {
	s.st.m.step(s.L, 1)
	if s.less == nil {
		return s.L.LessThan(s.v[i], s.v[j])
	}
	s.L.Push(s.less)
	s.L.Push(s.v[i])
	s.L.Push(s.v[j])
	s.L.Call(2, 1)
	r := lua.LVAsBool(s.L.Get(-1))
	s.L.Pop(1)
	return r
}
