// Package tracing records OpenTelemetry spans of messages as they pass
// through the broker, and exports them over OTLP/HTTP.
//
// A message's trace context travels in its W3C Trace Context headers
// (traceparent and tracestate; https://www.w3.org/TR/trace-context/), as
// enqueued, so the spans of the producer, of the broker and of the
// consumer form one trace. The broker records, as children of that
// context:
//
//   - "enqueue <queue>" (kind server): from the Enqueue request's arrival
//     to the result (the message durable, or refused);
//   - "deliver <queue>" (kind internal): from the message's enqueue to its
//     delivery to a consumer, that is its time in the queue; one per
//     attempt;
//   - "ack <queue>", "nack <queue>", "retry <queue>" or "release <queue>"
//     (kind server): from the delivery to the consumer's settle being
//     durable.
//
// Which messages are traced: one whose traceparent says sampled always;
// one whose traceparent says not sampled never; one without a
// traceparent with the probability of the sample ratio, and then the
// broker adds a traceparent header naming its enqueue span, so that its
// deliver and settle spans, and the consumer's, join that trace. The
// cost of a message not traced is a scan of its headers.
package tracing

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

// The W3C Trace Context header names.
const (
	HeaderTraceparent = "traceparent"
	HeaderTracestate  = "tracestate"
)

// Config configures Start.
type Config struct {
	// BaseURL is the OTLP/HTTP receiver's base URL; spans go to
	// BaseURL + "/v1/traces".
	BaseURL string
	// Interval is the longest a finished span waits before it is
	// exported (the batch processor's timeout).
	Interval time.Duration
	// SampleRatio is the probability, 0 to 1, that a message enqueued
	// without a traceparent is traced.
	SampleRatio float64
	// NodeID and Version name this broker in the resource
	// (service.instance.id, service.version).
	NodeID, Version string
}

// Tracer records and exports spans. A nil *Tracer records nothing; its
// methods are safe for concurrent use.
type Tracer struct {
	tp    *sdktrace.TracerProvider
	t     trace.Tracer
	ratio float64
}

// Start returns a Tracer exporting to c.BaseURL. The error is the
// exporter's, for a malformed URL; an unreachable receiver is retried by
// the exporter and reported through OpenTelemetry's error handler, and
// spans it cannot take are dropped, never held up.
func Start(c Config) (*Tracer, error) {
	exp, err := otlptracehttp.New(context.Background(), otlptracehttp.WithEndpointURL(c.BaseURL+"/v1/traces"))
	if err != nil {
		return nil, fmt.Errorf("otlp traces: %w", err)
	}
	res := resource.NewSchemaless(
		attribute.String("service.name", "fila-server"),
		attribute.String("service.version", c.Version),
		attribute.String("service.instance.id", c.NodeID),
	)
	tp := sdktrace.NewTracerProvider(
		// Which messages are traced is decided before a span starts (see
		// Enqueue): every span started is recorded.
		sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithBatcher(exp, sdktrace.WithBatchTimeout(c.Interval)),
		sdktrace.WithResource(res),
	)
	return &Tracer{tp: tp, t: tp.Tracer("github.com/fila-mq/fila/broker"), ratio: c.SampleRatio}, nil
}

// Shutdown exports the spans still batched and stops the exporter.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// Context is a message's trace context as its headers carry it. The zero
// Context is a message not traced.
type Context struct {
	sc trace.SpanContext
}

// Traced reports whether spans are recorded for the message.
func (c Context) Traced() bool { return c.sc.IsSampled() }

// Parse returns the trace context of a message's traceparent and
// tracestate header values, and whether traceparent is well formed.
// A malformed one is treated as absent.
func Parse(traceparent, tracestate string) (Context, bool) {
	if traceparent == "" {
		return Context{}, false
	}
	carrier := propagation.MapCarrier{HeaderTraceparent: traceparent}
	if tracestate != "" {
		carrier[HeaderTracestate] = tracestate
	}
	sc := trace.SpanContextFromContext(propagation.TraceContext{}.Extract(context.Background(), carrier))
	return Context{sc: sc}, sc.IsValid()
}

// Span is a span in progress; the zero Span records nothing.
type Span struct {
	s trace.Span
}

