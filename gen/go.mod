module github.com/fila-mq/fila/gen

go 1.26

require (
	github.com/BurntSushi/toml v1.6.0
	github.com/dave/jennifer v1.7.1
)
