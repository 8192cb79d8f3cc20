package hook

import (
	"fmt"
	"sync"

	lua "github.com/yuin/gopher-lua"
)

// The library is built once per process and shared by every interpreter
// state: its functions and tables take most of a state's memory, and none
// of it can be written to. Scripts reach the library tables only through
// metatables that hide themselves (__metatable), and their functions keep
// no state: builtins find the state running them through the call's meter
// (current).
type library struct {
	base       map[string]lua.LValue // the base library scripts see
	libs       []sharedLib           // string, table, math, fila
	stringMeta *lua.LTable           // the metatable of strings
	helpers    [numHelpers]lua.LValue
}

// A sharedLib is a library table and the metatable of the read-only
// proxies of it that scripts see, one proxy per state.
type sharedLib struct {
	name      string
	proxyMeta *lua.LTable
}

// baseNames are the functions of Lua's base library that scripts keep
// unchanged. Missing on purpose: load, loadstring, loadfile, dofile,
// require, module (code loading), getfenv, setfenv (they reach the
// environment of other functions), collectgarbage, gcinfo, newproxy, print
// (the process's own concerns). assert, error, rawset and unpack are
// replaced by metered versions (ops.go), and setmetatable is wrapped to
// record the tables it changes (host.go).
var baseNames = []string{
	"getmetatable", "ipairs", "next", "pairs", "pcall", "rawequal", "rawget",
	"select", "tonumber", "tostring", "type", "xpcall",
}

var sharedLibrary = sync.OnceValues(buildLibrary)

func init() {
	// Lua 5.0's implicit arg table in vararg functions, which gopher-lua
	// keeps by default, costs an unmetered table on every call of one.
	// Lua 5.1 only has it as a compile-time option; this package is the
	// broker's only user of gopher-lua.
	lua.CompatVarArg = false
}

// buildLibrary makes the library in a scratch state, whose only use is to
// make gopher-lua's base and math functions and the tables.
func buildLibrary() (*library, error) {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer L.Close()
	for _, open := range []lua.LGFunction{lua.OpenBase, lua.OpenMath} {
		if err := L.CallByParam(lua.P{Fn: L.NewFunction(open), Protect: true}); err != nil {
			return nil, fmt.Errorf("open the Lua library: %w", err)
		}
	}
	opened := L.G.Global
	lib := &library{base: map[string]lua.LValue{"_VERSION": lua.LString(lua.LuaVersion)}}
	for _, name := range baseNames {
		lib.base[name] = opened.RawGetString(name)
	}
	setmetatable := opened.RawGetString("setmetatable").(*lua.LFunction).GFunction
	for name, fn := range map[string]lua.LGFunction{
		"assert": baseAssert,
		"error":  baseError,
		"rawset": baseRawset,
		"unpack": baseUnpack,
		"setmetatable": func(L *lua.LState) int {
			if tb, ok := L.Get(1).(*lua.LTable); ok {
				current(L).touch(tb)
			}
			return setmetatable(L)
		},
	} {
		lib.base[name] = L.NewFunction(fn)
	}

	newLib := func(funcs map[string]lua.LGFunction) *lua.LTable {
		t := L.CreateTable(0, len(funcs))
		for name, fn := range funcs {
			t.RawSetString(name, L.NewFunction(fn))
		}
		return t
	}
	mathlib := L.CreateTable(0, 32)
	opened.RawGetString("math").(*lua.LTable).ForEach(func(k, v lua.LValue) { mathlib.RawSet(k, v) })
	stringlib := newLib(stringFuncs)
	for _, l := range []struct {
		name string
		t    *lua.LTable
	}{
		{"string", stringlib},
		{"table", newLib(tableFuncs)},
		{"math", mathlib},
		{"fila", newLib(map[string]lua.LGFunction{"get": filaGet})},
	} {
		lib.libs = append(lib.libs, sharedLib{name: l.name, proxyMeta: protected(L, l.t, L.NewFunction(readOnly(l.name)))})
	}
	// Methods on strings, ("x"):rep(3), find the string library through
	// the string metatable, which getmetatable("") does not reveal.
	lib.stringMeta = protected(L, stringlib, lua.LNil)
	lib.helpers = [numHelpers]lua.LValue{
		L.NewFunction(opConcat),
		L.NewFunction(opTable),
		L.NewFunction(opFunc),
		L.NewFunction(opSet),
	}
	return lib, nil
}

// protected returns a metatable that makes reads fall through to index,
// sends writes of new keys to newindex (if not nil), and hides itself from
// getmetatable and setmetatable.
func protected(L *lua.LState, index *lua.LTable, newindex lua.LValue) *lua.LTable {
	mt := L.CreateTable(0, 3)
	mt.RawSetString("__index", index)
	if newindex != lua.LNil {
		mt.RawSetString("__newindex", newindex)
	}
	mt.RawSetString("__metatable", lua.LFalse)
	return mt
}

func readOnly(lib string) lua.LGFunction {
	return func(L *lua.LState) int {
		L.RaiseError("%s library is read-only", lib)
		return 0
	}
}

// current returns the state whose call is running in L. Builtins run only
// inside calls, where L's context is the state's meter.
func current(L *lua.LState) *state {
	return L.Context().(*meter).st
}
