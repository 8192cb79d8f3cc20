package cmd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	fila "github.com/fila-mq/fila/sdk/go"
)

func newAuthCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "auth",
		Short: "Mint, list and revoke API keys; manage their ACLs",
		Long: `API keys authenticate clients (FILA_API_KEY, --api-key-file or
--api-key, which other users can read in the process list). A key's ACL
grants permissions of three kinds on queue patterns, written
kind:pattern: produce:orders.*, consume:orders.eu, admin:* (admin on *
also covers runtime config, API keys, cluster status, cluster move and
cluster drain). A pattern is an exact name, a prefix wildcard such as
orders.* (matching orders.eu, not orders), or *.`,
	}
	var name string
	var perms []string
	create := &cobra.Command{
		Use:     "create --name NAME [--perm KIND:PATTERN]...",
		Short:   "Mint an API key; its secret is printed once",
		Example: `  fila auth create --name ci --perm produce:orders.* --perm consume:orders.eu`,
		Args:    cobra.ExactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			if name == "" {
				return usagef("--name is required")
			}
			ps, err := parsePerms(perms)
			if err != nil {
				return err
			}
			return g.admin(cmd, "create api key", func(ctx context.Context, a *fila.Administrator) error {
				key, err := a.CreateAPIKey(ctx, fila.NewAPIKeySpec(name).Permissions(ps...))
				if err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]string{"key_id": key.ID, "name": name, "secret": key.Secret})
				}
				fmt.Fprintf(g.stdout, "key id: %s\nsecret: %s\n(the secret is shown only now: the broker keeps only its hash)\n", key.ID, key.Secret)
				return nil
			})
		},
	}
	create.Flags().StringVar(&name, "name", "", "a label for people (required)")
	create.Flags().StringArrayVar(&perms, "perm", nil, "initial permission KIND:PATTERN (repeatable)")

	revoke := &cobra.Command{
		Use:   "revoke KEY_ID",
		Short: "Revoke an API key; its connections fail on their next request",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "revoke api key", func(ctx context.Context, a *fila.Administrator) error {
				if err := a.RevokeAPIKey(ctx, args[0]); err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]string{"revoked": args[0]})
				}
				fmt.Fprintf(g.stdout, "revoked %s\n", args[0])
				return nil
			})
		},
	}
	list := &cobra.Command{
		Use:   "list",
		Short: "List API keys with their ACLs (never their secrets)",
		Args:  cobra.ExactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "list api keys", func(ctx context.Context, a *fila.Administrator) error {
				keys, err := a.ListAPIKeys(ctx)
				if err != nil {
					return err
				}
				if g.output == "json" {
					type key struct {
						ID          string   `json:"key_id"`
						Name        string   `json:"name"`
						CreatedAt   string   `json:"created_at"`
						Permissions []string `json:"permissions"`
					}
					out := make([]key, len(keys))
					for i, k := range keys {
						out[i] = key{k.ID, k.Name, k.CreatedAt.UTC().Format(time.RFC3339), permStrings(k.Permissions)}
					}
					return g.printJSON(out)
				}
				rows := make([][]string, len(keys))
				for i, k := range keys {
					rows[i] = []string{k.ID, k.Name, k.CreatedAt.UTC().Format(time.RFC3339), strings.Join(permStrings(k.Permissions), " ")}
				}
				return g.table([]string{"KEY ID", "NAME", "CREATED", "PERMISSIONS"}, rows)
			})
		},
	}

	acl := &cobra.Command{Use: "acl", Short: "Read or replace an API key's permissions"}
	aclSet := &cobra.Command{
		Use:     "set KEY_ID [KIND:PATTERN]...",
		Short:   "Replace a key's permissions (none: revoke every permission)",
		Example: `  fila auth acl set 0f3c9a produce:orders.* consume:orders.eu`,
		Args:    cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ps, err := parsePerms(args[1:])
			if err != nil {
				return err
			}
			return g.admin(cmd, "set acl", func(ctx context.Context, a *fila.Administrator) error {
				if err := a.SetACL(ctx, args[0], ps...); err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]any{"key_id": args[0], "permissions": permStrings(ps)})
				}
				fmt.Fprintf(g.stdout, "%s: %s\n", args[0], strings.Join(permStrings(ps), " "))
				return nil
			})
		},
	}
	aclGet := &cobra.Command{
		Use:   "get KEY_ID",
		Short: "Print a key's permissions, one per line",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return g.admin(cmd, "get acl", func(ctx context.Context, a *fila.Administrator) error {
				ps, err := a.GetACL(ctx, args[0])
				if err != nil {
					return err
				}
				if g.output == "json" {
					return g.printJSON(map[string]any{"key_id": args[0], "permissions": permStrings(ps)})
				}
				for _, p := range ps {
					fmt.Fprintln(g.stdout, p)
				}
				return nil
			})
		},
	}
	acl.AddCommand(aclSet, aclGet)
	c.AddCommand(create, revoke, list, acl)
	return c
}

func parsePerms(args []string) ([]fila.Permission, error) {
	ps := make([]fila.Permission, 0, len(args))
	for _, a := range args {
		p, err := fila.ParsePermission(a)
		if err != nil {
			return nil, usageError{err}
		}
		ps = append(ps, p)
	}
	return ps, nil
}

func permStrings(ps []fila.Permission) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
