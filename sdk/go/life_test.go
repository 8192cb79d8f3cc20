package fila_test

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
	"github.com/fila-mq/fila/sdk/go/internal/testbroker"
)

// TestReconnectResubscribes kills the broker under a client with an open
// subscription: the client reconnects to the restarted broker, the
// subscription keeps its channel, and new messages arrive on it.
func TestReconnectResubscribes(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr, fila.WithReconnect(10*time.Millisecond, 200*time.Millisecond))
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("jobs"))
	sub := subscribe(t, c, "jobs")
	if _, err := c.Producer().Enqueue(ctx, "jobs", []byte("before")); err != nil {
		t.Fatal(err)
	}
	if d := next(t, sub); string(d.Payload()) != "before" {
		t.Fatalf("delivery %q; want before", d.Payload())
	} else if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}

	srv.Kill()
	srv.Restart(t)

	// Calls made while the client reconnects wait for the new connection.
	if _, err := c.Producer().Enqueue(ctx, "jobs", []byte("after")); err != nil {
		t.Fatalf("Enqueue() after restart = %v", err)
	}
	d := next(t, sub)
	if string(d.Payload()) != "after" {
		t.Fatalf("delivery after restart %q; want after", d.Payload())
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("Ack() after restart = %v", err)
	}
	if got := c.Stats().Reconnects; got < 1 {
		t.Errorf("Stats().Reconnects = %d; want ≥ 1", got)
	}
}

// TestGracefulShutdownReconnects stops the broker with SIGTERM (GoAway)
// and starts it again: the client follows.
func TestGracefulShutdownReconnects(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr, fila.WithReconnect(10*time.Millisecond, 200*time.Millisecond))
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("jobs"))
	srv.Stop(t)
	srv.Restart(t)
	if _, err := c.Producer().Enqueue(ctx, "jobs", []byte("x")); err != nil {
		t.Fatalf("Enqueue() after graceful restart = %v", err)
	}
}

// TestConnectionLostWithoutReconnect: with reconnection off, a lost
// connection ends the client and its subscriptions.
func TestConnectionLostWithoutReconnect(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr, fila.WithoutReconnect())
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("jobs"))
	sub := subscribe(t, c, "jobs")
	srv.Kill()
	for d, err := range sub.Messages(ctx) {
		if d != nil {
			t.Fatal("delivery after kill")
		}
		if !errors.Is(err, fila.ErrConnectionLost) {
			t.Fatalf("Messages() after kill yielded %v; want ErrConnectionLost", err)
		}
	}
	_, err := c.Producer().Enqueue(ctx, "jobs", []byte("x"))
	if !errors.Is(err, fila.ErrClosed) {
		t.Fatalf("Enqueue() on an ended client = %v; want ErrClosed", err)
	}
}

