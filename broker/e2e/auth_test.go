package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
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

// TestRevocationWhileConnected checks that revoking a key closes its
// open connections with UNAUTHORIZED, and that ACL changes apply to the
// next request of an open connection.
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
	if _, err := c.Producer().Enqueue(ctx, "q", []byte("after")); !errors.Is(err, fila.ErrUnauthorized) || !strings.Contains(err.Error(), "API key "+k.ID+" was revoked") {
		t.Fatalf("enqueue after revocation = %v; want UNAUTHORIZED naming the revoked key", err)
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

// holdLeases enqueues n messages to queue and reads n deliveries from sub
// without settling them.
func holdLeases(t *testing.T, ctx context.Context, producer *fila.Client, sub *fila.Subscription, queue string, n int) []*fila.Delivery {
	t.Helper()
	enqueueN(t, ctx, producer, queue, "held", n)
	held := make([]*fila.Delivery, 0, n)
	for len(held) < n {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("delivery %d of %d: %v", len(held)+1, n, err)
		}
		held = append(held, d)
	}
	return held
}

func enqueueN(t *testing.T, ctx context.Context, c *fila.Client, queue, prefix string, n int) {
	t.Helper()
	msgs := make([]*fila.Message, n)
	for i := range msgs {
		msgs[i] = fila.NewMessage(queue, []byte(fmt.Sprintf("%s-%d", prefix, i)))
	}
	res, err := c.Producer().SendBatch(ctx, msgs)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
	}
}

// checkLeases checks a queue's ready and leased counts.
func checkLeases(t *testing.T, ctx context.Context, admin *fila.Client, queue string, ready, leased uint64) {
	t.Helper()
	st, err := admin.Admin().QueueStats(ctx, queue)
	if err != nil {
		t.Fatal(err)
	}
	if st.Ready != ready || st.Leased != leased {
		t.Fatalf("%s: ready %d, leased %d; want ready %d, leased %d", queue, st.Ready, st.Leased, ready, leased)
	}
}

// drainAll subscribes to queue and reads want deliveries, acking them; it
// returns how many were on their second attempt.
func drainAll(t *testing.T, ctx context.Context, c *fila.Client, queue string, want int) (retried int) {
	t.Helper()
	sub, err := c.Consumer().Subscribe(ctx, queue, fila.Prefetch(uint32(want)))
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close(ctx)
	for i := 0; i < want; i++ {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatalf("delivery %d of %d: %v", i+1, want, err)
		}
		if d.Attempt() == 2 {
			retried++
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return retried
}

// TestRevokeClosesSubscribedConnection holds leases on a subscription,
// revokes its key, and checks that the connection is closed with
// UNAUTHORIZED, the leases are released before RevokeApiKey answers, and
// nothing enqueued later reaches the revoked subscription.
func TestRevokeClosesSubscribedConnection(t *testing.T) {
	srv := authServer(t)
	ctx := ctxT(t, 2*time.Minute)
	root, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Admin().CreateQueue(ctx, fila.NewQueueSpec("q").VisibilityTimeout(time.Hour)); err != nil {
		t.Fatal(err)
	}
	k, err := root.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("worker").Permissions(fila.Consume("q")))
	if err != nil {
		t.Fatal(err)
	}
	worker, err := connectKey(t, srv.Addr, k.Secret)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := worker.Consumer().Subscribe(ctx, "q", fila.Prefetch(100))
	if err != nil {
		t.Fatal(err)
	}
	held := holdLeases(t, ctx, root, sub, "q", 70)
	checkLeases(t, ctx, root, "q", 0, 70)

	if err := root.Admin().RevokeAPIKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	checkLeases(t, ctx, root, "q", 70, 0)
	enqueueN(t, ctx, root, "q", "later", 60)
	late := 0
	for range sub.C() {
		late++
	}
	if late != 0 {
		t.Errorf("the revoked subscription received %d more deliveries", late)
	}
	if err := sub.Err(); !errors.Is(err, fila.ErrUnauthorized) || !strings.Contains(err.Error(), "API key "+k.ID+" was revoked") {
		t.Errorf("subscription ended with %v; want UNAUTHORIZED naming the revoked key", err)
	}
	if err := held[0].Ack(ctx); err == nil {
		t.Errorf("ack of a delivery held under a revoked key succeeded")
	}
	if _, err := worker.Admin().ListQueues(ctx); !errors.Is(err, fila.ErrUnauthorized) {
		t.Errorf("request after revocation = %v; want UNAUTHORIZED", err)
	}
	// The released messages (one failed attempt each) and the later ones
	// go to another consumer.
	if retried := drainAll(t, ctx, root, "q", 130); retried != 70 {
		t.Errorf("%d of the 130 deliveries were second attempts; want the 70 released", retried)
	}
}

