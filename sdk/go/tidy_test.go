package fila_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGoModTidy checks that `go mod tidy` works for users: a throwaway
// module outside the workspace that imports the SDK, with no requirement
// yet, gets it and sdk/core from a file-based module proxy through
// `go mod tidy`, builds, and runs against a broker. Tidy loads the
// imports of the SDK's tests too, so it fails if they need a module
// the SDK's go.mod does not require (the broker's, which no user should
// have to get).
func TestGoModTidy(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module from a proxy")
	}
	u := newUserModule(t)
	u.gocmd("mod", "tidy")
	gomod, err := os.ReadFile(filepath.Join(u.dir, "go.mod"))
	must(t, err)
	if !strings.Contains(string(gomod), "github.com/fila-mq/fila/sdk/go "+sdkVersion) {
		t.Fatalf("go mod tidy did not require github.com/fila-mq/fila/sdk/go %s:\n%s", sdkVersion, gomod)
	}
	if strings.Contains(string(gomod), "github.com/fila-mq/fila/broker") {
		t.Fatalf("go mod tidy required the broker's module:\n%s", gomod)
	}
	u.gocmd("build", "-o", "app", ".")
	u.runApp("go-mod-tidy")
}
