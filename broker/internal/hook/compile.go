package hook

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"

	"github.com/fila-mq/fila/broker/internal/fault"
)

// The hooks, by the name of the global function a script defines.
const (
	hookEnqueue = "on_enqueue"
	hookFailure = "on_failure"
)

// defineTimeout is the time limit of the run of a script's top level at
// compile time: generous, so that a loaded machine does not fail a
// CreateQueue, since the calls have their own limit.
const defineTimeout = 100 * time.Millisecond

// A Program is a queue's compiled hook scripts: immutable, and safe to
// share between runners and goroutines.
type Program struct {
	onEnqueue *lua.FunctionProto // nil: no on_enqueue hook
	onFailure *lua.FunctionProto // nil: no on_failure hook
}

// Compile compiles a queue's scripts: the Lua 5.1 source of its on_enqueue
// hook and of its on_failure hook, either of which may be empty for none.
// Each script is parsed, instrumented for the memory limit and compiled to
// a function prototype once, here; its top level is then run once, in a
// sandbox with an empty runtime config, the default memory limit and a
// time limit of 100ms, to check that it defines the global function of its
// name.
//
// The error wraps fault.ErrScriptError and names the script and, for a
// syntax or compile error, the line: "compile on_enqueue: line 3
// near 'end': syntax error: script error". A script whose top level
// fails, or that does not define its function, fails the same way.
func Compile(onEnqueue, onFailure string) (*Program, error) {
	var p Program
	var err error
	if onEnqueue != "" {
		if p.onEnqueue, err = compileScript(hookEnqueue, onEnqueue); err != nil {
			return nil, err
		}
	}
	if onFailure != "" {
		if p.onFailure, err = compileScript(hookFailure, onFailure); err != nil {
			return nil, err
		}
	}
	return &p, nil
}

func compileScript(name, src string) (*lua.FunctionProto, error) {
	proto, err := compileChunk(name, src)
	if err != nil {
		return nil, err
	}
	st, err := newState(nil)
	if err != nil {
		return nil, err
	}
	defer st.close()
	lim := DefaultLimits()
	lim.Timeout = defineTimeout
	if err := st.define(context.Background(), &lim, proto, name); err != nil {
		return nil, fmt.Errorf("compile %s: %w: %w", name, err, fault.ErrScriptError)
	}
	return proto, nil
}

// compileChunk parses, instruments and compiles src, naming it name in
// error positions.
func compileChunk(name, src string) (proto *lua.FunctionProto, err error) {
	fail := func(format string, args ...any) error {
		return fmt.Errorf("compile %s: %s: %w", name, fmt.Sprintf(format, args...), fault.ErrScriptError)
	}
	defer func() {
		// The parser and compiler report errors by panicking; a panic
		// that escapes them is a bug in them, not a reason to crash.
		if r := recover(); r != nil {
			proto, err = nil, fail("internal compiler error: %v", r)
		}
	}()

	chunk, err := parse.Parse(strings.NewReader(src), name)
	if err != nil {
		var perr *parse.Error
		if !errors.As(err, &perr) {
			return nil, fail("%s", strings.TrimSpace(err.Error()))
		}
		if perr.Pos.Line == parse.EOF {
			return nil, fail("line %d at end of script: %s", strings.Count(src, "\n")+1, strings.TrimSpace(perr.Message))
		}
		return nil, fail("line %d near '%s': %s", perr.Pos.Line, clip(perr.Token), strings.TrimSpace(perr.Message))
	}
	chunk, err = instrument(chunk)
	if err != nil {
		return nil, fail("%s", err)
	}
	proto, err = lua.Compile(chunk, name)
	if err != nil {
		var cerr *lua.CompileError
		if errors.As(err, &cerr) {
			return nil, fail("line %d: %s", cerr.Line, cerr.Message)
		}
		return nil, fail("%s", err)
	}
	return proto, nil
}
