package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

const bootstrap = "bootstrap-secret-for-tests-0123456789"

func authServer(t *testing.T) *filatest.Server {
	return filatest.Start(t, filatest.WithEnv("FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY="+bootstrap))
}

func connectKey(t *testing.T, addr, key string) (*fila.Client, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := fila.Connect(ctx, addr, fila.WithAPIKey(key))
	if err == nil {
		t.Cleanup(func() { c.Close() })
	}
	return c, err
}

func TestHandshakeNeedsAValidKey(t *testing.T) {
	srv := authServer(t)
	ctx := ctxT(t, time.Minute)
	for _, tc := range []struct{ name, key string }{{"no key", ""}, {"wrong key", "fila_not-a-real-key"}} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := connectKey(t, srv.Addr, tc.key); !errors.Is(err, fila.ErrUnauthorized) {
				t.Fatalf("Connect with %s = %v; want UNAUTHORIZED", tc.name, err)
			}
		})
	}
	admin, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatalf("Connect with the bootstrap key = %v", err)
	}
	key, err := admin.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("worker").Permissions(fila.Consume("*")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := connectKey(t, srv.Addr, key.Secret); err != nil {
		t.Fatalf("Connect with a minted key = %v", err)
	}
	if err := admin.Admin().RevokeAPIKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := connectKey(t, srv.Addr, key.Secret); !errors.Is(err, fila.ErrUnauthorized) {
		t.Fatalf("Connect with a revoked key = %v; want UNAUTHORIZED", err)
	}
}

// TestPermissionKinds gives one key each kind and checks it allows exactly
// its operations.
func TestPermissionKinds(t *testing.T) {
	srv := authServer(t)
	ctx := ctxT(t, time.Minute)
	root, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"orders.eu", "orders", "ordersx", "billing"} {
		if err := root.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)); err != nil {
			t.Fatal(err)
		}
	}
	mint := func(perms ...fila.Permission) *fila.Client {
		k, err := root.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("k").Permissions(perms...))
		if err != nil {
			t.Fatal(err)
		}
		c, err := connectKey(t, srv.Addr, k.Secret)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	producer := mint(fila.Produce("orders.*"))
	consumer := mint(fila.Consume("orders.*"))
	admin := mint(fila.Admin("orders.*"))

	forbidden := func(t *testing.T, what string, err error) {
		t.Helper()
		if !errors.Is(err, fila.ErrForbidden) {
			t.Errorf("%s = %v; want FORBIDDEN", what, err)
		}
	}
	allowed := func(t *testing.T, what string, err error) {
		t.Helper()
		if err != nil {
			t.Errorf("%s = %v; want success", what, err)
		}
	}

	// Produce.
	_, err = producer.Producer().Enqueue(ctx, "orders.eu", []byte("x"))
	allowed(t, "produce key: enqueue orders.eu", err)
	for _, q := range []string{"orders", "ordersx", "billing"} {
		_, err = producer.Producer().Enqueue(ctx, q, []byte("x"))
		forbidden(t, "produce key: enqueue "+q, err)
	}
	_, err = producer.Consumer().Subscribe(ctx, "orders.eu")
	forbidden(t, "produce key: subscribe", err)
	forbidden(t, "produce key: create queue", producer.Admin().CreateQueue(ctx, fila.NewQueueSpec("orders.new")))

	// Consume.
	sub, err := consumer.Consumer().Subscribe(ctx, "orders.eu", fila.Prefetch(1))
	allowed(t, "consume key: subscribe orders.eu", err)
	if err == nil {
		d := <-sub.C()
		allowed(t, "consume key: ack", d.Ack(ctx))
	}
	_, err = consumer.Consumer().Subscribe(ctx, "orders")
	forbidden(t, "consume key: subscribe orders", err)
	_, err = consumer.Producer().Enqueue(ctx, "orders.eu", []byte("x"))
	forbidden(t, "consume key: enqueue", err)
	_, err = consumer.Admin().QueueStats(ctx, "orders.eu")
	forbidden(t, "consume key: queue stats", err)

	// Admin.
	allowed(t, "admin key: create orders.new", admin.Admin().CreateQueue(ctx, fila.NewQueueSpec("orders.new")))
	_, err = admin.Admin().QueueStats(ctx, "orders.eu")
	allowed(t, "admin key: stats", err)
	forbidden(t, "admin key: create ordersx2", admin.Admin().CreateQueue(ctx, fila.NewQueueSpec("ordersx2")))
	forbidden(t, "admin key: delete billing", admin.Admin().DeleteQueue(ctx, "billing"))
	_, err = admin.Producer().Enqueue(ctx, "orders.eu", []byte("x"))
	forbidden(t, "admin key: enqueue", err)
	forbidden(t, "admin on orders.* : set config", admin.Admin().SetConfig(ctx, "throttle.x", "1,1"))
	_, err = admin.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("escalate").Permissions(fila.Admin("*")))
	forbidden(t, "admin on orders.* : create api key", err)
	qs, err := admin.Admin().ListQueues(ctx)
	allowed(t, "admin key: list queues", err)
	for _, q := range qs {
		if q.Name == "billing" || q.Name == "orders" || q.Name == "ordersx" {
			t.Errorf("admin on orders.* lists %s", q.Name)
		}
	}
}

