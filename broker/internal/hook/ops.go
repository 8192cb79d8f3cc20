package hook

import (
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// What the memory limit charges, in bytes: estimates of what gopher-lua
// allocates, including the garbage of slices and maps that grow by
// doubling. TestMemoryLimitBoundsTheHeap holds them to account.
const (
	costString    = 32   // a string's header and boxing, plus one byte per byte
	costTable     = 2048 // a table, with the 32-slot hash map gopher-lua gives it at its first string key
	costArrayItem = 64   // a value appended to a table's array part
	costHashItem  = 160  // a key added to a table's hash part, with gopher-lua's key list and index
	costSlot      = 32   // an array slot a store skips over (gopher-lua fills the gap)
	costClosure   = 128  // a closure
	costUpvalue   = 64   // each upvalue a closure captures
)

// opConcat is the metered .. operator: (concat)(a, b, ...) is a .. b .. ...,
// right-associative, with Lua 5.1's rules: numbers are converted, runs of
// strings and numbers are joined at once, and otherwise the __concat
// metamethod of either operand is called.
func opConcat(L *lua.LState) int {
	st := current(L)
	top := L.GetTop()
	rhs := L.Get(top)
	for i := top - 1; i >= 1; {
		lhs := L.Get(i)
		if !lua.LVCanConvToString(lhs) || !lua.LVCanConvToString(rhs) {
			mm := L.GetMetaField(lhs, "__concat")
			if mm == lua.LNil {
				mm = L.GetMetaField(rhs, "__concat")
			}
			if mm == lua.LNil {
				bad := lhs
				if lua.LVCanConvToString(lhs) {
					bad = rhs
				}
				L.RaiseError("attempt to concatenate a %s value", bad.Type().String())
			}
			L.Push(mm)
			L.Push(lhs)
			L.Push(rhs)
			L.Call(2, 1)
			rhs = L.Get(-1)
			L.Pop(1)
			i--
			continue
		}
		j := i
		for j > 1 && lua.LVCanConvToString(L.Get(j-1)) {
			j--
		}
		var buf [8]string
		parts := buf[:0]
		total := int64(costString)
		for k := j; k <= i; k++ {
			s := lua.LVAsString(L.Get(k))
			total += int64(len(s))
			parts = append(parts, s)
		}
		s := lua.LVAsString(rhs)
		total += int64(len(s))
		parts = append(parts, s)
		st.m.charge(L, total)
		rhs = lua.LString(strings.Join(parts, ""))
		i = j - 1
	}
	L.Push(rhs)
	return 1
}

// opTable is the metered table constructor: (table)(t, nkeyed, k1, v1, ...)
// charges for t, built by the VM with its positional fields and nkeyed
// string-keyed fields, then stores the remaining fields as rawset would.
func opTable(L *lua.LState) int {
	st := current(L)
	tb := L.CheckTable(1)
	keyed := int64(L.CheckNumber(2))
	st.m.charge(L, costTable+costHashItem*keyed+costArrayItem*int64(tb.Len()))
	top := L.GetTop()
	for i := 3; i < top; i += 2 {
		k := L.Get(i)
		st.chargeKey(L, tb, k)
		L.RawSet(tb, k, L.Get(i+1))
	}
	L.SetTop(1)
	return 1
}

// opFunc is the metered closure: (func)(f) charges for f and returns it.
func opFunc(L *lua.LState) int {
	st := current(L)
	fn := L.CheckFunction(1)
	st.m.charge(L, costClosure+costUpvalue*int64(len(fn.Upvalues)))
	return 1
}

// opSet is the metered store: (set)(t, k, v) is t[k] = v, metamethods
// included.
func opSet(L *lua.LState) int {
	st := current(L)
	obj, k, v := L.Get(1), L.Get(2), L.Get(3)
	if tb, ok := obj.(*lua.LTable); ok {
		st.chargeKey(L, tb, k)
		if tb.Metatable == lua.LNil {
			st.touch(tb)
			L.RawSet(tb, k, v)
			return 0
		}
	}
	// A __newindex may send the store anywhere.
	st.touchAll()
	L.SetTable(obj, k, v)
	return 0
}

// chargeKey charges for what storing key k in tb may allocate. gopher-lua
// keeps integer keys from 1 to 2^26 in a dense array: storing key k past
// the end fills every slot up to k, so t[1e7] = 1 costs 160 MB, and that
// is what gets charged. A table whose __newindex sends the store elsewhere
// is charged as if it kept it, which errs on the safe side.
func (st *state) chargeKey(L *lua.LState, tb *lua.LTable, k lua.LValue) {
	switch key := k.(type) {
	case lua.LString:
		if tb.RawGetString(string(key)) == lua.LNil {
			st.m.charge(L, costHashItem)
		}
		return
	case lua.LNumber:
		f := float64(key)
		if f >= 1 && f < float64(lua.MaxArrayIndex) && f == math.Trunc(f) {
			n := int64(tb.Len())
			if i := int64(f); i > n {
				st.m.charge(L, costArrayItem+costSlot*(i-n-1))
			}
			return
		}
	}
	if tb.RawGet(k) == lua.LNil {
		st.m.charge(L, costHashItem)
	}
}

// baseRawset is Lua's rawset, metered, and refused on the library tables.
func baseRawset(L *lua.LState) int {
	st := current(L)
	tb := L.CheckTable(1)
	k := L.CheckAny(2)
	v := L.CheckAny(3)
	if st.isProxy(tb) {
		L.RaiseError("rawset: library tables are read-only")
	}
	st.touch(tb)
	st.chargeKey(L, tb, k)
	L.RawSet(tb, k, v)
	L.SetTop(1)
	return 1
}

// baseUnpack is Lua 5.1's unpack with its limit on results: unpack(t, 1, 1e9)
// fails at once instead of filling the register stack.
func baseUnpack(L *lua.LState) int {
	tb := L.CheckTable(1)
	i := int64(optInteger(L, 2, 1))
	j := int64(tb.Len())
	if L.Get(3) != lua.LNil {
		j = int64(optInteger(L, 3, 0))
	}
	if i > j {
		return 0
	}
	if j-i >= maxResults {
		L.RaiseError("too many results to unpack")
	}
	for k := i; k <= j; k++ {
		L.Push(tb.RawGetInt(int(k)))
	}
	return int(j - i + 1)
}

// baseError is Lua's error. At level 1 or more, a string message gets the
// position of the function at that level, if it is a Lua function, as in
// Lua 5.1; the longer string is charged.
func baseError(L *lua.LState) int {
	st := current(L)
	v := L.Get(1)
	level := L.OptInt(2, 1)
	if n, ok := v.(lua.LNumber); ok {
		v = lua.LString(n.String())
	}
	if s, ok := v.(lua.LString); ok && level > 0 {
		pos := where(L, level)
		st.m.charge(L, costString+int64(len(pos)+len(s)))
		v = lua.LString(pos + string(s))
	}
	L.Error(v, 0)
	return 0
}

// baseAssert is Lua's assert; its message is positioned and charged as
// error's is.
func baseAssert(L *lua.LState) int {
	st := current(L)
	L.CheckAny(1)
	if lua.LVAsBool(L.Get(1)) {
		return L.GetTop()
	}
	msg := "assertion failed!"
	if L.GetTop() >= 2 {
		msg = L.CheckString(2)
	}
	pos := where(L, 1)
	st.m.charge(L, costString+int64(len(pos)+len(msg)))
	L.Error(lua.LString(pos+msg), 0)
	return 0
}

// where returns "chunk:line: " for the function level calls up from the
// running builtin, or "" if that is not a Lua function (luaL_where).
func where(L *lua.LState, level int) string {
	dbg, ok := L.GetStack(level)
	if !ok {
		return ""
	}
	if _, err := L.GetInfo("Sl", dbg, lua.LNil); err != nil || dbg.CurrentLine <= 0 {
		return ""
	}
	return dbg.Source + ":" + strconv.Itoa(dbg.CurrentLine) + ": "
}

// filaGet is fila.get(key): the runtime-config value of key, or nil.
func filaGet(L *lua.LState) int {
	st := current(L)
	key := L.CheckString(1)
	if st.cfg != nil {
		if v, ok := st.cfg.Get(key); ok {
			L.Push(lua.LString(v))
			return 1
		}
	}
	L.Push(lua.LNil)
	return 1
}

// optInteger returns argument n as an integer, or d if it is absent. A
// huge, infinite or NaN number is clamped into ±2^53, which every limit
// check then rejects, instead of being converted to an arbitrary int.
func optInteger(L *lua.LState, n int, d int) int {
	if L.Get(n) == lua.LNil {
		return d
	}
	f := float64(L.CheckNumber(n))
	const max = 1 << 53
	switch {
	case f != f:
		return 0
	case f > max:
		return max
	case f < -max:
		return -max
	}
	return int(f)
}