// Enqueue starts the enqueue span of a message to queue whose headers
// carry traceparent and tracestate (either may be ""), the request
// having arrived at start. For a message without a valid traceparent
// it decides, by the sample ratio, whether to trace it; when it does, add
// is the traceparent value the message must be given (with
// HeaderTraceparent) so that its later spans join the trace. canAdd false
// (the message has no room for another header) leaves such a message
// untraced.
func (t *Tracer) Enqueue(queue, traceparent, tracestate string, canAdd bool, start time.Time) (sp Span, add string) {
	if t == nil {
		return Span{}, ""
	}
	mc, ok := Parse(traceparent, tracestate)
	ctx := context.Background()
	switch {
	case ok && !mc.Traced():
		return Span{}, ""
	case ok:
		ctx = trace.ContextWithRemoteSpanContext(ctx, mc.sc)
	case !canAdd || t.ratio <= 0 || (t.ratio < 1 && rand.Float64() >= t.ratio):
		return Span{}, ""
	}
	_, s := t.t.Start(ctx, "enqueue "+queue,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(start),
		trace.WithAttributes(
			attribute.String("messaging.system", "fila"),
			attribute.String("messaging.operation.type", "send"),
			attribute.String("messaging.operation.name", "enqueue"),
			attribute.String("messaging.destination.name", queue),
		))
	if !ok {
		carrier := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(trace.ContextWithSpan(context.Background(), s), carrier)
		add = carrier[HeaderTraceparent]
	}
	return Span{s: s}, add
}

// EndEnqueue ends an enqueue span with the message's outcome: its ID and
// fairness key, whether it was a duplicate, or the error that refused it.
func (sp Span) EndEnqueue(id [16]byte, fairnessKey string, duplicate bool, err error) {
	if sp.s == nil {
		return
	}
	if err != nil {
		sp.s.SetStatus(codes.Error, err.Error())
	} else {
		sp.s.SetAttributes(
			attribute.String("messaging.message.id", uuid.UUID(id).String()),
			attribute.String("fila.fairness_key", fairnessKey),
			attribute.Bool("fila.duplicate", duplicate))
	}
	sp.s.End()
}

// Delivery describes a message delivered to a consumer.
type Delivery struct {
	Queue       string
	ID          [16]byte
	FairnessKey string
	Attempt     uint32 // from 1
	EnqueuedAt  time.Time
	Subscriber  string // the consumer's client name, if it gave one
}

// Deliver records the deliver span of a message traced under mc, from
// d.EnqueuedAt to now.
func (t *Tracer) Deliver(mc Context, d Delivery, now time.Time) {
	if t == nil || !mc.Traced() {
		return
	}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), mc.sc)
	attrs := []attribute.KeyValue{
		attribute.String("messaging.system", "fila"),
		attribute.String("messaging.operation.type", "receive"),
		attribute.String("messaging.operation.name", "deliver"),
		attribute.String("messaging.destination.name", d.Queue),
		attribute.String("messaging.message.id", uuid.UUID(d.ID).String()),
		attribute.String("fila.fairness_key", d.FairnessKey),
		attribute.Int64("fila.attempt", int64(d.Attempt)),
	}
	if d.Subscriber != "" {
		attrs = append(attrs, attribute.String("messaging.consumer.group.name", d.Subscriber))
	}
	start := d.EnqueuedAt
	if start.After(now) {
		start = now
	}
	_, s := t.t.Start(ctx, "deliver "+d.Queue,
		trace.WithSpanKind(trace.SpanKindInternal),
		trace.WithTimestamp(start),
		trace.WithAttributes(attrs...))
	s.End(trace.WithTimestamp(now))
}

// Settle records the span of a consumer's settle of a delivery traced
// under mc: op is "ack", "nack", "retry" or "release", delivered when the
// message went out, and err the settle's error, if it failed.
func (t *Tracer) Settle(mc Context, op, queue string, id [16]byte, delivered, now time.Time, err error) {
	if t == nil || !mc.Traced() {
		return
	}
	ctx := trace.ContextWithRemoteSpanContext(context.Background(), mc.sc)
	_, s := t.t.Start(ctx, op+" "+queue,
		trace.WithSpanKind(trace.SpanKindServer),
		trace.WithTimestamp(delivered),
		trace.WithAttributes(
			attribute.String("messaging.system", "fila"),
			attribute.String("messaging.operation.type", "settle"),
			attribute.String("messaging.operation.name", op),
			attribute.String("messaging.destination.name", queue),
			attribute.String("messaging.message.id", uuid.UUID(id).String()),
		))
	if err != nil {
		s.SetStatus(codes.Error, err.Error())
	}
	s.End(trace.WithTimestamp(now))
}
