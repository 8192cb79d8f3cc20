package fila_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
	"github.com/fila-mq/fila/sdk/go/internal/testbroker"
)

// statusRecorder collects the events of a status handler. The handler
// never blocks the client for long: the channel holds more events than a
// test produces.
type statusRecorder struct {
	t  *testing.T
	ch chan fila.StatusEvent
}

func newStatusRecorder(t *testing.T) *statusRecorder {
	return &statusRecorder{t: t, ch: make(chan fila.StatusEvent, 4096)}
}

func (r *statusRecorder) handle(ev fila.StatusEvent) { r.ch <- ev }

// until returns the first event of status st, failing the test if the
// handler reports none within a minute. Events of other statuses before
// it are returned too, in order.
func (r *statusRecorder) until(st fila.ConnStatus) (fila.StatusEvent, []fila.StatusEvent) {
	r.t.Helper()
	var before []fila.StatusEvent
	timeout := time.After(time.Minute)
	for {
		select {
		case ev := <-r.ch:
			if ev.Status == st {
				return ev, before
			}
			before = append(before, ev)
		case <-timeout:
			r.t.Fatalf("no %v event in a minute; saw %v", st, before)
		}
	}
}

// TestStatusEventsAcrossReconnect kills the broker under a client with a
// status handler and an open subscription: the handler sees the
// connection lost with a reason, the client dialling again, and the
// connection back once the broker restarts; the subscription waits
// through the outage and delivers again after it; Close ends with
// StatusClosed, the last event.
func TestStatusEventsAcrossReconnect(t *testing.T) {
	srv := testbroker.Start(t)
	rec := newStatusRecorder(t)
	c := connect(t, srv.Addr, fila.WithReconnect(10*time.Millisecond, 200*time.Millisecond), fila.WithStatusHandler(rec.handle))
	ctx := testCtx(t)
	if got := c.Status(); got != fila.StatusConnected {
		t.Fatalf("Status() after Connect = %v; want connected", got)
	}
	if ev, before := rec.until(fila.StatusConnected); ev.Addr != srv.Addr || ev.Err != nil || len(before) > 0 {
		t.Fatalf("first events %v then %+v; want connected to %s", before, ev, srv.Addr)
	}
	createQueue(t, c, fila.NewQueueSpec("jobs"))
	sub := subscribe(t, c, "jobs")

	srv.Kill()
	lost, before := rec.until(fila.StatusDisconnected)
	if len(before) > 0 {
		t.Errorf("events before the disconnection: %v", before)
	}
	if lost.Addr != srv.Addr || !errors.Is(lost.Err, fila.ErrConnectionLost) {
		t.Fatalf("disconnected event %+v; want %s and an error wrapping ErrConnectionLost", lost, srv.Addr)
	}
	t.Logf("disconnected: %v", lost.Err)
	// The subscription needs the node, so the client dials it again; the
	// broker is down, so it is not connected.
	if ev, _ := rec.until(fila.StatusReconnecting); ev.Addr != srv.Addr || ev.Err != nil {
		t.Fatalf("reconnecting event %+v; want %s without an error", ev, srv.Addr)
	}
	if got := c.Status(); got != fila.StatusReconnecting && got != fila.StatusDisconnected {
		t.Fatalf("Status() with the broker down = %v; want reconnecting or disconnected", got)
	}
	// Meanwhile the subscription has not ended: it delivers nothing.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err := sub.Next(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next() with the broker down = %v; want the context's deadline (the subscription waits)", err)
	}
	if err := sub.Err(); err != nil {
		t.Fatalf("Err() with the broker down = %v; want nil", err)
	}

	srv.Restart(t)
	ev, outage := rec.until(fila.StatusConnected)
	if ev.Addr != srv.Addr || ev.Err != nil {
		t.Fatalf("connected event %+v; want %s", ev, srv.Addr)
	}
	for _, o := range outage {
		switch {
		case o.Status == fila.StatusReconnecting && o.Err == nil:
		case o.Status == fila.StatusDisconnected && o.Err != nil:
		default:
			t.Errorf("event during the outage %+v; want reconnecting, or disconnected with a reason", o)
		}
	}
	if got := c.Status(); got != fila.StatusConnected {
		t.Fatalf("Status() after the restart = %v; want connected", got)
	}

	// The subscription resumed on the new connection.
	if _, err := c.Producer().Enqueue(ctx, "jobs", []byte("after")); err != nil {
		t.Fatalf("Enqueue() after restart = %v", err)
	}
	if d := next(t, sub); string(d.Payload()) != "after" {
		t.Fatalf("delivery after restart %q; want after", d.Payload())
	} else if err := d.Ack(ctx); err != nil {
		t.Fatalf("Ack() after restart = %v", err)
	}

	if err := sub.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if got := c.Status(); got != fila.StatusClosed {
		t.Fatalf("Status() after Close = %v; want closed", got)
	}
	closed, rest := rec.until(fila.StatusClosed)
	if closed.Err != nil || closed.Addr != "" || len(rest) > 0 {
		t.Fatalf("events %v then %+v; want closed without an error", rest, closed)
	}
	// StatusClosed is the last event: the handler's goroutine has exited.
	select {
	case ev := <-rec.ch:
		t.Fatalf("event after closed: %+v", ev)
	default:
	}
}

