module github.com/fila-mq/fila/sdk/core

go 1.26

require pgregory.net/rapid v1.3.0
