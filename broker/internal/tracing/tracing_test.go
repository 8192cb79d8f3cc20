package tracing

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fila-mq/fila/broker/internal/otlptest"
)

func start(t *testing.T, ratio float64) (*Tracer, *otlptest.Receiver) {
	t.Helper()
	recv := otlptest.Start()
	t.Cleanup(recv.Close)
	tr, err := Start(Config{BaseURL: recv.URL, Interval: 50 * time.Millisecond, SampleRatio: ratio, NodeID: "n1", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	return tr, recv
}

// flush shuts tr down, which exports every span ended, and returns the
// spans the receiver got by name.
func flush(t *testing.T, tr *Tracer, recv *otlptest.Receiver) map[string]otlptest.Span {
	t.Helper()
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, refused := recv.Exports(); len(refused) > 0 {
		t.Fatalf("the receiver refused exports: %q", refused)
	}
	byName := map[string]otlptest.Span{}
	for _, s := range recv.Spans() {
		if _, dup := byName[s.Name]; dup {
			t.Errorf("span %q recorded twice", s.Name)
		}
		byName[s.Name] = s
	}
	return byName
}

const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
)

// TestProducerContext: a message whose traceparent says sampled gets
// enqueue, deliver and ack spans, children of the producer's span, and
// no header added.
func TestProducerContext(t *testing.T) {
	tr, recv := start(t, 0)
	tp := "00-" + producerTrace + "-" + producerSpan + "-01"
	t0 := time.Now()
	sp, add := tr.Enqueue("orders", tp, "vendor=x", true, t0)
	if add != "" {
		t.Errorf("Enqueue added traceparent %q to a message that has one", add)
	}
	id := [16]byte{1, 2, 3}
	sp.EndEnqueue(id, "tenant-a", false, nil)
	mc, ok := Parse(tp, "vendor=x")
	if !ok || !mc.Traced() {
		t.Fatalf("Parse(%q) = %v, %v; want a traced context", tp, mc, ok)
	}
	delivered := t0.Add(30 * time.Millisecond)
	tr.Deliver(mc, Delivery{Queue: "orders", ID: id, FairnessKey: "tenant-a", Attempt: 1, EnqueuedAt: t0.Add(time.Millisecond), Subscriber: "worker"}, delivered)
	tr.Settle(mc, "ack", "orders", id, delivered, delivered.Add(5*time.Millisecond), nil)
	spans := flush(t, tr, recv)
	for _, name := range []string{"enqueue orders", "deliver orders", "ack orders"} {
		s, ok := spans[name]
		if !ok {
			t.Errorf("no span %q among %v", name, spans)
			continue
		}
		if s.TraceID != producerTrace || s.ParentSpanID != producerSpan {
			t.Errorf("%s: trace %s parent %s; want trace %s parent %s", name, s.TraceID, s.ParentSpanID, producerTrace, producerSpan)
		}
		if s.Attributes["messaging.system"] != "fila" || s.Attributes["messaging.destination.name"] != "orders" {
			t.Errorf("%s: attributes %v", name, s.Attributes)
		}
		if s.Service != "fila-server" {
			t.Errorf("%s: service %q; want fila-server", name, s.Service)
		}
	}
	d := spans["deliver orders"]
	if d.Attributes["fila.attempt"] != "1" || d.Attributes["fila.fairness_key"] != "tenant-a" || d.Attributes["messaging.consumer.group.name"] != "worker" {
		t.Errorf("deliver attributes %v", d.Attributes)
	}
	if got := time.Duration(d.EndNanos - d.StartNanos); got != 29*time.Millisecond {
		t.Errorf("deliver span lasts %v; want the 29ms from enqueue to delivery", got)
	}
	if e := spans["enqueue orders"]; e.Attributes["messaging.message.id"] != "01020300-0000-0000-0000-000000000000" || e.Kind != "SPAN_KIND_SERVER" {
		t.Errorf("enqueue span %+v", e)
	}
}

// TestRootSampled: a message without a traceparent, sampled by the
// ratio, is given one naming its enqueue span, under which its later
// spans fall; a failed settle is marked as an error.
func TestRootSampled(t *testing.T) {
	tr, recv := start(t, 1)
	sp, add := tr.Enqueue("q", "", "", true, time.Now())
	if !strings.HasPrefix(add, "00-") || !strings.HasSuffix(add, "-01") {
		t.Fatalf("Enqueue added %q; want a sampled traceparent", add)
	}
	sp.EndEnqueue([16]byte{9}, "default", false, nil)
	mc, ok := Parse(add, "")
	if !ok {
		t.Fatalf("the added traceparent %q does not parse", add)
	}
	now := time.Now()
	tr.Deliver(mc, Delivery{Queue: "q", ID: [16]byte{9}, Attempt: 2, EnqueuedAt: now}, now)
	tr.Settle(mc, "nack", "q", [16]byte{9}, now, now, errors.New("lease expired"))
	spans := flush(t, tr, recv)
	enq := spans["enqueue q"]
	if enq.ParentSpanID != "" || !strings.Contains(add, enq.TraceID+"-"+enq.SpanID) {
		t.Errorf("enqueue span %s/%s parent %q; want the root named by %s", enq.TraceID, enq.SpanID, enq.ParentSpanID, add)
	}
	for _, name := range []string{"deliver q", "nack q"} {
		if s := spans[name]; s.TraceID != enq.TraceID || s.ParentSpanID != enq.SpanID {
			t.Errorf("%s: %+v; want a child of the enqueue span", name, s)
		}
	}
	if !spans["nack q"].StatusError {
		t.Error("a failed settle's span is not marked as an error")
	}
}

// TestNotTraced: nothing is recorded for a message whose traceparent says
// not sampled, for one without when the ratio is 0 or there is no room
// for the header, or by a nil Tracer.
func TestNotTraced(t *testing.T) {
	tr, recv := start(t, 0)
	unsampled := "00-" + producerTrace + "-" + producerSpan + "-00"
	if sp, add := tr.Enqueue("q", unsampled, "", true, time.Now()); sp.s != nil || add != "" {
		t.Error("an unsampled traceparent was traced")
	}
	if sp, add := tr.Enqueue("q", "", "", true, time.Now()); sp.s != nil || add != "" {
		t.Error("ratio 0 traced a message without a traceparent")
	}
	if mc, ok := Parse(unsampled, ""); !ok || mc.Traced() {
		t.Errorf("Parse(unsampled) = %v, %v", mc, ok)
	}
	if _, ok := Parse("00-zz-yy-01", ""); ok {
		t.Error("a malformed traceparent parsed")
	}
	if spans := flush(t, tr, recv); len(spans) != 0 {
		t.Errorf("spans recorded: %v", spans)
	}

	full, recv2 := start(t, 1)
	if sp, add := full.Enqueue("q", "", "", false, time.Now()); sp.s != nil || add != "" {
		t.Error("a message with no room for a header was traced")
	}
	if spans := flush(t, full, recv2); len(spans) != 0 {
		t.Errorf("spans recorded: %v", spans)
	}

	var none *Tracer
	sp, add := none.Enqueue("q", "", "", true, time.Now())
	sp.EndEnqueue([16]byte{}, "", false, nil)
	none.Deliver(Context{}, Delivery{}, time.Now())
	none.Settle(Context{}, "ack", "q", [16]byte{}, time.Now(), time.Now(), nil)
	if add != "" || none.Shutdown(context.Background()) != nil {
		t.Error("a nil Tracer did something")
	}
}

// BenchmarkUntraced is the per-message cost of tracing on for a message
// the broker does not trace: no traceparent, and the sampling dice say
// no (ratio 0.01, so 1% of iterations start and end a span).
func BenchmarkUntraced(b *testing.B) {
	recv := otlptest.Start()
	defer recv.Close()
	tr, err := Start(Config{BaseURL: recv.URL, Interval: time.Second, SampleRatio: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		sp, _ := tr.Enqueue("q", "", "", true, now)
		sp.EndEnqueue([16]byte{}, "", false, nil)
		Parse("", "")
	}
}

// BenchmarkTraced is the cost of a traced message's three spans.
func BenchmarkTraced(b *testing.B) {
	recv := otlptest.Start()
	defer recv.Close()
	tr, err := Start(Config{BaseURL: recv.URL, Interval: time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer tr.Shutdown(context.Background())
	const tp = "00-" + producerTrace + "-" + producerSpan + "-01"
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		sp, _ := tr.Enqueue("q", tp, "", true, now)
		sp.EndEnqueue([16]byte{1}, "k", false, nil)
		mc, _ := Parse(tp, "")
		tr.Deliver(mc, Delivery{Queue: "q", ID: [16]byte{1}, Attempt: 1, EnqueuedAt: now}, now)
		tr.Settle(mc, "ack", "q", [16]byte{1}, now, now, nil)
	}
}
