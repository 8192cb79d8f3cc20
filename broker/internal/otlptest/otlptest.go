// Package otlptest is an OTLP/HTTP receiver for tests: it decodes the
// protobuf exports of metrics and traces that arrive at /v1/metrics and
// /v1/traces, as an OpenTelemetry Collector's OTLP receiver would, and
// keeps what they carried for the test to inspect.
package otlptest

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"

	colmetrics "go.opentelemetry.io/proto/otlp/collector/metrics/v1"
	coltrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	"google.golang.org/protobuf/proto"
)

// Span is one span received, its IDs in lower-case hex.
type Span struct {
	Name         string
	TraceID      string
	SpanID       string
	ParentSpanID string // "" for a root
	Kind         string // "SPAN_KIND_SERVER", ...
	StartNanos   uint64
	EndNanos     uint64
	Attributes   map[string]string // values as text
	Links        []Link
	Service      string // the resource's service.name
	StatusError  bool
}

// Link is a span's link to another span.
type Link struct{ TraceID, SpanID string }

// Receiver is a running receiver. Its methods are safe for concurrent use.
type Receiver struct {
	// URL is the base URL to export to ("http://127.0.0.1:port").
	URL string
	srv *httptest.Server

	mu      sync.Mutex
	metrics map[string]float64 // the last export's value of each metric
	spans   []Span
	exports int
	bad     []string
}

// Start starts a receiver on a loopback port; Close stops it.
func Start() *Receiver {
	r := &Receiver{metrics: map[string]float64{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	r.URL = r.srv.URL
	return r
}

// Close stops the receiver.
func (r *Receiver) Close() { r.srv.Close() }

// Metric returns the value of the named metric in the last export that
// carried it: the sum of its data points for a sum or gauge, the sum of
// its counts for a histogram. ok is false if none carried it.
func (r *Receiver) Metric(name string) (v float64, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	v, ok = r.metrics[name]
	return v, ok
}

// Spans returns the spans received so far.
func (r *Receiver) Spans() []Span {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Span(nil), r.spans...)
}

// Exports returns how many exports were received, and the reasons any
// were refused (a wrong path, content type, or a body that did not
// decode).
func (r *Receiver) Exports() (n int, refused []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.exports, append([]string(nil), r.bad...)
}

func (r *Receiver) refuse(w http.ResponseWriter, why string) {
	r.mu.Lock()
	r.bad = append(r.bad, why)
	r.mu.Unlock()
	http.Error(w, why, http.StatusBadRequest)
}

func (r *Receiver) serve(w http.ResponseWriter, req *http.Request) {
	if req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf" {
		r.refuse(w, "want a protobuf POST, got "+req.Method+" "+req.Header.Get("Content-Type"))
		return
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		r.refuse(w, err.Error())
		return
	}
	var resp proto.Message
	switch req.URL.Path {
	case "/v1/metrics":
		var m colmetrics.ExportMetricsServiceRequest
		if err := proto.Unmarshal(body, &m); err != nil {
			r.refuse(w, "metrics: "+err.Error())
			return
		}
		r.addMetrics(&m)
		resp = &colmetrics.ExportMetricsServiceResponse{}
	case "/v1/traces":
		var t coltrace.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &t); err != nil {
			r.refuse(w, "traces: "+err.Error())
			return
		}
		r.addSpans(&t)
		resp = &coltrace.ExportTraceServiceResponse{}
	default:
		r.refuse(w, "unknown path "+req.URL.Path)
		return
	}
	out, _ := proto.Marshal(resp)
	w.Header().Set("Content-Type", "application/x-protobuf")
	w.Write(out)
}

func (r *Receiver) addMetrics(req *colmetrics.ExportMetricsServiceRequest) {
	vals := map[string]float64{}
	for _, rm := range req.ResourceMetrics {
		for _, sm := range rm.ScopeMetrics {
			for _, m := range sm.Metrics {
				switch {
				case m.GetSum() != nil:
					for _, p := range m.GetSum().DataPoints {
						vals[m.Name] += p.GetAsDouble() + float64(p.GetAsInt())
					}
				case m.GetGauge() != nil:
					for _, p := range m.GetGauge().DataPoints {
						vals[m.Name] += p.GetAsDouble() + float64(p.GetAsInt())
					}
				case m.GetHistogram() != nil:
					for _, p := range m.GetHistogram().DataPoints {
						vals[m.Name] += float64(p.Count)
					}
				}
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exports++
	for k, v := range vals {
		r.metrics[k] = v
	}
}

func (r *Receiver) addSpans(req *coltrace.ExportTraceServiceRequest) {
	var got []Span
	for _, rs := range req.ResourceSpans {
		service := text(attrs(rs.GetResource().GetAttributes())["service.name"])
		for _, ss := range rs.ScopeSpans {
			for _, s := range ss.Spans {
				sp := Span{
					Name:         s.Name,
					TraceID:      hex.EncodeToString(s.TraceId),
					SpanID:       hex.EncodeToString(s.SpanId),
					ParentSpanID: hex.EncodeToString(s.ParentSpanId),
					Kind:         s.Kind.String(),
					StartNanos:   s.StartTimeUnixNano,
					EndNanos:     s.EndTimeUnixNano,
					Attributes:   map[string]string{},
					Service:      service,
					StatusError:  s.GetStatus().GetCode() == 2, // STATUS_CODE_ERROR
				}
				for k, v := range attrs(s.Attributes) {
					sp.Attributes[k] = text(v)
				}
				for _, l := range s.Links {
					sp.Links = append(sp.Links, Link{TraceID: hex.EncodeToString(l.TraceId), SpanID: hex.EncodeToString(l.SpanId)})
				}
				got = append(got, sp)
			}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.exports++
	r.spans = append(r.spans, got...)
}

func attrs(kvs []*commonpb.KeyValue) map[string]*commonpb.AnyValue {
	m := make(map[string]*commonpb.AnyValue, len(kvs))
	for _, kv := range kvs {
		m[kv.Key] = kv.Value
	}
	return m
}

// text renders an attribute value as text: strings as they are, numbers
// and booleans in Go's formatting.
func text(v *commonpb.AnyValue) string {
	switch x := v.GetValue().(type) {
	case *commonpb.AnyValue_StringValue:
		return x.StringValue
	case *commonpb.AnyValue_IntValue:
		return strconv.FormatInt(x.IntValue, 10)
	case *commonpb.AnyValue_BoolValue:
		if x.BoolValue {
			return "true"
		}
		return "false"
	case *commonpb.AnyValue_DoubleValue:
		return strconv.FormatFloat(x.DoubleValue, 'g', -1, 64)
	}
	return ""
}
