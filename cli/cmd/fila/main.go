// Command fila is the command-line client of the Fila broker: a thin shell
// over the Go SDK, with no privileged access and no operation the SDK
// lacks. Run "fila help" for its commands.
package main

import (
	"os"

	"github.com/fila-mq/fila/cli/internal/cmd"
)

func main() {
	os.Exit(cmd.Main(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
