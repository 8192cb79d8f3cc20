package hook

import (
	"context"
	"fmt"
	"testing"
)

// typicalHook is the on_enqueue hook of the benchmarks: tenant fairness,
// a weight from the runtime config and a provider throttle key.
const typicalHook = `
function on_enqueue(msg)
  local tenant = msg.headers.tenant or "default"
  local weight = tonumber(fila.get("weight." .. tenant)) or 1
  local keys = {}
  if msg.headers.provider then
    keys[1] = "provider:" .. msg.headers.provider
  end
  return { fairness_key = tenant, weight = weight, throttle_keys = keys }
end`

// typicalInputs are messages as a producer sends them: one of 16
// tenants, a provider, a trace ID of their own.
var typicalInputs = func() []EnqueueInput {
	in := make([]EnqueueInput, 1024)
	for i := range in {
		in[i] = EnqueueInput{
			Queue:       "orders",
			Headers:     []Header{{"tenant", fmt.Sprintf("tenant-%d", i%16)}, {"provider", "stripe"}, {"trace-id", fmt.Sprintf("%016x", i*7919)}},
			PayloadSize: 1024,
		}
	}
	return in
}()

var benchConfig = newTestConfig("weight.tenant-1", "3", "weight.tenant-2", "2")

// BenchmarkOnEnqueue measures the cost a hook adds to each message: the
// whole OnEnqueue call, from taking an interpreter to parsing the result.
// "none" is a queue without a hook.
func BenchmarkOnEnqueue(b *testing.B) {
	for _, bc := range []struct{ name, script string }{
		{"none", ""},
		{"empty", "function on_enqueue(msg) end"},
		{"typical", typicalHook},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := NewRunner(mustCompile(b, bc.script, ""), benchConfig, Limits{}, nil, nil)
			defer r.Close()
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if _, err := r.OnEnqueue(ctx, typicalInputs[i%len(typicalInputs)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}

// BenchmarkOnEnqueueParallel runs the typical hook from as many goroutines
// as GOMAXPROCS, as connection goroutines do.
func BenchmarkOnEnqueueParallel(b *testing.B) {
	r := NewRunner(mustCompile(b, typicalHook, ""), benchConfig, Limits{}, nil, nil)
	defer r.Close()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		ctx := context.Background()
		i := 0
		for pb.Next() {
			i++
			if _, err := r.OnEnqueue(ctx, typicalInputs[i%len(typicalInputs)]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

func BenchmarkOnFailure(b *testing.B) {
	r := NewRunner(mustCompile(b, "", `
function on_failure(msg)
  if msg.attempts >= 5 then return { action = "dlq" } end
  return { action = "retry", delay_ms = math.min(1000 * 2 ^ (msg.attempts - 1), 60000) }
end`), nil, Limits{}, nil, nil)
	defer r.Close()
	in := FailureInput{Queue: "orders", ID: "0190a0b2-0000-7000-8000-000000000001", Attempts: 2, Error: "HTTP 503",
		Headers: typicalInputs[0].Headers, PayloadSize: 1024}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.OnFailure(ctx, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCompile is the cost of a CreateQueue's scripts, paid once.
func BenchmarkCompile(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Compile(typicalHook, ""); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNewState is the cost of an interpreter state, paid once per
// state a runner makes (at most Limits.States) and kept while it lives.
func BenchmarkNewState(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		st, err := newState(nil)
		if err != nil {
			b.Fatal(err)
		}
		st.close()
	}
}
