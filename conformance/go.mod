module github.com/fila-mq/fila/conformance

go 1.26

require (
	github.com/fila-mq/fila/broker v0.1.0
	github.com/fila-mq/fila/sdk/core v0.1.0
	github.com/fila-mq/fila/sdk/go v0.1.0
)
