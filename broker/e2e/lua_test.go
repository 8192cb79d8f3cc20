package e2e

import (
	"bytes"
	"context"
	"errors"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// recipe returns the Lua block under the "### title" heading of
// docs/lua-patterns.md, so the recipes tested here are the ones published.
func recipe(t *testing.T, title string) string {
	t.Helper()
	doc, err := os.ReadFile("../../docs/lua-patterns.md")
	if err != nil {
		t.Fatal(err)
	}
	s := string(doc)
	i := strings.Index(s, "### "+title+"\n")
	if i < 0 {
		t.Fatalf("docs/lua-patterns.md has no recipe %q", title)
	}
	m := regexp.MustCompile("(?s)```lua\n(.*?)```").FindStringSubmatch(s[i:])
	if m == nil {
		t.Fatalf("recipe %q has no lua block", title)
	}
	return m[1]
}

// recv returns the next delivery of sub within ctx.
func recv(t *testing.T, ctx context.Context, sub *fila.Subscription) *fila.Delivery {
	t.Helper()
	select {
	case d, ok := <-sub.C():
		if !ok {
			t.Fatalf("subscription ended: %v", sub.Err())
		}
		return d
	case <-ctx.Done():
		t.Fatal("no delivery in time")
	}
	return nil
}

// TestLuaRecipes runs every recipe of docs/lua-patterns.md on a real
// server and checks what it does to deliveries.
func TestLuaRecipes(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	admin, prod, cons := c.Admin(), c.Producer(), c.Consumer()

	withHook := func(t *testing.T, queue, onEnqueue, onFailure string) *fila.Subscription {
		t.Helper()
		spec := fila.NewQueueSpec(queue).OnEnqueue(onEnqueue).OnFailure(onFailure).VisibilityTimeout(30 * time.Second)
		if err := admin.CreateQueue(ctx, spec); err != nil {
			t.Fatal(err)
		}
		sub, err := cons.Subscribe(ctx, queue)
		if err != nil {
			t.Fatal(err)
		}
		return sub
	}
	send := func(t *testing.T, m *fila.Message) {
		t.Helper()
		if _, err := prod.Send(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	expect := func(t *testing.T, d *fila.Delivery, key string, weight uint32, throttle ...string) {
		t.Helper()
		if d.FairnessKey() != key || d.Weight() != weight || !slices.Equal(d.ThrottleKeys(), throttle) {
			t.Errorf("delivered with key %q weight %d throttle %q; want %q %d %q", d.FairnessKey(), d.Weight(), d.ThrottleKeys(), key, weight, throttle)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("tenant fairness", func(t *testing.T) {
		sub := withHook(t, "tenants", recipe(t, "Tenant fairness"), "")
		send(t, fila.NewMessage("tenants", []byte("x")).Header("tenant", "acme"))
		expect(t, recv(t, ctx, sub), "acme", 1)
		send(t, fila.NewMessage("tenants", []byte("x")))
		expect(t, recv(t, ctx, sub), "default", 1)
	})
	t.Run("weighted tiers", func(t *testing.T) {
		sub := withHook(t, "tiers", recipe(t, "Weighted tiers"), "")
		send(t, fila.NewMessage("tiers", []byte("x")).Header("tenant", "acme").Header("tier", "gold"))
		expect(t, recv(t, ctx, sub), "acme", 4)
		send(t, fila.NewMessage("tiers", []byte("x")).Header("tenant", "b").Header("tier", "unknown"))
		expect(t, recv(t, ctx, sub), "b", 1)
	})
	t.Run("weights from runtime config", func(t *testing.T) {
		sub := withHook(t, "cfgweights", recipe(t, "Weights from runtime config"), "")
		if err := admin.SetConfig(ctx, "weight.acme", "5"); err != nil {
			t.Fatal(err)
		}
		send(t, fila.NewMessage("cfgweights", []byte("x")).Header("tenant", "acme"))
		expect(t, recv(t, ctx, sub), "acme", 5)
		if err := admin.SetConfig(ctx, "weight.acme", "3"); err != nil {
			t.Fatal(err)
		}
		send(t, fila.NewMessage("cfgweights", []byte("x")).Header("tenant", "acme"))
		expect(t, recv(t, ctx, sub), "acme", 3)
	})
	t.Run("provider throttling", func(t *testing.T) {
		sub := withHook(t, "providers", recipe(t, "Provider throttling"), "")
		send(t, fila.NewMessage("providers", []byte("x")).Header("provider", "stripe"))
		expect(t, recv(t, ctx, sub), "default", 1, "provider:stripe")
		send(t, fila.NewMessage("providers", []byte("x")).ThrottleKey("own"))
		expect(t, recv(t, ctx, sub), "default", 1, "own")
	})
	t.Run("composite throttle keys", func(t *testing.T) {
		sub := withHook(t, "composite", recipe(t, "Composite throttle keys"), "")
		send(t, fila.NewMessage("composite", []byte("x")).Header("tenant", "acme").Header("provider", "stripe"))
		expect(t, recv(t, ctx, sub), "acme", 1, "provider:stripe", "provider:stripe:tenant:acme")
	})
	t.Run("payload-size lanes", func(t *testing.T) {
		sub := withHook(t, "lanes", recipe(t, "Payload-size lanes"), "")
		send(t, fila.NewMessage("lanes", bytes.Repeat([]byte("x"), 70<<10)).Header("tenant", "t"))
		expect(t, recv(t, ctx, sub), "t:large", 1)
		send(t, fila.NewMessage("lanes", []byte("small")).Header("tenant", "t"))
		expect(t, recv(t, ctx, sub), "t:small", 4)
	})
	t.Run("retry with backoff then DLQ", func(t *testing.T) {
		if err := admin.SetConfig(ctx, "retry.max_attempts", "2"); err != nil {
			t.Fatal(err)
		}
		sub := withHook(t, "backoff", "", recipe(t, "Retry with backoff, then DLQ"))
		send(t, fila.NewMessage("backoff", []byte("x")))
		d := recv(t, ctx, sub)
		failedAt := time.Now()
		if err := d.Nack(ctx, "boom"); err != nil {
			t.Fatal(err)
		}
		d = recv(t, ctx, sub)
		if d.Attempt() != 2 {
			t.Fatalf("retry delivered as attempt %d; want 2", d.Attempt())
		}
		if waited := time.Since(failedAt); waited < 900*time.Millisecond {
			t.Errorf("retried after %v; the recipe backs off 1s after the first failure", waited)
		}
		if err := d.Nack(ctx, "boom again"); err != nil {
			t.Fatal(err)
		}
		dlq, err := cons.Subscribe(ctx, "backoff.dlq")
		if err != nil {
			t.Fatal(err)
		}
		d = recv(t, ctx, dlq)
		if d.Header("fila-attempts") != "2" || d.Header("fila-error") != "boom again" {
			t.Errorf("dead-lettered with headers %v; want fila-attempts 2, fila-error \"boom again\"", d.Headers())
		}
		d.Ack(ctx)
	})
	t.Run("DLQ on a specific error", func(t *testing.T) {
		sub := withHook(t, "permanent", "", recipe(t, "DLQ on a specific error"))
		send(t, fila.NewMessage("permanent", []byte("x")))
		if err := recv(t, ctx, sub).Nack(ctx, "HTTP 404 not found"); err != nil {
			t.Fatal(err)
		}
		dlq, err := cons.Subscribe(ctx, "permanent.dlq")
		if err != nil {
			t.Fatal(err)
		}
		d := recv(t, ctx, dlq)
		if d.Header("fila-attempts") != "1" {
			t.Errorf("dead-lettered after %s attempts; want 1", d.Header("fila-attempts"))
		}
		d.Ack(ctx)
		// A transient error is retried.
		send(t, fila.NewMessage("permanent", []byte("y")))
		if err := recv(t, ctx, sub).Nack(ctx, "connection reset"); err != nil {
			t.Fatal(err)
		}
		if d := recv(t, ctx, sub); d.Attempt() != 2 {
			t.Errorf("transient failure redelivered as attempt %d; want 2", d.Attempt())
		}
	})
	t.Run("syntax error fails CreateQueue with the line", func(t *testing.T) {
		err := admin.CreateQueue(ctx, fila.NewQueueSpec("broken").OnEnqueue("function on_enqueue(msg)\n  return {\nend"))
		var ce *fila.CreateQueueError
		if !errors.As(err, &ce) || ce.Code != fila.CreateQueueScriptError || !strings.Contains(err.Error(), "line") {
			t.Fatalf("CreateQueue(broken script) = %v; want SCRIPT_ERROR naming the line", err)
		}
	})
}
