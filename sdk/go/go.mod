module github.com/fila-mq/fila/sdk/go

go 1.26

require github.com/fila-mq/fila/sdk/core v0.1.0

require (
	github.com/google/uuid v1.6.0 // indirect
	golang.org/x/mod v0.43.0 // indirect
)
