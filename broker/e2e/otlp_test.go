package e2e

import (
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/fila-mq/fila/broker/filatest"
	"github.com/fila-mq/fila/broker/internal/otlptest"
	fila "github.com/fila-mq/fila/sdk/go"
)

// OTLP export of a real fila-server to a receiver started here: the
// metrics arrive by name with their values, and a message sent by a
// tracing client gets the broker's enqueue, deliver and ack spans in the
// producer's trace, between the SDK's send and process spans.

// waitFor polls cond until it holds or the timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestOTLPMetricsAndTraces(t *testing.T) {
	recv := otlptest.Start()
	defer recv.Close()
	srv := filatest.Start(t, filatest.WithEnv(
		"FILA_TELEMETRY_OTLP_ENDPOINT="+recv.URL,
		"FILA_TELEMETRY_OTLP_INTERVAL=200ms",
		"FILA_TELEMETRY_TRACE_SAMPLE_RATIO=0", // only the traced client's messages
	))
	ctx := ctxT(t, 2*time.Minute)
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	c := connect(t, srv.Addr, fila.WithTracing(tp))
	plain := connect(t, srv.Addr)

	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("jobs")); err != nil {
		t.Fatal(err)
	}
	// One traced message, and five from a client that does not trace:
	// with the ratio at 0 the broker traces none of those.
	id, err := c.Producer().Send(ctx, fila.NewMessage("jobs", []byte("traced")).FairnessKey("tenant-a"))
	if err != nil {
		t.Fatal(err)
	}
	for range 5 {
		if _, err := plain.Producer().Enqueue(ctx, "jobs", []byte("plain")); err != nil {
			t.Fatal(err)
		}
	}
	sub, err := c.Consumer().Subscribe(ctx, "jobs")
	if err != nil {
		t.Fatal(err)
	}
	for range 6 {
		d, err := sub.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Ack(ctx); err != nil {
			t.Fatal(err)
		}
	}

	// Metrics: the counters' values, as /metrics would give them.
	waitFor(t, time.Minute, "the queue counters over OTLP", func() bool {
		enq, _ := recv.Metric("fila_queue_enqueued_total")
		acked, _ := recv.Metric("fila_queue_acked_total")
		return enq == 6 && acked == 6
	})
	for _, name := range []string{"fila_connections_open", "fila_request_duration_seconds", "fila_store_fsyncs_total", "fila_build_info", "go_goroutines"} {
		if _, ok := recv.Metric(name); !ok {
			t.Errorf("metric %s did not arrive over OTLP", name)
		}
	}

	// Traces: the broker's spans of the traced message, in its trace.
	var send sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "send jobs" {
			send = s
		}
	}
	if send == nil {
		t.Fatal("the client recorded no send span")
	}
	traceID, sendID := send.SpanContext().TraceID().String(), send.SpanContext().SpanID().String()
	want := []string{"enqueue jobs", "deliver jobs", "ack jobs"}
	byName := map[string]otlptest.Span{}
	waitFor(t, time.Minute, "the broker's spans over OTLP", func() bool {
		for _, s := range recv.Spans() {
			byName[s.Name] = s
		}
		for _, n := range want {
			if _, ok := byName[n]; !ok {
				return false
			}
		}
		return true
	})
	for _, n := range want {
		s := byName[n]
		if s.TraceID != traceID || s.ParentSpanID != sendID {
			t.Errorf("%s: trace %s parent %s; want the send span's trace %s, parent %s", n, s.TraceID, s.ParentSpanID, traceID, sendID)
		}
		if s.Service != "fila-server" || s.Attributes["messaging.message.id"] != id.String() {
			t.Errorf("%s: service %q attributes %v", n, s.Service, s.Attributes)
		}
	}
	if got := len(recv.Spans()); got != 3 {
		t.Errorf("the broker exported %d spans; want 3, those of the one traced message", got)
	}
	if d := byName["deliver jobs"]; d.Attributes["fila.fairness_key"] != "tenant-a" || d.Attributes["fila.attempt"] != "1" {
		t.Errorf("deliver span attributes %v", d.Attributes)
	}
	// The consumer's process span is linked to the producer's send span.
	var process sdktrace.ReadOnlySpan
	for _, s := range rec.Ended() {
		if s.Name() == "process jobs" && s.SpanContext().TraceID().String() == traceID {
			process = s
		}
	}
	if process == nil || len(process.Links()) != 1 || process.Links()[0].SpanContext.SpanID().String() != sendID {
		t.Errorf("process span %v; want one linked to the send span", process)
	}
	if _, refused := recv.Exports(); len(refused) > 0 {
		t.Errorf("the receiver refused exports: %q", refused)
	}
}

// TestOTLPRootSampling: with the ratio at 1, a message enqueued without a
// traceparent is traced by the broker, which gives it one: the consumer
// sees it, and the deliver and ack spans fall under the enqueue span.
func TestOTLPRootSampling(t *testing.T) {
	recv := otlptest.Start()
	defer recv.Close()
	srv := filatest.Start(t, filatest.WithEnv(
		"FILA_TELEMETRY_OTLP_ENDPOINT="+recv.URL,
		"FILA_TELEMETRY_OTLP_INTERVAL=200ms",
		"FILA_TELEMETRY_TRACE_SAMPLE_RATIO=1",
	))
	ctx := ctxT(t, 2*time.Minute)
	c := connect(t, srv.Addr)
	if err := c.Admin().CreateQueue(ctx, fila.NewQueueSpec("q")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Producer().Enqueue(ctx, "q", []byte("x")); err != nil {
		t.Fatal(err)
	}
	sub, err := c.Consumer().Subscribe(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	d, err := sub.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tp := d.Header("traceparent")
	if len(tp) != 55 {
		t.Fatalf("delivered traceparent %q; want one added by the broker", tp)
	}
	if err := d.Nack(ctx, "try again"); err != nil {
		t.Fatal(err)
	}
	byName := map[string]otlptest.Span{}
	waitFor(t, time.Minute, "the enqueue, deliver and nack spans", func() bool {
		for _, s := range recv.Spans() {
			byName[s.Name] = s
		}
		return byName["enqueue q"].SpanID != "" && byName["deliver q"].SpanID != "" && byName["nack q"].SpanID != ""
	})
	enq := byName["enqueue q"]
	if tp != "00-"+enq.TraceID+"-"+enq.SpanID+"-01" || enq.ParentSpanID != "" {
		t.Errorf("traceparent %q; want the enqueue span, a root: %+v", tp, enq)
	}
	for _, n := range []string{"deliver q", "nack q"} {
		if s := byName[n]; s.TraceID != enq.TraceID || s.ParentSpanID != enq.SpanID {
			t.Errorf("%s: %+v; want a child of the enqueue span", n, s)
		}
	}
}