// TestStatusWithoutReconnect: with reconnection off, a lost connection
// is reported, then the client's end with the reason; its subscription
// ends with an error wrapping ErrConnectionLost, from Next as from
// Messages.
func TestStatusWithoutReconnect(t *testing.T) {
	srv := testbroker.Start(t)
	rec := newStatusRecorder(t)
	c := connect(t, srv.Addr, fila.WithoutReconnect(), fila.WithStatusHandler(rec.handle))
	ctx := testCtx(t)
	rec.until(fila.StatusConnected)
	createQueue(t, c, fila.NewQueueSpec("jobs"))
	sub := subscribe(t, c, "jobs")

	srv.Kill()
	if _, err := sub.Next(ctx); !errors.Is(err, fila.ErrConnectionLost) {
		t.Fatalf("Next() after kill = %v; want ErrConnectionLost", err)
	}
	n := 0
	for d, err := range sub.Messages(ctx) {
		n++
		if d != nil || !errors.Is(err, fila.ErrConnectionLost) {
			t.Fatalf("Messages() after kill yielded %v, %v; want ErrConnectionLost", d, err)
		}
	}
	if n != 1 {
		t.Fatalf("Messages() after kill yielded %d times; want once, the error", n)
	}
	if err := sub.Err(); !errors.Is(err, fila.ErrConnectionLost) {
		t.Fatalf("Err() after kill = %v; want ErrConnectionLost", err)
	}

	lost, before := rec.until(fila.StatusDisconnected)
	if len(before) > 0 || lost.Addr != srv.Addr || !errors.Is(lost.Err, fila.ErrConnectionLost) {
		t.Fatalf("events %v then %+v; want disconnected from %s, wrapping ErrConnectionLost", before, lost, srv.Addr)
	}
	closed, before := rec.until(fila.StatusClosed)
	if len(before) > 0 || !errors.Is(closed.Err, fila.ErrConnectionLost) {
		t.Fatalf("events %v then %+v; want closed, wrapping ErrConnectionLost", before, closed)
	}
	if got := c.Status(); got != fila.StatusClosed {
		t.Fatalf("Status() after the client ended = %v; want closed", got)
	}
	if _, err := c.Ping(ctx); !errors.Is(err, fila.ErrClosed) {
		t.Fatalf("Ping() after the client ended = %v; want ErrClosed", err)
	}
}

// TestStatusHandlerNotCalledWhenConnectFails: a client that never
// connected reports nothing.
func TestStatusHandlerNotCalledWhenConnectFails(t *testing.T) {
	rec := newStatusRecorder(t)
	refuse := func(context.Context, string) (net.Conn, error) { return nil, errors.New("no route") }
	c, err := fila.Connect(testCtx(t), "fila.invalid:5555", fila.WithDialer(refuse), fila.WithStatusHandler(rec.handle))
	if err == nil {
		c.Close()
		t.Fatalf("Connect() through a failing dialer = nil error")
	}
	select {
	case ev := <-rec.ch:
		t.Fatalf("event from a client that never connected: %+v", ev)
	default:
	}
}
