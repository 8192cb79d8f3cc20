package metrics

import (
	"context"
	"fmt"
	"time"

	prombridge "go.opentelemetry.io/contrib/bridges/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// OTLP configures StartOTLP.
type OTLP struct {
	// BaseURL is the OTLP/HTTP receiver's base URL (config's
	// TelemetryConfig.OTLPBase); metrics go to BaseURL + "/v1/metrics".
	BaseURL string
	// Interval is how often the metrics are exported.
	Interval time.Duration
	// NodeID names this broker in the resource (service.instance.id).
	NodeID string
	// Version is the broker's version (service.version).
	Version string
}

// StartOTLP exports the metrics of Gatherer (the ones /metrics serves,
// through the OpenTelemetry Prometheus bridge) every o.Interval over
// OTLP/HTTP with protobuf encoding, until the returned shutdown, which
// exports once more. The error is the exporter's for a malformed URL; an
// unreachable receiver is retried by the exporter and reported through
// OpenTelemetry's error handler.
func (m *Metrics) StartOTLP(o OTLP) (shutdown func(context.Context) error, err error) {
	exp, err := otlpmetrichttp.New(context.Background(), otlpmetrichttp.WithEndpointURL(o.BaseURL+"/v1/metrics"))
	if err != nil {
		return nil, fmt.Errorf("otlp metrics: %w", err)
	}
	reader := sdkmetric.NewPeriodicReader(exp,
		sdkmetric.WithInterval(o.Interval),
		sdkmetric.WithProducer(prombridge.NewMetricProducer(prombridge.WithGatherer(m.Gatherer()))))
	res := resource.NewSchemaless(
		attribute.String("service.name", "fila-server"),
		attribute.String("service.version", o.Version),
		attribute.String("service.instance.id", o.NodeID),
	)
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader), sdkmetric.WithResource(res))
	return mp.Shutdown, nil
}
