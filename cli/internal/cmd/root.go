// Package cmd implements the fila command line with cobra. Every command
// talks to the broker through the Go SDK only: the CLI has no privileged
// access and no operation the SDK lacks.
package cmd

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/fila-mq/fila/cli/internal/bench"
	fila "github.com/fila-mq/fila/sdk/go"
)

// Exit codes of Main.
const (
	ExitOK       = 0 // success
	ExitFailure  = 1 // the command failed: broker error, connection, I/O
	ExitUsage    = 2 // bad flags or arguments
	ExitNotFound = 3 // the queue, message, API key or config key does not exist
)

// globals are the flags every command shares.
type globals struct {
	addr       string
	apiKey     string // --api-key
	apiKeyFile string // --api-key-file
	output     string

	keyOnce sync.Once // resolves the API key once: bench dials concurrently
	key     string
	keyErr  error
	timeout time.Duration

	tls           bool
	tlsCA         string
	tlsCert       string
	tlsKey        string
	tlsServerName string

	stdin          io.Reader
	stdout, stderr io.Writer
}

// Main runs the CLI with args and returns the process exit code (see the
// Exit constants). Errors go to stderr, as "fila: ..." lines, or as a
// JSON object {"error": ..., "code": ...} with --output json.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdin: stdin, stdout: stdout, stderr: stderr}
	root := newRoot(g)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first interrupt asks the command to wind down; once it has,
	// the signals go back to their default, so a second one ends the
	// process at once, whatever the command is still waiting for.
	go func() {
		<-ctx.Done()
		stop()
	}()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	code := ExitFailure
	var (
		ue  usageError
		bue bench.UsageError
	)
	switch {
	case errors.As(err, &ue), errors.As(err, &bue):
		code = ExitUsage
	case isNotFound(err):
		code = ExitNotFound
	}
	// The SDK's errors start with "fila: "; the CLI's own get it here,
	// so that every error reads the same, once.
	msg := err.Error()
	if !strings.HasPrefix(msg, "fila: ") {
		msg = "fila: " + msg
	}
	if g.output == "json" {
		e := map[string]string{"error": msg}
		if c := errorCode(err); c != "" {
			e["code"] = c
		}
		b, _ := json.Marshal(e)
		fmt.Fprintln(stderr, string(b))
	} else {
		fmt.Fprintln(stderr, msg)
	}
	return code
}

// usageError marks errors in how the command was called.
type usageError struct{ error }

func (e usageError) Unwrap() error { return e.error }

func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

// errNotSet marks a lookup that found nothing without a protocol error:
// an unset config key. It exits ExitNotFound, with the JSON code
// NOT_FOUND.
var errNotSet = errors.New("not set")

