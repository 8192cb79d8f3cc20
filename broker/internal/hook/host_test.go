package hook

import (
	"context"
	"testing"
	"time"
)

// hostScript returns, as its fairness key, a dump of everything it can see
// of msg, after doing to it what the attack header asks.
const hostScript = `
local function dump(t, depth)
  local keys = {}
  for k, v in pairs(t) do
    if type(v) == "table" and depth < 2 then v = "{" .. dump(v, depth + 1) .. "}" end
    keys[#keys + 1] = tostring(k) .. "=" .. tostring(v)
  end
  table.sort(keys)
  local s = table.concat(keys, ",")
  if getmetatable(t) then s = s .. "+mt" end
  return s
end

local attacks = {
  header = function(msg) msg.headers.injected = "x" end,
  field = function(msg) msg.extra = 1 end,
  queue = function(msg) msg.queue = "other" end,
  rawset = function(msg) rawset(msg.headers, "raw", "x") end,
  delete = function(msg) msg.headers.tenant = nil end,
  meta = function(msg) setmetatable(msg.headers, {__index = function() return "leak" end}) end,
  msgmeta = function(msg) setmetatable(msg, {__index = {extra = 1}}) end,
  insert = function(msg) table.insert(msg.throttle_keys, "t3") end,
  remove = function(msg) table.remove(msg.throttle_keys) end,
  sort = function(msg) table.sort(msg.throttle_keys, function(a, b) return a > b end) end,
  store = function(msg) msg.throttle_keys[1] = "changed" end,
  redirect = function(msg) local t = setmetatable({}, {__newindex = msg.headers}) t.evil = "x" end,
  global = function(msg) leaked = msg end,
  unsetG = function(msg) _G = nil end,
  replaceG = function(msg) _G = {leaked = true} end,
  error = function(msg) msg.headers.injected = "x" error("boom") end,
  timeout = function(msg) msg.headers.injected = "x" while true do end end,
}

function on_enqueue(msg)
  local attack = attacks[msg.headers.attack]
  if attack then attack(msg) end
  return {fairness_key = dump(msg, 0) .. "|" .. tostring(leaked) .. "|" .. tostring(msg.headers.missing) .. "|" .. tostring(_G == _G._G)}
end`

func TestHostTablesDoNotLeak(t *testing.T) {
	in := func(attack string) EnqueueInput {
		return EnqueueInput{
			Queue:        "orders",
			Headers:      headers("tenant", "acme", "attack", attack),
			PayloadSize:  10,
			FairnessKey:  "k",
			ThrottleKeys: []string{"t1", "t2"},
		}
	}
	fresh := newTestRunner(t, hostScript, "", nil, testLimits)
	want, err := fresh.OnEnqueue(context.Background(), in("none"))
	if err != nil {
		t.Fatal(err)
	}

	for _, attack := range []string{"header", "field", "queue", "rawset", "delete", "meta", "msgmeta",
		"insert", "remove", "sort", "store", "redirect", "global", "unsetG", "replaceG", "error", "timeout"} {
		t.Run(attack, func(t *testing.T) {
			// One interpreter: the check runs where the attack ran.
			r := newTestRunner(t, hostScript, "", nil, Limits{Timeout: time.Second, States: 1})
			ctx := context.Background()
			r.OnEnqueue(ctx, in(attack))
			got, err := r.OnEnqueue(ctx, in("none"))
			if err != nil || got.FairnessKey != want.FairnessKey {
				t.Errorf("after attack %q: msg = %s, %v; want %s", attack, got.FairnessKey, err, want.FairnessKey)
			}
		})
	}
}

func TestHostTablesFollowTheInput(t *testing.T) {
	// Reused tables must show each call its own message, whatever the
	// previous one had.
	r := newTestRunner(t, `
function on_enqueue(msg)
  local h = {}
  for k, v in pairs(msg.headers) do h[#h + 1] = k .. "=" .. v end
  table.sort(h)
  return {fairness_key = table.concat({msg.queue, table.concat(h, "&"), msg.payload_size,
    tostring(msg.fairness_key), tostring(msg.weight), table.concat(msg.throttle_keys, "+")}, "|")}
end`, "", nil, Limits{Timeout: 10 * time.Second, States: 1})
	calls := []struct {
		in   EnqueueInput
		want string
	}{
		{EnqueueInput{Queue: "a", Headers: headers("x", "1", "y", "2"), PayloadSize: 1, FairnessKey: "f", Weight: 2, ThrottleKeys: []string{"t"}},
			"a|x=1&y=2|1|f|2|t"},
		{EnqueueInput{Queue: "a", Headers: headers("x", "3", "y", "4"), PayloadSize: 2},
			"a|x=3&y=4|2|nil|nil|"},
		{EnqueueInput{Queue: "b", Headers: headers("x", "5"), PayloadSize: 3, ThrottleKeys: []string{"u", "v"}},
			"b|x=5|3|nil|nil|u+v"},
		{EnqueueInput{Queue: "b", Headers: headers("y", "6", "x", "7"), ThrottleKeys: []string{"w", "z"}},
			"b|x=7&y=6|0|nil|nil|w+z"},
		{EnqueueInput{Queue: "b", Headers: headers("x", "8", "x", "9"), Weight: 4},
			"b|x=9|0|nil|4|"},
		{EnqueueInput{Queue: "b", Headers: headers("x", "10", "x", "11"), FairnessKey: "g"},
			"b|x=11|0|g|nil|"},
		{EnqueueInput{Queue: "b"}, "b||0|nil|nil|"},
	}
	for i, c := range calls {
		out, err := r.OnEnqueue(context.Background(), c.in)
		if err != nil || out.FairnessKey != c.want {
			t.Errorf("call %d: OnEnqueue(%+v) = %q, %v; want %q", i, c.in, out.FairnessKey, err, c.want)
		}
	}
}
