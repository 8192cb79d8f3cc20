package main

import (
	"flag"
	"fmt"
	"io"
	"regexp"
	"strings"

	"github.com/fila-mq/fila/sdk/core/wire"
)

// A keyFlag is a flag that sets one configuration key, overriding the
// file and the environment.
type keyFlag struct {
	name  string // without dashes: "listen"
	key   string // "server.listen_addr"
	usage string // for --help; a `NAME` in backquotes names the value
}

// keyFlags are the flags for the settings most often changed.
var keyFlags = []keyFlag{
	{"listen", "server.listen_addr", "listen for clients on `ADDR`, host:port (server.listen_addr; default 0.0.0.0:5555)"},
	{"data-dir", "storage.data_dir", "keep the data in `DIR` (storage.data_dir; default ./data)"},
	{"http", "http.listen_addr", "serve /healthz, /readyz and /metrics on `ADDR`, host:port, or \"\" for none (http.listen_addr; default none)"},
}

// usageText introduces the flags in --help.
const usageText = `fila-server runs the Fila message broker: durable queues, with fair
scheduling across fairness keys.

Usage:
  fila-server [--config PATH] [--listen ADDR] [--data-dir DIR] [--http ADDR]
  fila-server --print-config | --version | --help

It needs no configuration: by default clients connect on port 5555 and the
data goes to ./data. Each layer below overrides the one before it:

  1. the built-in defaults;
  2. the configuration file: the one named by --config, else fila.toml in
     the working directory, else /etc/fila/fila.toml, the first that exists;
  3. the environment: every key of the file can also be set as
     FILA_<SECTION>_<KEY>, such as FILA_SERVER_LISTEN_ADDR=127.0.0.1:5555
     for listen_addr in [server];
  4. the flags --listen, --data-dir and --http.

Every key is described in docs/configuration.md; --print-config shows the
effective value of each and where it came from.

Flags:
`

// usage writes the --help text: what fila-server is, where its
// configuration comes from, and its flags.
func usage(w io.Writer, fs *flag.FlagSet) {
	var b strings.Builder
	b.WriteString(usageText)
	type line struct{ left, usage string }
	var lines []line
	width := 0
	fs.VisitAll(func(f *flag.Flag) {
		name, text := flag.UnquoteUsage(f)
		left := "  --" + f.Name
		if name != "" {
			left += " " + name
		}
		width = max(width, len(left))
		lines = append(lines, line{left, text})
	})
	lines = append(lines, line{"  -h, --help", "print this help, then exit"})
	for _, l := range lines {
		for i, text := range wrap(l.usage, usageWidth-width-2) {
			left := l.left
			if i > 0 {
				left = ""
			}
			fmt.Fprintf(&b, "%-*s  %s\n", width, left, text)
		}
	}
	io.WriteString(w, b.String())
}

// usageWidth is the width --help wraps its flags' descriptions to.
const usageWidth = 80

// wrap splits text into lines of at most width bytes, between words; a
// longer word has a line of its own.
func wrap(text string, width int) []string {
	var lines []string
	line := ""
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
		}
	}
	return append(lines, line)
}

// usageError writes msg and where to find the usage to w, and returns
// the exit status of a usage error, 2.
func usageError(w io.Writer, msg string) int {
	fmt.Fprintf(w, "fila-server: %s\nRun 'fila-server --help' for usage.\n", msg)
	return 2
}

// flagError rewords an error of the flag package, which names a flag
// with one dash whatever was written, to name it as --help does.
func flagError(err error) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return "unknown flag --" + name
	}
	return dashed.ReplaceAllString(msg, "$1--$2")
}

// dashed matches a flag's name written with one dash in an error of the
// flag package.
var dashed = regexp.MustCompile(`(^|[ :])-([a-z][a-z-]*)`)

// protocolLine says which versions of the wire protocol this build
// speaks.
func protocolLine() string {
	return fmt.Sprintf("protocol %d (oldest supported: %d)", wire.ProtocolVersion, wire.MinProtocolVersion)
}
