package cmd

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

func newConfigCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "config",
		Short: "Read and change the runtime config (rate limits, hook settings)",
		Long: `The runtime config is a live key-value store, readable from Lua hooks with
fila.get(key). Keys under "throttle." are rate limits: throttle.K = "rate,burst"
(tokens per second, bucket size) for messages carrying throttle key K.`,
	}
	set := &cobra.Command{
		Use:     "set KEY VALUE",
		Short:   "Set a runtime config key",
		Example: `  fila config set throttle.provider:stripe 100,200`,
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "set config", func(ctx context.Context, a *fila.Administrator) error {
				if err := a.SetConfig(ctx, args[0], args[1]); err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]string{"key": args[0], "value": args[1]})
				}
				fmt.Fprintf(g.stdout, "%s = %s\n", args[0], args[1])
				return nil
			})
		},
	}
	get := &cobra.Command{
		Use:   "get KEY",
		Short: "Print a runtime config key's value (exit code 3 when unset)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "get config", func(ctx context.Context, a *fila.Administrator) error {
				v, ok, err := a.GetConfig(ctx, args[0])
				if err != nil {
					return err
				}
				if !ok {
					return fmt.Errorf("config get %s: %w", args[0], errNotSet)
				}
				if g.output == "json" {
					return g.printJSON(map[string]string{"key": args[0], "value": v})
				}
				fmt.Fprintln(g.stdout, v)
				return nil
			})
		},
	}
	var prefix string
	list := &cobra.Command{
		Use:     "list",
		Short:   "List runtime config entries, sorted by key",
		Example: `  fila config list --prefix throttle.`,
		Args:    cobra.ExactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "list config", func(ctx context.Context, a *fila.Administrator) error {
				es, err := a.ListConfig(ctx, prefix)
				if err != nil {
					return err
				}
				if g.output == "json" {
					type entry struct {
						Key   string `json:"key"`
						Value string `json:"value"`
					}
					out := make([]entry, len(es))
					for i, e := range es {
						out[i] = entry{e.Key, e.Value}
					}
					return g.printJSON(out)
				}
				rows := make([][]string, len(es))
				for i, e := range es {
					rows[i] = []string{e.Key, e.Value}
				}
				return g.table([]string{"KEY", "VALUE"}, rows)
			})
		},
	}
	list.Flags().StringVar(&prefix, "prefix", "", `only keys starting with this, such as "throttle."`)
	del := &cobra.Command{
		Use:   "delete KEY",
		Short: "Delete a runtime config key (exit code 3 when unset; deleting throttle.K lifts the limit on K)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "delete config", func(ctx context.Context, a *fila.Administrator) error {
				existed, err := a.DeleteConfig(ctx, args[0])
				if err != nil {
					return err
				}
				if !existed {
					return fmt.Errorf("config delete %s: %w", args[0], errNotSet)
				}
				if g.output == "json" {
					return g.printJSON(map[string]any{"key": args[0], "existed": true})
				}
				fmt.Fprintf(g.stdout, "deleted %s\n", args[0])
				return nil
			})
		},
	}
	c.AddCommand(set, get, list, del)
	return c
}
