// Package e2e tests a real fila-server process through the Go SDK and raw
// sockets: fairness, durability across kill -9, lease expiry, bad input.
package e2e

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

func connect(t *testing.T, addr string, opts ...fila.Option) *fila.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := fila.Connect(ctx, addr, opts...)
	if err != nil {
		t.Fatalf("Connect(%s) = %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestFairShareAcrossKeys enqueues 10,000 messages over three fairness keys
// with weights 1, 1 and 2 from two concurrent producers, then consumes them
// all: every ID is delivered exactly once, and over the first 2,000
// deliveries (every key still backlogged) each key's share is within 2
// percentage points of weight / total weight.
func TestFairShareAcrossKeys(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 3*time.Minute)
	admin := connect(t, srv.Addr).Admin()
	if err := admin.CreateQueue(ctx, fila.NewQueueSpec("jobs")); err != nil {
		t.Fatal(err)
	}

	keys := []struct {
		name   string
		weight uint32
	}{{"a", 1}, {"b", 1}, {"c", 2}}
	const total = 10000
	ids := make(map[fila.ID]string, total)
	var mu sync.Mutex
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for p := 0; p < 2; p++ {
		prod := connect(t, srv.Addr).Producer()
		wg.Add(1)
		go func(p int) {
			defer wg.Done()
			// Each producer sends half, in batches, cycling through the keys.
			for start := p; start < total; start += 200 {
				var batch []*fila.Message
				var bkeys []string
				for i := start; i < start+200 && i < total; i += 2 {
					k := keys[i%3]
					// 1 KiB payloads: about one message per weight unit per
					// round at the default quantum (docs/concepts.md).
					payload := make([]byte, 1024)
					copy(payload, fmt.Sprintf("msg-%05d", i))
					batch = append(batch, fila.NewMessage("jobs", payload).FairnessKey(k.name).Weight(k.weight))
					bkeys = append(bkeys, k.name)
				}
				res, err := prod.SendBatch(ctx, batch)
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for i, r := range res {
					if r.Err != nil {
						mu.Unlock()
						errs <- r.Err
						return
					}
					ids[r.ID] = bkeys[i]
				}
				mu.Unlock()
			}
		}(p)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(ids) != total {
		t.Fatalf("%d distinct IDs enqueued; want %d", len(ids), total)
	}

	cons := connect(t, srv.Addr).Consumer()
	sub, err := cons.Subscribe(ctx, "jobs", fila.Prefetch(100))
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[fila.ID]bool, total)
	count := map[string]int{}
	n := 0
	for d, err := range sub.Messages(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if seen[d.ID()] {
			t.Fatalf("message %s delivered twice", d.ID())
		}
		key, ok := ids[d.ID()]
		if !ok {
			t.Fatalf("unknown message %s delivered", d.ID())
		}
		if key != d.FairnessKey() {
			t.Fatalf("message %s delivered with fairness key %q; enqueued with %q", d.ID(), d.FairnessKey(), key)
		}
		seen[d.ID()] = true
		if n < 2000 {
			count[key]++
		}
		n++
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if n == 2000 {
			for _, k := range keys {
				share := float64(count[k.name]) / 2000
				want := float64(k.weight) / 4
				t.Logf("key %s weight %d: %d of the first 2000 deliveries (%.1f%%, entitled %.1f%%)", k.name, k.weight, count[k.name], 100*share, 100*want)
				if math.Abs(share-want) > 0.02 {
					t.Errorf("key %s share %.3f over the first 2000 deliveries; want %.3f ± 0.02", k.name, share, want)
				}
			}
		}
		if n == total {
			break
		}
	}
	if len(seen) != total {
		t.Fatalf("%d messages delivered; want %d", len(seen), total)
	}
}

// TestCrashRecovery enqueues messages, acks some, kills the server with
// SIGKILL and restarts it on the same data: every unacked message is
// delivered again, no acked one is.
func TestCrashRecovery(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("orders")); err != nil {
		t.Fatal(err)
	}
	const n = 500
	var all []fila.ID
	for i := 0; i < n; i += 50 {
		var batch []*fila.Message
		for j := i; j < i+50; j++ {
			batch = append(batch, fila.NewMessage("orders", []byte(fmt.Sprint(j))).FairnessKey(fmt.Sprint("t", j%7)))
		}
		res, err := c.Producer().SendBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
			all = append(all, r.ID)
		}
	}
	// Ack 200 of them.
	sub, err := c.Consumer().Subscribe(ctx, "orders", fila.Prefetch(50))
	if err != nil {
		t.Fatal(err)
	}
	acked := map[fila.ID]bool{}
	for d, err := range sub.Messages(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		acked[d.ID()] = true
		if len(acked) == 200 {
			break
		}
	}
	// Done with it: left open, the client would subscribe it again after
	// the restart, and it would keep taking messages that nobody reads
	// (their leases expire and give its credit back).
	if err := sub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	srv.Restart(t)

	c2 := connect(t, srv.Addr)
	sub2, err := c2.Consumer().Subscribe(ctx, "orders", fila.Prefetch(50))
	if err != nil {
		t.Fatal(err)
	}
	got := map[fila.ID]bool{}
	want := n - len(acked)
	for d, err := range sub2.Messages(ctx) {
		if err != nil {
			t.Fatal(err)
		}
		if acked[d.ID()] {
			t.Fatalf("acked message %s delivered after the crash", d.ID())
		}
		if got[d.ID()] {
			t.Fatalf("message %s delivered twice after the crash", d.ID())
		}
		got[d.ID()] = true
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
		if len(got) == want {
			break
		}
	}
	for _, id := range all {
		if !acked[id] && !got[id] {
			t.Errorf("unacked message %s lost in the crash", id)
		}
	}
	// Nothing else arrives.
	qs, err := c2.Admin().ListQueues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "orders" && q.Ready+q.Leased+q.Delayed != 0 {
			t.Errorf("queue still holds %d ready, %d leased, %d delayed", q.Ready, q.Leased, q.Delayed)
		}
	}
}