func TestPerItemForbiddenInABatch(t *testing.T) {
	srv := authServer(t)
	ctx := ctxT(t, time.Minute)
	root, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"a", "b"} {
		if err := root.Admin().CreateQueue(ctx, fila.NewQueueSpec(q)); err != nil {
			t.Fatal(err)
		}
	}
	k, err := root.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("p").Permissions(fila.Produce("a")))
	if err != nil {
		t.Fatal(err)
	}
	c, err := connectKey(t, srv.Addr, k.Secret)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Producer().SendBatch(ctx, []*fila.Message{
		fila.NewMessage("a", []byte("1")), fila.NewMessage("b", []byte("2")), fila.NewMessage("a", []byte("3")),
	})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Err != nil || res[2].Err != nil {
		t.Errorf("allowed items failed: %v, %v", res[0].Err, res[2].Err)
	}
	if !errors.Is(res[1].Err, fila.ErrForbidden) {
		t.Errorf("forbidden item = %v; want FORBIDDEN", res[1].Err)
	}
}

func TestRevocationWhileConnected(t *testing.T) {
	srv := authServer(t)
	ctx := ctxT(t, time.Minute)
	root, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Admin().CreateQueue(ctx, fila.NewQueueSpec("q")); err != nil {
		t.Fatal(err)
	}
	k, err := root.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("p").Permissions(fila.Produce("q")))
	if err != nil {
		t.Fatal(err)
	}
	c, err := connectKey(t, srv.Addr, k.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Producer().Enqueue(ctx, "q", []byte("before")); err != nil {
		t.Fatal(err)
	}
	if err := root.Admin().RevokeAPIKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Producer().Enqueue(ctx, "q", []byte("after")); !errors.Is(err, fila.ErrUnauthorized) {
		t.Fatalf("enqueue after revocation = %v; want UNAUTHORIZED", err)
	}
	// ACL changes apply to open connections too.
	k2, err := root.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("p2").Permissions(fila.Produce("q")))
	if err != nil {
		t.Fatal(err)
	}
	c2, err := connectKey(t, srv.Addr, k2.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Admin().SetACL(ctx, k2.ID, fila.Consume("q")); err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Producer().Enqueue(ctx, "q", []byte("x")); !errors.Is(err, fila.ErrForbidden) {
		t.Fatalf("enqueue after the ACL lost produce = %v; want FORBIDDEN", err)
	}
	perms, err := root.Admin().GetACL(ctx, k2.ID)
	if err != nil || len(perms) != 1 || perms[0].String() != "consume:q" {
		t.Fatalf("GetACL = %v, %v; want [consume:q]", perms, err)
	}
	keys, err := root.Admin().ListAPIKeys(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range keys {
		if key.ID == k.ID {
			t.Errorf("revoked key %s still listed", k.ID)
		}
	}
}