// TestACLChangeEndsSubscription holds leases on a subscription, takes
// consume on its queue away from the key, and checks that the
// subscription ends with FORBIDDEN and its leases are released before
// SetAcl answers, while the connection and its other subscription go on.
func TestACLChangeEndsSubscription(t *testing.T) {
	srv := authServer(t)
	ctx := ctxT(t, 2*time.Minute)
	root, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"q", "other"} {
		if err := root.Admin().CreateQueue(ctx, fila.NewQueueSpec(q).VisibilityTimeout(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	k, err := root.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("worker").Permissions(fila.Consume("q"), fila.Consume("other"), fila.Produce("q")))
	if err != nil {
		t.Fatal(err)
	}
	worker, err := connectKey(t, srv.Addr, k.Secret)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := worker.Consumer().Subscribe(ctx, "q", fila.Prefetch(100))
	if err != nil {
		t.Fatal(err)
	}
	sub2, err := worker.Consumer().Subscribe(ctx, "other", fila.Prefetch(10))
	if err != nil {
		t.Fatal(err)
	}
	held := holdLeases(t, ctx, root, sub, "q", 70)

	if err := root.Admin().SetACL(ctx, k.ID, fila.Produce("q"), fila.Consume("other")); err != nil {
		t.Fatal(err)
	}
	checkLeases(t, ctx, root, "q", 70, 0)
	enqueueN(t, ctx, root, "q", "later", 50)
	late := 0
	for range sub.C() {
		late++
	}
	if late != 0 {
		t.Errorf("the ended subscription received %d more deliveries", late)
	}
	if err := sub.Err(); !errors.Is(err, fila.ErrForbidden) || !strings.Contains(err.Error(), `no longer holds consume on "q"`) {
		t.Errorf("subscription ended with %v; want FORBIDDEN naming the queue and consume", err)
	}
	if err := held[0].Ack(ctx); !errors.Is(err, fila.ErrForbidden) {
		t.Errorf("ack after consume was taken away = %v; want FORBIDDEN", err)
	}
	// The connection stays open for what the key may still do.
	if _, err := worker.Producer().Enqueue(ctx, "q", []byte("still allowed")); err != nil {
		t.Errorf("enqueue with produce kept = %v", err)
	}
	if _, err := root.Producer().Enqueue(ctx, "other", []byte("for sub2")); err != nil {
		t.Fatal(err)
	}
	if d, err := sub2.Next(ctx); err != nil || string(d.Payload()) != "for sub2" {
		t.Errorf("the subscription still allowed: %v, %v", d, err)
	}
	if _, err := worker.Consumer().Subscribe(ctx, "q"); !errors.Is(err, fila.ErrForbidden) {
		t.Errorf("subscribe after consume was taken away = %v; want FORBIDDEN", err)
	}
	if retried := drainAll(t, ctx, root, "q", 121); retried != 70 {
		t.Errorf("%d of the 121 deliveries were second attempts; want the 70 released", retried)
	}
}

// dialRawKey opens a raw connection and handshakes with key.
func dialRawKey(t *testing.T, addr, key string) *rawConn {
	t.Helper()
	rc := dialRaw(t, addr, false)
	rc.send(1, &wire.Handshake{MaxVersion: 1, MinVersion: 1, ClientName: "raw", APIKey: key})
	if h, f := rc.recv(); h.Opcode != wire.OpHandshakeOk {
		t.Fatalf("handshake answered by %v %+v", h.Opcode, f)
	}
	return rc
}

// TestACLChangeOnTheWire checks the frames: the subscription's Error, a
// Credit afterwards refused as for any subscription that is not open,
// and the revoked connection's Error on request ID 0 before it closes.
func TestACLChangeOnTheWire(t *testing.T) {
	srv := authServer(t)
	ctx := ctxT(t, time.Minute)
	root, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Admin().CreateQueue(ctx, fila.NewQueueSpec("q")); err != nil {
		t.Fatal(err)
	}
	k, err := root.Admin().CreateAPIKey(ctx, fila.NewAPIKeySpec("raw").Permissions(fila.Consume("q")))
	if err != nil {
		t.Fatal(err)
	}
	rc := dialRawKey(t, srv.Addr, k.Secret)
	rc.send(5, &wire.Subscribe{Queue: "q", Prefetch: 1})
	if h, f := rc.recv(); h.Opcode != wire.OpSubscribeOk || h.RequestID != 5 {
		t.Fatalf("Subscribe answered by %v %+v", h.Opcode, f)
	}
	if err := root.Admin().SetACL(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	h, f := rc.recv()
	if ef, ok := f.(*wire.ErrorFrame); !ok || h.RequestID != 5 || ef.Code != wire.CodeForbidden {
		t.Fatalf("after SetAcl: %v on %d %+v; want Error FORBIDDEN on 5", h.Opcode, h.RequestID, f)
	}
	rc.send(0, &wire.Credit{Subscription: 5, Credits: 10})
	h, f = rc.recv()
	if ef, ok := f.(*wire.ErrorFrame); !ok || h.RequestID != 5 || ef.Code != wire.CodeSubscriptionNotFound {
		t.Fatalf("Credit after the end: %v on %d %+v; want Error SUBSCRIPTION_NOT_FOUND on 5", h.Opcode, h.RequestID, f)
	}
	if err := root.Admin().RevokeAPIKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	h, f = rc.recv()
	if ef, ok := f.(*wire.ErrorFrame); !ok || h.RequestID != 0 || ef.Code != wire.CodeUnauthorized || ef.Message != "API key "+k.ID+" was revoked" {
		t.Fatalf("after RevokeApiKey: %v on %d %+v; want Error UNAUTHORIZED on 0", h.Opcode, h.RequestID, f)
	}
	if _, _, err := rc.next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the Error: %v; want the connection closed", err)
	}
}

// TestAuditLog performs each audited operation once and checks the log
// has exactly one audit line for each, with its fields, and no secret.
func TestAuditLog(t *testing.T) {
	srv := authServer(t)
	ctx := ctxT(t, time.Minute)
	root, err := connectKey(t, srv.Addr, bootstrap)
	if err != nil {
		t.Fatal(err)
	}
	adm := root.Admin()
	if err := adm.CreateQueue(ctx, fila.NewQueueSpec("orders")); err != nil {
		t.Fatal(err)
	}
	key, err := adm.CreateAPIKey(ctx, fila.NewAPIKeySpec("ci").Permissions(fila.Produce("orders.*")))
	if err != nil {
		t.Fatal(err)
	}
	worker, err := connectKey(t, srv.Addr, key.Secret)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := worker.Admin().ListQueues(ctx); err != nil {
		t.Fatal(err)
	}
	if err := adm.SetACL(ctx, key.ID, fila.Produce("orders.*"), fila.Consume("orders")); err != nil {
		t.Fatal(err)
	}
	const value = "config-value-that-may-be-sensitive"
	if err := adm.SetConfig(ctx, "routing.token", value); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.DeleteConfig(ctx, "routing.token"); err != nil {
		t.Fatal(err)
	}
	if err := adm.DeleteQueue(ctx, "orders"); err != nil {
		t.Fatal(err)
	}
	if err := adm.RevokeAPIKey(ctx, key.ID); err != nil {
		t.Fatal(err)
	}
	const wrong = "fila_a-wrong-secret-that-must-not-be-logged"
	if _, err := connectKey(t, srv.Addr, wrong); !errors.Is(err, fila.ErrUnauthorized) {
		t.Fatalf("Connect with a wrong key = %v", err)
	}
	waitLog(t, ctx, srv, "msg=audit", "event=auth.failed")

	log := srv.Log()
	for _, secret := range []string{bootstrap, key.Secret, wrong, value} {
		if strings.Contains(log, secret) {
			t.Errorf("the log contains the secret %q", secret)
		}
	}
	admin := "key_id=bootstrap"
	for _, tc := range []struct {
		event  string
		fields []string
	}{
		{"queue.created", []string{admin, "queue=orders", "dead_letter_queue=orders.dlq"}},
		{"api_key.created", []string{admin, "target_key_id=" + key.ID, "name=ci", "permissions=[produce:orders.*]"}},
		{"acl.set", []string{admin, "target_key_id=" + key.ID, `permissions="[produce:orders.* consume:orders]"`}},
		{"config.set", []string{admin, "config_key=routing.token", "value_bytes=34"}},
		{"config.deleted", []string{admin, "config_key=routing.token", "existed=true"}},
		{"queue.deleted", []string{admin, "queue=orders"}},
		{"api_key.revoked", []string{admin, "target_key_id=" + key.ID}},
		{"auth.failed", []string{"client=fila-go/", `reason="unauthorized: unknown or revoked API key"`}},
	} {
		var lines []string
		for _, line := range strings.Split(log, "\n") {
			if strings.Contains(line, "msg=audit") && strings.Contains(line, " event="+tc.event+" ") {
				lines = append(lines, line)
			}
		}
		if len(lines) != 1 {
			t.Errorf("%d audit lines for %s; want 1:\n%s", len(lines), tc.event, strings.Join(lines, "\n"))
			continue
		}
		for _, f := range append(tc.fields, "level=INFO", "remote=127.0.0.1:", "conn=") {
			if !strings.Contains(lines[0], " "+f) {
				t.Errorf("audit line of %s lacks %s:\n%s", tc.event, f, lines[0])
			}
		}
	}
}