// TestLeaseExpiryRedelivers leaves a delivery unacked past a 1s visibility
// timeout: it is delivered again, to another consumer, as attempt 2, and
// the first consumer's late ack fails with LEASE_EXPIRED.
func TestLeaseExpiryRedelivers(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("slow").VisibilityTimeout(time.Second)); err != nil {
		t.Fatal(err)
	}
	id, err := c.Producer().Enqueue(ctx, "slow", []byte("work"))
	if err != nil {
		t.Fatal(err)
	}
	first := connect(t, srv.Addr).Consumer()
	sub1, err := first.Subscribe(ctx, "slow", fila.Prefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	d1 := <-sub1.C()
	if d1.ID() != id || d1.Attempt() != 1 {
		t.Fatalf("first delivery %s attempt %d; want %s attempt 1", d1.ID(), d1.Attempt(), id)
	}
	// A second consumer waits; the first never acks.
	second := connect(t, srv.Addr).Consumer()
	sub2, err := second.Subscribe(ctx, "slow", fila.Prefetch(1))
	if err != nil {
		t.Fatal(err)
	}
	var d2 *fila.Delivery
	select {
	case d2 = <-sub2.C():
	case <-ctx.Done():
		t.Fatal("message not redelivered after its lease expired")
	}
	if d2.ID() != id || d2.Attempt() != 2 {
		t.Fatalf("redelivery %s attempt %d; want %s attempt 2", d2.ID(), d2.Attempt(), id)
	}
	if err := d1.Ack(ctx); !errors.Is(err, fila.ErrLeaseExpired) {
		t.Fatalf("late ack by the first consumer = %v; want LEASE_EXPIRED", err)
	}
	var ae *fila.AckError
	if err := d1.Ack(ctx); !errors.As(err, &ae) || ae.Code != fila.AckLeaseExpired {
		t.Fatalf("late ack = %T %v; want *AckError LEASE_EXPIRED", err, err)
	}
	if err := d2.Ack(ctx); err != nil {
		t.Fatalf("ack by the second consumer = %v", err)
	}
}

