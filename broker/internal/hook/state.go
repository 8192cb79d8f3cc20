package hook

import (
	"context"
	"fmt"
	"strconv"

	lua "github.com/yuin/gopher-lua"
)

// Sizes of an interpreter state. gopher-lua allocates the call stack up
// front and grows the register stack on demand up to its maximum, and keeps
// both for the life of the state.
const (
	callStackSize   = 200     // Lua and Go frames; deeper recursion is "stack overflow"
	registrySize    = 256     // registers allocated up front (16 bytes each)
	registryMaxSize = 1 << 16 // at most 1 MiB of registers per state
	registryGrow    = 4096    // slots added at a time: small steps copy the stack over and over

	// maxResults caps the values one builtin may return (unpack,
	// string.byte): Lua 5.1's C stack limit.
	maxResults = 8000
)

// A state is one sandboxed interpreter. The pool hands it to one goroutine
// at a time. It carries nothing of a call to the next: the libraries are
// shared and read-only, the script's top level runs again for every call,
// and the tables a call could reach (its global table, msg) are emptied or
// refilled before the next call, or dropped if the call wrote to them
// (host.go).
type state struct {
	L   *lua.LState
	m   meter
	cfg ConfigReader

	// envMeta is the metatable of every call's global table: reads fall
	// through to the library (base), writes stay in the call's table.
	envMeta *lua.LTable
	// proxies are the read-only library tables scripts see (string,
	// table, math, fila). They must stay empty; see tampered.
	proxies []*lua.LTable
	helpers [numHelpers]lua.LValue
	// tops maps a script's prototype to the function that runs its top
	// level in this state (see instrument), made on first use.
	tops map[*lua.FunctionProto]*lua.LFunction
	// host are the tables the host makes for calls, kept from one call to
	// the next (host.go); dirty has a bit set for each one the running
	// call wrote to.
	host       [numHost]*lua.LTable
	dirty      uint8
	headerKeys []string // the keys of host[hostHeaders], in order
	queue      string   // the queue name last given to a call, and its Lua value
	queueValue lua.LValue
	// broken is set when a call ended in a way that may have left the
	// interpreter inconsistent; the pool then discards the state.
	broken bool
}

func newState(cfg ConfigReader) (*state, error) {
	lib, err := sharedLibrary()
	if err != nil {
		return nil, err
	}
	L := lua.NewState(lua.Options{
		CallStackSize:    callStackSize,
		RegistrySize:     registrySize,
		RegistryMaxSize:  registryMaxSize,
		RegistryGrowStep: registryGrow,
		SkipOpenLibs:     true,
		// Not MinimizeStackMemory: gopher-lua's growing call stack panics
		// in Go on overflow through a metamethod, where the fixed one
		// raises "stack overflow".
	})
	st := &state{L: L, cfg: cfg, tops: make(map[*lua.FunctionProto]*lua.LFunction, 2), helpers: lib.helpers}
	st.m.st = st
	base := L.CreateTable(0, len(lib.base)+len(lib.libs))
	for name, v := range lib.base {
		base.RawSetString(name, v)
	}
	for _, l := range lib.libs {
		proxy := L.CreateTable(0, 0)
		proxy.Metatable = l.proxyMeta
		base.RawSetString(l.name, proxy)
		st.proxies = append(st.proxies, proxy)
	}
	st.envMeta = protected(L, base, lua.LNil)
	L.SetMetatable(lua.LString(""), lib.stringMeta)
	return st, nil
}

// isProxy reports whether tb is one of the read-only library tables.
func (st *state) isProxy(tb *lua.LTable) bool {
	for _, p := range st.proxies {
		if p == tb {
			return true
		}
	}
	return false
}

// tampered reports whether a call stored something in a library table. The
// metered builtins refuse to, so this is a second line: such a state is
// discarded rather than reused.
func (st *state) tampered() bool {
	for _, p := range st.proxies {
		if k, _ := p.Next(lua.LNil); k != lua.LNil {
			return true
		}
	}
	return false
}

// A callError is how a call failed, before the runner adds which hook and
// queue.
type callError struct {
	err    error
	failed bool // the hook's fault: counted, and fed to the circuit breaker
}

