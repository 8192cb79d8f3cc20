package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/fila-mq/fila/broker/filatest"
)

// TestTutorials runs docs/tutorials.md: every "$ " line of its ```console
// blocks, in order, through sh against a fresh broker with the fila
// binary first on PATH. A command must exit 0, and when the page shows
// output under it, print that output, where <id> stands for any message
// ID and <time> for any duration. Blocks of other languages (the SDK snippets, starting the broker)
// are not run.
func TestTutorials(t *testing.T) {
	page := filepath.Join("..", "..", "..", "docs", "tutorials.md")
	steps := parseTranscript(t, page)
	if len(steps) == 0 {
		t.Fatalf("%s: no commands", page)
	}
	srv := filatest.Start(t)
	bin := binary(t)
	dir := t.TempDir()
	if err := os.Symlink(bin, filepath.Join(dir, "fila")); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), "FILA_ADDR="+srv.Addr, "FILA_API_KEY=", "FILA_OUTPUT=",
		"PATH="+dir+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, st := range steps {
		cmd := exec.Command("sh", "-c", st.command)
		cmd.Env = env
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("%s:%d: $ %s: %v\nstdout: %s\nstderr: %s", page, st.line, st.command, err, out, stderr)
		}
		if st.output == nil {
			continue
		}
		got := trimLines(string(out))
		if !matchLines(got, st.output) {
			t.Errorf("%s:%d: $ %s\ngot:\n%s\nwant:\n%s", page, st.line, st.command, strings.Join(got, "\n"), strings.Join(st.output, "\n"))
		}
	}
}

type step struct {
	line    int
	command string
	output  []string // nil: not checked
}

// parseTranscript reads the "$ " commands of the page's console blocks and
// the output lines under each.
func parseTranscript(t *testing.T, path string) []step {
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	var steps []step
	in := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```console"):
			in = true
		case strings.HasPrefix(line, "```"):
			in = false
		case !in:
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, step{line: n, command: line[2:]})
		case len(steps) > 0:
			last := &steps[len(steps)-1]
			last.output = append(last.output, strings.TrimRight(line, " "))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return steps
}

func trimLines(s string) []string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	if len(lines) == 1 && lines[0] == "" {
		return nil
	}
	return lines
}

var (
	idPlaceholder   = regexp.QuoteMeta("<id>")
	timePlaceholder = regexp.QuoteMeta("<time>")
)

func matchLines(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	for i := range want {
		pat := strings.ReplaceAll(regexp.QuoteMeta(want[i]), idPlaceholder, `[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12}`)
		pat = strings.ReplaceAll(pat, timePlaceholder, `[0-9.hmsµn]+`)
		if !regexp.MustCompile("^" + pat + "$").MatchString(got[i]) {
			return false
		}
	}
	return true
}