// TestBadInputClosesOnlyThatConnection sends garbage, and a header claiming
// a 4 GiB frame: each gets an Error frame and a closed connection, the
// server does not allocate the claimed size, and other clients go on.
func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, time.Minute)
	good := connect(t, srv.Addr)
	if err := good.Admin().CreateQueue(ctx, fila.NewQueueSpec("q")); err != nil {
		t.Fatal(err)
	}
	rssBefore, err := srv.RSS()
	if err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name  string
		bytes []byte
		code  wire.Code
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), 0},
		{"4 GiB length", wire.AppendHeader(nil, wire.Header{Length: math.MaxUint32, Opcode: wire.OpEnqueue, RequestID: 1}), wire.CodeFrameTooLarge},
		{"4 GiB length after handshake", append(
			wire.AppendFrame(nil, 1, &wire.Handshake{MaxVersion: 1, MinVersion: 1}),
			wire.AppendHeader(nil, wire.Header{Length: math.MaxUint32, Opcode: wire.OpEnqueue, RequestID: 2})...), wire.CodeFrameTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nc, err := net.DialTimeout("tcp", srv.Addr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			if _, err := nc.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			data, err := io.ReadAll(nc)
			if err != nil {
				t.Fatalf("read until close: %v (got %x)", err, data)
			}
			fr := wire.NewFrameReader(0, 0)
			fr.Feed(data)
			var last *wire.ErrorFrame
			for {
				h, body, ok, err := fr.Next()
				if err != nil || !ok {
					break
				}
				if h.Opcode == wire.OpError {
					var ef wire.ErrorFrame
					if err := ef.Decode(body); err != nil {
						t.Fatal(err)
					}
					last = &ef
				}
			}
			if last == nil {
				t.Fatalf("no Error frame before close; got %x", data)
			}
			if tc.code != 0 && last.Code != tc.code {
				t.Fatalf("Error code %v (%s); want %v", last.Code, last.Message, tc.code)
			}
			t.Logf("server answered %v: %s", last.Code, last.Message)
		})
	}

	// The good client is unaffected.
	if _, err := good.Producer().Enqueue(ctx, "q", []byte("still here")); err != nil {
		t.Fatalf("enqueue after bad clients = %v", err)
	}
	rssAfter, err := srv.RSS()
	if err != nil {
		t.Fatal(err)
	}
	if grown := rssAfter - rssBefore; grown > 64<<20 {
		t.Errorf("server RSS grew by %d MiB after a 4 GiB length claim", grown>>20)
	}
}

// TestDisconnectReleasesLeases closes a consumer's connection while it
// holds an unacked delivery, gracefully and by a dropped socket: either
// way the message goes to another consumer at once, its attempt counted,
// long before its one-hour visibility timeout.
func TestDisconnectReleasesLeases(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("held").VisibilityTimeout(time.Hour)); err != nil {
		t.Fatal(err)
	}
	id, err := c.Producer().Enqueue(ctx, "held", []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	attempt := uint32(1)
	var dropped net.Conn
	take := func(dial func(context.Context, string) (net.Conn, error)) *fila.Client {
		t.Helper()
		cl, err := fila.Connect(ctx, srv.Addr, fila.WithDialer(dial), fila.WithoutReconnect())
		if err != nil {
			t.Fatal(err)
		}
		sub, err := cl.Consumer().Subscribe(ctx, "held", fila.Prefetch(1))
		if err != nil {
			t.Fatal(err)
		}
		if d := recv(t, ctx, sub); d.ID() != id || d.Attempt() != attempt {
			t.Fatalf("delivered %s attempt %d; want %s attempt %d", d.ID(), d.Attempt(), id, attempt)
		}
		attempt++
		return cl
	}
	tcp := func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		dropped = nc
		return nc, err
	}
	take(tcp).Close() // graceful: GoAway, then close
	cl := take(tcp)
	dropped.Close() // the socket drops under the client
	defer cl.Close()
	take(tcp).Close()
}