// TestCloseDrains closes the client while Sends are in flight: each Send
// either returned an ID, and then its message is in the queue, or failed
// with ErrClosed; nothing else.
func TestCloseDrains(t *testing.T) {
	srv := testbroker.Start(t)
	admin := connect(t, srv.Addr).Admin()
	ctx := testCtx(t)
	if err := admin.CreateQueue(ctx, fila.NewQueueSpec("jobs")); err != nil {
		t.Fatal(err)
	}
	c, err := fila.Connect(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	const n = 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok, closed := 0, 0
	var other []error
	started := make(chan struct{}, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			_, err := c.Producer().Enqueue(ctx, "jobs", []byte("x"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				ok++
			case errors.Is(err, fila.ErrClosed):
				closed++
			default:
				other = append(other, err)
			}
		}()
	}
	for range n / 2 {
		<-started
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	wg.Wait()
	if len(other) > 0 {
		t.Fatalf("Enqueue() during Close failed with %v; want only ErrClosed", other)
	}
	st, err := admin.QueueStats(ctx, "jobs")
	if err != nil || st.Ready != uint64(ok) {
		t.Fatalf("QueueStats(jobs) = %+v, %v; want ready = %d acknowledged sends", st, err, ok)
	}
	t.Logf("%d sends acknowledged, %d refused as closed", ok, closed)
	if _, err := c.Ping(ctx); !errors.Is(err, fila.ErrClosed) {
		t.Errorf("Ping() after Close = %v; want ErrClosed", err)
	}
	if _, err := c.Consumer().Subscribe(ctx, "jobs"); !errors.Is(err, fila.ErrClosed) {
		t.Errorf("Subscribe() after Close = %v; want ErrClosed", err)
	}
	if err := c.Close(); err != nil {
		t.Errorf("second Close() = %v; want nil", err)
	}
}

// TestCloseEndsSubscriptions: Close ends open subscriptions with ErrClosed.
func TestCloseEndsSubscriptions(t *testing.T) {
	srv := testbroker.Start(t)
	ctx := testCtx(t)
	c, err := fila.Connect(ctx, srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	createQueue(t, c, fila.NewQueueSpec("jobs"))
	sub, err := c.Consumer().Subscribe(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown() = %v", err)
	}
	if _, err := sub.Next(ctx); !errors.Is(err, fila.ErrClosed) {
		t.Errorf("Next() after client Close = %v; want ErrClosed", err)
	}
}

const bootstrapKey = "bootstrap-secret-0123456789"

func startAuth(t *testing.T, extra ...string) *testbroker.Server {
	env := append([]string{"FILA_AUTH_ENABLED=true", "FILA_AUTH_BOOTSTRAP_APIKEY=" + bootstrapKey}, extra...)
	return testbroker.Start(t, testbroker.WithEnv(env...))
}

func TestAuthKeysACLsAndForbidden(t *testing.T) {
	srv := startAuth(t)
	ctx := testCtx(t)

	// No key, or a wrong one: refused at handshake, not retried.
	for _, key := range []string{"", "wrong-secret-0123456789"} {
		c, err := fila.Connect(ctx, srv.Addr, fila.WithAPIKey(key))
		if err == nil {
			c.Close()
			t.Fatalf("Connect(key %q) = nil error; want ErrUnauthorized", key)
		}
		if !errors.Is(err, fila.ErrUnauthorized) {
			t.Fatalf("Connect(key %q) = %v; want ErrUnauthorized", key, err)
		}
	}

	root := connect(t, srv.Addr, fila.WithAPIKey(bootstrapKey))
	a := root.Admin()
	createQueue(t, root, fila.NewQueueSpec("orders.eu"))
	createQueue(t, root, fila.NewQueueSpec("billing"))

	key, err := a.CreateAPIKey(ctx, fila.NewAPIKeySpec("ci").Permissions(fila.Produce("orders.*")))
	if err != nil {
		t.Fatalf("CreateAPIKey(ci) = %v", err)
	}
	if key.ID == "" || key.Secret == "" {
		t.Fatalf("CreateAPIKey(ci) = %+v; want an ID and a secret", key)
	}
	keys, err := a.ListAPIKeys(ctx)
	if err != nil {
		t.Fatalf("ListAPIKeys() = %v", err)
	}
	var found *fila.APIKeyInfo
	for i := range keys {
		if keys[i].ID == key.ID {
			found = &keys[i]
		}
	}
	if found == nil || found.Name != "ci" || len(found.Permissions) != 1 || found.Permissions[0] != fila.Produce("orders.*") || found.CreatedAt.IsZero() {
		t.Fatalf("ListAPIKeys() = %+v; want ci with produce:orders.*", keys)
	}

	ci := connect(t, srv.Addr, fila.WithAPIKey(key.Secret))
	if _, err := ci.Producer().Enqueue(ctx, "orders.eu", []byte("x")); err != nil {
		t.Fatalf("Enqueue(orders.eu) with produce:orders.* = %v", err)
	}
	_, err = ci.Producer().Enqueue(ctx, "billing", []byte("x"))
	if !errors.Is(err, fila.ErrForbidden) {
		t.Fatalf("Enqueue(billing) with produce:orders.* = %v; want ErrForbidden", err)
	}
	_, err = ci.Consumer().Subscribe(ctx, "orders.eu")
	wantErr[*fila.StatusError](t, "Subscribe(orders.eu) without consume", err, fila.ErrForbidden)
	err = ci.Admin().CreateQueue(ctx, fila.NewQueueSpec("orders.us"))
	wantErr[*fila.StatusError](t, "CreateQueue() without admin", err, fila.ErrForbidden)

	// Replace the ACL: consume is granted, produce is gone.
	if err := a.SetACL(ctx, key.ID, fila.Consume("orders.eu"), fila.Admin("orders.*")); err != nil {
		t.Fatalf("SetACL() = %v", err)
	}
	perms, err := a.GetACL(ctx, key.ID)
	if err != nil || len(perms) != 2 || perms[0] != fila.Consume("orders.eu") || perms[1] != fila.Admin("orders.*") {
		t.Fatalf("GetACL() = %v, %v; want consume:orders.eu admin:orders.*", perms, err)
	}
	sub, err := ci.Consumer().Subscribe(ctx, "orders.eu")
	if err != nil {
		t.Fatalf("Subscribe(orders.eu) with consume = %v", err)
	}
	if err := next(t, sub).Ack(ctx); err != nil {
		t.Fatalf("Ack() with consume = %v", err)
	}
	if _, err := ci.Producer().Enqueue(ctx, "orders.eu", []byte("x")); !errors.Is(err, fila.ErrForbidden) {
		t.Fatalf("Enqueue() after produce was removed = %v; want ErrForbidden", err)
	}
	if err := ci.Admin().CreateQueue(ctx, fila.NewQueueSpec("orders.us")); err != nil {
		t.Fatalf("CreateQueue(orders.us) with admin:orders.* = %v", err)
	}

	// Unknown key IDs.
	err = a.SetACL(ctx, "nope", fila.Produce("*"))
	wantErr[*fila.SetACLError](t, "SetACL(nope)", err, fila.ErrAPIKeyNotFound)
	_, err = a.GetACL(ctx, "nope")
	wantErr[*fila.GetACLError](t, "GetACL(nope)", err, fila.ErrAPIKeyNotFound)
	err = a.RevokeAPIKey(ctx, "nope")
	wantErr[*fila.RevokeAPIKeyError](t, "RevokeAPIKey(nope)", err, fila.ErrAPIKeyNotFound)

	// Revocation: the key's next request is unauthorized.
	if err := a.RevokeAPIKey(ctx, key.ID); err != nil {
		t.Fatalf("RevokeAPIKey() = %v", err)
	}
	if _, err := ci.Admin().ListQueues(ctx); !errors.Is(err, fila.ErrUnauthorized) {
		t.Fatalf("ListQueues() with a revoked key = %v; want ErrUnauthorized", err)
	}
}

// TestTLS connects over TLS with a private CA, then with mTLS.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	ca := testbroker.NewCA(t, "fila test CA")
	serverCert, serverKey := ca.Issue(t, dir, "server", "fila.test", "::1")
	clientCert, clientKey := ca.Issue(t, dir, "client")
	caFile := ca.WriteFile(t, dir, "ca.pem")

	t.Run("server", func(t *testing.T) {
		srv := testbroker.Start(t, testbroker.WithEnv("FILA_TLS_CERT_FILE="+serverCert, "FILA_TLS_KEY_FILE="+serverKey))
		c := connect(t, srv.Addr, fila.WithCAFile(caFile), fila.WithServerName("fila.test"))
		if _, err := c.Ping(testCtx(t)); err != nil {
			t.Fatalf("Ping() over TLS = %v", err)
		}
		// The certificate names fila.test, not 127.0.0.1.
		if c, err := fila.Connect(testCtx(t), srv.Addr, fila.WithCAFile(caFile)); err == nil {
			c.Close()
			t.Fatalf("Connect() without the server name = nil error; want a certificate error")
		}
	})
	t.Run("mutual", func(t *testing.T) {
		srv := testbroker.Start(t, testbroker.WithEnv("FILA_TLS_CERT_FILE="+serverCert, "FILA_TLS_KEY_FILE="+serverKey, "FILA_TLS_CLIENT_CA_FILE="+caFile))
		c := connect(t, srv.Addr, fila.WithCAFile(caFile), fila.WithServerName("fila.test"), fila.WithClientCertFile(clientCert, clientKey))
		if _, err := c.Ping(testCtx(t)); err != nil {
			t.Fatalf("Ping() over mTLS = %v", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := fila.Connect(ctx, srv.Addr, fila.WithCAFile(caFile), fila.WithServerName("fila.test")); err == nil {
			_, err = c.Ping(ctx) // TLS 1.3 reports a missing client certificate after the handshake
			c.Close()
			if err == nil {
				t.Fatalf("Ping() without a client certificate = nil error")
			}
		}
	})
	t.Run("bad files", func(t *testing.T) {
		for _, opt := range []fila.Option{
			fila.WithCAFile(filepath.Join(dir, "missing.pem")),
			fila.WithCAFile(serverKey),
			fila.WithClientCertFile(clientCert, filepath.Join(dir, "missing.pem")),
		} {
			if c, err := fila.Connect(testCtx(t), "127.0.0.1:1", opt); err == nil {
				c.Close()
				t.Errorf("Connect() with a bad TLS file = nil error")
			}
		}
	})
}
