package e2e

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/filatest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// waitStats polls a queue's stats until ok accepts them, failing the test
// when ctx ends first.
func waitStats(t *testing.T, ctx context.Context, a *fila.Administrator, queue string, ok func(*fila.QueueStats) bool) *fila.QueueStats {
	t.Helper()
	for {
		st, err := a.QueueStats(ctx, queue)
		if err != nil {
			t.Fatal(err)
		}
		if ok(st) {
			return st
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%s: stats never as wanted; last %+v", queue, st)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// TestMessageTTL: a queue's message TTL, and a message's own TTL, expire
// messages not delivered in time: dead-lettered with fila-error "expired"
// by default, dropped by a queue that says so; the expiries are counted
// in the queue's stats and /metrics. Out-of-range TTLs are refused.
func TestMessageTTL(t *testing.T) {
	srv, base := httpServer(t, "127.0.0.1")
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	a := c.Admin()
	if err := a.CreateQueue(ctx, fila.NewQueueSpec("quotes").MessageTTL(200*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if err := a.CreateQueue(ctx, fila.NewQueueSpec("ticks").MessageTTL(time.Hour).ExpiredAction(fila.ExpireDrop)); err != nil {
		t.Fatal(err)
	}
	enqueueMany(t, ctx, c.Producer(), 3, func(i int) *fila.Message {
		switch i {
		case 0:
			return fila.NewMessage("quotes", []byte("stale")) // the queue's 200ms
		case 1:
			return fila.NewMessage("quotes", []byte("fresh")).TTL(time.Hour)
		}
		return fila.NewMessage("ticks", []byte("tick")).TTL(100 * time.Millisecond)
	})

	st := waitStats(t, ctx, a, "quotes", func(st *fila.QueueStats) bool { return st.MessagesExpired == 1 })
	if st.MessageTTL != 200*time.Millisecond || st.ExpiredAction != fila.ExpireDeadLetter || st.Ready != 1 || st.DeadLettered != 1 {
		t.Errorf("quotes: ttl %v, action %q, ready %d, dead-lettered %d; want 200ms, dead-letter, 1, 1", st.MessageTTL, st.ExpiredAction, st.Ready, st.DeadLettered)
	}
	st = waitStats(t, ctx, a, "ticks", func(st *fila.QueueStats) bool { return st.MessagesExpired == 1 })
	if st.ExpiredAction != fila.ExpireDrop || st.Ready != 0 || st.DeadLettered != 0 {
		t.Errorf("ticks: action %q, ready %d, dead-lettered %d; want drop, 0, 0", st.ExpiredAction, st.Ready, st.DeadLettered)
	}

	dlq, err := c.Consumer().Subscribe(ctx, "quotes.dlq")
	if err != nil {
		t.Fatal(err)
	}
	if d := recv(t, ctx, dlq); string(d.Payload()) != "stale" || d.Header("fila-error") != "expired" {
		t.Errorf("quotes.dlq: %q with fila-error %q; want \"stale\" with \"expired\"", d.Payload(), d.Header("fila-error"))
	}
	sub, err := c.Consumer().Subscribe(ctx, "quotes")
	if err != nil {
		t.Fatal(err)
	}
	if d := recv(t, ctx, sub); string(d.Payload()) != "fresh" {
		t.Errorf("quotes: %q; want \"fresh\"", d.Payload())
	}

	fams := scrape(t, base)
	for _, q := range []string{"quotes", "ticks"} {
		if v, ok := value(fams, "fila_queue_messages_expired_total", "queue="+q); !ok || v != 1 {
			t.Errorf("fila_queue_messages_expired_total{queue=%s} = %v (present %v); want 1", q, v, ok)
		}
	}

	res, err := c.Producer().SendBatch(ctx, []*fila.Message{fila.NewMessage("quotes", []byte("x")).TTL(31 * 24 * time.Hour)})
	if err != nil || !errors.Is(res[0].Err, fila.ErrInvalidArgument) {
		t.Errorf("enqueue with a 31-day TTL: %v, %v; want INVALID_ARGUMENT", err, res[0].Err)
	}
	if err := a.CreateQueue(ctx, fila.NewQueueSpec("bad").ExpiredAction("keep")); !errors.Is(err, fila.ErrInvalidArgument) {
		t.Errorf("create queue with expired action keep: %v; want INVALID_ARGUMENT", err)
	}
}

// TestPriorityAcrossRestart: within a fairness key, higher priorities are
// delivered first, FIFO within one, and priorities and TTLs survive a
// restart of the broker.
func TestPriorityAcrossRestart(t *testing.T) {
	srv := filatest.Start(t)
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("jobs")); err != nil {
		t.Fatal(err)
	}
	sent := []*fila.Message{
		fila.NewMessage("jobs", []byte("low")).Priority(0),
		fila.NewMessage("jobs", []byte("mid-1")),
		fila.NewMessage("jobs", []byte("high")).Priority(9),
		fila.NewMessage("jobs", []byte("mid-2")).Priority(4).TTL(time.Hour),
		fila.NewMessage("jobs", []byte("gone")).TTL(100 * time.Millisecond),
	}
	if _, err := c.Producer().SendBatch(ctx, sent); err != nil {
		t.Fatal(err)
	}
	res, err := c.Producer().SendBatch(ctx, []*fila.Message{fila.NewMessage("jobs", []byte("x")).Priority(10)})
	if err != nil || !errors.Is(res[0].Err, fila.ErrInvalidArgument) {
		t.Errorf("enqueue with priority 10: %v, %v; want INVALID_ARGUMENT", err, res[0].Err)
	}
	c.Close()
	srv.Kill()
	srv.Restart(t)

	c = connect(t, srv.Addr)
	waitStats(t, ctx, c.Admin(), "jobs", func(st *fila.QueueStats) bool { return st.MessagesExpired == 1 })
	sub, err := c.Consumer().Subscribe(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"high", "mid-1", "mid-2", "low"} {
		d := recv(t, ctx, sub)
		if string(d.Payload()) != want {
			t.Fatalf("delivered %q; want %q (high, then the default priority in order, then low)", d.Payload(), want)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
