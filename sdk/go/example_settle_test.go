package fila_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	fila "github.com/fila-mq/fila/sdk/go"
)

// A delivery that failed is nacked with a reason: the queue's policy
// retries it with backoff, then dead-letters it, and the reason becomes
// its fila-error header in the dead-letter queue.
func ExampleDelivery_Nack() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	spec := fila.NewQueueSpec("reports").MaxAttempts(2).Backoff(time.Millisecond, time.Millisecond)
	if err := client.Admin().CreateQueue(ctx, spec); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Producer().Enqueue(ctx, "reports", []byte("report-42")); err != nil {
		log.Fatal(err)
	}

	sub, err := client.Consumer().Subscribe(ctx, "reports")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)
	for range 2 {
		d, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		if err := d.Nack(ctx, "upstream timeout"); err != nil {
			log.Fatal(err)
		}
		fmt.Println("attempt", d.Attempt(), "nacked")
	}

	dlq, err := client.Consumer().Subscribe(ctx, "reports.dlq")
	if err != nil {
		log.Fatal(err)
	}
	defer dlq.Close(ctx)
	d, err := dlq.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("dead-lettered %s after %s attempts: %s\n", d.Payload(), d.Header("fila-attempts"), d.Header("fila-error"))
	if err := d.Ack(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1 nacked
	// attempt 2 nacked
	// dead-lettered report-42 after 2 attempts: upstream timeout
}

// A consumer that knows when to try again (a rate-limited API said so)
// fails the delivery with its own delay instead of the queue's backoff.
// The attempt counts toward the queue's limit.
func ExampleDelivery_RetryAfter() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if err := client.Admin().CreateQueue(ctx, fila.NewQueueSpec("webhook-calls")); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Producer().Enqueue(ctx, "webhook-calls", []byte("POST /hooks/7")); err != nil {
		log.Fatal(err)
	}

	sub, err := client.Consumer().Subscribe(ctx, "webhook-calls")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)
	d, err := sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// The API answered 429 Too Many Requests: try again in a moment.
	if err := d.RetryAfter(ctx, 200*time.Millisecond); err != nil {
		log.Fatal(err)
	}
	fmt.Println("attempt", d.Attempt(), "retried later")

	d, err = sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("attempt", d.Attempt(), string(d.Payload()))
	if err := d.Ack(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// attempt 1 retried later
	// attempt 2 POST /hooks/7
}

// Long work keeps its lease alive with ExtendLease; an extension past the
// broker's max_lease_extension (12h by default) is refused and leaves the
// deadline as it was.
func ExampleDelivery_ExtendLease() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	spec := fila.NewQueueSpec("transcodes").VisibilityTimeout(30 * time.Second)
	if err := client.Admin().CreateQueue(ctx, spec); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Producer().Enqueue(ctx, "transcodes", []byte("movie.mkv")); err != nil {
		log.Fatal(err)
	}

	sub, err := client.Consumer().Subscribe(ctx, "transcodes")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)
	d, err := sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	before := d.LeaseDeadline()
	deadline, err := d.ExtendLease(ctx, 10*time.Minute)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("extended:", deadline.After(before), deadline.Equal(d.LeaseDeadline()))

	_, err = d.ExtendLease(ctx, 24*time.Hour)
	code, _ := fila.CodeOf(err)
	fmt.Println("a day:", code, errors.Is(err, fila.ErrInvalidArgument), deadline.Equal(d.LeaseDeadline()))
	if err := d.Ack(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// extended: true true
	// a day: INVALID_ARGUMENT true true
}

// A consumer that will not process a delivery (it is shutting down) gives
// it back: it is ready again at once, and its attempt is not counted.
func ExampleDelivery_Release() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if err := client.Admin().CreateQueue(ctx, fila.NewQueueSpec("exports")); err != nil {
		log.Fatal(err)
	}
	if _, err := client.Producer().Enqueue(ctx, "exports", []byte("export-9")); err != nil {
		log.Fatal(err)
	}

	sub, err := client.Consumer().Subscribe(ctx, "exports")
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)
	d, err := sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	if err := d.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released", string(d.Payload()), "attempt", d.Attempt())

	d, err = sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("delivered", string(d.Payload()), "attempt", d.Attempt())
	if err := d.Ack(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// released export-9 attempt 1
	// delivered export-9 attempt 1
}

