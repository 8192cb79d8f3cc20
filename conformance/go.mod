module github.com/fila-mq/fila/conformance

go 1.26

require (
	github.com/fila-mq/fila/broker v0.1.0
	github.com/fila-mq/fila/sdk/core v0.1.0
	github.com/fila-mq/fila/sdk/go v0.1.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/google/uuid v1.6.0 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
)
