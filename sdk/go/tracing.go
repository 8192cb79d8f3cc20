package fila

import (
	"context"
	"slices"

	"github.com/fila-mq/fila/sdk/core/wire"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName is the instrumentation scope of the SDK's spans.
const tracerName = "github.com/fila-mq/fila/sdk/go"

// WithTracing makes the client trace its messages with OpenTelemetry
// through tp, carrying the trace context in each message's W3C Trace
// Context headers, traceparent and tracestate
// (https://www.w3.org/TR/trace-context/):
//
//   - Send, SendBatch and Enqueue start, per message, a producer span
//     "send <queue>", a child of the span in ctx, put its context in the
//     message's headers, and end it with the result (the message's ID, or
//     the error). A message whose application already set traceparent
//     keeps it, and gets no span.
//   - Each Delivery whose headers carry a trace context starts a consumer
//     span "process <queue>", a child of the producer's span and linked to
//     it, which its first Ack, Nack, RetryAfter or Release ends (a
//     subscription's Close ends those of the deliveries it gives back).
//     Delivery.Context returns a context that carries it, for the
//     application's own spans.
//
// A broker with [telemetry] otlp_endpoint set records its spans of the
// message (enqueue, deliver, ack) in the same trace. Sampling is tp's:
// a message whose producer span is not sampled is not traced by the
// broker either.
func WithTracing(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracer = tp.Tracer(tracerName) }
}

// propagator is the W3C Trace Context format.
var propagator propagation.TraceContext

// headerCarrier adapts a message's headers to propagation.TextMapCarrier.
type headerCarrier struct{ h *[]wire.MessageHeader }

func (c headerCarrier) Get(key string) string {
	for _, kv := range *c.h {
		if kv.Key == key {
			return kv.Value
		}
	}
	return ""
}

func (c headerCarrier) Set(key, value string) {
	for i, kv := range *c.h {
		if kv.Key == key {
			(*c.h)[i].Value = value
			return
		}
	}
	*c.h = append(*c.h, wire.MessageHeader{Key: key, Value: value})
}

func (c headerCarrier) Keys() []string {
	keys := make([]string, len(*c.h))
	for i, kv := range *c.h {
		keys[i] = kv.Key
	}
	return keys
}

// traceSend starts the producer spans of msgs and puts their contexts in
// the messages' headers, which it copies first: the application's
// Message keeps its own. It returns nil when the client does not trace.
func (c *Client) traceSend(ctx context.Context, msgs []wire.EnqueueMessage) []trace.Span {
	tr := c.opts.tracer
	if tr == nil {
		return nil
	}
	spans := make([]trace.Span, len(msgs))
	for i := range msgs {
		m := &msgs[i]
		if (headerCarrier{&m.Headers}).Get("traceparent") != "" {
			continue
		}
		sctx, sp := tr.Start(ctx, "send "+m.Queue,
			trace.WithSpanKind(trace.SpanKindProducer),
			trace.WithAttributes(
				attribute.String("messaging.system", "fila"),
				attribute.String("messaging.operation.type", "send"),
				attribute.String("messaging.destination.name", m.Queue),
			))
		if m.FairnessKey != "" {
			sp.SetAttributes(attribute.String("fila.fairness_key", m.FairnessKey))
		}
		m.Headers = slices.Clip(m.Headers)
		propagator.Inject(sctx, headerCarrier{&m.Headers})
		spans[i] = sp
	}
	return spans
}

// endSend ends the producer spans of traceSend with the messages'
// results, or with err when the whole send failed.
func endSend(spans []trace.Span, res []SendResult, err error) {
	for i, sp := range spans {
		if sp == nil {
			continue
		}
		e := err
		if e == nil && i < len(res) {
			e = res[i].Err
			if e == nil {
				sp.SetAttributes(attribute.String("messaging.message.id", res[i].ID.String()))
			}
		}
		if e != nil {
			sp.SetStatus(codes.Error, e.Error())
		}
		sp.End()
	}
}

// traceProcess starts d's consumer span when the client traces and d's
// headers carry a trace context.
func (d *Delivery) traceProcess() {
	tr := d.s.c.opts.tracer
	if tr == nil {
		return
	}
	pctx := propagator.Extract(context.Background(), headerCarrier{&d.m.Headers})
	psc := trace.SpanContextFromContext(pctx)
	if !psc.IsValid() {
		return
	}
	_, d.span = tr.Start(pctx, "process "+d.m.Queue,
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithLinks(trace.Link{SpanContext: psc}),
		trace.WithAttributes(
			attribute.String("messaging.system", "fila"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.destination.name", d.m.Queue),
			attribute.String("messaging.message.id", d.ID().String()),
			attribute.String("fila.fairness_key", d.m.FairnessKey),
			attribute.Int64("fila.attempt", int64(d.m.Attempt)),
		))
}

// Context returns ctx carrying the delivery's trace context: its
// consumer span when the client traces (WithTracing), or else the
// producer's span context from its traceparent header, if any, so that
// the application's spans join the message's trace.
func (d *Delivery) Context(ctx context.Context) context.Context {
	if d.span != nil {
		return trace.ContextWithSpan(ctx, d.span)
	}
	return propagator.Extract(ctx, headerCarrier{&d.m.Headers})
}

// endProcess ends d's consumer span, the first time only, with how it was
// settled and err, the settle's error.
func (d *Delivery) endProcess(how string, err error) error {
	if d.span == nil || !d.spanEnded.CompareAndSwap(false, true) {
		return err
	}
	d.span.SetAttributes(attribute.String("fila.settled", how))
	if err != nil {
		d.span.SetStatus(codes.Error, err.Error())
	}
	d.span.End()
	return err
}
