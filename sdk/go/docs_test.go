package fila_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocsExamplesCompile type-checks every complete program (a ```go
// block starting with "package main") of docs/sdk-examples.md against
// this SDK, so the page cannot drift from the API.
func TestDocsExamplesCompile(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet")
	}
	page := filepath.Join("..", "..", "docs", "sdk-examples.md")
	progs := goPrograms(t, page)
	if len(progs) == 0 {
		t.Skipf("%s: not in this checkout", page)
	}
	sdkDir, err := filepath.Abs(".")
	must(t, err)
	coreDir := filepath.Join(sdkDir, "..", "core")

	tmp := t.TempDir()
	must(t, os.WriteFile(filepath.Join(tmp, "go.mod"), []byte("module example.com/docs\n\ngo 1.26\n\nrequire github.com/fila-mq/fila/sdk/go v0.1.0\n"), 0o644))
	work := fmt.Sprintf("go 1.26\n\nuse (\n\t.\n\t%q\n\t%q\n)\n\nreplace (\n\tgithub.com/fila-mq/fila/sdk/core v0.1.0 => %q\n\tgithub.com/fila-mq/fila/sdk/go v0.1.0 => %q\n)\n", sdkDir, coreDir, coreDir, sdkDir)
	must(t, os.WriteFile(filepath.Join(tmp, "go.work"), []byte(work), 0o644))
	for i, p := range progs {
		dir := filepath.Join(tmp, fmt.Sprintf("example%d", i+1))
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(p.src), 0o644))
	}
	cmd := exec.Command("go", "vet", "./...")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(tmp, "go.work"), "GOFLAGS=", "GOTOOLCHAIN=local")
	if out, err := cmd.CombinedOutput(); err != nil {
		var where []string
		for i, p := range progs {
			where = append(where, fmt.Sprintf("example%d = %s:%d", i+1, page, p.line))
		}
		t.Fatalf("go vet of the programs in %s: %v\n%s\n(%s)", page, err, out, strings.Join(where, ", "))
	}
}

type program struct {
	line int
	src  string
}

func goPrograms(t *testing.T, path string) []program {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var progs []program
	var cur *strings.Builder
	start := 0
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch {
		case cur == nil && line == "```go":
			cur, start = &strings.Builder{}, n+1
		case cur != nil && line == "```":
			if src := cur.String(); strings.HasPrefix(src, "package main") {
				progs = append(progs, program{start, src})
			}
			cur = nil
		case cur != nil:
			cur.WriteString(line + "\n")
		}
	}
	must(t, sc.Err())
	return progs
}
