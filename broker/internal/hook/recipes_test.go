package hook

import (
	"bufio"
	"context"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

const recipesDoc = "../../../docs/lua-patterns.md"

// readRecipes returns the lua code blocks of the Recipes section of
// docs/lua-patterns.md, by the heading of their subsection.
func readRecipes(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(recipesDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recipes := map[string]string{}
	var inRecipes, inLua bool
	var heading string
	var code strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inLua && line == "```":
			inLua = false
			if _, dup := recipes[heading]; dup {
				t.Errorf("recipe %q has more than one lua block", heading)
			}
			recipes[heading] = code.String()
		case inLua:
			code.WriteString(line + "\n")
		case strings.HasPrefix(line, "## "):
			inRecipes = line == "## Recipes"
		case inRecipes && strings.HasPrefix(line, "### "):
			heading = strings.TrimPrefix(line, "### ")
		case inRecipes && line == "```lua":
			inLua = true
			code.Reset()
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return recipes
}

// An enqueueCase is one call of an on_enqueue recipe.
type enqueueCase struct {
	config map[string]string
	in     EnqueueInput
	want   EnqueueOutput
}

// A failureCase is one call of an on_failure recipe.
type failureCase struct {
	config   map[string]string
	attempts int
	err      string
	want     Decision
}

func headers(kv ...string) []Header {
	var h []Header
	for i := 0; i+1 < len(kv); i += 2 {
		h = append(h, Header{kv[i], kv[i+1]})
	}
	return h
}

var enqueueRecipes = map[string][]enqueueCase{
	"Tenant fairness": {
		{in: EnqueueInput{Headers: headers("tenant", "acme")}, want: EnqueueOutput{FairnessKey: "acme"}},
		{in: EnqueueInput{Headers: headers("tenant", "")}, want: EnqueueOutput{FairnessKey: "default"}},
		{in: EnqueueInput{FairnessKey: "mine", Weight: 2}, want: EnqueueOutput{FairnessKey: "default", Weight: 2}},
	},
	"Tenants and their jobs": {
		{in: EnqueueInput{Headers: headers("tenant", "acme", "job", "nightly-export")}, want: EnqueueOutput{FairnessKey: "acme/nightly-export"}},
		{in: EnqueueInput{Headers: headers("tenant", "acme")}, want: EnqueueOutput{FairnessKey: "acme/any"}},
		{in: EnqueueInput{Headers: headers("job", "invoice-42")}, want: EnqueueOutput{FairnessKey: "default/invoice-42"}},
	},
	"Weighted tiers": {
		{in: EnqueueInput{Headers: headers("tenant", "acme", "tier", "gold")}, want: EnqueueOutput{FairnessKey: "acme", Weight: 4}},
		{in: EnqueueInput{Headers: headers("tenant", "initech", "tier", "silver")}, want: EnqueueOutput{FairnessKey: "initech", Weight: 2}},
		{in: EnqueueInput{Headers: headers("tier", "platinum")}, want: EnqueueOutput{FairnessKey: "default", Weight: 1}},
	},
	"Weights from runtime config": {
		{config: map[string]string{"weight.acme": "5"}, in: EnqueueInput{Headers: headers("tenant", "acme")},
			want: EnqueueOutput{FairnessKey: "acme", Weight: 5}},
		{config: map[string]string{"weight.acme": "5"}, in: EnqueueInput{Headers: headers("tenant", "globex")},
			want: EnqueueOutput{FairnessKey: "globex", Weight: 1}},
		{config: map[string]string{"weight.acme": "lots"}, in: EnqueueInput{Headers: headers("tenant", "acme")},
			want: EnqueueOutput{FairnessKey: "acme", Weight: 1}},
		{config: map[string]string{"weight.acme": "2.5"}, in: EnqueueInput{Headers: headers("tenant", "acme")},
			want: EnqueueOutput{FairnessKey: "acme", Weight: 1}},
		{config: map[string]string{"weight.acme": "99999"}, in: EnqueueInput{Headers: headers("tenant", "acme")},
			want: EnqueueOutput{FairnessKey: "acme", Weight: 1000}},
	},
	"Provider throttling": {
		{in: EnqueueInput{Headers: headers("provider", "stripe")}, want: EnqueueOutput{ThrottleKeys: []string{"provider:stripe"}}},
		{in: EnqueueInput{ThrottleKeys: []string{"own"}}, want: EnqueueOutput{ThrottleKeys: []string{"own"}}},
		{in: EnqueueInput{Headers: headers("provider", ""), FairnessKey: "k"}, want: EnqueueOutput{FairnessKey: "k"}},
	},
	"Composite throttle keys": {
		{in: EnqueueInput{Headers: headers("tenant", "acme", "provider", "stripe")},
			want: EnqueueOutput{FairnessKey: "acme", ThrottleKeys: []string{"provider:stripe", "provider:stripe:tenant:acme"}}},
		{in: EnqueueInput{Headers: headers("tenant", "acme"), ThrottleKeys: []string{"own"}},
			want: EnqueueOutput{FairnessKey: "acme", ThrottleKeys: []string{"own"}}},
	},
	"Payload-size lanes": {
		{in: EnqueueInput{Headers: headers("tenant", "acme"), PayloadSize: 100}, want: EnqueueOutput{FairnessKey: "acme:small", Weight: 4}},
		{in: EnqueueInput{Headers: headers("tenant", "acme"), PayloadSize: 64 << 10}, want: EnqueueOutput{FairnessKey: "acme:large", Weight: 1}},
		{in: EnqueueInput{PayloadSize: 1 << 20}, want: EnqueueOutput{FairnessKey: "default:large", Weight: 1}},
	},
}

var failureRecipes = map[string][]failureCase{
	"Retry with backoff, then DLQ": {
		{attempts: 1, err: "timeout", want: Decision{Delay: time.Second}},
		{attempts: 2, err: "timeout", want: Decision{Delay: 2 * time.Second}},
		{attempts: 4, err: "lease expired", want: Decision{Delay: 8 * time.Second}},
		{attempts: 6, err: "timeout", want: Decision{Delay: 32 * time.Second}},
		{attempts: 7, err: "timeout", want: Decision{Delay: time.Minute}},
		{attempts: 8, err: "timeout", want: Decision{DeadLetter: true}},
		{config: map[string]string{"retry.max_attempts": "3"}, attempts: 2, err: "x", want: Decision{Delay: 2 * time.Second}},
		{config: map[string]string{"retry.max_attempts": "3"}, attempts: 3, err: "x", want: Decision{DeadLetter: true}},
	},
	"DLQ on a specific error": {
		{attempts: 1, err: "HTTP 404 Not Found", want: Decision{DeadLetter: true}},
		{attempts: 1, err: "invalid payload: unexpected EOF", want: Decision{DeadLetter: true}},
		{attempts: 1, err: "HTTP 429 Too Many Requests", want: Decision{Delay: 30 * time.Second}},
		{attempts: 2, err: "HTTP 503 Service Unavailable", want: Decision{Delay: 2 * time.Second}},
		{attempts: 2, err: "lease expired", want: Decision{Delay: 2 * time.Second}},
		{attempts: 5, err: "HTTP 503 Service Unavailable", want: Decision{DeadLetter: true}},
	},
}

func TestRecipes(t *testing.T) {
	recipes := readRecipes(t)
	for name := range recipes {
		if _, ok := enqueueRecipes[name]; !ok {
			if _, ok := failureRecipes[name]; !ok {
				t.Errorf("recipe %q has no test cases", name)
			}
		}
	}
	for name, cases := range enqueueRecipes {
		t.Run(name, func(t *testing.T) {
			code, ok := recipes[name]
			if !ok {
				t.Fatalf("no recipe %q in %s", name, recipesDoc)
			}
			for _, c := range cases {
				r := newTestRunner(t, code, "", configOf(c.config), testLimits)
				in := c.in
				in.Queue = "orders"
				out, err := r.OnEnqueue(context.Background(), in)
				if err != nil || !reflect.DeepEqual(out, c.want) {
					t.Errorf("OnEnqueue(%+v) with config %v = %+v, %v; want %+v, nil", in, c.config, out, err, c.want)
				}
			}
		})
	}
	for name, cases := range failureRecipes {
		t.Run(name, func(t *testing.T) {
			code, ok := recipes[name]
			if !ok {
				t.Fatalf("no recipe %q in %s", name, recipesDoc)
			}
			for _, c := range cases {
				r := newTestRunner(t, "", code, configOf(c.config), testLimits)
				in := FailureInput{Queue: "orders", ID: "0190a0b2-0000-7000-8000-000000000001", Attempts: c.attempts, Error: c.err}
				d, err := r.OnFailure(context.Background(), in)
				if err != nil || d != c.want {
					t.Errorf("OnFailure(attempts %d, error %q) with config %v = %+v, %v; want %+v, nil",
						c.attempts, c.err, c.config, d, err, c.want)
				}
			}
		})
	}
}

func configOf(m map[string]string) ConfigReader {
	c := newTestConfig()
	for k, v := range m {
		c.Set(k, v)
	}
	return c
}
