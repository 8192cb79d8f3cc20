// Package hook runs a queue's Lua hooks in a sandbox.
//
// A queue may have two hooks, given as Lua 5.1 source when it is created
// and compiled then (Compile), each a script defining one global function:
//
//   - on_enqueue(msg) sees msg.queue, msg.headers (a table),
//     msg.payload_size and the producer's msg.fairness_key, msg.weight
//     (each nil when not set) and msg.throttle_keys (a list), and returns
//     nil or a table with any of fairness_key (a non-empty string), weight
//     (an integer from 1 to Limits.MaxWeight) and throttle_keys (a list of
//     non-empty strings). A field the script returns wins over the
//     producer's; a field it leaves out keeps the producer's.
//   - on_failure(msg) sees the same and msg.id, msg.attempts and msg.error
//     (the nack reason, or "lease expired"), and returns
//     {action = "retry", delay_ms = n} or {action = "dlq"}.
//
// Scripts read the runtime config with fila.get(key), which returns the
// value or nil; a change is seen by the next call. Compile returns a
// Program; NewRunner makes a Runner, one per queue, which runs the hooks
// for many goroutines at once (OnEnqueue, OnFailure).
//
// # Failures
//
// A hook fails when its script raises an error, hits a limit, or returns a
// value of the wrong type or range. The call then returns the defaults (the
// producer's values; for on_failure, the caller's default retry policy)
// and an error, and the failure is counted (Stats). After
// Limits.CircuitBreakerThreshold consecutive failures a hook's circuit
// breaker opens: the hook is bypassed, calls returning ErrCircuitOpen,
// for Limits.CircuitBreakerCooldown, after which one call probes it and
// closes the breaker if it succeeds. Openings and closings are logged.
//
// # The sandbox
//
// Scripts get Lua's base library without load, loadstring, loadfile,
// dofile, require, module, getfenv, setfenv, collectgarbage, gcinfo,
// newproxy and print; the string, table and math libraries; and fila.get.
// There is no os, io, debug, package or coroutine. The libraries are
// read-only, and so are the metatables of strings and of the global table.
//
// Each call runs the script's top level again, then calls its function,
// and nothing a call does survives it: the global table is emptied after
// every call, upvalues and tables the script made are garbage once it
// returns, and the tables the host made for it (msg, msg.headers) are
// refilled for the next call, or made afresh if the call wrote to them.
// Calls cannot see one another, and a script cannot keep a cache that
// grows. Keep the top level to definitions and small tables. Its "..." is
// not allowed, since it has no arguments to give.
//
// Scripts are compiled once, to a function prototype shared by every
// interpreter state. A runner keeps at most Limits.States states (about
// 36 KB each), made on first need and reused; the library they run with is
// built once per process and shared, read-only.
//
// # Limits
//
// Time. A call may run for Limits.Timeout. Its context is the call's
// meter, whose Done method gopher-lua calls before every VM instruction;
// every 1024 instructions it looks at the clock and, once the time is up
// (or the caller's context is done), returns a closed channel, which makes
// the VM raise an error. A limit hit stays hit: pcall cannot catch it, as
// the next instruction raises it again. Builtins whose running time is not
// bounded by the size of what they were charged for (pattern matching,
// sort, plain find, insert, remove) count their steps on the same meter.
//
// Memory. gopher-lua has no allocator hook, so the memory limit is kept
// by accounting: a call may allocate Limits.MemoryLimit bytes in total,
// charged before the allocation happens (for a table constructor or a
// closure, whose size the script's text and the 8000-value limit below
// bound, just after), and is
// stopped when it would pass it. At compile time every operation that can
// allocate more than a constant in one VM instruction, or keep memory past
// one, is rewritten to call a metered helper: the .. operator, table
// constructors, closures and stores into tables (instrument.go). The builtins that build strings or
// tables are the package's own, metered (string.rep, format, gsub, char,
// upper, lower, reverse, table.concat, insert, unpack, error); the
// pattern functions and string.format are written for the sandbox too,
// since gopher-lua's cannot be bounded. What is left unmetered, numbers
// and the call's registers, is bounded by the instruction count and by
// the register stack's maximum (1 MiB per state). The charges are
// estimates of gopher-lua's allocations (ops.go). The tests run every
// memory bomb they know (string.rep, .. and gsub amplification, huge and
// sparse tables, linked lists, closure chains, ...) and check that what
// the stopped call allocated, live or not, stays within 3 times the limit
// (it stays under 2), and that nothing of it is kept once it returns.
//
// Recursion is bounded by the call stack (200 frames, Lua and Go), the
// nesting of a script's blocks and expressions by 200 levels (checked at
// compile time: gopher-lua's compiler recurses on the syntax tree), and the
// results of one builtin by 8000 values (unpack, string.byte). A call that
// ends with a Go panic inside the interpreter fails, and its state is
// discarded rather than reused.
package hook