// AckAll acks what it can: a delivery the broker could not ack (here one
// already released) fails alone, as an *AckError in the joined error,
// and the others are acked.
func ExampleConsumer_AckAll_partial() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	if err := client.Admin().CreateQueue(ctx, fila.NewQueueSpec("invoices-eu")); err != nil {
		log.Fatal(err)
	}
	for _, p := range []string{"INV-1", "INV-2", "INV-3"} {
		if _, err := client.Producer().Enqueue(ctx, "invoices-eu", []byte(p)); err != nil {
			log.Fatal(err)
		}
	}

	sub, err := client.Consumer().Subscribe(ctx, "invoices-eu", fila.Prefetch(3))
	if err != nil {
		log.Fatal(err)
	}
	defer sub.Close(ctx)
	var ds []*fila.Delivery
	for range 3 {
		d, err := sub.Next(ctx)
		if err != nil {
			log.Fatal(err)
		}
		ds = append(ds, d)
	}
	if err := ds[1].Release(ctx); err != nil { // its lease ends
		log.Fatal(err)
	}

	err = client.Consumer().AckAll(ctx, ds)
	var e *fila.AckError
	if errors.As(err, &e) {
		fmt.Println("not acked:", e.Code, errors.Is(err, fila.ErrLeaseExpired))
	}
	// The released message is delivered again; the others are gone.
	d, err := sub.Next(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("again:", string(d.Payload()))
	if err := d.Ack(ctx); err != nil {
		log.Fatal(err)
	}
	// Output:
	// not acked: LEASE_EXPIRED true
	// again: INV-2
}

// An error's protocol code is read with errors.As, from the operation's
// own error type (whose Code lists only the operation's codes) or from
// *StatusError, or with CodeOf from any of them, as a Code to compare with
// the package's constants.
func ExampleCodeOf() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	client, err := fila.Connect(ctx, addr)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()

	_, err = client.Admin().QueueStats(ctx, "no-such-queue")
	var qe *fila.QueueStatsError
	if errors.As(err, &qe) {
		fmt.Println("QueueStatsError:", qe.Code, qe.Code == fila.QueueStatsQueueNotFound, qe.Target)
	}
	code, ok := fila.CodeOf(err)
	fmt.Println("CodeOf:", code, ok, code == fila.CodeQueueNotFound)

	// A failure any operation may meet is a *StatusError.
	err = client.Admin().CreateQueue(ctx, fila.NewQueueSpec(""))
	var se *fila.StatusError
	if errors.As(err, &se) {
		fmt.Println("StatusError:", se.Code, se.Code == fila.CodeInvalidArgument)
	}
	switch code, _ := fila.CodeOf(err); code {
	case fila.CodeInvalidArgument:
		fmt.Println("fix the request")
	case fila.CodeUnavailable, fila.CodeNotLeader:
		fmt.Println("try again later")
	}

	// A call that never reached the broker has no code.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = client.Ping(cancelled)
	_, ok = fila.CodeOf(err)
	fmt.Println("cancelled:", ok)
	// Output:
	// QueueStatsError: QUEUE_NOT_FOUND true no-such-queue
	// CodeOf: QUEUE_NOT_FOUND true true
	// StatusError: INVALID_ARGUMENT true
	// fix the request
	// cancelled: false
}

// A status handler follows the connection: connected, disconnected with
// the reason, reconnecting, and closed at the end.
func ExampleWithStatusHandler() {
	ctx := context.Background()
	addr := cmp.Or(os.Getenv("FILA_ADDR"), "localhost:5555")
	events := make(chan fila.StatusEvent, 16)
	client, err := fila.Connect(ctx, addr, fila.WithStatusHandler(func(ev fila.StatusEvent) {
		events <- ev // the handler runs on a goroutine of its own
	}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", client.Status())
	fmt.Println("event:", (<-events).Status)

	client.Close()
	fmt.Println("status:", client.Status())
	ev := <-events
	fmt.Println("event:", ev.Status, ev.Err)
	// Output:
	// status: connected
	// event: connected
	// status: closed
	// event: closed <nil>
}
