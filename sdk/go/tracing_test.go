package fila_test

import (
	"testing"

	fila "github.com/fila-mq/fila/sdk/go"
	"github.com/fila-mq/fila/sdk/go/internal/testbroker"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// TestTracing: with WithTracing, a Send's producer span is a child of the
// caller's span and its context travels in the traceparent header; the
// delivery's consumer span is its child, linked to it, ended by the Ack;
// the application's Message is left as it was.
func TestTracing(t *testing.T) {
	srv := testbroker.Start(t)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c := connect(t, srv.Addr, fila.WithTracing(tp))
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("traced"))
	sub := subscribe(t, c, "traced")

	pctx, parent := tp.Tracer("app").Start(ctx, "handle request")
	msg := fila.NewMessage("traced", []byte("x")).Header("app", "1").FairnessKey("tenant-a")
	id, err := c.Producer().Send(pctx, msg)
	if err != nil {
		t.Fatal(err)
	}
	parent.End()
	d := next(t, sub)
	if d.Header("traceparent") == "" || d.Header("app") != "1" {
		t.Fatalf("delivered headers %v; want app and traceparent", d.Headers())
	}
	// The application's own span under the delivery's context.
	_, work := tp.Tracer("app").Start(d.Context(ctx), "work")
	work.End()
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
	// A second settle does not end the span again.
	d.Ack(ctx)

	spans := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		if _, dup := spans[s.Name()]; dup {
			t.Errorf("span %q ended twice", s.Name())
		}
		spans[s.Name()] = s
	}
	send, process := spans["send traced"], spans["process traced"]
	if send == nil || process == nil || spans["work"] == nil {
		t.Fatalf("spans ended: %v; want send, process and work", spans)
	}
	if send.Parent().SpanID() != parent.SpanContext().SpanID() || send.SpanKind() != trace.SpanKindProducer {
		t.Errorf("send span: parent %v kind %v; want the caller's span, producer", send.Parent().SpanID(), send.SpanKind())
	}
	if want := "00-" + send.SpanContext().TraceID().String() + "-" + send.SpanContext().SpanID().String() + "-01"; d.Header("traceparent") != want {
		t.Errorf("traceparent %q; want %q", d.Header("traceparent"), want)
	}
	attrs := map[string]string{}
	for _, kv := range send.Attributes() {
		attrs[string(kv.Key)] = kv.Value.String()
	}
	if attrs["messaging.message.id"] != id.String() || attrs["messaging.destination.name"] != "traced" || attrs["fila.fairness_key"] != "tenant-a" {
		t.Errorf("send span attributes %v", attrs)
	}
	if process.Parent().SpanID() != send.SpanContext().SpanID() || process.SpanKind() != trace.SpanKindConsumer {
		t.Errorf("process span: parent %v kind %v; want the send span, consumer", process.Parent().SpanID(), process.SpanKind())
	}
	if l := process.Links(); len(l) != 1 || l[0].SpanContext.SpanID() != send.SpanContext().SpanID() {
		t.Errorf("process span links %v; want the send span", l)
	}
	if spans["work"].Parent().SpanID() != process.SpanContext().SpanID() {
		t.Error("the application's span under Delivery.Context is not a child of the process span")
	}
	// Sending the same Message again gets a new producer span: its
	// headers were not changed by the first Send.
	if _, err := c.Producer().Send(ctx, msg); err != nil {
		t.Fatal(err)
	}
	d2 := next(t, sub)
	if d2.Header("traceparent") == d.Header("traceparent") {
		t.Error("the second Send of the Message reused the first's traceparent: Send changed the application's Message")
	}
	d2.Ack(ctx)
}

// TestDeliveryContextWithoutTracing: a client without WithTracing still
// hands the producer's context to the application through
// Delivery.Context, and starts no spans.
func TestDeliveryContextWithoutTracing(t *testing.T) {
	srv := testbroker.Start(t)
	c := connect(t, srv.Addr)
	ctx := testCtx(t)
	createQueue(t, c, fila.NewQueueSpec("plain"))
	sub := subscribe(t, c, "plain")
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	if _, err := c.Producer().Send(ctx, fila.NewMessage("plain", nil).Header("traceparent", tp)); err != nil {
		t.Fatal(err)
	}
	d := next(t, sub)
	sc := trace.SpanContextFromContext(d.Context(ctx))
	if sc.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" || sc.SpanID().String() != "00f067aa0ba902b7" || !sc.IsRemote() {
		t.Errorf("Delivery.Context span context %v; want the producer's, remote", sc)
	}
	if err := d.Ack(ctx); err != nil {
		t.Fatal(err)
	}
}
