package hook

import (
	lua "github.com/yuin/gopher-lua"
)

// The tables the host makes for a call (the global table, msg, its headers
// and throttle keys) cost most of a small hook's time: gopher-lua gives a
// table with string keys a hash map, a key index and a key list. So a state
// keeps them and refills them for the next call, unless the call wrote to
// them. That is decidable: the VM itself writes only to the global table
// (by name) and to tables being constructed; every other write goes
// through the instrumented store or a builtin of this package (rawset,
// setmetatable, table.insert, remove and sort), which call touch. A table
// that was written to is dropped and made afresh for the next call.
const (
	hostEnv          = iota // the global table: emptied after each call
	hostEnqueueMsg          // on_enqueue's msg
	hostFailureMsg          // on_failure's msg
	hostHeaders             // msg.headers, reused for the same keys in the same order
	hostThrottleKeys        // msg.throttle_keys, reused for the same number of keys
	numHost
)

// touch records that the running call writes to tb, by a store that is
// not a global assignment by name.
func (st *state) touch(tb *lua.LTable) {
	for i, h := range st.host {
		if h == tb {
			st.dirty |= 1 << i
		}
	}
}

// touchAll records that the running call may have written to any table,
// as a store through a __newindex metamethod may.
func (st *state) touchAll() { st.dirty = 1<<numHost - 1 }

// resetHost readies the host tables for the next call: written ones are
// dropped, and the global table is emptied (gopher-lua never forgets a key
// a table once had, so a global table that saw arbitrary keys would grow
// from call to call; one that saw only assignments by name sees the same
// names every time).
func (st *state) resetHost() {
	for i := range st.host {
		if st.dirty&(1<<i) != 0 {
			st.host[i] = nil
		}
	}
	st.dirty = 0
	if env := st.host[hostEnv]; env != nil {
		// Deleting the key just returned by Next is allowed, as in Lua.
		for k, _ := env.Next(lua.LNil); k != lua.LNil; k, _ = env.Next(k) {
			if k != lua.LString("_G") {
				env.RawSet(k, lua.LNil)
			}
		}
		if env.RawGetString("_G") != env { // the call assigned _G
			env.RawSetString("_G", env)
		}
	}
}

// env returns the global table of calls.
func (st *state) env() *lua.LTable {
	env := st.host[hostEnv]
	if env == nil {
		env = st.L.CreateTable(0, 4)
		env.Metatable = st.envMeta
		env.RawSetString("_G", env)
		st.host[hostEnv] = env
	}
	return env
}

func (st *state) enqueueMsg(in *EnqueueInput) *lua.LTable {
	return st.message(hostEnqueueMsg, in.Queue, in.Headers, in.PayloadSize, in.FairnessKey, in.Weight, in.ThrottleKeys)
}

func (st *state) failureMsg(in *FailureInput) *lua.LTable {
	msg := st.message(hostFailureMsg, in.Queue, in.Headers, in.PayloadSize, in.FairnessKey, in.Weight, in.ThrottleKeys)
	msg.RawSetString("id", lua.LString(in.ID))
	msg.RawSetString("attempts", lua.LNumber(in.Attempts))
	msg.RawSetString("error", lua.LString(in.Error))
	return msg
}

// message fills the msg table both hooks see. A fairness key or weight the
// producer did not set is nil, so that a script can write
// msg.fairness_key or msg.headers.tenant.
func (st *state) message(slot int, queue string, headers []Header, payloadSize int,
	fairnessKey string, weight uint32, throttleKeys []string) *lua.LTable {
	msg := st.host[slot]
	if msg == nil {
		msg = st.L.CreateTable(0, 9)
		st.host[slot] = msg
	}
	if queue != st.queue || st.queueValue == nil {
		st.queue, st.queueValue = queue, lua.LString(queue)
	}
	msg.RawSetString("queue", st.queueValue)
	msg.RawSetString("headers", st.headers(headers))
	msg.RawSetString("payload_size", lua.LNumber(payloadSize))
	var fk, w lua.LValue = lua.LNil, lua.LNil
	if fairnessKey != "" {
		fk = lua.LString(fairnessKey)
	}
	if weight != 0 {
		w = lua.LNumber(weight)
	}
	msg.RawSetString("fairness_key", fk)
	msg.RawSetString("weight", w)
	msg.RawSetString("throttle_keys", st.throttleKeys(throttleKeys))
	return msg
}

// headers returns msg.headers: a header that repeats has its last value.
func (st *state) headers(headers []Header) *lua.LTable {
	h := st.host[hostHeaders]
	if h == nil || len(headers) != len(st.headerKeys) {
		h = nil
	} else {
		for i, kv := range headers {
			if kv.Key != st.headerKeys[i] {
				h = nil
				break
			}
		}
	}
	if h == nil {
		h = st.L.CreateTable(0, len(headers))
		st.host[hostHeaders] = h
		st.headerKeys = st.headerKeys[:0]
		for _, kv := range headers {
			st.headerKeys = append(st.headerKeys, kv.Key)
		}
	}
	for _, kv := range headers {
		setString(h, kv.Key, kv.Value)
	}
	return h
}

// setString sets tb[key] = value, unless it holds that already: boxing a
// string for Lua allocates, and many headers repeat from message to
// message.
func setString(tb *lua.LTable, key, value string) {
	if cur, ok := tb.RawGetString(key).(lua.LString); !ok || string(cur) != value {
		tb.RawSetString(key, lua.LString(value))
	}
}

func (st *state) throttleKeys(keys []string) *lua.LTable {
	t := st.host[hostThrottleKeys]
	if t == nil || t.Len() != len(keys) {
		t = st.L.CreateTable(len(keys), 0)
		st.host[hostThrottleKeys] = t
	}
	for i, k := range keys {
		if cur, ok := t.RawGetInt(i + 1).(lua.LString); !ok || string(cur) != k {
			t.RawSetInt(i+1, lua.LString(k))
		}
	}
	return t
}
