package fila_test

import (
	"errors"
	"testing"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
	"github.com/fila-mq/fila/sdk/go/internal/testbroker"
)

// TestSendFanout: a message fanned out to one queue per consumer group
// reaches every group, each copy with its own ID and the message's
// headers and fairness key; a missing queue fails its copy alone.
func TestSendFanout(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	groups := []string{"events.billing", "events.search", "events.audit"}
	for _, g := range groups {
		createQueue(t, c, fila.NewQueueSpec(g))
	}
	m := fila.NewMessage("", []byte("order 42 paid")).FairnessKey("acme").Header("type", "paid")
	res, err := c.Producer().SendFanout(ctx, m, append(groups, "events.nope")...)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 4 || !errors.Is(res[3].Err, fila.ErrQueueNotFound) {
		t.Fatalf("SendFanout results %+v; want 4, the last QUEUE_NOT_FOUND", res)
	}
	ids := map[fila.ID]bool{}
	for i, g := range groups {
		if res[i].Err != nil {
			t.Fatalf("copy to %s: %v", g, res[i].Err)
		}
		ids[res[i].ID] = true
		d := next(t, subscribe(t, c, g))
		if string(d.Payload()) != "order 42 paid" || d.FairnessKey() != "acme" || d.Header("type") != "paid" || d.ID() != res[i].ID {
			t.Fatalf("%s got %q key %q type %q; want the copy with its own ID", g, d.Payload(), d.FairnessKey(), d.Header("type"))
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if len(ids) != 3 {
		t.Fatalf("%d distinct IDs for 3 copies", len(ids))
	}
}

// TestPeekPurgeLease: Peek pages through a queue without leasing, a
// subscription with LeaseTimeout gets its own lease length, and
// PurgeQueue removes what is not leased.
func TestPeekPurgeLease(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("jobs").VisibilityTimeout(30*time.Second))
	for _, p := range []string{"a", "b", "c"} {
		if _, err := c.Producer().Enqueue(ctx, "jobs", []byte(p)); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.Consumer().Subscribe(ctx, "jobs", fila.Prefetch(1), fila.LeaseTimeout(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	d := next(t, sub)
	if until := time.Until(d.LeaseDeadline()); until < 30*time.Minute {
		t.Fatalf("lease ends in %v; want about an hour", until)
	}
	page, err := c.Admin().Peek(ctx, "jobs", fila.PeekCount(2))
	if err != nil || len(page.Messages) != 2 || page.Next != page.Messages[1].ID || page.Messages[0].State != "leased" {
		t.Fatalf("Peek = %+v, %v; want 2 and a next page", page, err)
	}
	page, err = c.Admin().Peek(ctx, "jobs", fila.PeekAfter(page.Next))
	if err != nil || len(page.Messages) != 1 || string(page.Messages[0].Preview) != "c" || page.Next != (fila.ID{}) {
		t.Fatalf("second page = %+v, %v; want c alone", page, err)
	}
	n, err := c.Admin().PurgeQueue(ctx, "jobs")
	if err != nil || n != 2 {
		t.Fatalf("PurgeQueue = %d, %v; want 2", n, err)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatalf("ack of the kept lease: %v", err)
	}
	if _, err := c.Admin().PurgeQueue(ctx, "nope"); !errors.Is(err, fila.ErrQueueNotFound) {
		t.Fatalf("PurgeQueue(nope) = %v; want QUEUE_NOT_FOUND", err)
	}
	if _, err := c.Consumer().Subscribe(ctx, "jobs", fila.LeaseTimeout(100*time.Hour)); !errors.Is(err, fila.ErrInvalidArgument) {
		t.Fatalf("Subscribe with a 100h lease = %v; want INVALID_ARGUMENT", err)
	}
}
