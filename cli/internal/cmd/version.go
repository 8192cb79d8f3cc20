package cmd

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/fila-mq/fila/sdk/core/wire"
	fila "github.com/fila-mq/fila/sdk/go"
)

// newVersionCmd is `fila version`: the CLI's version and the protocol
// versions it speaks. It needs no broker; `fila ping` shows the broker's.
func newVersionCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the CLI's version and protocol version (no broker needed)",
		Long: `version prints the CLI's version and the versions of the wire protocol
it speaks: the newest, and the oldest it still accepts. It does not
connect; fila ping shows the broker's version.`,
		Args: cobra.ExactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if g.output == "json" {
				return g.printJSON(map[string]any{
					"version":              fila.Version,
					"protocol_version":     wire.ProtocolVersion,
					"min_protocol_version": wire.MinProtocolVersion,
				})
			}
			fmt.Fprintln(g.stdout, "fila", fila.Version)
			fmt.Fprintf(g.stdout, "protocol %d (oldest supported: %d)\n", wire.ProtocolVersion, wire.MinProtocolVersion)
			return nil
		},
	}
}
