package config

import (
	"bufio"
	"io"
	"strings"
)

// Print writes c as TOML that Load reads back to the same configuration,
// for `fila-server --print-config`: every section and key, in the order of
// the documentation, each followed by a comment naming its source from src
// ("# default", "# file /etc/fila/fila.toml", "# env FILA_LOG_LEVEL",
// "# flag --listen"). A nil src omits the comments. A set bootstrap_apikey
// is written as "<redacted>". Print returns the first error of w.
func (c Config) Print(w io.Writer, src *Sources) error {
	bw := bufio.NewWriter(w)
	bw.WriteString("# Effective configuration of fila-server.\n")
	if src != nil {
		layers := " and the environment"
		if src.fromFlags() {
			layers = ", the environment and flags"
		}
		if src.file != "" {
			bw.WriteString("# Read from " + src.file + layers + "; each value names its source.\n")
		} else {
			bw.WriteString("# No configuration file was found; each value names its source.\n")
		}
	}
	for _, section := range sections {
		bw.WriteString("\n[" + section + "]\n")
		var lines, comments []string
		width := 0
		for i := range fields {
			f := &fields[i]
			if f.section != section {
				continue
			}
			line := f.name + " = " + f.format(&c)
			width = max(width, len(line))
			lines = append(lines, line)
			if src != nil {
				comments = append(comments, src.Of(f.key()).String())
			}
		}
		for i, line := range lines {
			bw.WriteString(line)
			if src != nil {
				bw.WriteString(strings.Repeat(" ", width-len(line)+2))
				bw.WriteString("# " + comments[i])
			}
			bw.WriteByte('\n')
		}
	}
	return bw.Flush()
}

// fromFlags reports whether any value came from a command-line flag.
func (s *Sources) fromFlags() bool {
	for _, src := range s.keys {
		if src.Origin == FromFlag {
			return true
		}
	}
	return false
}