// call runs one hook call: it runs the top level of the script compiled to
// proto in a fresh global table, then calls the global function fn with
// msg, and returns the function's first result. The caller reads the
// result before the state is reused.
func (st *state) call(ctx context.Context, lim *Limits, proto *lua.FunctionProto, fn string, msg *lua.LTable) (lua.LValue, *callError) {
	if cerr := st.begin(ctx, lim); cerr != nil {
		return nil, cerr
	}
	defer st.end()
	f, cerr := st.load(proto, fn)
	if cerr != nil {
		return nil, cerr
	}
	L := st.L
	L.Push(f)
	L.Push(msg)
	if err := L.PCall(1, 1, nil); err != nil {
		return nil, st.failure(err)
	}
	if st.tampered() {
		st.broken = true
	}
	return L.Get(-1), nil
}

// define runs the top level of the chunk made from proto and checks that
// it defines the global function fn.
func (st *state) define(ctx context.Context, lim *Limits, proto *lua.FunctionProto, fn string) error {
	if cerr := st.begin(ctx, lim); cerr != nil {
		return cerr.err
	}
	defer st.end()
	if _, cerr := st.load(proto, fn); cerr != nil {
		return cerr.err
	}
	return nil
}

// begin starts the meter for a call.
func (st *state) begin(ctx context.Context, lim *Limits) *callError {
	st.m.reset(ctx, lim.Timeout, lim.MemoryLimit)
	if err := st.m.Err(); err != nil {
		return &callError{err: err}
	}
	st.L.SetContext(&st.m)
	return nil
}

// end detaches the meter, drops the call's values from the stack and
// readies the host tables for the next call, so that nothing of the call
// remains.
func (st *state) end() {
	st.L.RemoveContext()
	st.L.SetTop(0)
	st.resetHost()
}

// load runs the top level of the script compiled to proto and returns the
// global function fn it defines.
func (st *state) load(proto *lua.FunctionProto, fn string) (*lua.LFunction, *callError) {
	if cerr := st.runTop(proto, 0); cerr != nil {
		return nil, cerr
	}
	f, ok := st.env().RawGetString(fn).(*lua.LFunction)
	if !ok {
		return nil, &callError{err: fmt.Errorf("the script does not define function %s", fn), failed: true}
	}
	return f, nil
}

// runTop runs the top level of the script compiled to proto in the global
// table, whose metatable makes the libraries visible, and leaves nret of
// its results on the stack.
func (st *state) runTop(proto *lua.FunctionProto, nret int) *callError {
	L := st.L
	top, ok := st.tops[proto]
	if !ok {
		chunk := L.NewFunctionFromProto(proto)
		L.Push(chunk)
		for _, h := range st.helpers {
			L.Push(h)
		}
		if err := L.PCall(numHelpers, 1, nil); err != nil {
			return st.failure(err)
		}
		top = L.Get(-1).(*lua.LFunction)
		L.Pop(1)
		st.tops[proto] = top
	}
	top.Env = st.env() // the closures the top level makes take their globals from it
	L.Push(top)
	if err := L.PCall(0, nret, nil); err != nil {
		return st.failure(err)
	}
	return nil
}

// failure classifies an error from PCall.
func (st *state) failure(err error) *callError {
	if stop := st.m.Err(); stop != nil {
		_, limit := stop.(*limitError)
		return &callError{err: stop, failed: limit}
	}
	apiErr, ok := err.(*lua.ApiError)
	if !ok {
		st.broken = true
		return &callError{err: err, failed: true}
	}
	if apiErr.Type == lua.ApiErrorPanic {
		// A Go panic inside the interpreter: do not trust the state again.
		st.broken = true
		return &callError{err: fmt.Errorf("internal error: %s", clip(apiErr.Object.String())), failed: true}
	}
	return &callError{err: fmt.Errorf("%s", describeError(apiErr.Object)), failed: true}
}

// describeError renders a Lua error object without running any Lua: a
// table with a __tostring metamethod is not asked for its string.
func describeError(v lua.LValue) string {
	switch v := v.(type) {
	case lua.LString:
		return clip(string(v))
	case lua.LNumber:
		return v.String()
	default:
		return "error object is a " + v.Type().String() + " value"
	}
}

// maxErrorText caps the script-provided text in an error, which the caller
// may log for every message.
const maxErrorText = 200

func clip(s string) string {
	if len(s) <= maxErrorText {
		return s
	}
	return s[:maxErrorText] + "... (" + strconv.Itoa(len(s)) + " bytes)"
}

// close releases the interpreter.
func (st *state) close() { st.L.Close() }