func isNotFound(err error) bool {
	for _, target := range []error{errNotSet, fila.ErrQueueNotFound, fila.ErrAPIKeyNotFound, fila.ErrMessageNotFound} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// errorCode is the protocol code name of err, such as QUEUE_NOT_FOUND, or
// "" when it has none.
func errorCode(err error) string {
	var se *fila.StatusError
	if errors.As(err, &se) {
		return se.Code.String()
	}
	for _, c := range []struct {
		name string
		err  error
	}{
		{"QUEUE_NOT_FOUND", fila.ErrQueueNotFound},
		{"QUEUE_EXISTS", fila.ErrQueueExists},
		{"MESSAGE_TOO_LARGE", fila.ErrMessageTooLarge},
		{"MESSAGE_NOT_FOUND", fila.ErrMessageNotFound},
		{"LEASE_EXPIRED", fila.ErrLeaseExpired},
		{"NOT_A_DLQ", fila.ErrNotADLQ},
		{"INVALID_CONFIG_VALUE", fila.ErrInvalidConfigValue},
		{"SCRIPT_ERROR", fila.ErrScriptError},
		{"API_KEY_NOT_FOUND", fila.ErrAPIKeyNotFound},
		{"NOT_FOUND", errNotSet},
		{"CONNECTION_LOST", fila.ErrConnectionLost},
	} {
		if errors.Is(err, c.err) {
			return c.name
		}
	}
	return ""
}

func newRoot(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "fila",
		Short: "Command-line client of the Fila message broker",
		Long: `fila administers a Fila broker and moves messages through it.

It is a thin client over the Go SDK. Output is a table for people, or
JSON for scripts (--output json). Errors go to stderr, as one line
"fila: ...", or with --output json as {"error": ..., "code": ...}.

Exit codes, the same for every command:
  0  success
  1  the command failed: the broker refused it, or a connection or I/O error
  2  usage error: an unknown command or flag, a bad argument or flag value
  3  not found: the queue, message, API key or config key does not exist`,
		Version:       fila.Version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			if g.output != "table" && g.output != "json" {
				return usagef("--output %q: want table or json", g.output)
			}
			if g.timeout <= 0 {
				return usagef("--timeout %v: want a positive duration, such as 30s", g.timeout)
			}
			if g.apiKey != "" && g.apiKeyFile != "" {
				return usagef("--api-key and --api-key-file: give one or the other")
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	pf := root.PersistentFlags()
	pf.StringVar(&g.addr, "addr", envOr("FILA_ADDR", "localhost:5555"), "broker address host:port; for a cluster, several, comma-separated (env FILA_ADDR)")
	pf.StringVar(&g.apiKey, "api-key", "", "API key secret; other users can read it in the process list: prefer --api-key-file or env FILA_API_KEY")
	pf.StringVar(&g.apiKeyFile, "api-key-file", "", "file holding the API key secret (a trailing newline is ignored); overrides env FILA_API_KEY")
	pf.StringVarP(&g.output, "output", "o", envOr("FILA_OUTPUT", "table"), "output format: table or json (env FILA_OUTPUT)")
	pf.DurationVar(&g.timeout, "timeout", 30*time.Second, "bound on connecting and on each request; must be positive")
	pf.BoolVar(&g.tls, "tls", os.Getenv("FILA_CLIENT_TLS") == "true", "connect over TLS, trusting the system's CAs (env FILA_CLIENT_TLS=true)")
	pf.StringVar(&g.tlsCA, "tls-ca", os.Getenv("FILA_CLIENT_TLS_CA"), "PEM file of CAs to trust instead of the system's; implies --tls (env FILA_CLIENT_TLS_CA)")
	pf.StringVar(&g.tlsCert, "tls-cert", os.Getenv("FILA_CLIENT_TLS_CERT"), "PEM client certificate for mTLS; implies --tls (env FILA_CLIENT_TLS_CERT)")
	pf.StringVar(&g.tlsKey, "tls-key", os.Getenv("FILA_CLIENT_TLS_KEY"), "PEM private key of --tls-cert (env FILA_CLIENT_TLS_KEY)")
	pf.StringVar(&g.tlsServerName, "tls-server-name", os.Getenv("FILA_CLIENT_TLS_SERVER_NAME"), "name to check the broker's certificate against; implies --tls (env FILA_CLIENT_TLS_SERVER_NAME)")

	root.AddGroup(
		&cobra.Group{ID: "msg", Title: "Messages:"},
		&cobra.Group{ID: "admin", Title: "Administration:"},
	)
	for _, c := range []*cobra.Command{newEnqueueCmd(g), newConsumeCmd(g)} {
		c.GroupID = "msg"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{newQueueCmd(g), newConfigCmd(g), newRedriveCmd(g), newExplainCmd(g), newDashboardCmd(g), newAuthCmd(g), newClusterCmd(g), newPingCmd(g)} {
		c.GroupID = "admin"
		root.AddCommand(c)
	}
	root.AddCommand(newVersionCmd(g))
	root.AddCommand(bench.NewCommand(g.connect, &g.output))
	// Cobra adds its help and completion commands when the root runs;
	// add them now so that classifyUsage covers them too.
	root.SetHelpCommand(newHelpCmd())
	root.InitDefaultHelpCmd()
	root.InitDefaultCompletionCmd()
	classifyUsage(root)
	// A group runs only to print its help: its usage is "fila queue
	// [command]", without a line for running it alone.
	root.SetUsageTemplate(strings.Replace(root.UsageTemplate(),
		"{{if .Runnable}}", "{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
	return root
}

// classifyUsage makes every error in the arguments of c and of the
// commands under it a usage error (exit 2). Cobra's own errors are
// untyped, and a command that only groups others (the root, queue, auth,
// bench, completion) would print its help and exit 0 whatever follows it:
//
//   - A command that groups others gets an action and an argument check:
//     alone it prints its help (exit 0); with an argument, which can only
//     be an unknown subcommand, it fails with unknownCommand.
//   - Every other command's argument check is wrapped so that its error
//     is a usage error. The wrapper also checks the flags marked required
//     or grouped (cobra.MarkFlagRequired, MarkFlagsMutuallyExclusive),
//     which cobra would check later with untyped errors.
//
// Flag errors are usage errors through the root's FlagErrorFunc.
func classifyUsage(c *cobra.Command) {
	if c.HasSubCommands() && !c.Runnable() {
		c.Args = unknownCommand
		c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
	} else {
		check := c.Args
		if check == nil {
			check = cobra.ArbitraryArgs
		}
		c.Args = func(cmd *cobra.Command, args []string) error {
			err := check(cmd, args)
			if err == nil {
				err = cmd.ValidateRequiredFlags()
			}
			if err == nil {
				err = cmd.ValidateFlagGroups()
			}
			var (
				ue  usageError
				bue bench.UsageError
			)
			if err == nil || errors.As(err, &ue) || errors.As(err, &bue) {
				return err
			}
			return usageError{err}
		}
	}
	for _, sub := range c.Commands() {
		classifyUsage(sub)
	}
}

// unknownCommand is the argument check of a command that only groups
// others: any argument is a subcommand it does not have. The error reads
// as cobra's, with its suggestions, and says where the usage is.
func unknownCommand(cmd *cobra.Command, args []string) error {
	if len(args) == 0 {
		return nil
	}
	var hint strings.Builder
	if !cmd.DisableSuggestions {
		if cmd.SuggestionsMinimumDistance <= 0 {
			cmd.SuggestionsMinimumDistance = 2
		}
		if s := cmd.SuggestionsFor(args[0]); len(s) > 0 {
			hint.WriteString("\n\nDid you mean this?\n")
			for _, name := range s {
				fmt.Fprintf(&hint, "\t%s\n", name)
			}
		}
	}
	return usagef("unknown command %q for %q%s\nRun '%s --help' for usage.", args[0], cmd.CommandPath(), hint.String(), cmd.CommandPath())
}

// newHelpCmd is cobra's help command, except that an unknown topic is a
// usage error (cobra's prints the root's help and exits 0).
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		Long:  "Help prints the help of any command: fila help [path to command].",
		ValidArgsFunction: func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var names []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() && strings.HasPrefix(sub.Name(), toComplete) {
					names = append(names, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return names, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil {
				return usageError{err}
			}
			if len(rest) > 0 {
				return unknownCommand(cmd, rest)
			}
			return cmd.Help()
		},
	}
}

func envOr(key, def string) string {
	if v, ok := os.LookupEnv(key); ok && v != "" {
		return v
	}
	return def
}

// resolveAPIKey returns the API key secret to present, from the first of
// these that is set: --api-key, --api-key-file (whose content, less one
// trailing newline, is the secret), FILA_API_KEY. Both flags together are
// a usage error (PersistentPreRunE reports it first); an unreadable file
// fails the command, an empty one is a usage error. The file is read
// once, and the secret never appears in an error.
func (g *globals) resolveAPIKey() (string, error) {
	g.keyOnce.Do(func() {
		switch {
		case g.apiKey != "" && g.apiKeyFile != "":
			g.keyErr = usagef("--api-key and --api-key-file: give one or the other")
		case g.apiKey != "":
			g.key = g.apiKey
		case g.apiKeyFile != "":
			b, err := os.ReadFile(g.apiKeyFile)
			if err != nil {
				g.keyErr = fmt.Errorf("--api-key-file: %w", err)
				return
			}
			g.key = strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
			if g.key == "" {
				g.keyErr = usagef("--api-key-file %s: the file is empty", g.apiKeyFile)
			}
		default:
			g.key = os.Getenv("FILA_API_KEY")
		}
	})
	return g.key, g.keyErr
}

// connect opens a client with the global flags. Commands that make one
// request do not reconnect: a lost connection fails them.
func (g *globals) connect(ctx context.Context, reconnect bool) (*fila.Client, error) {
	return g.connectTo(ctx, g.addr, reconnect)
}

// connectTo opens a client of addr (host:port, or several, comma
// separated) with the global flags other than --addr, as connect does,
// and the extra options after them.
func (g *globals) connectTo(ctx context.Context, addr string, reconnect bool, extra ...fila.Option) (*fila.Client, error) {
	opts := []fila.Option{fila.WithDialTimeout(g.timeout), fila.WithClientName("fila-cli/" + fila.Version)}
	apiKey, err := g.resolveAPIKey()
	if err != nil {
		return nil, err
	}
	if apiKey != "" {
		opts = append(opts, fila.WithAPIKey(apiKey))
	}
	if g.tls {
		opts = append(opts, fila.WithTLS(&tls.Config{MinVersion: tls.VersionTLS12}))
	}
	if g.tlsCA != "" {
		opts = append(opts, fila.WithCAFile(g.tlsCA))
	}
	if g.tlsCert != "" || g.tlsKey != "" {
		if g.tlsCert == "" || g.tlsKey == "" {
			return nil, usagef("--tls-cert and --tls-key go together")
		}
		opts = append(opts, fila.WithClientCertFile(g.tlsCert, g.tlsKey))
	}
	if g.tlsServerName != "" {
		opts = append(opts, fila.WithServerName(g.tlsServerName))
	}
	if !reconnect {
		opts = append(opts, fila.WithoutReconnect())
	}
	return fila.Connect(ctx, addr, append(opts, extra...)...)
}

// admin runs fn with an admin handle, bounded by --timeout. op is the SDK
// operation fn performs, as the SDK's errors name it ("queue stats"):
// its errors name the command instead (see renameOp).
func (g *globals) admin(cmd *cobra.Command, op string, fn func(ctx context.Context, a *fila.Administrator) error) error {
	ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
	defer cancel()
	c, err := g.connect(ctx, false)
	if err != nil {
		return err
	}
	defer c.Close()
	return renameOp(fn(ctx, c.Admin()), op, cmd)
}

// renameOp makes an error of the SDK name the command the user ran
// rather than the protocol operation the command performed: for "fila
// queue inspect nosuch", the SDK's "fila: queue stats nosuch: queue not
// found" becomes "fila: queue inspect nosuch: queue not found". Every
// error the SDK returns for an operation starts with "fila: " and op; an
// error that does not is returned as it is. Only the message changes:
// errors.Is and errors.As see the SDK's error, so the exit code and the
// JSON error code stay the same.
func renameOp(err error, op string, cmd *cobra.Command) error {
	if err == nil {
		return nil
	}
	rest, ok := strings.CutPrefix(err.Error(), "fila: "+op)
	if !ok || (rest != "" && rest[0] != ' ' && rest[0] != ':') {
		return err
	}
	name := strings.TrimPrefix(cmd.CommandPath(), cmd.Root().Name()+" ")
	if name == op {
		return err
	}
	return &renamedError{msg: "fila: " + name + rest, err: err}
}

// renamedError is an error with a message of its own over err: renameOp's,
// or one that says its cause in words ("--timeout 30s ran out"), which
// err's text would repeat. errors.Is and errors.As see err.
type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }

// printJSON writes v as indented JSON.
func (g *globals) printJSON(v any) error {
	enc := json.NewEncoder(g.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// table writes rows under a header, aligned in columns.
func (g *globals) table(header []string, rows [][]string) error {
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	return tw.Flush()
}

// completeQueues completes a queue-name argument from the broker's list,
// for shell completion. It stays silent when the broker is unreachable.
func (g *globals) completeQueues(dlqOnly bool) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		c, err := g.connect(ctx, false)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		defer c.Close()
		qs, err := c.Admin().ListQueues(ctx)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, q := range qs {
			if strings.HasPrefix(q.Name, toComplete) && (!dlqOnly || q.Parent != "") {
				names = append(names, q.Name)
			}
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	}
}

func newPingCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ping",
		Short: "Check the broker answers: node, server version, round-trip time",
		Args:  cobra.ExactArgs(0),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), g.timeout)
			defer cancel()
			c, err := g.connect(ctx, false)
			if err != nil {
				return err
			}
			defer c.Close()
			rtt, err := c.Ping(ctx)
			if err != nil {
				return err
			}
			if g.output == "json" {
				return g.printJSON(map[string]any{"addr": g.addr, "node_id": c.NodeID(), "server": c.ServerName(), "rtt_us": rtt.Microseconds()})
			}
			fmt.Fprintf(g.stdout, "%s: node %s, %s, round trip %v\n", g.addr, c.NodeID(), c.ServerName(), rtt.Round(time.Microsecond))
			return nil
		},
	}
}
